package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/stats"
)

func TestSplitByDuty(t *testing.T) {
	const s, ms = int64(time.Second), int64(time.Millisecond)
	req := func(start, lat, tpot int64) LCSample {
		return LCSample{ArrivalMonoNs: start, LatencyNs: lat, TPOTNs: tpot}
	}
	// A 4 s period: BE works in [0, 2 s), [4 s, 6 s), ... and idles in
	// [2 s, 4 s), [6 s, 8 s), ...
	samples := []LCSample{
		req(-1*s, 100*ms, 10*ms),    // before the clock's epoch: not counted
		req(50*ms, 100*ms, 0),       // inside the guard: not counted
		req(200*ms, 300*ms, 30*ms),  // with BE
		req(1*s, 400*ms, 40*ms),     // with BE
		req(1900*ms, 50*ms, 0),      // inside, but ends at 1.95 s: with BE
		req(1950*ms, 100*ms, 0),     // crosses into the idle half: not counted
		req(2200*ms, 150*ms, 15*ms), // alone
		req(3*s, 200*ms, 20*ms),     // alone
		req(4200*ms, 500*ms, 50*ms), // with BE (the next period)
		req(6500*ms, 100*ms, 10*ms), // alone
		req(7950*ms, 100*ms, 10*ms), // crosses into the working half: not counted
		req(9*s, 1150*ms, 0),        // 9.0-10.15 s: crosses into the idle half, not counted
		// Due at 9.5 s, it starts when the one before ends: 10.15-10.45 s,
		// alone (as due, it would have run with BE).
		req(9500*ms, 300*ms, 0),
	}
	d := splitByDuty(&LCResult{Samples: samples}, 4*time.Second)
	if d.WithBE == nil || d.Alone == nil || d.WithBE.N != 4 || d.Alone.N != 4 {
		t.Fatalf("split %+v %+v: want 4 with BE, 4 alone", d.WithBE, d.Alone)
	}
	// p50s: with BE the median of {300, 400, 50, 500} ms, 350 ms; alone of
	// {150, 200, 100, 300}, 175 ms. TPOT: with BE {30, 40, 50}, alone {15, 20, 10}.
	if got := d.P50Ratio; got != 2 {
		t.Errorf("p50 ratio %v, want 350/175", got)
	}
	if got := d.TPOTRatio; got != 40.0/15 {
		t.Errorf("TPOT ratio %v, want 40/15", got)
	}
	// Too few a side: the halves are summarized, no ratio.
	few := splitByDuty(&LCResult{Samples: samples[:5]}, 4*time.Second)
	if few.P50Ratio != 0 || few.WithBE == nil || few.Alone != nil {
		t.Errorf("three with BE, none alone: %+v", few)
	}
	if splitByDuty(nil, 4*time.Second) != nil || splitByDuty(&LCResult{}, 0) != nil {
		t.Error("no LC or no period: want nil")
	}
}

// TestDutyPerCPU: a request's CPU loop time says how fast its CPU ran; the LC's ratio per its
// CPU's speed is the ratio of the halves' medians of latency over loop time, of the requests the
// halves count, and a run with a request unmeasured has none.
func TestDutyPerCPU(t *testing.T) {
	const ms = int64(time.Millisecond)
	req := func(start, lat, meterUs int64) LCSample {
		return LCSample{ArrivalMonoNs: start * ms, LatencyNs: lat * ms, CPUMeterNs: meterUs * 1000}
	}
	// A 4 s period: BE works in [0, 2 s) and idles in [2 s, 4 s).
	samples := []LCSample{
		req(200, 150, 2500), req(600, 180, 3000), req(1000, 160, 2000), req(1400, 170, 2500), // with BE: latency/loop 60, 60, 80, 68
		req(2050, 100, 100000),                                                                 // inside the idle half's guard: not counted
		req(2200, 100, 2000), req(2600, 110, 2400), req(3000, 120, 2000), req(3400, 130, 2600), // alone: 50, 45.8, 60, 50
		req(3900, 200, 100000), // runs past the half's end: not counted
	}
	tests := []struct {
		name        string
		unmeasured  int // this request carries no loop time (-1: none)
		cpu, perCPU float64
	}{
		// Loop medians 2.5 and 2.2 ms; latency over loop, medians 64 and 50 (not 165/2.5 over 115/2.2).
		{"every request measured", -1, 2.5 / 2.2, 64.0 / 50},
		{"one request unmeasured", 6, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ss := slices.Clone(samples)
			if tt.unmeasured >= 0 {
				ss[tt.unmeasured].CPUMeterNs = 0
			}
			sr := &ScenarioResult{Name: "llm-be-1us", Kind: KindShared, Runtime: RuntimeLLM, Rep: 1, BEDuty: 4 * time.Second, LC: &LCResult{Samples: ss}}
			summarizeLC(sr)
			finalize(&Results{Scenarios: []*ScenarioResult{sr}}, 1)
			d := sr.LCDuty
			if math.Abs(d.P50Ratio-165.0/115) > 1e-6 {
				t.Fatalf("p50 ratio %v, want 165/115", d.P50Ratio)
			}
			if math.Abs(d.CPURatio-tt.cpu) > 1e-6 || math.Abs(d.PerCPURatio-tt.perCPU) > 1e-6 {
				t.Errorf("CPU ratio %v, per CPU %v; want %v, %v", d.CPURatio, d.PerCPURatio, tt.cpu, tt.perCPU)
			}
			if (d.CPUCI != nil && d.PerCPUCI != nil) != (tt.perCPU > 0) {
				t.Errorf("intervals %+v %+v: want them iff measured", d.CPUCI, d.PerCPUCI)
			}
			var b strings.Builder
			writeDutyPerCPU(&b, &Results{Scenarios: []*ScenarioResult{sr}})
			if row := "| llm-be-1us | 1 | 1.136x | ["; strings.Contains(b.String(), row) != (tt.perCPU > 0) {
				t.Errorf("report:\n%s\nwant the row %q iff measured", b.String(), row)
			}
		})
	}
}

