// Command treecheck fails when the tracked tree breaks one of the rules that
// keep a fresh clone small and the manual a manual. `make vet` runs it.
//
//   - The tracked files together are at most 6 MB (maxTreeBytes).
//   - No GPU run's raw output is tracked: no .gz, .xz, .tgz or .log file.
//     The GPU scripts still write them beside their summaries in
//     docs/results/, where .gitignore keeps them out; a run's recording of
//     calls (`gpreemptctl trace requests --record`) is such output too, in
//     testdata/ or not: a markdown summary stands for it.
//   - docs/*.md, the manual, cites no commit hash: a run keyed by a commit is
//     a dated report under docs/results/, which the manual links to.
//   - Every relative link of a tracked markdown file (inline, or a reference
//     definition, outside code) names a tracked file or folder: a plot or
//     report that leaves the tree takes its links along.
//
// Build outputs (executables, libraries) are internal/tools/buildoutputs'.
package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strings"
)

// maxTreeBytes bounds the tracked tree (git ls-files -z | xargs -0 du -cb).
const maxTreeBytes = 6_000_000

// rawExts are the extensions of raw results and archives, never tracked.
var rawExts = []string{".gz", ".xz", ".tgz", ".log"}

// pendingDocs are manual pages that still cite commits while being
// rewritten: reported, not failed. Remove an entry once its page is clean.
var pendingDocs = map[string]string{}

func main() {
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		fmt.Fprintf(os.Stderr, "treecheck: git ls-files: %v (not a git checkout: nothing checked)\n", err)
		return
	}
	var files []string
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		if len(name) > 0 {
			files = append(files, string(name))
		}
	}
	problems, err := check(os.DirFS("."), files)
	if err != nil {
		fmt.Fprintf(os.Stderr, "treecheck: %v\n", err)
		os.Exit(1)
	}
	var bad int
	for _, p := range problems {
		if why, ok := pendingDocs[p.file]; ok && p.commit {
			fmt.Fprintf(os.Stderr, "treecheck: (pending: %s) %s\n", why, p)
			continue
		}
		fmt.Fprintf(os.Stderr, "treecheck: %s\n", p)
		bad++
	}
	if bad > 0 {
		os.Exit(1)
	}
}

// A problem is one broken rule; commit marks a commit cited by the manual.
type problem struct {
	file   string
	line   int
	msg    string
	commit bool
}

func (p problem) String() string {
	if p.line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.file, p.line, p.msg)
	}
	if p.file != "" {
		return p.file + ": " + p.msg
	}
	return p.msg
}

// check applies every rule to the tracked files, read from fsys. A tracked
// file deleted in the work tree is skipped.
func check(fsys fs.FS, files []string) ([]problem, error) {
	var problems []problem
	var total int64
	tracked := map[string]bool{".": true} // the tree's root, as a link to ../ from docs/ names it
	for _, name := range files {
		for d := name; d != "."; d = path.Dir(d) {
			tracked[d] = true
		}
	}
	for _, name := range files {
		st, err := fs.Lstat(fsys, name)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		total += st.Size()
		if ext := rawExt(name); ext != "" {
			problems = append(problems, problem{file: name, msg: fmt.Sprintf("a tracked %s file (raw results and archives stay out of the tree): git rm --cached it; .gitignore keeps docs/results' raw files out", ext)})
		}
		if !strings.HasSuffix(name, ".md") || !st.Mode().IsRegular() {
			continue
		}
		text, err := fs.ReadFile(fsys, name)
		if err != nil {
			return nil, err
		}
		lines := markdownLines(string(text)) // read once for its links and its citations
		for _, l := range relativeLinks(path.Dir(name), lines) {
			if !tracked[l.target] {
				problems = append(problems, problem{file: name, line: l.line, msg: fmt.Sprintf("links to %s, which is not in the tree: mend the link or name the git show that brings it back", l.target)})
			}
		}
		if isManual(name) {
			for _, c := range commitCitations(lines) {
				problems = append(problems, problem{file: name, line: c.line, commit: true,
					msg: fmt.Sprintf("cites commit %s: the manual states what holds; a run keyed by a commit goes to a dated report in docs/results/", c.hash)})
			}
		}
	}
	if total > maxTreeBytes {
		problems = append(problems, problem{msg: fmt.Sprintf("the tracked tree is %d bytes, over %d: keep raw results, logs and unlinked plots out (docs/results/ keeps summaries and the plots the docs show)", total, maxTreeBytes)})
	}
	return problems, nil
}

// rawExt is name's raw-result extension, "" for none.
func rawExt(name string) string {
	for _, ext := range rawExts {
		if strings.HasSuffix(name, ext) {
			return ext
		}
	}
	return ""
}

// isManual reports whether name is a page of the manual: docs/*.md, not
// the run reports under docs/results/.
func isManual(name string) bool {
	return path.Dir(name) == "docs" && strings.HasSuffix(name, ".md")
}
