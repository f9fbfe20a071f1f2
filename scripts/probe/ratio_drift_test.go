package probe

import (
	"math"
	"math/rand/v2"
	"regexp"
	"strconv"
	"testing"
)

// TestRatioDriftTellsDriftFromScatter: six LC runs of two requests a second over 400 s under an 8 s
// duty, each request's latency scattered by 15% (seeded), BE making it 1.1x slower (scatter), or
// 1.0x rising to 1.6x through each run (drift): ratio_drift.py's pooled variance ratio must lie
// near 1 with lag-1 correlations near white noise's for the first, well over both for the second.
func TestRatioDriftTellsDriftFromScatter(t *testing.T) {
	for _, tc := range []struct {
		name         string
		slowdown     func(at float64) float64 // BE's factor at a fraction of the run
		fLo, fHi     float64
		lagLo, lagHi float64 // the spans' mean lag-1 correlation
		meanLo       float64 // each span's mean block ratio at least (BE's halves told from idle ones)
	}{
		{"scatter", func(float64) float64 { return 1.1 }, 0.5, 1.6, -0.3, 0.2, 1.05},
		{"drift", func(at float64) float64 { return 1 + 0.6*at }, 3, math.Inf(1), 0.4, 1, 1.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(1, 2))
			const start, n = int64(1e9), 800
			var scenarios []any
			for range 6 {
				var samples []sample
				for i := range n {
					at := start + int64(i)*5e8 + 3e8
					lat := 200e6 * math.Exp(0.15*rng.NormFloat64())
					if (at/4e9)%2 == 0 {
						lat *= tc.slowdown(float64(i) / n)
					}
					samples = append(samples, sample{Arrival: at, Latency: int64(lat)})
				}
				scenarios = append(scenarios, map[string]any{"name": "llm-be-200us", "be_duty": 8e9,
					"window_start_mono_ns": start, "window_end_mono_ns": start + n*5e8, "lc": map[string]any{"samples": samples}})
			}
			results := map[string]any{"scenarios": scenarios}
			path := writeResults(t, results)
			out := runScript(t, "ratio_drift.py", "--cycles", "2", path)
			for _, m := range regexp.MustCompile(`\(mean ([0-9.]+)\)`).FindAllSubmatch(out, -1) {
				if v, _ := strconv.ParseFloat(string(m[1]), 64); v < tc.meanLo || v > 1.4 {
					t.Errorf("a span's mean block ratio %v, want [%v, 1.4]:\n%s", v, tc.meanLo, out)
				}
			}
			m := regexp.MustCompile(`pooled: 6 spans, (\d+) blocks; between-block over sampling variance ([0-9.]+); lag-1 correlation above 0 in \d, mean ([-+][0-9.]+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("no pooled line over 6 spans:\n%s", out)
			}
			blocks, _ := strconv.Atoi(string(m[1]))
			fr, _ := strconv.ParseFloat(string(m[2]), 64)
			lag, _ := strconv.ParseFloat(string(m[3]), 64)
			if blocks < 120 || fr < tc.fLo || fr > tc.fHi || lag < tc.lagLo || lag > tc.lagHi {
				t.Errorf("want 120+ blocks, F in [%v, %v], mean lag-1 in [%v, %v]:\n%s", tc.fLo, tc.fHi, tc.lagLo, tc.lagHi, out)
			}
		})
	}
}
