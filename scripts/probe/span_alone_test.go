package probe

import (
	"encoding/json"
	"math"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSpanAloneReadsTheDriftingLC: an LC at 200 ms alone that drifts to 150 ms in its ninth
// window, 1.2x slower while BE works (4 windows of 8), under a reference gpreemptd learnt at
// 200 ms: span_alone.py's replay must read the arm at 1.2 by the span's alone and at 0.9 by the
// reference, as a stale reference misreads a drifting LC (BE's edges on the windows' here: the
// window BE began in left out reads 1.2 too).
func TestSpanAloneReadsTheDriftingLC(t *testing.T) {
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
			samples = append(samples, sample{Arrival: end - lat, Latency: lat})
		}
		reads = append(reads, read{w, "200µs", share, true, []lcRow{{1.1 * 200e3, lo, lo + 1e9}}})
	}
	results := map[string]any{"scenarios": []any{map[string]any{"name": "slo:test", "slo": reads,
		"lc": map[string]any{"samples": samples}, "lc_duty_by_arm": []any{map[string]any{"arm": "200µs", "p50_ratio": 1.2, "with_be": 80, "alone": 80}}}}}
	path := writeResults(t, results)
	out := runScript(t, "span_alone.py", path)
	if !regexp.MustCompile(`(?m)^\| 200µs \| 1\.200 \(80 / 80\) \| 0\.900 \(\d+\) \| 1\.200 \(\d+\) \| 1\.200 \(\d+\) \| 1\.200 \(\d+\) \|$`).Match(out) {
		t.Errorf("want the arm read 0.900 by the reference and 1.200 by the span's alone:\n%s", out)
	}
}

// TestSpanAloneStartedLeavesOutRequestsBeforeBE: BE works the even 4 s halves of the clock (an 8 s
// duty), the daemon's 1 s windows half a second off them, and a request that starts while BE works
// runs 1.2x its latency alone (200 ms scattered ±20%). The window BE began in holds requests that
// started before it, at their alone latency, counted with BE by when they ended: the span rule must
// read the arm under 1.2, and the started rule, which leaves them out, nearer 1.2 than it.
func TestSpanAloneStartedLeavesOutRequestsBeforeBE(t *testing.T) {
	path := dutyRun(t, func(int) float64 { return 1 }, 1e6)
	out := runScript(t, "span_alone.py", path)
	m := regexp.MustCompile(`(?m)^\| 200µs \| [^|]+ \| [^|]+ \| ([0-9.]+) \(\d+\) \| [^|]+ \| ([0-9.]+) \(\d+\) \|$`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no row for 200µs:\n%s", out)
	}
	span, _ := strconv.ParseFloat(string(m[1]), 64)
	started, _ := strconv.ParseFloat(string(m[2]), 64)
	if !(span < 1.19) || !(math.Abs(started-1.2) < math.Abs(span-1.2)) {
		t.Errorf("want the span rule under 1.19 and the started rule nearer 1.2: span %.3f, started %.3f:\n%s", span, started, out)
	}
	// --scatter: the span rule's measurements one by one, as many as its median was taken over
	n := regexp.MustCompile(`(?m)^\| 200µs \| [^|]+ \| [^|]+ \| [0-9.]+ \((\d+)\) \|`).FindSubmatch(out)
	out = runScript(t, "span_alone.py", "--scatter", path)
	m = regexp.MustCompile(`pooled over 1 arms, (\d+) measurements: relative SD ([0-9.]+)`).FindSubmatch(out)
	if n == nil || m == nil || string(m[1]) != string(n[1]) {
		t.Fatalf("want one arm pooled over the span rule's measurements:\n%s", out)
	}
	if sd, _ := strconv.ParseFloat(string(m[2]), 64); sd <= 0 || sd > 0.1 {
		t.Errorf("relative SD %v, want the 200 ms ± 20%% requests' few percent:\n%s", sd, out)
	}
}

// dutyRun is TestSpanAloneStartedLeavesOutRequestsBeforeBE's run, each request's latency and CPU loop (unit ns at
// speed 1) times cpu(j), its CPU's slowness then.
func dutyRun(t *testing.T, cpu func(j int) float64, unit float64) string {
	const half = int64(4e9)
	works := func(t int64) bool { return (t/half)%2 == 0 }
	var samples []sample
	for j := range 640 {
		at := int64(8e9) + int64(j)*250e6 + 1e8
		lat := 200e6 * (0.8 + 0.4*math.Mod(float64(j)*0.6180339887, 1)) * cpu(j)
		if works(at) {
			lat *= 1.2
		}
		samples = append(samples, sample{at, int64(lat), int64(unit * cpu(j))})
	}
	var reads []read
	for k := range 160 {
		lo := int64(8e9) + int64(k)*1e9 + 5e8
		share := 0.0
		if works(lo) || works(lo+1e9-1) {
			share = 0.8
		}
		reads = append(reads, read{k, "200µs", share, true, []lcRow{{1.1 * 200e3, lo, lo + 1e9}}})
	}
	return writeResults(t, map[string]any{"scenarios": []any{map[string]any{"name": "slo:test", "slo": reads, "be_duty": 8e9,
		"lc": map[string]any{"samples": samples}, "lc_duty_by_arm": []any{map[string]any{"arm": "200µs", "p50_ratio": 1.2, "with_be": 200, "alone": 200}}}}})
}