func TestDutyCount(t *testing.T) {
	const s = int64(time.Second)
	// A 4 s period; completions at 0.5, 1.5 (working), 2.5 (idle), 4.5
	// (working) and 6.5 s (idle).
	done := []int64{s / 2, 3 * s / 2, 5 * s / 2, 9 * s / 2, 13 * s / 2}
	for _, c := range []struct {
		start, end int64
		n          int64
		working    time.Duration
	}{
		{0, 8 * s, 3, 4 * time.Second},
		{s, 7 * s, 2, 3 * time.Second}, // [1, 2) and [4, 6)
		{3 * s, 4 * s, 0, 0},           // idle throughout
		{5 * s / 2, 5 * s, 1, time.Second},
		{s, s, 0, 0},
	} {
		n, w := dutyCount(done, c.start, c.end, 4*time.Second)
		if n != c.n || w != c.working {
			t.Errorf("(%d, %d]: %d in %v, want %d in %v", c.start, c.end, n, w, c.n, c.working)
		}
	}
}

func TestBEArgvDuty(t *testing.T) {
	o := testOptions(t, "llm-defaults", "")
	o.LLMPeriod = 800 * time.Millisecond
	r := &runner{o: o, scripts: "/s"}
	if be, _ := r.beArgv(o.Scenarios[0], "/tmp/be.json"); slices.Contains(be, "--duty-period") {
		t.Errorf("no --be-duty: %v", be)
	}
	r.o.BEDuty = 4 * time.Second
	be, _ := r.beArgv(o.Scenarios[0], "/tmp/be.json")
	if i := slices.Index(be, "--duty-period"); i < 0 || i+1 >= len(be) || be[i+1] != "4s" {
		t.Errorf("--be-duty 4s: %v", be)
	}
}

