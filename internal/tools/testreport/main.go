// Command testreport runs `go test -json` with the arguments it is given
// and prints what plain `go test` would (each package's result, and the
// output of the tests that failed), then every test that was skipped with
// the reason it gave. Plain `go test` shows skips only with -v, and the
// GPU tests skip on a machine without one. The exit status is go test's.
//
//	go run ./internal/tools/testreport -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
)

func main() {
	cmd := exec.Command("go", append([]string{"test", "-json"}, os.Args[1:]...)...)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	}
	r := newReport()
	readErr := r.read(stdout, os.Stdout)
	err = cmd.Wait()
	r.writeSkips(os.Stdout)
	if readErr != nil {
		fmt.Fprintf(os.Stderr, "testreport: %v\n", readErr)
	}
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		os.Exit(exit.ExitCode())
	case err != nil:
		fmt.Fprintf(os.Stderr, "testreport: %v\n", err)
		os.Exit(1)
	case readErr != nil || r.failed:
		os.Exit(1)
	}
}

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// skip is a skipped test and why.
type skip struct {
	Package, Test, Reason string
}

type report struct {
	// output holds each running test's lines until it ends.
	output map[[2]string][]string
	skips  []skip
	failed bool
}

func newReport() *report { return &report{output: map[[2]string][]string{}} }

// read consumes the event stream, printing as plain go test does.
func (r *report) read(in io.Reader, out io.Writer) error {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil || ev.Action == "" {
			// Not an event (go test wrote it itself): pass it on.
			fmt.Fprintln(out, sc.Text())
			continue
		}
		r.event(ev, out)
	}
	return sc.Err()
}

func (r *report) event(ev event, out io.Writer) {
	key := [2]string{ev.Package, ev.Test}
	switch {
	case ev.Action == "build-output":
		fmt.Fprint(out, ev.Output)
	case ev.Action == "build-fail":
		r.failed = true
	case ev.Test == "" && ev.Action == "output":
		// The package's own lines: its result, and anything printed
		// outside a test. "PASS" and "FAIL" alone repeat the result.
		if ev.Output != "PASS\n" && ev.Output != "FAIL\n" {
			fmt.Fprint(out, ev.Output)
		}
	case ev.Test == "" && ev.Action == "fail":
		r.failed = true
	case ev.Test == "":
		// A package's start, pass, or skip (no test files): its
		// output line already said so.
	case ev.Action == "output":
		r.output[key] = append(r.output[key], ev.Output)
	case ev.Action == "fail":
		r.failed = true
		for _, line := range r.output[key] {
			if !isFrame(line) || strings.HasPrefix(strings.TrimSpace(line), "--- FAIL") {
				fmt.Fprint(out, line)
			}
		}
		delete(r.output, key)
	case ev.Action == "skip":
		r.skips = append(r.skips, skip{Package: ev.Package, Test: ev.Test, Reason: reason(r.output[key])})
		delete(r.output, key)
	case ev.Action == "pass":
		delete(r.output, key)
	}
}

// isFrame tells go test's own lines about a test (=== RUN, --- PASS) from
// what the test logged.
func isFrame(line string) bool {
	t := strings.TrimSpace(line)
	for _, p := range []string{"=== ", "--- PASS", "--- FAIL", "--- SKIP"} {
		if strings.HasPrefix(t, p) {
			return true
		}
	}
	return false
}

// reason is what a skipped test logged, its file:line prefix dropped.
func reason(lines []string) string {
	var parts []string
	for _, line := range lines {
		if isFrame(line) {
			continue
		}
		t := strings.TrimSpace(line)
		if file, rest, ok := strings.Cut(t, ": "); ok && strings.Contains(file, "_test.go:") {
			t = rest
		}
		if t != "" {
			parts = append(parts, t)
		}
	}
	if len(parts) == 0 {
		return "(no reason given)"
	}
	return strings.Join(parts, "; ")
}

// writeSkips lists the skipped tests, by package and name.
func (r *report) writeSkips(out io.Writer) {
	if len(r.skips) == 0 {
		return
	}
	slices.SortFunc(r.skips, func(a, b skip) int {
		return strings.Compare(a.Package+" "+a.Test, b.Package+" "+b.Test)
	})
	fmt.Fprintf(out, "\n%d tests skipped:\n", len(r.skips))
	for _, s := range r.skips {
		fmt.Fprintf(out, "SKIP %s %s: %s\n", s.Package, s.Test, s.Reason)
	}
}