// TestSpanAloneScatterPerCPU: the same run with the LC's CPU 1.6x slower in stretches of requests (a vCPU's speed
// modes, its loop slower with it): its measurements must scatter by more than twice what they do per its CPU's speed,
// these made of the same requests (as many measurements), whatever the loop's unit.
func TestSpanAloneScatterPerCPU(t *testing.T) {
	slow := func(j int) float64 { return map[bool]float64{true: 1.6, false: 1}[(j*j/7+j)%29 < 11] }
	pooled := regexp.MustCompile(`pooled over 1 arms, (\d+) measurements: relative SD ([0-9.]+)`)
	sd := func(path string, args ...string) (string, float64) {
		out := runScript(t, "span_alone.py", append(append([]string{"--scatter"}, args...), path)...)
		m := pooled.FindSubmatch(out)
		if m == nil {
			t.Fatalf("no pooled line:\n%s", out)
		}
		v, _ := strconv.ParseFloat(string(m[2]), 64)
		return string(m[1]), v
	}
	path := dutyRun(t, slow, 1e6)
	n, raw := sd(path)
	nc, perCPU := sd(path, "--per-cpu")
	n2, perCPU2 := sd(dutyRun(t, slow, 4.4e6), "--per-cpu")
	if !(perCPU < raw/2) || perCPU > 0.1 || nc != n || n2 != n || perCPU2 != perCPU {
		t.Errorf("relative SD %.3f raw (%s measurements), %.3f per its CPU (%s), %.3f with the loop's unit 4.4x (%s): want the second under half the first and 0.1, the third the second, as many measurements",
			raw, n, perCPU, nc, perCPU2, n2)
	}
}

// TestSpanAloneMeasured: gpreemptd's status read three times a measurement, one arm measured at 1.0, 1.1 and 0.9
// (relative SD 0.1) and another twice (left out, under three); a read between measurements repeats the last. Each
// measurement counts once, where the count grew, under the arm the read before showed: the read that shows it shows
// the arm its window decided (filed under that, 500 µs would read 1.1, 0.9, 1.3). 0.100 over 3, not the 9 reads' 0.087.
func TestSpanAloneMeasured(t *testing.T) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	read := func(arm string, made int, ratio float64) {
		r := map[string]any{"status": map[string]any{"slo": map[string]any{
			"searches": []any{map[string]any{"arm": arm}},
			"lc":       []any{map[string]any{"measurements": made, "ratio": ratio}}}}}
		if err := enc.Encode(r); err != nil {
			t.Fatal(err)
		}
	}
	read("200µs", 0, 0)
	for made, m := range []struct {
		ratio float64
		next  string // the arm the window that made it decided
	}{{1.0, "200µs"}, {1.1, "500µs"}, {1.2, "200µs"}, {0.9, "500µs"}, {1.3, "500µs"}} {
		for range 3 {
			read(m.next, made+1, m.ratio)
		}
	}
	path := writeText(t, t.TempDir(), "status.jsonl", b.String())
	out := runScript(t, "span_alone.py", "--measured", path)
	if !strings.Contains(string(out), "pooled over 1 arms, 3 measurements: relative SD 0.100") {
		t.Errorf("want one arm of 3 measurements at 0.100:\n%s", out)
	}
}

// TestSpanAloneReading: two runs' arms against SLO mode's readings. Counted: arms measured twice or
// more over 30 requests a half or more (an arm read once, or of 29 requests a half, is left out),
// weighted by their requests; the per-loop ratio only where the bench wrote one. The app at 1.21x
// and 1.1x where SLO mode read 1.1x (ratios 1.1 and 1.0, 300 and 100 requests): 1.074 weighted
// (e^((300 ln 1.1)/400)), 1.049 by arm; per its loop 1.1x on the one arm that has it: 1.000; the
// CPU loops 1.2x and 1.0x: 1.095.
func TestSpanAloneReading(t *testing.T) {
	arm := func(app, loop, daemon float64, n, reads int) map[string]any {
		a := map[string]any{"arm": "200µs", "with_be": n, "alone": n, "p50_ratio": app, "daemon_ratio": daemon, "daemon_measurements": reads}
		if loop > 0 {
			a["p50_per_cpu_ratio"] = loop
		}
		return a
	}
	run := func(cpuLoop float64, arms ...map[string]any) string {
		return writeResults(t, map[string]any{"scenarios": []any{
			map[string]any{"name": "slo:llm-defaults", "lc_duty": map[string]any{"cpu_meter_p50_ratio": cpuLoop}, "lc_duty_by_arm": arms}}})
	}
	a := run(1.2, arm(1.21, 1.1, 1.1, 150, 5), arm(2.0, 1.1, 1.1, 150, 1), arm(2.0, 1.1, 1.1, 29, 4))
	b := run(1.0, arm(1.1, 0, 1.1, 50, 2))
	out := string(runScript(t, "span_alone.py", "--reading", a, b))
	for _, want := range []string{
		"the app's ratio over SLO mode's reading, 2 arms: 1.074 weighted by requests, 1.049 ± 0.095 by arm",
		"the app's per its CPU loop over SLO mode's reading, 1 arms: 1.000 weighted by requests",
		"the LC's CPU loop with BE over alone, 2 scenarios: 1.095",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in:\n%s", want, out)
		}
	}
}
