package main

import (
	"regexp"
	"slices"
	"strings"
)

// A citation is a commit hash the manual names, at a 1-based line.
type citation struct {
	line int
	hash string
}

var (
	// word is what a hash is bounded by: 0xa06c is one word, not a hash.
	word = regexp.MustCompile(`[0-9A-Za-z_]+`)
	// uuid is a GPU's or a pod's identity, whose groups look like hashes.
	uuid = regexp.MustCompile(`[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)
)

// commitWords, among the three words before a hash, say it names a commit;
// nextWords do so right after it, and atWords right before it.
var (
	commitWords = []string{"commit", "commits", "committed", "revision", "revisions", "rev", "binaries", "build", "built", "head"}
	atWords     = []string{"at", "since", "before", "after", "until", "from"}
	nextWords   = []string{"commit", "commits"}
)

// commitCitations finds the commit hashes a markdown text's lines cite. A hash is a word of
// 7 to 12 or 40 lowercase hex digits with at least one digit and one letter
// (so 0xa06c, 1024000 or "deadbeef"-free prose are left alone); it is cited
// when it stands in a code span or fenced block, is the whole text of a
// link, is a parenthesis' whole text or first item, or is next to a word that names a commit
// ("commit", "binaries of", "at", ...).
func commitCitations(lines []mdLine) []citation {
	var out []citation
	for _, l := range lines {
		line := uuid.ReplaceAllStringFunc(l.text, func(s string) string { return strings.Repeat("-", len(s)) })
		words := word.FindAllStringIndex(line, -1)
		for j, w := range words {
			tok := line[w[0]:w[1]]
			if !commitLike(tok) {
				continue
			}
			if l.fenced || inCodeSpan(line, w[0]) || isLinkText(line, w[0], w[1]) || inParens(line, w[0], w[1]) || nearCommitWord(line, words, j) {
				out = append(out, citation{line: l.n, hash: tok})
			}
		}
	}
	return out
}

// commitLike reports whether tok has the shape of a git object name.
func commitLike(tok string) bool {
	if n := len(tok); (n < 7 || n > 12) && n != 40 {
		return false
	}
	var digit, letter bool
	for _, c := range tok {
		switch {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'f':
			letter = true
		default:
			return false
		}
	}
	return digit && letter
}

// inCodeSpan reports whether position at of line is inside `...`.
func inCodeSpan(line string, at int) bool {
	return strings.Count(line[:at], "`")%2 == 1
}

// isLinkText reports whether line[start:end] is the whole text of a link.
func isLinkText(line string, start, end int) bool {
	return start > 0 && line[start-1] == '[' && strings.HasPrefix(line[end:], "](")
}

// inParens reports whether line[start:end] is a parenthesis' whole text or its first item: where a
// hash names the commit of the words before it.
func inParens(line string, start, end int) bool {
	return start > 0 && line[start-1] == '(' && end < len(line) && strings.ContainsRune("),;", rune(line[end]))
}

// nearCommitWord reports whether words[j] of line follows a commit word
// within three words, follows an "at"-like word, or precedes "commit".
func nearCommitWord(line string, words [][]int, j int) bool {
	at := func(k int) string { return strings.ToLower(line[words[k][0]:words[k][1]]) }
	for k := j - 1; k >= 0 && k >= j-3; k-- {
		if slices.Contains(commitWords, at(k)) {
			return true
		}
	}
	if j > 0 && slices.Contains(atWords, at(j-1)) {
		return true
	}
	return j+1 < len(words) && slices.Contains(nextWords, at(j+1))
}
