// Command importcheck fails when the module's packages stop reading as a
// map. `make vet` runs it.
//
//   - No folder imports one that imports it: a folder stands for every
//     package in it and below it, and for two package folders A and B,
//     neither inside the other, something under A importing something
//     under B while something under B imports something under A is a loop.
//     Only folders that hold a package count, so `internal/` is not one,
//     and only what the packages' builds import: a package's tests may use
//     a fake built on the package itself (tsg's on internal/rmfake).
//   - No package is over maxLines lines of Go without its tests
//     (internal/bench exempt), and gpreemptd's own package, the wiring of
//     its parts, is at most maxDaemonLines. Every .go file in the
//     package's folder that is not a _test.go counts, generated ones too.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

const (
	maxLines       = 3000
	maxDaemonLines = 1500
)

// lineLimits are the folders with a limit of their own: 0 is none.
var lineLimits = map[string]int{
	"internal/bench":  0,
	"internal/daemon": maxDaemonLines,
}

// pkg is one package as the check sees it: its folder relative to the
// module root, the folders of the module's packages its build imports and
// its lines without tests.
type pkg struct {
	folder  string
	imports []string
	lines   int
}

func main() {
	pkgs, err := load()
	if err != nil {
		fmt.Fprintf(os.Stderr, "importcheck: %v\n", err)
		os.Exit(1)
	}
	var problems []string
	for _, p := range check(pkgs) {
		fmt.Fprintf(os.Stderr, "importcheck: %s\n", p)
		problems = append(problems, p.String())
	}
	if len(problems) > 0 {
		fmt.Fprintf(os.Stderr, "importcheck: %d problems: split the package, or move the import that closes the loop (docs/DESIGN.md)\n", len(problems))
		os.Exit(1)
	}
}

// listed is what load reads of `go list -json`.
type listed struct {
	ImportPath string
	Dir        string
	Imports    []string
	Module     *struct{ Path, Dir string }
}

// load lists the module's packages with `go list -json ./...`.
func load() ([]pkg, error) {
	cmd := exec.Command("go", "list", "-e", "-json", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, bytes.TrimSpace(stderr.Bytes()))
	}
	var all []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var l listed
		if err := dec.Decode(&l); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list: %w", err)
		}
		all = append(all, l)
	}
	folders := map[string]string{} // import path -> folder
	for _, l := range all {
		if l.Module == nil {
			continue
		}
		rel, err := filepath.Rel(l.Module.Dir, l.Dir)
		if err != nil {
			return nil, err
		}
		folders[l.ImportPath] = filepath.ToSlash(rel)
	}
	var pkgs []pkg
	for _, l := range all {
		folder, ok := folders[l.ImportPath]
		if !ok {
			continue
		}
		p := pkg{folder: folder}
		seen := map[string]bool{}
		for _, imp := range l.Imports {
			if f, ok := folders[imp]; ok && f != folder && !seen[f] {
				seen[f] = true
				p.imports = append(p.imports, f)
			}
		}
		if p.lines, err = countLines(l.Dir); err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// countLines counts the lines of the .go files in dir without its tests.
func countLines(dir string) (int, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		b, err := os.ReadFile(name)
		if err != nil {
			return 0, err
		}
		n += bytes.Count(b, []byte{'\n'})
	}
	return n, nil
}

// problem is one broken rule: a package over its line limit (lines) or
// a loop between two folders.
type problem struct {
	folder string
	lines  bool
	msg    string
}

func (p problem) String() string { return p.msg }

// check returns every package over its line limit, then every loop
// between folders.
func check(pkgs []pkg) []problem {
	var problems []problem
	sorted := slices.SortedFunc(slices.Values(pkgs), func(a, b pkg) int { return strings.Compare(a.folder, b.folder) })
	for _, p := range sorted {
		limit, ok := lineLimits[p.folder]
		if !ok {
			limit = maxLines
		}
		if limit > 0 && p.lines > limit {
			problems = append(problems, problem{folder: p.folder, lines: true,
				msg: fmt.Sprintf("%s: %d lines without tests, at most %d", p.folder, p.lines, limit)})
		}
	}
	for _, l := range loops(pkgs) {
		problems = append(problems, problem{msg: l})
	}
	return problems
}

// within says whether folder f is d or lies under it.
func within(f, d string) bool { return f == d || strings.HasPrefix(f, d+"/") }

// loops returns the pairs of package folders, neither inside the other,
// that import each other, each with one import either way.
func loops(pkgs []pkg) []string {
	var folders []string
	for _, p := range pkgs {
		folders = append(folders, p.folder)
	}
	sort.Strings(folders)
	// edge[a][b]: an import from under a to under b, as "from -> to".
	edge := map[string]map[string]string{}
	for _, p := range pkgs {
		for _, imp := range p.imports {
			for _, a := range folders {
				if !within(p.folder, a) {
					continue
				}
				for _, b := range folders {
					if !within(imp, b) || within(a, b) || within(b, a) {
						continue
					}
					if edge[a] == nil {
						edge[a] = map[string]string{}
					}
					if old, ok := edge[a][b]; !ok || p.folder+" -> "+imp < old {
						edge[a][b] = p.folder + " -> " + imp
					}
				}
			}
		}
	}
	var out []string
	for a, to := range edge {
		for b, ab := range to {
			if ba, ok := edge[b][a]; ok && a < b {
				out = append(out, fmt.Sprintf("%s and %s import each other (%s; %s)", a, b, ab, ba))
			}
		}
	}
	sort.Strings(out)
	return out
}
