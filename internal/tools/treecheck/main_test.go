package main

import (
	"slices"
	"strings"
	"testing"
	"testing/fstest"
)

func TestCommitCitations(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"after commit", "Measured with the binaries of commit 06f426d; done.", []string{"06f426d"}},
		{"committed at", "results committed at 5a9b8aa (the run)", []string{"5a9b8aa"}},
		{"binaries of", "binaries of 3ec24f7 for classing", []string{"3ec24f7"}},
		{"in a code span", "run `git checkout b1e3c08` first", []string{"b1e3c08"}},
		{"a full hash in a code span", "`0123456789abcdef0123456789abcdef01234567`", []string{"0123456789abcdef0123456789abcdef01234567"}},
		{"link text", "reports: [edbf9c8](results/gate-h100/dgate.md)", []string{"edbf9c8"}},
		{"before commit", "the 4d1d90a commit moved it", []string{"4d1d90a"}},
		{"in a fenced block", "```\n$ git log 4fcaaec\n```", []string{"4fcaaec"}},
		{"two on a line", "commit 8f05d77 and commit f8c35d2", []string{"8f05d77", "f8c35d2"}},
		{"a parenthesis", "GPT-2 far from the LC's (db4c2ce): 1.140x", []string{"db4c2ce"}},

		{"a 0x value in a code span", "the class `0xa06c` and `0xc1d00013`", nil},
		{"a 0x value after commit", "commit 0xa06c1234 is not a hash", nil},
		{"a hex word in prose", "the hash 06f426d alone is not next to a commit word", nil},
		{"no digit", "`deadbeef` and `facade1`", []string{"facade1"}},
		{"no letter", "commit 1024000 requests", nil},
		{"too short", "commit abc123", nil},
		{"between 12 and 40", "`0123456789abcdef0`", nil},
		{"uppercase", "commit 06F426D", nil},
		{"a GPU UUID in a code span", "`GPU-160f26c1-24d4-da08-fd3b-0a10c705eb27`", nil},
		{"a hash in a link target", "[the run](results/must3-f8c35d2.md)", nil},
		{"a longer word", "commit 06f426dz", nil},
		{"a parenthesis' first item", "must3 (6b35629, 2026-11-23, SM 1980 MHz)", []string{"6b35629"}},
		{"a link target, parenthesised", "[run](db4c2ce.md)", nil},
		{"later in a parenthesis", "GPT-2 (see 4d1d90a) and (380 s, db4c2ce)", nil},
	}
	for _, tt := range tests {
		var got []string
		for _, c := range commitCitations(markdownLines(tt.text)) {
			got = append(got, c.hash)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q gives %q, want %q", tt.name, tt.text, got, tt.want)
		}
	}
}

func TestCommitCitationsLine(t *testing.T) {
	got := commitCitations(markdownLines("# Title\n\nplain\nsince 2c7d0f1 it holds\n"))
	if len(got) != 1 || got[0].line != 4 {
		t.Fatalf("got %+v, want one citation on line 4", got)
	}
}

func TestCheck(t *testing.T) {
	fsys := fstest.MapFS{
		"README.md":                          {Data: []byte("commit 06f426d (the README is not the manual)")},
		"docs/GATE.md":                       {Data: []byte("holds with binaries of b1e3c08\n")},
		"docs/CLI.md":                        {Data: []byte("no citation, `0xa06c`\n")},
		"docs/results/2026-11-27-gate.md":    {Data: []byte("binaries of b1e3c08\n")},
		"docs/results/gate-h100/run.log":     {Data: []byte("log")},
		"docs/results/gate-h100/r.json.gz":   {Data: []byte("gz")},
		"docs/results/gate-h100/all.tgz":     {Data: []byte("tgz")},
		"docs/results/gate-h100/d.log.xz":    {Data: []byte("xz")},
		"docs/results/gate-h100/results.md":  {Data: []byte("summary")},
		"docs/results/gate-h100/results.txt": {Data: []byte("summary")},
		// A run's recording of calls is raw output, in testdata/ or not.
		"internal/trace/request/testdata/lc.jsonl.gz": {Data: []byte("calls")},
		"docs/results/gate-h100/calls.jsonl.gz":       {Data: []byte("calls")},
		// Links: to a plot that left the tree (a problem), to files and folders that are in it.
		"docs/results/2026-11-30-slo.md": {Data: []byte("[plot](slo-h100/gone.png) and [run](gate-h100/results.md#p50), [up](../CLI.md), [dir](gate-h100/), [root](../../)\n")},
	}
	files := []string{"deleted-in-the-work-tree.go"}
	for name := range fsys {
		files = append(files, name)
	}
	slices.Sort(files)
	problems, err := check(fsys, files)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range problems {
		got = append(got, p.String())
	}
	want := []string{
		"docs/GATE.md:1: cites commit b1e3c08",
		"docs/results/2026-11-30-slo.md:1: links to docs/results/slo-h100/gone.png, which is not in the tree",
		"docs/results/gate-h100/all.tgz: a tracked .tgz file",
		"docs/results/gate-h100/calls.jsonl.gz: a tracked .gz file",
		"docs/results/gate-h100/d.log.xz: a tracked .xz file",
		"docs/results/gate-h100/r.json.gz: a tracked .gz file",
		"docs/results/gate-h100/run.log: a tracked .log file",
		"internal/trace/request/testdata/lc.jsonl.gz: a tracked .gz file",
	}
	if len(got) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("problem %d: %q, want it to start %q", i, got[i], want[i])
		}
	}
}

