package main

import (
	"slices"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		pkgs []pkg
		want []string // each a substring of one problem, in order
	}{
		{
			name: "one way",
			pkgs: []pkg{{folder: "a", imports: []string{"b"}}, {folder: "b"}},
		},
		{
			name: "two packages import each other's folders",
			pkgs: []pkg{{folder: "a", imports: []string{"b/c"}}, {folder: "b"}, {folder: "b/c"}, {folder: "b/d", imports: []string{"a"}}},
			want: []string{"a and b import each other (a -> b/c; b/d -> a)"},
		},
		{
			name: "a folder and its subfolder",
			pkgs: []pkg{{folder: "a", imports: []string{"a/b"}}, {folder: "a/b", imports: []string{"a"}}},
		},
		{
			name: "subfolders of one folder",
			pkgs: []pkg{{folder: "x/a", imports: []string{"x/b"}}, {folder: "x/b", imports: []string{"x/a/c"}}, {folder: "x/a/c"}},
			want: []string{"x/a and x/b import each other (x/a -> x/b; x/b -> x/a/c)"},
		},
		{
			name: "a folder that holds no package is not one",
			pkgs: []pkg{{folder: "internal/a", imports: []string{"pub"}}, {folder: "pub", imports: []string{"internal/b"}}, {folder: "internal/b"}},
		},
		{
			name: "line limits",
			pkgs: []pkg{
				{folder: "big", lines: maxLines + 1}, {folder: "fits", lines: maxLines},
				{folder: "internal/bench", lines: 3 * maxLines},
				{folder: "internal/daemon", lines: maxDaemonLines + 1}, {folder: "internal/daemon/x", lines: maxDaemonLines + 1},
			},
			want: []string{"big: 3001 lines without tests, at most 3000", "internal/daemon: 1501 lines without tests, at most 1500"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, p := range check(tc.pkgs) {
				got = append(got, p.String())
			}
			if len(got) != len(tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("problem %d: got %q, want %q in it", i, got[i], w)
				}
			}
		})
	}
}

// TestLoadsThisModule runs the check's loader on this module: every
// package is found with its folder, and this one imports none of them.
func TestLoadsThisModule(t *testing.T) {
	pkgs, err := load()
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(pkgs, func(p pkg) bool { return p.folder == "internal/tools/importcheck" })
	if i < 0 {
		t.Fatalf("internal/tools/importcheck not among %d packages", len(pkgs))
	}
	if p := pkgs[i]; len(p.imports) != 0 || p.lines == 0 {
		t.Errorf("internal/tools/importcheck: imports %q, %d lines; want none, some", p.imports, p.lines)
	}
}