// TestBEGEMMDuty runs be_gemm.py on a stub torch whose products finish at
// once: with --duty-period it launches only in the working halves, so a
// product completes in an idle half only when the worker was descheduled
// across the boundary, at most once a boundary; without it, the idle
// halves hold thousands (the check can fail).
func TestBEGEMMDuty(t *testing.T) {
	py := python3(t)
	stub := writeStubTorch(t)
	const half = 20 * time.Millisecond
	run := func(args ...string) (stray, working int, halves int64) {
		out := filepath.Join(t.TempDir(), "be.json")
		cmd := exec.Command(py, append([]string{"../../bench/pytorch/be_gemm.py", "--queue", "1", "--duration", "400ms", "--out", out}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+stub)
		if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "READY") {
			t.Fatalf("be_gemm.py: %v: %s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Start       int64   `json:"start_mono_ns"`
			End         int64   `json:"end_mono_ns"`
			Completions []int64 `json:"completions_mono_ns"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Completions {
			if (c/int64(half))%2 == 1 {
				stray++
			} else {
				working++
			}
		}
		return stray, working, r.End/int64(half) - r.Start/int64(half) + 1
	}
	stray, working, halves := run("--duty-period", "40ms")
	if working == 0 || stray > int(halves)/2+1 {
		t.Errorf("with a 40ms duty: %d products in working halves, %d in idle ones (at most %d)", working, stray, halves/2+1)
	}
	if stray, _, halves := run(); stray <= int(halves)/2+1 {
		t.Errorf("without a duty: only %d products in the 'idle' halves", stray)
	}
}

func TestDutyLength(t *testing.T) {
	for _, c := range []struct {
		name         string
		duty, period time.Duration
		hasLC        bool
		want         time.Duration
	}{
		// GPT-2 decode every 800 ms: (4 s - 0.1 - 0.8) / 0.8 = 3.9 a half,
		// 8 halves of each and one more: 17 x 4 s.
		{"gpt2", 8 * time.Second, 800 * time.Millisecond, true, 68 * time.Second},
		// The Llama shape at one a second: 2.9 a half, 11 of each: 23 x 4 s.
		{"llama", 8 * time.Second, time.Second, true, 92 * time.Second},
		// Eager resnet50 every 20 ms: one half of each holds 194.
		{"resnet50", 8 * time.Second, 20 * time.Millisecond, true, 12 * time.Second},
		{"be-only", 8 * time.Second, time.Second, false, 12 * time.Second},
	} {
		if got := dutyLength(c.duty, c.period, c.hasLC); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestDutyLengthHoldsItsRequests places requests every period, each a
// period long (dutyLength's worst case), at every phase of the cycle over
// a run of dutyLength: each half holds at least minDutyRequests.
func TestDutyLengthHoldsItsRequests(t *testing.T) {
	const duty = 8 * time.Second
	for _, period := range []time.Duration{20 * time.Millisecond, 800 * time.Millisecond, time.Second, 1500 * time.Millisecond} {
		d := dutyLength(duty, period, true)
		for phase := time.Duration(0); phase < duty; phase += duty / 16 {
			start := int64(100*duty + phase)
			lc := &LCResult{}
			for i := range int(d / period) {
				lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: start + int64(i)*int64(period), LatencyNs: int64(period) - 1})
			}
			lat, _ := dutyHalves(lc, duty)
			if len(lat[0]) < minDutyRequests || len(lat[1]) < minDutyRequests {
				t.Errorf("period %v, phase %v: %d with BE, %d alone in %v", period, phase, len(lat[0]), len(lat[1]), d)
			}
		}
	}
}

// TestDutyTooShort: 30 requests in each half make a repetition; 29 in
// one leave its ratio shown but out of the median over repetitions.
func TestDutyTooShort(t *testing.T) {
	const duty = 8 * time.Second
	const half = int64(duty / 2)
	run := func(rep, with, alone int, withMs, aloneMs int64) *ScenarioResult {
		lc := &LCResult{}
		for i := range with {
			lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: 2*half*int64(1+i) + int64(time.Second), LatencyNs: withMs * int64(time.Millisecond)})
		}
		for i := range alone {
			lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: 2*half*int64(1+i) + half + int64(time.Second), LatencyNs: aloneMs * int64(time.Millisecond)})
		}
		slices.SortFunc(lc.Samples, func(a, b LCSample) int { return int(a.ArrivalMonoNs - b.ArrivalMonoNs) })
		return &ScenarioResult{Name: "llm-be-1us", Kind: KindShared, Runtime: RuntimeLLM, Rep: rep, BEDuty: duty, LC: lc}
	}
	res := &Results{Config: runOptions{BEDuty: duty, Repeat: 3}, Scenarios: []*ScenarioResult{
		run(1, 30, 30, 300, 200), // 1.5x
		run(2, 29, 40, 500, 100), // too short: 5x left out
		run(3, 40, 30, 220, 200), // 1.1x
	}}
	for _, sr := range res.Scenarios {
		summarizeLC(sr)
	}
	finalize(res, 1)
	for i, want := range []bool{false, true, false} {
		if got := res.Scenarios[i].LCDuty.TooShort; got != want {
			t.Errorf("rep %d: too short %v, want %v", i+1, got, want)
		}
	}
	if got := res.Scenarios[1].LCDuty.P50Ratio; got != 5 {
		t.Errorf("the short run's ratio %v, want it shown (5)", got)
	}
	s := res.Summaries[0]
	if s.Duty == nil || !slices.Equal(s.Duty.PerRep, []float64{1.5, 1.1}) || s.DutyTooShort != 1 {
		t.Fatalf("summary %+v (too short %d): want reps 1.5 and 1.1, one too short", s.Duty, s.DutyTooShort)
	}
	if s.Duty.Median != 1.3 || s.Duty.Min != 1.1 || s.Duty.Max != 1.5 {
		t.Errorf("median %v [%v, %v], want 1.3 [1.1, 1.5]", s.Duty.Median, s.Duty.Min, s.Duty.Max)
	}
}

// TestDutyInterval: each run's ratio has a bootstrap interval from its
// own halves, the same for the same seed; constant halves give a point.
func TestDutyInterval(t *testing.T) {
	const duty = 8 * time.Second
	const half = int64(duty / 2)
	rng := rand.New(rand.NewPCG(7, 7))
	lc := &LCResult{}
	for i := range 200 {
		k := int64(i / 4)
		lat := 200 + rng.IntN(40) // ms, alone
		if k%2 == 0 {
			lat = 300 + rng.IntN(60) // with BE
		}
		lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: k*half + int64(200+i%4*900)*int64(time.Millisecond), LatencyNs: int64(lat) * int64(time.Millisecond)})
	}
	build := func(seed uint64) *DutySplit {
		sr := &ScenarioResult{Name: "llm-be-1us", Kind: KindShared, Runtime: RuntimeLLM, BEDuty: duty, LC: lc}
		summarizeLC(sr)
		finalize(&Results{Scenarios: []*ScenarioResult{sr}}, seed)
		return sr.LCDuty
	}
	d := build(1)
	if d.P50CI == nil || !d.P50CI.Contains(d.P50Ratio) || d.P50CI.Lo < 1.3 || d.P50CI.Hi > 1.7 {
		t.Fatalf("ratio %v, interval %+v: want it inside, within [1.3, 1.7]", d.P50Ratio, d.P50CI)
	}
	if again := build(1); *again.P50CI != *d.P50CI {
		t.Errorf("seed 1 twice: %+v then %+v", d.P50CI, again.P50CI)
	}
	for i := range lc.Samples {
		lc.Samples[i].LatencyNs = int64(100 * time.Millisecond)
	}
	if p := build(1).P50CI; p == nil || p.Lo != 1 || p.Hi != 1 {
		t.Errorf("constant halves: %+v, want [1, 1]", p)
	}
}

func TestDutyOf(t *testing.T) {
	o := testOptions(t, "llm-be-1us,llm-standalone,pytorch-eager-be-1ms,pytorch-be-1us,be-1us,pytorch-eager-be-only", "")
	o.BEDuty, o.LLMPeriod, o.Duration = 8*time.Second, time.Second, 20*time.Second
	want := []time.Duration{8 * time.Second, 0, 8 * time.Second, 0, 0, 8 * time.Second}
	for i, sc := range o.Scenarios {
		if got := o.dutyOf(sc); got != want[i] {
			t.Errorf("%s: duty %v, want %v", sc.Name, got, want[i])
		}
	}
	if got := o.measureDuration(o.Scenarios[0]); got != 92*time.Second {
		t.Errorf("llm-be-1us at 1 s: measures %v, want 92s", got)
	}
	if got := o.lcRequests(o.Scenarios[0]); got != 92 {
		t.Errorf("llm-be-1us at 1 s: %d requests, want 92", got)
	}
	if got := o.measureDuration(o.Scenarios[1]); got != 20*time.Second {
		t.Errorf("llm-standalone (no BE): measures %v, want --duration", got)
	}
	for _, c := range []struct {
		beOnly, want time.Duration
	}{{0, 20 * time.Second}, {30 * time.Second, 30 * time.Second}, {120 * time.Second, 120 * time.Second}, {5 * time.Second, 12 * time.Second}} { // 5s: raised to three halves of the duty
		o.BEOnlyDuration = c.beOnly
		if got := o.measureDuration(o.Scenarios[5]); got != c.want {
			t.Errorf("--be-only-duration %v: pytorch-eager-be-only measures %v, want %v", c.beOnly, got, c.want)
		}
		if got := o.measureDuration(o.Scenarios[0]); got != 92*time.Second {
			t.Errorf("--be-only-duration %v: llm-be-1us measures %v, want 92s as without it", c.beOnly, got)
		}
	}
	o.BEOnlyDuration = 0
	o.BEDutyGraph = true // --be-duty given: the CUDA-graph LC's BE idles too
	if got := o.dutyOf(o.Scenarios[3]); got != 8*time.Second {
		t.Errorf("pytorch-be-1us with --be-duty given: %v", got)
	}
	o.BEDuty = 0
	if got := o.dutyOf(o.Scenarios[0]); got != 0 {
		t.Errorf("--be-duty 0: %v", got)
	}
}

func TestBETrainArgvDuty(t *testing.T) {
	o := testOptions(t, "pytorch-eager-be-1ms,pytorch-be-1ms", "")
	o.BEDuty = 8 * time.Second
	r := &runner{o: o, scripts: "/s"}
	if be, _ := r.beArgv(o.Scenarios[0], "/tmp/be.json"); !slices.Contains(be, "--duty-period") || !strings.HasSuffix(be[2], "be_train.py") {
		t.Errorf("eager: %v", be)
	}
	if be, _ := r.beArgv(o.Scenarios[1], "/tmp/be.json"); slices.Contains(be, "--duty-period") {
		t.Errorf("CUDA graph, --be-duty not given: %v", be)
	}
}

// armDuty splits an slo: run's duty ratio at SLO mode's arm change: 1.24x under the first arm,
// 1.00x under the second, where the whole run blends them; the second arm's requests were off
// their CPU 20 ms each in both halves, which its ratio cannot show and armDuty does; without
// arms in the reads, nothing.
func TestArmDuty(t *testing.T) {
	const s = int64(time.Second)
	const duty = 8 * time.Second
	start := 1000 * s
	change := start + 40*s
	lc := &LCResult{PID: 1}
	for i := range 80 {
		a := start + s/2 + int64(i)*s
		lat := 600 * time.Millisecond
		if (a/int64(duty/2))%2 == 0 && a < change {
			lat = 744 * time.Millisecond
		}
		cpu := lat // on its CPU throughout, but under the second arm: 20 ms off it in both halves
		if a >= change {
			lat, cpu = lat+18*time.Millisecond, lat-2*time.Millisecond
		}
		// its CPU loop 2 ms, but 2.48 ms (slow) in BE's working halves of the first arm's first 24 s: all of its ratio
		meter := int64(2 * time.Millisecond)
		if (a/int64(duty/2))%2 == 0 && a < start+24*s {
			meter = int64(2.48 * float64(time.Millisecond))
		}
		if i == 77 {
			meter = 0 // one of the second arm's requests (in a half, counted) has no loop
		}
		lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: a, LatencyNs: int64(lat), CPUNs: int64(cpu), CPUMeterNs: meter})
	}
	sr := &ScenarioResult{Name: "slo:llm-defaults", LC: lc, BEDuty: duty, WindowStartMonoNs: start, WindowEndMonoNs: start + 81*s}
	for t := start - 10*s; t <= start+81*s; t += s / 4 {
		arm := "200µs"
		if t >= change+s/8 { // the change shows at the read after it
			arm = "200µs+gate"
		}
		sr.SLO = append(sr.SLO, SLOSample{MonoNs: t, Arm: arm})
	}
	got := armDuty(sr)
	if len(got) != 2 || got[0].Arm != "200µs" || got[1].Arm != "200µs+gate" || got[0].FromS != 0 || got[1].FromS != 40.25 {
		t.Fatalf("arms %+v", got)
	}
	if math.Abs(got[0].P50Ratio-1.24) > 1e-9 || got[1].P50Ratio != 1 || got[0].WithBE+got[1].WithBE < 30 || got[0].Alone+got[1].Alone < 30 {
		t.Errorf("ratios %+v: want 1.24x then 1.00x", got)
	}
	// Per its CPU loop: the first arm's working halves slow by the CPU through 24 s, by BE after, so under its ratio;
	// the second arm, a request of it without a loop, none.
	if p0, p1 := got[0].PerCPURatio, got[1].PerCPURatio; p0 <= 0 || p0 >= got[0].P50Ratio || p1 != 0 {
		t.Errorf("per CPU loop %v, %v: want the first under its ratio %v (the CPU's share out), none for the second", p0, p1, got[0].P50Ratio)
	}
	if o0, o1 := got[0].OffCPUMs, got[1].OffCPUMs; o0 == nil || o1 == nil || *o0 != 0 || math.Abs(*o1-20) > 1e-9 {
		t.Errorf("off its CPU %v, %v: want 0 then 20 ms", o0, o1)
	}
	// The frontier of the last read: over the LC alone for one relative objective (times its factor), else over the objective.
	last := &sr.SLO[len(sr.SLO)-1]
	last.Arms = []api.SLOArm{{Arm: "200µs", LCVsObjective: new(1.2), Lo: new(1.1), Hi: new(1.3), Verdict: "misses"}, {Arm: "200µs+gate", Lo: new(0.8), Verdict: "might meet"}}
	for _, c := range []struct {
		objectives []string
		of         string
		factor     float64
	}{{[]string{"p50<=1.1x"}, "alone", 1.1}, {[]string{"p50<=1.1x", "p99<=2x"}, "objective", 1}, {[]string{"p50<=300ms"}, "objective", 1}} {
		last.LC = nil
		for _, o := range c.objectives {
			last.LC = append(last.LC, SLOLCSample{PID: 1, Objective: o})
		}
		got := armDuty(sr)
		f0, f1 := got[0].Frontier, got[1].Frontier
		if f0 == nil || f1 == nil || f0.Of != c.of || f1.Of != c.of || math.Abs(*f0.Mean-1.2*c.factor) > 1e-9 || math.Abs(*f0.Hi-1.3*c.factor) > 1e-9 ||
			f1.Mean != nil || f1.Hi != nil || math.Abs(*f1.Lo-0.8*c.factor) > 1e-9 || f0.Verdict != "misses" {
			t.Errorf("%v: frontier %+v, %+v", c.objectives, f0, f1)
		}
	}
	// Over the LC alone, the frontier is read against the app: 200µs's mean 1.32 [1.21, 1.43] holds the app's 1.24; 200µs+gate has no mean.
	last.LC = []SLOLCSample{{PID: 1, Objective: "p50<=1.1x"}}
	sr.LCDutyByArm = armDuty(sr)
	var b strings.Builder
	writeDutyByArm(&b, &Results{Scenarios: []*ScenarioResult{sr}})
	if want := "the app's within the frontier's bounds on 1 of 1 arms; the frontier's mean less the app's: 200µs +0.080."; !strings.Contains(b.String(), want) {
		t.Errorf("want %q in:\n%s", want, b.String())
	}
	*last.Arms[0].Hi = 1.12 // bounds [1.21, 1.232]: the app's 1.24 beyond them
	sr.LCDutyByArm, b = armDuty(sr), strings.Builder{}
	writeDutyByArm(&b, &Results{Scenarios: []*ScenarioResult{sr}})
	if want := "the app's within the frontier's bounds on 0 of 1 arms"; !strings.Contains(b.String(), want) {
		t.Errorf("want %q in:\n%s", want, b.String())
	}
	last.LC = []SLOLCSample{{PID: 1, Objective: "p50<=300ms"}} // over the objective: not the app's ratio
	sr.LCDutyByArm, b = armDuty(sr), strings.Builder{}
	writeDutyByArm(&b, &Results{Scenarios: []*ScenarioResult{sr}})
	if strings.Contains(b.String(), "frontier against the app") {
		t.Errorf("a frontier over the objective read against the app's ratio:\n%s", b.String())
	}
	if got := frontierCell(armDuty(sr)[1].Frontier); got != "– [0.800, –] over the objective, might meet" {
		t.Errorf("frontier cell %q", got)
	}
	last.Arms = nil
	for i := range sr.SLO {
		sr.SLO[i].Arm = ""
	}
	if got := armDuty(sr); got != nil {
		t.Errorf("no arms read: %+v", got)
	}
}

// A setting that costs the LC in both halves (its thread blocked 40 ms a request) keeps its ratio
// and shows against the static classes' requests while BE idled, with the time off its CPU.
func TestDutyAlone(t *testing.T) {
	const ms = int64(time.Millisecond)
	run := func(name, ts string, rep int, extra int64) *ScenarioResult {
		var ss []LCSample
		for i := range int64(8) { // a 4 s period: BE works in [0, 2 s), idles in [2 s, 4 s)
			lat := 100 + 10*(i%4) + 30*(1-i/4) // with BE 130-160, alone 100-130 ms
			ss = append(ss, LCSample{ArrivalMonoNs: (200 + 400*i + 400*(i/4)) * ms, LatencyNs: (lat + extra) * ms, CPUNs: lat * ms})
		}
		sr := &ScenarioResult{Name: name, Kind: KindShared, Runtime: RuntimeLLM, Rep: rep, BETimeslice: ts, BEDuty: 4 * time.Second, LC: &LCResult{Samples: ss}}
		summarizeLC(sr)
		return sr
	}
	tests := []struct {
		name string
		runs []*ScenarioResult
		rows []string // each wanted in the report; none: no section
	}{
		{"slo blocked 40 ms a request", []*ScenarioResult{run("slo:llm-defaults", "", 1, 40), run("llm-be-200us", "200us", 1, 0)},
			[]string{"| slo:llm-defaults | 1 | 155000.0 | 1.35x | 40.0 / 40.0 |", "| llm-be-200us | 1 | 115000.0 | 1.00x | 0.0 / 0.0 |"}},
		{"each repetition against its own", []*ScenarioResult{run("llm-be-200us", "200us", 1, 0), run("slo:llm-defaults", "", 2, 0), run("llm-be-200us", "200us", 2, 40)},
			[]string{"| slo:llm-defaults | 2 | 115000.0 | 0.74x |"}},
		{"no static classes", []*ScenarioResult{run("slo:llm-defaults", "", 1, 40)}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := &Results{Scenarios: tt.runs}
			finalize(res, 1)
			var b strings.Builder
			writeDutyAlone(&b, res)
			if (b.Len() > 0) != (len(tt.rows) > 0) {
				t.Fatalf("report:\n%s\nwant a section: %v", b.String(), len(tt.rows) > 0)
			}
			for _, row := range tt.rows {
				if !strings.Contains(b.String(), row) {
					t.Errorf("report:\n%s\nwant the row %q", b.String(), row)
				}
			}
		})
	}
}

// daemonReadings takes SLO mode's own measurements of each arm over the measurement, a window at
// a time (however many reads show it): a new latency_us is one, and so is the same value again
// where what accumulated toward it fell to 0 under the arm held (a bucket's middle repeats); each
// of the arm the window before showed (the window that first shows it may show the arm its
// decision moved to), its latency over its target divided by the factor, a `tpot_` one's marked
// so. A target that moves alone (the reference) is none, nor is a fall to 0 as the arm moves,
// one before the measurement, or one of another objective than `p50<=Nx` or `tpot_p50<=Nx`
// against the LC alone.
func TestDaemonReadings(t *testing.T) {
	const s = int64(time.Second)
	start := 1000 * s
	sr := &ScenarioResult{LC: &LCResult{PID: 7}, WindowStartMonoNs: start, WindowEndMonoNs: start + 60*s}
	window := 0
	read := func(at int64, arm, obj string, lat, target float64, pending int) {
		window++
		for k := range 3 { // three reads a window
			sr.SLO = append(sr.SLO, SLOSample{MonoNs: at + int64(k)*s/4, Window: window, Arm: arm, LC: []SLOLCSample{
				{PID: 3, Objective: "p50<=1.1x", LatencyUs: float64(window), TargetUs: 1e9}, // another LC's
				{PID: 7, Objective: obj, LatencyUs: lat, TargetUs: target, Pending: pending}}})
		}
	}
	read(start-2*s, "200µs", "p50<=1.1x", 700, 660, 3)      // before the measurement
	read(start-s, "200µs", "p50<=1.1x", 680, 660, 9)        // before the measurement
	read(start+s, "200µs", "p50<=1.1x", 744, 660, 0)        // 1.24
	read(start+2*s, "200µs", "p50<=1.1x", 744, 704, 4)      // the reference moved: no measurement
	read(start+3*s, "200µs", "p50<=1.1x", 744, 704, 0)      // 1.1625, the same value again
	read(start+4*s, "200µs", "p50<=1.1x", 744, 704, 6)      // accumulating
	read(start+5*s, "200µs+gate", "p50<=1.1x", 800, 704, 0) // 1.25, of 200µs: the move came with it
	read(start+6*s, "200µs+gate", "p50<=1.1x", 800, 704, 5) // accumulating
	read(start+7*s, "1ms", "p50<=1.1x", 800, 704, 0)        // a move: nothing counted
	read(start+8*s, "1ms", "p50<=1.1x", 640, 704, 0)        // 1.00
	for _, obj := range []string{"tpot_p50<=1.1x", "p99<=1.1x", "p50<=1.1x@shortest", "p50<=700ms"} {
		read(start+9*s, "1ms", obj, 600+float64(window), 700, 0)
	}
	read(start+61*s, "1ms", "p50<=1.1x", 900, 704, 0) // after the measurement
	got := daemonReadings(sr)
	want := []reading{{start - s, "200µs", "", 744 / 600.0}, {start + 2*s, "200µs", "", 744 / 640.0}, {start + 4*s, "200µs", "", 800 / 640.0},
		{start + 7*s, "1ms", "", 640 / 640.0}, {start + 8*s, "1ms", "tpot", 610 / (700 / 1.1)}}
	if len(got) != len(want) {
		t.Fatalf("readings %+v, want %+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.arm != w.arm || g.at != w.at || g.metric != w.metric || math.Abs(g.v-w.v) > 1e-9 {
			t.Errorf("reading %d: %+v, want %+v", i, g, w)
		}
	}
}

// TestDaemonReadingsByCount: from a daemon that counts its measurements, each is told by the count
// moving, also one that repeats the last's latency as the arm moves (which latency and pending
// alone cannot tell) and the first of an LC forgotten and counted from 1 again, and none where
// the count stands though the latency shown moves, or after a window without a sample (which
// shows no count). It fails with the count left unread, or read against the window before alone.
func TestDaemonReadingsByCount(t *testing.T) {
	const s = int64(time.Second)
	start := 1000 * s
	sr := &ScenarioResult{LC: &LCResult{PID: 7}, WindowStartMonoNs: start, WindowEndMonoNs: start + 60*s}
	for i, w := range []struct {
		arm           string
		lat           float64
		pending, made int
	}{{"200µs", 700, 5, 1}, {"200µs", 744, 0, 2}, {"500µs", 744, 0, 3}, {"500µs", 744, 3, 3}, {"500µs", 760, 0, 3}, {"500µs", 770, 0, 4},
		{"500µs", 800, 0, 1}, {"500µs", 0, 0, 0}, {"500µs", 800, 3, 1}} {
		sr.SLO = append(sr.SLO, SLOSample{MonoNs: start + int64(i+1)*s, Window: i + 1, Arm: w.arm, LC: []SLOLCSample{
			{PID: 7, Objective: "p50<=1.1x", LatencyUs: w.lat, TargetUs: 660, Pending: w.pending, Measurements: w.made}}})
	}
	got := daemonReadings(sr)
	want := []reading{{start + s, "200µs", "", 744 / 600.0}, {start + 2*s, "200µs", "", 744 / 600.0}, {start + 5*s, "500µs", "", 770 / 600.0},
		{start + 6*s, "500µs", "", 800 / 600.0}}
	if len(got) != len(want) {
		t.Fatalf("readings %+v, want %+v", got, want)
	}
	for i, w := range want {
		if g := got[i]; g.arm != w.arm || g.at != w.at || math.Abs(g.v-w.v) > 1e-9 {
			t.Errorf("reading %d: %+v, want %+v", i, g, w)
		}
	}
}

// eachSecond is an LC (pid 1) of n requests, one a second from half a second past start, each
// as sample makes it of its arrival.
func eachSecond(start int64, n int, sample func(arrival int64) LCSample) *LCResult {
	lc := &LCResult{PID: 1}
	for i := range n {
		a := start + int64(time.Second)/2 + int64(i)*int64(time.Second)
		s := sample(a)
		s.ArrivalMonoNs = a
		lc.Samples = append(lc.Samples, s)
	}
	return lc
}

// An arm held twice (500µs, then 1ms, then 500µs again) has each span's own measurements.
func TestArmDutyReadingsBySpan(t *testing.T) {
	const s = int64(time.Second)
	const duty = 8 * time.Second
	start := 1000 * s
	lc := eachSecond(start, 90, func(int64) LCSample { return LCSample{LatencyNs: int64(600 * time.Millisecond)} })
	sr := &ScenarioResult{Name: "slo:llm-defaults", LC: lc, BEDuty: duty, WindowStartMonoNs: start, WindowEndMonoNs: start + 91*s}
	lat := 0.0
	for k := range 90 {
		arm := map[bool]string{true: "1ms", false: "500µs"}[k >= 30 && k < 60]
		if k%10 == 5 { // a measurement: about 1.0x, then 1.2x under 1ms, then 1.1x (the LC alone 600 us)
			lat = 600 * ([]float64{1.0, 1.2, 1.1}[k/30] + []float64{0, 0.01, -0.01}[k%30/10])
		}
		sr.SLO = append(sr.SLO, SLOSample{MonoNs: start + int64(k)*s, Arm: arm, LC: []SLOLCSample{{PID: 1, Objective: "p50<=1.1x", LatencyUs: lat, TargetUs: 660}}})
	}
	got := armDuty(sr)
	want := []struct {
		arm string
		v   float64
		n   int
	}{{"500µs", 1.0, 3}, {"1ms", 1.2, 3}, {"500µs", 1.1, 3}}
	if len(got) != len(want) {
		t.Fatalf("arms %+v", got)
	}
	for i, w := range want {
		if got[i].Arm != w.arm || math.Abs(got[i].DaemonRatio-w.v) > 1e-9 || got[i].DaemonMeasurements != w.n {
			t.Errorf("span %d: %s %.3f (%d), want %s %.3f (%d)", i, got[i].Arm, got[i].DaemonRatio, got[i].DaemonMeasurements, w.arm, w.v, w.n)
		}
	}
}

// Under a tpot_ objective an arm's reading is of TPOT, beside the app's TPOT ratio under the arm
// (its request latency's ratio, the row's, is another): both show in the per-arm table.
func TestArmDutyTPOTReading(t *testing.T) {
	const s = int64(time.Second)
	const duty = 8 * time.Second
	start := 1000 * s
	lc := eachSecond(start, 80, func(a int64) LCSample {
		tpot := 10 * time.Millisecond
		if (a/int64(duty/2))%2 == 0 {
			tpot = 12 * time.Millisecond // 1.2x while BE works; the request's latency 1.0x
		}
		return LCSample{LatencyNs: int64(300 * time.Millisecond), TPOTNs: int64(tpot)}
	})
	sr := &ScenarioResult{Name: "slo:llm-defaults", LC: lc, BEDuty: duty, WindowStartMonoNs: start, WindowEndMonoNs: start + 81*s}
	for k := range 80 {
		lat := 0.0
		if k >= 10 {
			lat = 11000 + float64(k/10) // a measurement every 10 windows, the LC alone 10 ms: about 1.1x
		}
		sr.SLO = append(sr.SLO, SLOSample{MonoNs: start + int64(k)*s, Window: k + 1, Arm: "500µs", LC: []SLOLCSample{{PID: 1, Objective: "tpot_p50<=1.1x", LatencyUs: lat, TargetUs: 11000}}})
	}
	sr.SLO = append(sr.SLO, SLOSample{MonoNs: start + 80*s, Window: 81, Arm: "1ms"}) // a second arm, so that the table is written
	got := armDuty(sr)
	if len(got) == 0 || got[0].DaemonMetric != "tpot" || got[0].DaemonMeasurements != 7 || math.Abs(got[0].TPOTRatio-1.2) > 1e-9 || got[0].P50Ratio != 1 {
		t.Fatalf("arms %+v: want a TPOT reading of 7 measurements beside the app's TPOT 1.2x, latency 1.0x", got)
	}
	sr.LCDutyByArm = append(got, ArmDuty{Arm: "1ms", WithBE: 1, Alone: 1})
	var b strings.Builder
	writeDutyByArm(&b, &Results{Scenarios: []*ScenarioResult{sr}})
	if want := fmt.Sprintf("| TPOT %.3fx (7), the app's 1.200x |", got[0].DaemonRatio); !strings.Contains(b.String(), want) {
		t.Errorf("per-arm table lacks %q:\n%s", want, b.String())
	}
}

// TestArmIntervals: each arm's ratio has a bootstrap interval of its own halves, which holds it
// and not the other arm's; an arm with fewer than minDutyMedian requests in a half has none, and
// its cell no ratio; the same results give the same intervals; the run's own interval is the one
// seed 1 gave it before the arms had theirs.
func TestArmIntervals(t *testing.T) {
	res := armIntervalsRun()
	finalize(res, 1)
	sr := res.Scenarios[0]
	want := []struct {
		arm    string
		lo, hi float64 // what the interval lies within (0, 0: none)
		cell   string  // the start of its row's ratio cell
	}{{"200µs", 1.3, 1.7, "| 28 / 28 | 1.477x ["}, {"200µs+gate", 0.95, 1.25, "| 30 / 28 | 1.087x ["}, {"1ms", 0, 0, "| 2 / 2 | – |"}}
	got := sr.LCDutyByArm
	if len(got) != len(want) {
		t.Fatalf("arms %+v", got)
	}
	var b strings.Builder
	writeDutyByArm(&b, res)
	for i, w := range want {
		a := got[i]
		switch {
		case a.Arm != w.arm:
			t.Errorf("arm %d: %s, want %s", i, a.Arm, w.arm)
		case w.hi == 0 && a.P50CI != nil:
			t.Errorf("%s, %d / %d requests: interval %+v, want none", a.Arm, a.WithBE, a.Alone, *a.P50CI)
		case w.hi > 0 && (a.P50CI == nil || !a.P50CI.Contains(a.P50Ratio) || a.P50CI.Lo < w.lo || a.P50CI.Hi > w.hi):
			t.Errorf("%s: ratio %.3f, interval %+v: want it inside, within [%v, %v]", a.Arm, a.P50Ratio, a.P50CI, w.lo, w.hi)
		}
		if !strings.Contains(b.String(), w.cell) {
			t.Errorf("%s: per-arm table lacks %q:\n%s", w.arm, w.cell, b.String())
		}
	}
	again := armIntervalsRun()
	finalize(again, 1)
	for i, a := range again.Scenarios[0].LCDutyByArm {
		if g := got[i].P50CI; (a.P50CI == nil) != (g == nil) || g != nil && *a.P50CI != *g {
			t.Errorf("%s, the same results twice: %+v then %+v", a.Arm, g, a.P50CI)
		}
	}
	if p := sr.LCDuty.P50CI; p == nil || *p != (stats.Interval{Lo: 250.0 / 222, Hi: 311.0 / 220}) {
		t.Errorf("the run's interval %+v, want [250/222, 311/220] as before the arms had theirs", p)
	}
}

// armIntervalsRun is an slo: run of 118 requests, one a second, under three arms: 200µs for 56 s
// (about 1.5x with BE), 200µs+gate to 114 s (about 1.1x), then 1ms, under which two requests ran
// in each half.
func armIntervalsRun() *Results {
	const s = int64(time.Second)
	const duty = 8 * time.Second
	start := 1000 * s
	rng := rand.New(rand.NewPCG(7, 7))
	armAt := func(t int64) string {
		switch {
		case t < start+56*s:
			return "200µs"
		case t < start+114*s:
			return "200µs+gate"
		}
		return "1ms"
	}
	lc := eachSecond(start, 118, func(a int64) LCSample {
		lat := 200 + rng.IntN(40) // ms, alone
		if (a/int64(duty/2))%2 == 0 {
			switch armAt(a) {
			case "200µs":
				lat = 300 + rng.IntN(60)
			case "200µs+gate":
				lat = 220 + rng.IntN(44)
			default:
				lat = 250 + rng.IntN(20)
			}
		}
		return LCSample{LatencyNs: int64(lat) * int64(time.Millisecond)}
	})
	sr := &ScenarioResult{Name: "slo:llm-defaults", Kind: KindShared, Runtime: RuntimeLLM, LC: lc, BEDuty: duty, WindowStartMonoNs: start, WindowEndMonoNs: start + 119*s}
	for t := start - 10*s; t <= start+119*s; t += s / 4 {
		sr.SLO = append(sr.SLO, SLOSample{MonoNs: t, Arm: armAt(t)})
	}
	summarizeLC(sr)
	return &Results{Scenarios: []*ScenarioResult{sr}}
}

// TestFrontierAgainstAppPoolsSpans: an arm held twice (1.0x over 10/10 requests, 1.3x over 30/30)
// is read against 1.225x, its spans weighted by their requests: outside the frontier's [1.0, 1.2]
// (their plain mean, 1.15, would lie inside), its mean 1.1 off by −0.125; an arm without the app's
// ratio or without a frontier is not read.
func TestFrontierAgainstAppPoolsSpans(t *testing.T) {
	f := &FrontierArm{Mean: new(1.1), Lo: new(1.0), Hi: new(1.2), Of: "alone"}
	within, offs := frontierAgainstApp([]ArmDuty{
		{Arm: "200µs", WithBE: 10, Alone: 10, P50Ratio: 1.0, Frontier: f},
		{Arm: "1ms", WithBE: 5, Alone: 5, P50Ratio: 1.5},              // no frontier: not read
		{Arm: "500µs", WithBE: 2, Alone: 1, P50Ratio: 0, Frontier: f}, // no ratio: not read
		{Arm: "200µs", WithBE: 30, Alone: 30, P50Ratio: 1.3, Frontier: f},
	})
	if within != 0 || len(offs) != 1 || offs[0] != "200µs -0.125" {
		t.Errorf("within %d, offs %q: want 0 and [200µs -0.125]", within, offs)
	}
}
