package probe

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestSpanAloneReadsTheDriftingLC: an LC at 200 ms alone that drifts to 150 ms in its ninth
// window, 1.2x slower while BE works (4 windows of 8), under a reference gpreemptd learnt at
// 200 ms: span_alone.py's replay must read the arm at 1.2 by the span's alone and at 0.9 by the
// reference, as a stale reference misreads a drifting LC (BE's edges on the windows' here: the
// window BE began in left out reads 1.2 too).
func TestSpanAloneReadsTheDriftingLC(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	type sample struct {
		Arrival int64 `json:"arrival_mono_ns"`
		Latency int64 `json:"latency_ns"`
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
	var samples []sample
	var reads []read
	for w := range 80 {
		alone, share := int64(200e6), 0.0
		if w >= 8 {
			alone = 150e6
		}
		lat := alone
		if w%8 < 4 {
			lat, share = alone*6/5, 0.8
		}
		lo := int64(w+1) * 1e9
		for _, end := range []int64{lo + 3e8, lo + 7e8} {
			samples = append(samples, sample{end - lat, lat})
		}
		reads = append(reads, read{w, "200µs", share, true, []lcRow{{1.1 * 200e3, lo, lo + 1e9}}})
	}
	results := map[string]any{"scenarios": []any{map[string]any{"name": "slo:test", "slo": reads,
		"lc": map[string]any{"samples": samples}, "lc_duty_by_arm": []any{map[string]any{"arm": "200µs", "p50_ratio": 1.2, "with_be": 80, "alone": 80}}}}}
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
	out, err := exec.Command("python3", "span_alone.py", path).CombinedOutput()
	if err != nil {
		t.Fatalf("span_alone.py: %v: %s", err, out)
	}
	if !regexp.MustCompile(`(?m)^\| 200µs \| 1\.200 \(80 / 80\) \| 0\.900 \(\d+\) \| 1\.200 \(\d+\) \| 1\.200 \(\d+\) \|$`).Match(out) {
		t.Errorf("want the arm read 0.900 by the reference and 1.200 by the span's alone:\n%s", out)
	}
}
