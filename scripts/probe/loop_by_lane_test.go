package probe

import (
	"strings"
	"testing"
)

// TestLoopByLaneGroupsByPins: two lanes' summaries, one pinned LC 2,3 / BE 4,5 with three settings (one interval
// above 1, one below), one LC 6,7 / BE 8,9 with three (one whose upper bound reads 1.00, one whose lower does), each loop table followed by
// another table: loop_by_lane.py must group by the pins, take only the loop table's rows, count the intervals that
// leave 1 out and, apart, those with a bound at 1.00 (rounded: either way).
func TestLoopByLaneGroupsByPins(t *testing.T) {
	dir := t.TempDir()
	write := func(name, pins string, rows ...string) string {
		return writeText(t, dir, name, "```\n.carry/gpreempt-bench run --scenarios a,b "+pins+" --repeat 1\n```\n\n"+
			"The LC timed a fixed loop on its own thread between requests ...:\n\n"+
			"| scenario | rep | the LC's CPU loop, with BE / alone | 95% CI | LC p50 per its CPU's speed, with BE / alone | 95% CI |\n"+
			"|---|---:|---:|---:|---:|---:|\n"+strings.Join(rows, "\n")+"\n\n"+
			"| scenario | rep | arm | ratio |\n|---|---:|---|---:|\n| slo:x | 1 | 9.000x | [9.00, 9.00] | 1.0x |\n")
	}
	a := write("gpu0-x-rep1.md", "--lc-cpus 2,3 --be-cpus 4,5",
		"| llm-be-1us | 1 | 1.100x | [1.02, 1.20] | 1.0x | [0.9, 1.1] |",
		"| llm-be-200us | 1 | 0.900x | [0.80, 0.98] | 1.0x | [0.9, 1.1] |",
		"| daemon:llm-be-200us#gate | 1 | 1.000x | [0.90, 1.10] | 1.0x | [0.9, 1.1] |")
	b := write("gpu1-x-rep1.md", "--lc-cpus 6,7 --be-cpus 8,9", "| slo:llm-defaults | 1 | 1.050x | [0.95, 1.15] | 1.0x | [0.9, 1.1] |",
		"| llm-be-200us | 1 | 0.738x | [0.62, 1.00] | 1.0x | [0.9, 1.1] |",
		"| llm-be-1us | 1 | 1.080x | [1.00, 1.16] | 1.0x | [0.9, 1.1] |")
	out := string(runScript(t, "loop_by_lane.py", a, b))
	wantLines(t, out,
		"6 settings",
		"| 2,3 | 4,5 | 3 | 0.997x | 0.900-1.100x | 1 | 1 | 0 |",
		"| 6,7 | 8,9 | 3 | 0.942x | 0.738-1.080x | 0 | 0 | 2 |",
		"all: intervals above 1 in 1, below in 1, of 6 (about 0 each by chance); a bound at 1.00 in 2")
}