func TestCheckSize(t *testing.T) {
	fsys := fstest.MapFS{
		"a": {Data: make([]byte, maxTreeBytes/2)},
		"b": {Data: make([]byte, maxTreeBytes/2)},
	}
	if problems, err := check(fsys, []string{"a", "b"}); err != nil || len(problems) != 0 {
		t.Fatalf("at the limit: %v, %v; want none", problems, err)
	}
	fsys["c"] = &fstest.MapFile{Data: []byte{0}}
	problems, err := check(fsys, []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0].msg, "over 6000000") {
		t.Fatalf("one byte over: %v, want the size problem", problems)
	}
}

func TestRelativeLinks(t *testing.T) {
	tests := []struct {
		name string
		text string
		want []string
	}{
		{"a file beside it", "see [the run](run.md).", []string{"docs/run.md"}},
		{"an image", "![plot](slo-h100/a.png)", []string{"docs/slo-h100/a.png"}},
		{"up a folder", "[design](../README.md)", []string{"README.md"}},
		{"an anchor left off", "[SLO](SLO.md#latency-sources)", []string{"docs/SLO.md"}},
		{"a title", `[x](a.md "the title")`, []string{"docs/a.md"}},
		{"two on a line", "[a](a.md) and [b](b/c.md)", []string{"docs/a.md", "docs/b/c.md"}},
		{"a folder", "[helm](../deploy/helm/)", []string{"deploy/helm"}},

		{"a URL", "[docs](https://example.com/a.md)", nil},
		{"a mail address", "[us](mailto:a@example.com)", nil},
		{"within the page", "[below](#measurements)", nil},
		{"in a code span", "`[x](gone.md)`", nil},
		{"in a fenced block", "```\n[x](gone.md)\n```\n", nil},
		{"prose in parentheses beside a link", "BE (at 1 us) kept, [run](run.md) (its report)", []string{"docs/run.md"}},
		{"parentheses in the target", "[x](b(c).md)", []string{"docs/b(c).md"}},
		{"an angle target", "[x](<a b.md>)", []string{"docs/a b.md"}},
		{"a title in single quotes", "[x](a.md 't')", []string{"docs/a.md"}},
		{"a title in parentheses", "[x](a.md (t))", []string{"docs/a.md"}},
		{"a reference definition", "[r]: ../gone.md", []string{"gone.md"}},
		{"a query", "[x](a.md?plain=1#L3)", []string{"docs/a.md"}},
		{"an escape", "[x](a%20b.md)", []string{"docs/a b.md"}},
		{"from the root", "[x](/README.md)", []string{"README.md"}},
		{"the root", "[x](../)", []string{"."}},
		{"a phone number", "[x](tel:123)", nil},
		{"in a tilde fence", "~~~\n[x](gone.md)\n~~~\n", nil},
		{"a longer fence holding a shorter", "````\n```\n[x](gone.md)\n```\n````\n[y](y.md)", []string{"docs/y.md"}},
		{"an indented fence", "  ```\n  [x](gone.md)\n  ```\n", nil},
	}
	for _, tt := range tests {
		var got []string
		for _, l := range relativeLinks("docs", markdownLines(tt.text)) {
			got = append(got, l.target)
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s: %q gives %q, want %q", tt.name, tt.text, got, tt.want)
		}
	}
}
