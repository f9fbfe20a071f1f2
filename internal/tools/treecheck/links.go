package main

import (
	"path"
	"regexp"
	"strings"
)

// A link is a relative link target a markdown file names, at a 1-based line.
type link struct {
	line   int
	target string
}

// mdLink is a markdown link or image: its target, then an optional title.
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// relativeLinks are the links of text to files in the tree: not to a URL, not
// within the page, and not in a code span or fenced block (commands and
// examples), each resolved from dir and without its #anchor.
func relativeLinks(dir, text string) []link {
	var out []link
	for _, l := range markdownLines(text) {
		if l.fenced {
			continue
		}
		line := l.text
		for _, m := range mdLink.FindAllStringSubmatchIndex(line, -1) {
			t := line[m[2]:m[3]]
			if inCodeSpan(line, m[0]) || strings.HasPrefix(t, "#") || strings.Contains(t, "://") || strings.HasPrefix(t, "mailto:") {
				continue
			}
			t, _, _ = strings.Cut(t, "#")
			out = append(out, link{line: l.n, target: path.Join(dir, t)})
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

// markdownLines are text's lines but the fences themselves.
func markdownLines(text string) []mdLine {
	var out []mdLine
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		out = append(out, mdLine{i + 1, line, fenced})
	}
	return out
}
