package probe

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A bench results.json.gz's parts the probes read: an LC request, and a status read of SLO mode with its LC row.
type sample struct {
	Arrival int64 `json:"arrival_mono_ns"`
	Latency int64 `json:"latency_ns"`
	Meter   int64 `json:"cpu_meter_ns,omitempty"` // the LC's CPU loop around it: its CPU's speed then
}

type lcRow struct {
	Target float64 `json:"target_us"`
	From   int64   `json:"from_mono_ns"`
	To     int64   `json:"to_mono_ns"`
}

type read struct {
	Window  int     `json:"window"`
	Arm     string  `json:"arm"`
	BEShare float64 `json:"be_share"`
	Aligned bool    `json:"aligned"`
	LC      []lcRow `json:"lc"`
}

// writeResults writes results as a results.json.gz in a test directory and returns its path.
func writeResults(t *testing.T, results any) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "results.json.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := gzip.NewWriter(f)
	if err := json.NewEncoder(z).Encode(results); err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(z.Close(), f.Close()); err != nil {
		t.Fatal(err)
	}
	return path
}

// runScript runs a probe script with python3 (the test skipped without it); the script is read here first, so that
// the test cache sees it change.
func runScript(t *testing.T, script string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	if _, err := os.ReadFile(script); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("python3", append([]string{script}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	return out
}

// writeText writes text as dir/name and returns its path.
func writeText(t *testing.T, dir, name, text string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// wantLines fails t for each of lines that out lacks as a whole line's end.
func wantLines(t *testing.T, out string, lines ...string) {
	t.Helper()
	for _, want := range lines {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}
