package probe

import (
	"fmt"
	"strings"
	"testing"
)

// TestClockHalvesTellsClockFromSlices: an LC of 300 ms a request, one a second, under an 8 s duty whose working halves
// alternate between an SM clock of 1500 MHz and 1980 MHz (GPU 1's log lines at 100 MHz beside them). Clock-bound, it
// runs 1.3x as long beside BE at the low clock only; slice-bound, 1.1x at either: clock_halves.py must split the
// requests beside BE by their clock and give 1.300 and 1.000 for the one against the other.
func TestClockHalvesTellsClockFromSlices(t *testing.T) {
	const cycles = 20
	var log strings.Builder
	log.WriteString("nvidia-smi: a line that is no reading\n")
	for s := range cycles*8 + 2 {
		mhz := 1980
		if s%8 < 4 && (s/8)%2 == 0 {
			mhz = 1500
		}
		fmt.Fprintf(&log, "%d.00, 0, %d, 690.1, 55\n%d.00, 1, 100, 80.0, 40\n", s, mhz, s)
	}
	clocks := writeText(t, t.TempDir(), "lane-clocks.log", log.String())
	scenario := func(name string, withBE func(lowClock bool) float64) map[string]any {
		var samples []sample
		for s := range cycles * 8 {
			ms := 300.0
			if s%8 < 4 {
				ms = withBE((s/8)%2 == 0)
			}
			samples = append(samples, sample{Arrival: int64(s)*1e9 + 3e8, Latency: int64(ms * 1e6)})
		}
		return map[string]any{"name": name, "be_duty": 8e9, "lc": map[string]any{"samples": samples}}
	}
	path := writeResults(t, map[string]any{"scenarios": []any{
		scenario("clock-bound", func(low bool) float64 { return map[bool]float64{true: 390, false: 300}[low] }),
		scenario("slice-bound", func(bool) float64 { return 330 }),
	}})
	out := string(runScript(t, "clock_halves.py", clocks, path))
	wantLines(t, out,
		"| clock-bound | 300.0 (80, 1980) | 300.0 (40) | 390.0 (40, 1500) | 1.300 |",
		"| slice-bound | 300.0 (80, 1980) | 330.0 (40) | 330.0 (40, 1500) | 1.000 |")
}
