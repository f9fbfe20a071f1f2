package bench

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParsePrep: the --prep-dist flag.
func FuzzParsePrep(f *testing.F) {
	for _, s := range []string{"500us", "fixed:500us", "uniform:300us:700us", "uniform:700us:300us", "", "x:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParsePrep(s)
		if err != nil {
			return
		}
		if d.Min < 0 || d.Max < d.Min {
			t.Fatalf("ParsePrep(%q) = %+v: negative or inverted", s, d)
		}
		again, err := ParsePrep(d.String())
		if err != nil || again != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, d, d.String(), again, err)
		}
	})
}

// FuzzParseScenarios: the --scenarios flag.
func FuzzParseScenarios(f *testing.F) {
	for _, s := range []string{DefaultScenarios, "be-ratio:3000us:1000us", "pytorch-prepreempt-be-1us,prepreempt-standalone", "be-0us", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scs, err := ParseScenarios(s)
		if err != nil {
			return
		}
		for _, sc := range scs {
			if sc.Hints && !sc.HasLC() {
				t.Fatalf("%q: pre-preemption without an LC worker accepted", s)
			}
			if sc.Kind == KindBERatio && (sc.Ratio[0] <= 0 || sc.Ratio[1] <= 0) {
				t.Fatalf("%q: ratio %v", s, sc.Ratio)
			}
		}
	})
}

// FuzzWorkerResult: a worker's JSON result, as the orchestrator reads and
// checks it (workers are separate programs, the Python ones included).
func FuzzWorkerResult(f *testing.F) {
	for _, name := range []string{"lc_infer.json", "be_train.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"schema":1,"samples":[{"latency_ns":-5}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "w.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var lc LCResult
		if err := readJSON(path, &lc); err == nil {
			_ = checkLC(&lc, 1)
		}
		var be BEResult
		if err := readJSON(path, &be); err == nil {
			_ = checkBE("be", &be)
		}
		if json.Valid(b) {
			return
		}
		if err := readJSON(path, &lc); err == nil {
			t.Fatalf("invalid JSON accepted: %q", b)
		}
	})
}
