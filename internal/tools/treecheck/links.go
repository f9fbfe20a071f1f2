package main

import (
	"net/url"
	"path"
	"regexp"
	"strings"
)

// A link is a relative link target a markdown file names, at a 1-based line.
type link struct {
	line   int
	target string
}

var (
	// mdLink is an inline link or image: its target (<...>, or one level of balanced
	// parentheses), then an optional title in "", '' or ().
	mdLink = regexp.MustCompile(`\]\((<[^>]*>|(?:[^()\s]|\([^()\s]*\))+)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\)`)
	// refDef is a reference-style link's definition: [name]: target.
	refDef = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	// scheme starts a URL (https:, mailto:, tel:): not a file in the tree.
	scheme = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*:`)
)

// relativeLinks are the inline links and reference definitions of a markdown text's lines to files in the tree:
// not to a URL, not within the page, and not in a code span or fenced block (commands and
// examples), each resolved from dir ("/..." from the tree's root), without its #anchor and
// ?query and with %-escapes decoded. HTML tags are not read.
func relativeLinks(dir string, lines []mdLine) []link {
	var out []link
	for _, l := range lines {
		if l.fenced {
			continue
		}
		var at [][]int
		for _, m := range mdLink.FindAllStringSubmatchIndex(l.text, -1) {
			at = append(at, []int{m[0], m[2], m[3]})
		}
		if m := refDef.FindStringSubmatchIndex(l.text); m != nil {
			at = append(at, []int{m[0], m[2], m[3]})
		}
		for _, m := range at {
			t := strings.TrimSuffix(strings.TrimPrefix(l.text[m[1]:m[2]], "<"), ">")
			if inCodeSpan(l.text, m[0]) || strings.HasPrefix(t, "#") || scheme.MatchString(t) {
				continue
			}
			t, _, _ = strings.Cut(t, "#")
			t, _, _ = strings.Cut(t, "?")
			if u, err := url.PathUnescape(t); err == nil {
				t = u
			}
			if strings.HasPrefix(t, "/") {
				t = path.Clean(t[1:])
			} else {
				t = path.Join(dir, t)
			}
			out = append(out, link{line: l.n, target: t})
		}
	}
	return out
}

// An mdLine is one line of a markdown text, 1-based, and whether a fenced block holds it.
type mdLine struct {
	n      int
	text   string
	fenced bool
}

// fence opens or closes a fenced block: three or more backticks or tildes.
var fence = regexp.MustCompile("^\\s*(`{3,}|~{3,})")

// markdownLines are text's lines but the fences themselves; a block closes on a fence of its
// opening's character, at least as long (so ``` inside ```` stays code).
func markdownLines(text string) []mdLine {
	var out []mdLine
	open := ""
	for i, line := range strings.Split(text, "\n") {
		if m := fence.FindStringSubmatch(line); m != nil {
			switch {
			case open == "":
				open = m[1]
				continue
			case m[1][0] == open[0] && len(m[1]) >= len(open) && strings.TrimSpace(line[len(m[0]):]) == "":
				open = ""
				continue
			}
		}
		out = append(out, mdLine{i + 1, line, open != ""})
	}
	return out
}
