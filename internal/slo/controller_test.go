package slo

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestTwoObjectivesOfOneLC(t *testing.T) {
	// One LC with a median and a tail objective: each quantile has its own
	// baseline, and the stricter binds. The graph LC with hints meets
	// p50<=1.05x up to 200 us; a tail bound of 1.02x holds it at 50 us.
	p50, p99 := Objective{Quantile: 0.5, Inflation: 1.05}, Objective{Quantile: 0.99, Inflation: 1.02}
	c := mustNew(t, Options{})
	g := NewSimGPU(1)
	prev := c.Current()
	var ds []Decision
	for range 80 {
		ts := c.Current()
		o := g.Window(GraphHintsH100, p50, ts, prev)
		tail := o.LC[0]
		tail.Objective = p99
		o.LC = append(o.LC, tail)
		ds = append(ds, c.Observe(o))
		prev = ts
	}
	if len(c.refs) != 2 {
		t.Errorf("references %v; want one per objective", c.refs)
	}
	d := ds[len(ds)-1]
	if len(d.LC) != 2 || d.LC[0].Objective != "p50<=1.05x" || d.LC[1].Objective != "p99<=1.02x" {
		t.Fatalf("LC results %+v", d.LC)
	}
	if d.Worst != math.Max(d.LC[0].Ratio, d.LC[1].Ratio) {
		t.Errorf("worst %v of %+v", d.Worst, d.LC)
	}
	if _, last := settled(ds); last > 50*time.Microsecond {
		t.Errorf("settled at %v under a 1.02x bound: %v", last, summary(ds))
	}
}

// run plays n windows of the workload chosen per window and returns the
// controller's decisions.
func run(t *testing.T, c *Controller, g *SimGPU, n int, obj Objective, w func(i int) Workload) []Decision {
	t.Helper()
	ds := runBounded(c, g, n, obj, w, 0, 0)
	for i, d := range ds {
		// A reason is read by people: every figure in it is known.
		if strings.Contains(d.Reason, "NaN") {
			t.Fatalf("window %d: reason %q", i, d.Reason)
		}
	}
	return ds
}

// runBounded plays n windows, window i of w(i), with the BE timeslice
// bounded by lo and hi (Observation.MinBETimeslice, MaxBETimeslice; 0:
// none).
func runBounded(c *Controller, g *SimGPU, n int, obj Objective, w func(i int) Workload, lo, hi time.Duration) []Decision {
	var ds []Decision
	prev := c.Current()
	for i := range n {
		o := g.Window(w(i), obj, c.Current(), prev)
		o.MinBETimeslice, o.MaxBETimeslice = lo, hi
		prev = c.Current()
		d := c.Observe(o)
		g.Paused = d.PauseBE
		ds = append(ds, d)
	}
	return ds
}

// firstAt is the first of ds at BE timeslice ts (-1: none).
func firstAt(ds []Decision, ts time.Duration) int {
	return slices.IndexFunc(ds, func(d Decision) bool { return d.BETimeslice == ts })
}

// steady is a workload that does not change.
func steady(w Workload) func(int) Workload { return func(int) Workload { return w } }

// outcome is what the windows of ds gave, noiselessly, under w: the mean
// LC latency over standalone and the mean BE share, as a benchmark pooling
// those windows would see them.
func outcome(ds []Decision, w Workload) (lc, share float64) {
	for _, d := range ds {
		r, s := w.At(d.BETimeslice)
		if d.PauseBE {
			r, s = 1, 0
		}
		lc += r
		share += s
	}
	return lc / float64(len(ds)), share / float64(len(ds))
}

func changes(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Changed {
			n++
		}
	}
	return n
}

// settled returns the first window from which the timeslice never changes
// again, and that timeslice.
func settled(ds []Decision) (int, time.Duration) {
	last := ds[len(ds)-1].BETimeslice
	i := len(ds)
	for i > 0 && ds[i-1].BETimeslice == last {
		i--
	}
	return i, last
}

func mustNew(t *testing.T, o Options) *Controller {
	t.Helper()
	c, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestEagerFindsTheKnee(t *testing.T) {
	// LC p50 <= 1.05x: the best setting measured for eager PyTorch is
	// 1 ms (LC 0.94x, BE 87.1%); 2 ms and 3 ms miss the objective,
	// shorter ones give BE less. Each window's p50 scatters by 8% (as
	// measured), more than the objective's 5%, so the search strays now
	// and then; what counts is what the settled windows give, pooled.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	var lcs, shares []float64
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		ds := run(t, c, NewSimGPU(seed), 120, obj, steady(EagerPyTorchH100))
		tail := ds[60:]
		lc, share := outcome(tail, EagerPyTorchH100)
		shares = append(shares, share)
		lcs = append(lcs, lc)
		// One setting off either side of the knee now and then (a
		// baseline from 8 scattered windows is itself off by ~3%).
		if lc > 1.13 || share < 0.80 {
			t.Errorf("seed %d: LC %.3fx, BE %.1f%% over the last 60 windows (want <= 1.13x, >= 80%%): %v", seed, lc, 100*share, summary(ds))
		}
		// Exploring costs changes: an arm tried is left again unless
		// it proves itself, and is tried again a HalfLife later.
		if n := changes(tail); n > 10 {
			t.Errorf("seed %d: %d changes in %d settled windows (each costs a GSP RPC per BE group)", seed, n, len(tail))
		}
	}
	slices.Sort(lcs)
	slices.Sort(shares)
	if lc, share := lcs[len(lcs)/2], shares[len(shares)/2]; lc > 1.05 || share < 0.865 {
		t.Errorf("median LC %.3fx, BE share %.3f; want <= 1.05x and the knee's (1 ms: 0.871)", lc, share)
	}
}

func TestSearchPassesAMissedRung(t *testing.T) {
	// LC latency need not grow with the BE timeslice. The eager PyTorch
	// LC on the H100 (1 s windows, 2026-11-22): 200 us missed p50 <=
	// 1.05x of its latency under 1 us by 10-20% over 2-5 windows (~6%
	// over the whole run), while 1 ms has run at 0.94x with BE at 87%. A search that stops at the first rung that misses
	// leaves BE at 64-76%.
	dip := Workload{
		Name: "eager-dip", Baseline: 6 * time.Millisecond, Noise: 0.08, ShareNoise: 0.03, Requests: 50,
		Points: []Point{
			{time.Microsecond, 1.0, 0.635, false},
			{50 * time.Microsecond, 1.12, 0.70, false},
			{200 * time.Microsecond, 1.12, 0.761, false},
			{time.Millisecond, 0.95, 0.871, false},
			{3 * time.Millisecond, 1.17, 0.905, false},
		},
	}
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	var shares []float64
	var reach []int // windows from the start to the first at 1 ms
	for seed := range uint64(20) {
		ds := run(t, mustNew(t, Options{}), NewSimGPU(seed), 150, obj, steady(dip))
		_, share := outcome(ds[90:], dip)
		shares = append(shares, share)
		at := firstAt(ds, time.Millisecond)
		if at < 0 {
			at = len(ds)
		}
		reach = append(reach, at)
	}
	slices.Sort(shares)
	slices.Sort(reach)
	t.Logf("windows to 1 ms: %v", reach)
	// 8 to learn the baseline, 3 at the safe 200 us that misses, then on
	// past it (500 us, 3 windows) rather than back under it first.
	if med := reach[len(reach)/2]; med > 20 {
		t.Errorf("1 ms first reached after a median of %d windows; want <= 20 (past the dip from the safe setting)", med)
	}
	if med := shares[len(shares)/2]; med < 0.84 {
		t.Errorf("median BE share over the settled windows %.3f; want >= 0.84 (1 ms: 0.871; 200 us, the last rung before the dip: 0.761)", med)
	}
}

func TestFloorHoldsWhileSet(t *testing.T) {
	// A CUDA-graph LC would take 1 us; with two BE processes on the GPU
	// the daemon sets a 200 us floor, and nothing below it is chosen,
	// not even to calibrate. When the floor goes, the search goes on
	// below it.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	c := mustNew(t, Options{})
	g := NewSimGPU(3)
	ds := runBounded(c, g, 60, obj, steady(GraphHintsH100), 200*time.Microsecond, 0)
	for i, d := range ds {
		if d.BETimeslice < 200*time.Microsecond {
			t.Fatalf("window %d: %v under a 200us floor: %v", i, d.BETimeslice, summary(ds))
		}
	}
	if ds[0].Cause != CauseCalibrate || ds[0].Changed {
		t.Errorf("first window: %+v; want calibration at the floor (the safe 200us), no change", ds[0])
	}
	// The floor raised from under the current setting: a change, cause floor.
	c = mustNew(t, Options{Safe: time.Microsecond})
	o := g.Window(GraphHintsH100, obj, c.Current(), c.Current())
	o.MinBETimeslice = 150 * time.Microsecond
	if d := c.Observe(o); !d.Changed || d.Cause != CauseFloor || d.BETimeslice != 200*time.Microsecond {
		t.Errorf("floor of 150us from 1us: %+v, want a change to 200us, cause floor", d)
	}
	// With the floor gone, the LC is learnt alone (BE paused at the arm
	// in force), and the search settles at or below 200us (the last
	// rung within 1.05x).
	ds = run(t, c, g, 60, obj, steady(GraphHintsH100))
	if !ds[0].PauseBE || ds[0].Cause != CauseCalibrate {
		t.Errorf("floor gone: first decision %+v, want a calibration with BE paused", ds[0])
	}
	if _, last := settled(ds); last > 200*time.Microsecond {
		t.Errorf("floor gone: settled at %v, want <= 200us: %v", last, summary(ds))
	}
}

func TestGraphStaysShort(t *testing.T) {
	// A CUDA-graph LC with hints wants short BE timeslices: anything past
	// the spinner's lead makes LC wait for BE. Visiting a longer one for a
	// window or two while exploring is expected, staying is not.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		ds := run(t, c, NewSimGPU(seed), 120, obj, steady(GraphHintsH100))
		tail := ds[40:]
		short := 0
		var worsts []float64
		for _, d := range tail {
			if d.BETimeslice <= 200*time.Microsecond {
				short++
			}
			worsts = append(worsts, d.Worst)
		}
		// 200 us meets the objective without headroom (1.04x of 1.01x
		// against 1.05x): 500 us is probed, and each miss backs the
		// probe off for twice as long.
		probes := 0
		for _, d := range tail {
			if d.Changed && d.BETimeslice > 200*time.Microsecond {
				probes++
			}
		}
		if short < len(tail)*85/100 || probes > 2 {
			t.Errorf("seed %d: %d of %d windows at <= 200us, %d tries of longer ones: %v", seed, short, len(tail), probes, summary(ds))
		}
		// 500 us misses by multiples (LC waits out BE's timeslice):
		// nothing longer is ever tried, and it is left after the dwell
		// (its first window mixes 200 us, the second decides).
		for i, d := range ds {
			if d.BETimeslice > 500*time.Microsecond {
				t.Errorf("seed %d: window %d at %v, past a rung that missed by multiples: %v", seed, i, d.BETimeslice, summary(ds))
				break
			}
			if i > 1 && d.BETimeslice == 500*time.Microsecond && ds[i-1].BETimeslice == 500*time.Microsecond && ds[i-2].BETimeslice == 500*time.Microsecond {
				t.Errorf("seed %d: window %d: a third window at 500us, which misses by 5.8x: %v", seed, i, summary(ds))
				break
			}
		}
		slices.Sort(worsts)
		if med := worsts[len(worsts)/2]; med > 1 {
			t.Errorf("seed %d: median LC latency %.3f of its objective", seed, med)
		}
	}
}

func TestConvergesAfterWorkloadChange(t *testing.T) {
	// The LC switches from graph to eager half-way: the controller must
	// settle on the eager knee within 10 windows (10 s at 1 s windows).
	// With aligned windows (an app's reporter pushing just before the
	// daemon reads), the window after each move is learnt: a window a rung.
	for _, tc := range []struct {
		name             string
		aligned          bool
		firstMove, climb int // windows after the change; from the first move to 2ms (median)
	}{
		{"windows mixed after a move", false, 11, 4},
		{"aligned windows", true, 10, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := Objective{Quantile: 0.5, Inflation: 1.05}
			var lcs, shares []float64
			var climbs []int
			for seed := range uint64(20) {
				c, g := mustNew(t, Options{}), NewSimGPU(seed)
				g.Aligned = tc.aligned
				ds := run(t, c, g, 120, obj, func(i int) Workload {
					if i < 60 {
						return GraphHintsH100
					}
					return EagerPyTorchH100
				})
				// docs/SLO.md's count: the change seen in 3 windows (BE stopped
				// by the decision that sees it), 6 paused, the first move 2
				// after (1 aligned).
				after := ds[60:]
				paused := slices.IndexFunc(after, func(d Decision) bool { return d.PauseBE })
				if seen := slices.IndexFunc(after, func(d Decision) bool { return d.WorkloadChanged }); seen < 0 || seen != paused || after[seen].Arm != after[seen-1].Arm {
					t.Errorf("seed %d: the change seen %d windows after it, BE paused %d: want BE stopped, the arm kept, by the decision that sees it: %v", seed, seen, paused, summary(ds[55:75]))
				}
				moved := -1
				for i := paused + 1; paused >= 0 && i < len(after); i++ {
					if !after[i].PauseBE && !after[i-1].PauseBE && after[i].Arm != after[i-1].Arm {
						moved = i
						break
					}
				}
				if paused < 0 || moved < 0 || moved > tc.firstMove {
					t.Errorf("seed %d: BE paused %d and the search moved %d windows after the change (want <= %d): %v", seed, paused, moved, tc.firstMove, summary(ds[55:75]))
				}
				first := firstAt(after, time.Millisecond)
				// The eager LC's windows scatter by 8%: the controller needs
				// about 5 of them to know its new baseline, and 2-3 per step.
				if first < 0 || first > 25 {
					t.Errorf("seed %d: reached 1ms %d windows after the change (want <= 25): %v", seed, first, summary(ds[55:90]))
				}
				if at2 := firstAt(after, 2*time.Millisecond); at2 >= 0 && moved >= 0 {
					climbs = append(climbs, at2-moved)
				}
				lc, share := outcome(ds[90:], EagerPyTorchH100)
				lcs, shares = append(lcs, lc), append(shares, share)
				// Against the LC alone (5 windows of 8% scatter, its median off
				// by 4% now and then) the knee may not be proven: 500 us then.
				if lc > 1.13 || share < 0.78 {
					t.Errorf("seed %d: after settling LC %.3fx BE %.1f%%", seed, lc, 100*share)
				}
			}
			slices.Sort(lcs)
			slices.Sort(shares)
			slices.Sort(climbs)
			if lcs[len(lcs)/2] > 1.05 || shares[len(shares)/2] < 0.86 {
				t.Errorf("median after settling: LC %.3fx BE %.1f%% (want <= 1.05x and the knee's ~87%%)", lcs[len(lcs)/2], 100*shares[len(shares)/2])
			}
			if len(climbs) < 10 || climbs[len(climbs)/2] > tc.climb {
				t.Errorf("windows from the first move to 2ms: %v (want a median <= %d over 10 or more seeds)", climbs, tc.climb)
			}
		})
	}
}

// TestSignalLossCountsThroughACeilingMove: a window without LC latency
// counts toward the fallback also when a floor or ceiling moved BE in it
// (a spinner ceiling set as the LC's pushes stop, say).
func TestSignalLossCountsThroughACeilingMove(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	var c *Controller
	var g *SimGPU
	for seed := uint64(0); ; seed++ { // a seed whose search settled above 500us
		c, g = mustNew(t, Options{}), NewSimGPU(seed)
		if run(t, c, g, 40, obj, steady(EagerPyTorchH100)); c.Current() > 500*time.Microsecond {
			break
		}
		if seed == 20 {
			t.Fatal("precondition: no seed settled above 500us")
		}
	}
	g.Missing = true
	var ds []Decision
	prev := c.Current()
	for i := range 3 {
		o := g.Window(EagerPyTorchH100, obj, c.Current(), prev)
		if i == 1 {
			o.MaxBETimeslice = 500 * time.Microsecond
		}
		prev = c.Current()
		ds = append(ds, c.Observe(o))
	}
	if ds[1].Cause != CauseCeiling {
		t.Fatalf("precondition: the second window's decision %+v, want a ceiling move", ds[1])
	}
	if !ds[2].Fallback || c.Current() != 200*time.Microsecond {
		t.Errorf("after 3 windows without LC latency, one of them a ceiling move: at %v, %v", c.Current(), summary(ds))
	}
}

func TestSignalLossFallsBackToSafe(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	var shares, lcs []float64
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		g := NewSimGPU(seed)
		for i := 0; i < 4 && (i == 0 || c.Current() == 200*time.Microsecond); i++ {
			run(t, c, g, 20, obj, steady(EagerPyTorchH100))
		}
		if c.Current() == 200*time.Microsecond {
			t.Fatalf("seed %d: precondition: the controller left the safe setting (at %v)", seed, c.Current())
		}
		g.Missing = true
		ds := run(t, c, g, 5, obj, steady(EagerPyTorchH100))
		if c.Current() != 200*time.Microsecond || !ds[2].Fallback || !ds[2].Changed {
			t.Fatalf("seed %d: after 3 windows without LC latency: at %v, decisions %v", seed, c.Current(), summary(ds))
		}
		if changes(ds) != 1 {
			t.Errorf("seed %d: %d changes while the signal was missing, want 1", seed, changes(ds))
		}
		g.Missing = false
		ds = run(t, c, g, 40, obj, steady(EagerPyTorchH100))
		if ds[0].Fallback {
			t.Errorf("seed %d: still in fallback with the signal back", seed)
		}
		lc, share := outcome(ds[15:], EagerPyTorchH100)
		lcs, shares = append(lcs, lc), append(shares, share)
	}
	// Back to searching from the safe setting (200us alone gives BE
	// 76%): bounded as TestEagerFindsTheKnee bounds its seeds, but for
	// one: a baseline learnt a few percent low (8 windows that scatter
	// by 8%) can hold the search at 200 us, within its objective.
	slices.Sort(lcs)
	slices.Sort(shares)
	if lcs[len(lcs)-1] > 1.16 || shares[1] < 0.80 || shares[len(shares)/2] < 0.865 {
		t.Errorf("after the signal came back: LC %.3f..%.3fx, BE share %.3f..%.3f (median %.3f); want LC <= 1.16x, BE >= 80%% in 19 of 20 seeds, median >= 86.5%%",
			lcs[0], lcs[len(lcs)-1], shares[0], shares[len(shares)-1], shares[len(shares)/2])
	}
}

func TestNoOscillationAtTheBoundary(t *testing.T) {
	// A workload sitting right at its objective at one rung, with noise
	// that straddles it: hysteresis and dwell bound the changes.
	edge := Workload{
		Name: "edge", Baseline: time.Millisecond, Noise: 0.05, Requests: 100,
		Points: []Point{
			{time.Microsecond, 0.9, 0.7, false},
			{200 * time.Microsecond, 1.0, 0.8, false},
			{time.Millisecond, 1.06, 0.9, false},
			{3 * time.Millisecond, 2, 0.95, false},
		},
	}
	obj := Objective{Quantile: 0.99, Inflation: 1.05}
	for seed := range uint64(10) {
		c := mustNew(t, Options{})
		ds := run(t, c, NewSimGPU(seed), 300, obj, steady(edge))
		if n := changes(ds); n > 40 {
			t.Errorf("seed %d: %d changes in 300 windows", seed, n)
		}
		// Never two changes closer than the dwell.
		last := -100
		for i, d := range ds {
			if d.Changed {
				if i-last < 2 {
					t.Fatalf("seed %d: changes at windows %d and %d: %v", seed, last, i, summary(ds))
				}
				last = i
			}
		}
	}
}

func TestTwoLCTheStricterBinds(t *testing.T) {
	c := mustNew(t, Options{})
	tight := Objective{Quantile: 0.99, Inflation: 1.1}
	loose := Objective{Quantile: 0.5, Absolute: time.Second}
	d := c.Observe(Observation{LC: []LCSample{
		{Key: "a", Objective: loose, Latency: time.Millisecond, Requests: 100},
		{Key: "b", Objective: tight, Latency: 1200 * time.Microsecond, Standalone: time.Millisecond, Requests: 100},
	}, BEShare: 0.9})
	if math.Abs(d.Worst-1.2/1.1) > 1e-9 {
		t.Fatalf("worst = %v, want %v (the stricter objective)", d.Worst, 1.2/1.1)
	}
	// Too few requests: not counted.
	d = c.Observe(Observation{LC: []LCSample{{Key: "a", Objective: loose, Latency: time.Millisecond, Requests: 3}}})
	if !math.IsNaN(d.Worst) {
		t.Fatalf("a window of 3 requests counted: worst %v", d.Worst)
	}
}

func TestNewRefusesBadLadders(t *testing.T) {
	for _, l := range [][]time.Duration{
		{2 * time.Millisecond, time.Millisecond},
		{time.Millisecond, time.Millisecond},
		{500 * time.Nanosecond},
		{1500 * time.Nanosecond},
	} {
		if _, err := New(Options{Ladder: l}); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(ladder %v) = %v, want ErrInvalid", l, err)
		}
	}
}

func TestSimInterpolates(t *testing.T) {
	r, s := EagerPyTorchH100.At(time.Millisecond)
	if r != 0.94 || s != 0.871 {
		t.Fatalf("measured point: %v %v", r, s)
	}
	r, _ = EagerPyTorchH100.At(500 * time.Microsecond)
	if r <= 0.94 || r >= 0.97 {
		t.Fatalf("500us interpolates to %v, want between the 200us and 1ms points", r)
	}
	if r, _ := EagerPyTorchH100.At(time.Nanosecond); r != 1.01 {
		t.Fatalf("below the first point: %v", r)
	}
}

func summary(ds []Decision) []string {
	var out []string
	for _, d := range ds {
		s := d.BETimeslice.String()
		if d.Changed {
			s = "->" + s
		}
		out = append(out, s)
	}
	return out
}

func TestDecisionsCarryCause(t *testing.T) {
	moves := map[string]bool{CauseViolation: true, CauseExplore: true, CauseKnownBetter: true, CauseNoSignal: true, CauseCalibrate: true,
		CauseFloor: true, CauseCeiling: true, CauseUnavailable: true, CauseAtLimit: true}
	stays := map[string]bool{CauseDwell: true, CauseWithin: true, CauseNoSignal: true, CauseAtLimit: true, CauseCalibrate: true, CauseChange: true}
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	g := NewSimGPU(7)
	c := mustNew(t, Options{})
	ds := run(t, c, g, 60, obj, func(i int) Workload {
		g.Missing = i >= 30 && i < 40
		if i >= 40 {
			return GraphHintsH100
		}
		return EagerPyTorchH100
	})
	seen := map[string]bool{}
	for i, d := range ds {
		seen[d.Cause] = true
		if d.Changed && !moves[d.Cause] || !d.Changed && !stays[d.Cause] {
			t.Errorf("window %d: changed=%v with cause %q (%s)", i, d.Changed, d.Cause, d.Reason)
		}
		// Every window judged has a target; while the LC is first learnt
		// (BE paused) there is none yet.
		if d.Cause != CauseNoSignal && d.Cause != CauseCalibrate && (len(d.LC) != 1 || d.LC[0].Target <= 0 || math.IsNaN(d.LC[0].Ratio)) {
			t.Errorf("window %d: LC results %+v", i, d.LC)
		}
	}
	for _, want := range []string{CauseDwell, CauseWithin, CauseExplore, CauseNoSignal, CauseViolation} {
		if !seen[want] {
			t.Errorf("no decision with cause %q in %v", want, summary(ds))
		}
	}
}

func TestUnknownShareKeepsLongestFeasible(t *testing.T) {
	// Without a BE share signal the controller can only take the longest
	// BE timeslice that meets the objective: 1 ms for eager PyTorch
	// (2 ms misses it); 200 us for the graph LC with hints (500 us
	// misses it), or 50 us where noise took 200 us (at 0.99 of the
	// objective) over it three windows of four.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for _, tc := range []struct {
		w        Workload
		want, or time.Duration
	}{{EagerPyTorchH100, time.Millisecond, time.Millisecond}, {GraphHintsH100, 200 * time.Microsecond, 50 * time.Microsecond}} {
		for seed := range uint64(10) {
			c := mustNew(t, Options{})
			g := NewSimGPU(seed)
			prev := c.Current()
			var ds []Decision
			for range 120 {
				ts := c.Current()
				o := g.Window(tc.w, obj, ts, prev)
				o.BEShare = math.NaN()
				ds = append(ds, c.Observe(o))
				prev = ts
			}
			n := 0
			for _, d := range ds[60:] {
				if d.BETimeslice == tc.want || d.BETimeslice == tc.or {
					n++
				}
			}
			lc, share := outcome(ds[60:], tc.w)
			if tc.w.Noise < 0.05 && n < 50 {
				t.Errorf("%s seed %d: %d of 60 late windows at %v: %v", tc.w.Name, seed, n, tc.want, summary(ds))
			}
			// A scattering LC: judged by what the windows give, pooled.
			if tc.w.Noise >= 0.05 && (lc > 1.13 || share < 0.80) {
				t.Errorf("%s seed %d: LC %.3fx BE %.1f%% over the late windows: %v", tc.w.Name, seed, lc, 100*share, summary(ds))
			}
		}
	}
}

// graphPyTorchH100 is resnet50 inference as one CUDA graph beside
// resnet50 training, LC p50 over its latency under 1 us, as gpreemptd
// saw it on the H100 (slo:pytorch@switch, 500 ms windows, 2026-11-22):
// 50 us 0.96x, 200 us 1.08x, 500 us 1.4x, 1 ms 1.9x; its windows scatter
// by ~1.5%. Its eager phase runs 4x slower.
var graphPyTorchH100 = Workload{
	Name: "graph-pytorch", Baseline: 1500 * time.Microsecond, Noise: 0.015, Requests: 25,
	Points: []Point{
		{time.Microsecond, 1.0, 0.70, false},
		{50 * time.Microsecond, 1.0, 0.80, false},
		{200 * time.Microsecond, 1.08, 0.85, false},
		{500 * time.Microsecond, 1.4, 0.88, false},
		{time.Millisecond, 1.9, 0.90, false},
	},
}

func TestWorkloadChangeWithAMove(t *testing.T) {
	// The LC goes from a CUDA graph to eager launches in the window the
	// search tries a longer BE timeslice (as it did in one repetition on
	// the H100): the new rung misses by 4x and is left; the rung returned
	// to, which met the objective a moment ago, misses by as much, and
	// that is the change. With no BE share to see (as in gpreemptd), the
	// controller must reach the eager knee (1 ms) within 20 windows (10 s
	// of 500 ms windows).
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	var firsts []int
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		prev, switched := c.Current(), -1
		var ds []Decision
		for i := range 200 {
			w := graphPyTorchH100
			if switched >= 0 {
				w = EagerPyTorchH100
			}
			ts := c.Current()
			d := c.Observe(g.Window(w, obj, ts, prev))
			prev, g.Paused = ts, d.PauseBE
			ds = append(ds, d)
			if switched < 0 && i >= 30 && d.Changed && d.Cause == CauseExplore {
				switched = i + 1
			}
		}
		if switched < 0 {
			t.Fatalf("seed %d: the search never explored after window 30: %v", seed, summary(ds))
		}
		first := -1
		for i := switched; i < len(ds); i++ {
			if ds[i].BETimeslice >= time.Millisecond {
				first = i - switched
				break
			}
		}
		firsts = append(firsts, first)
		// A baseline from 8 windows of an LC that scatters by 8% is off
		// by 3% or more now and then, and the search then stops short
		// of the knee for a while.
		if first < 0 || first > 50 {
			t.Errorf("seed %d: reached 1ms %d windows after the change (want <= 50): %v", seed, first, summary(ds[switched-2:]))
		}
		// The change takes two windows to be seen, and the window that
		// mixes two arms is not judged.
		if n := atLimit(ds[switched:]); n > 3 {
			t.Errorf("seed %d: %d windows held at the shortest BE timeslice against the graph baseline", seed, n)
		}
	}
	slices.Sort(firsts)
	t.Logf("windows from the change to 1 ms: %v", firsts)
	// 4-5 windows to see the change (the arm tried as the LC changed is
	// left after the dwell; under the one returned to a change takes
	// two), 7 to learn the LC alone (5, one that drains BE's queue, one
	// that mixes), 2 an arm to climb.
	if med, p90 := firsts[len(firsts)/2], firsts[len(firsts)*9/10]; med > 18 || p90 > 22 {
		t.Errorf("median %d, 90th percentile %d windows from the change to 1 ms; want <= 18 and <= 22", med, p90)
	}
}

func atLimit(ds []Decision) int {
	n := 0
	for _, d := range ds {
		if d.Cause == CauseAtLimit {
			n++
		}
	}
	return n
}

func TestRelearnsAnLCThatSlowed(t *testing.T) {
	// An eager LC's own CPU-side work slows it by 20% for good (on the
	// H100 one repetition's eager LC ran 1.1-1.2x its baseline under
	// every setting, 1 us included). The change detector sees it, the
	// LC is learnt alone again, and the search resumes instead of
	// holding BE at its shortest timeslice against a latency the LC no
	// longer has.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	slow := EagerPyTorchH100
	slow.Baseline = slow.Baseline * 120 / 100
	var shares []float64
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := run(t, c, g, 160, obj, func(i int) Workload {
			if i < 50 {
				return EagerPyTorchH100
			}
			return slow
		})
		_, share := outcome(ds[100:], slow)
		shares = append(shares, share)
		// 20% is 2.5 of its windows' deviations: a step that an arm
		// measured for a few windows only partly hides.
		if i := slices.IndexFunc(ds[50:], func(d Decision) bool { return d.WorkloadChanged }); i < 0 || i > 40 {
			t.Errorf("seed %d: the slowdown seen %d windows after it (-1: never): %v", seed, i, summary(ds[50:]))
		}
	}
	slices.Sort(shares)
	if med := shares[len(shares)/2]; med < 0.84 {
		t.Errorf("median BE share after the LC slowed %.3f; want >= 0.84 (1 ms: 0.871)", med)
	}
}

func TestSteadyLCIsNotRelearnt(t *testing.T) {
	// A steady LC, however much its windows scatter, is learnt once.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for _, w := range []Workload{EagerPyTorchH100, graphPyTorchH100, GraphHintsH100} {
		total := 0
		for seed := range uint64(20) {
			g := NewSimGPU(seed)
			g.ShareUnknown = true
			ds := run(t, mustNew(t, Options{}), g, 150, obj, steady(w))
			n := 0
			for _, d := range ds {
				if d.WorkloadChanged {
					n++
				}
			}
			total += n
			if n > 1 {
				t.Errorf("%s seed %d: learnt again %d times in 150 windows: %v", w.Name, seed, n, summary(ds))
			}
		}
		t.Logf("%s: %d relearnings over 20 seeds", w.Name, total)
	}
}

func TestANewLCIsNotJudgedByAnOldOnesRungs(t *testing.T) {
	// An eager LC runs, exits; a CUDA-graph LC (a new process) starts,
	// after a pause or at once (a server restarted under a new pid). What
	// the rungs showed under the eager LC is not the new one's: visiting
	// them is learning, not a workload change (on the H100 such a visit
	// of 500 us, where the eager LC had met its objective, sent the
	// controller to learn the new LC again), and no jump goes to the old
	// LC's knee (known_better), where the new one misses.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for _, gap := range []int{40, 0} {
		for seed := range uint64(10) {
			c := mustNew(t, Options{})
			g := NewSimGPU(seed)
			g.ShareUnknown = true
			var ds []Decision
			prev := c.Current()
			for i := range 120 + gap {
				w := EagerPyTorchH100
				g.Key, g.Missing = "eager", false
				switch {
				case i >= 60+gap:
					w, g.Key = graphPyTorchH100, "graph"
				case i >= 60:
					g.Missing = true
				}
				ts := c.Current()
				ds = append(ds, c.Observe(g.Window(w, obj, ts, prev)))
				prev = ts
			}
			for i, d := range ds[60+gap:] {
				if d.WorkloadChanged || (d.Cause == CauseKnownBetter && d.BETimeslice > 200*time.Microsecond) {
					t.Errorf("gap %d, seed %d: window %d after the new LC started: %s %v: %s: %v", gap, seed, i, d.Cause, d.BETimeslice, d.Reason, summary(ds[60+gap:]))
					break
				}
			}
		}
	}
}

func TestCeilingHoldsWhileSet(t *testing.T) {
	// The eager LC's knee is 1 ms; under a 499 us ceiling nothing above
	// 200 us is chosen, not even to explore, and the search goes on above
	// it once it is lifted. A ceiling under the floor gives way to it.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	c := mustNew(t, Options{Safe: time.Millisecond})
	g := NewSimGPU(5)
	g.ShareUnknown = true
	ds := runBounded(c, g, 60, obj, steady(EagerPyTorchH100), 0, 499*time.Microsecond)
	if d := ds[0]; !d.Changed || d.Cause != CauseCeiling || d.BETimeslice != 200*time.Microsecond {
		t.Errorf("first window from a safe 1ms: %+v, want a change to 200us, cause ceiling", d)
	}
	for i, d := range ds {
		if d.BETimeslice > 200*time.Microsecond {
			t.Fatalf("window %d: %v under a 499us ceiling: %v", i, d.BETimeslice, summary(ds))
		}
	}
	ds = run(t, c, g, 80, obj, steady(EagerPyTorchH100))
	if n := slices.IndexFunc(ds, func(d Decision) bool { return d.BETimeslice >= time.Millisecond }); n < 0 {
		t.Errorf("ceiling lifted: never reached 1ms: %v", summary(ds))
	}
	o := g.Window(EagerPyTorchH100, obj, c.Current(), c.Current())
	o.MinBETimeslice, o.MaxBETimeslice = 200*time.Microsecond, 50*time.Microsecond
	if d := c.Observe(o); d.BETimeslice < 200*time.Microsecond {
		t.Errorf("ceiling under the floor: %+v", d)
	}
}

func TestABurstIsNotAWorkloadChange(t *testing.T) {
	// An eager LC settled near its knee runs two windows 36% slower (on
	// the H100: 1.34x and 1.37x of its objective under 1 ms, its own
	// CPU-side work) and then as before: rarely a workload change (the
	// straying windows are watched for a third; two in a row made one in
	// 9 of these 20 seeds). The same slowdown for good is one: learnt
	// again within a few windows when the setting had shown steady
	// latency, else once the search has walked down to where the baseline
	// was learnt (TestRelearnsAnLCThatSlowed).
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	slow := EagerPyTorchH100
	slow.Baseline = slow.Baseline * 136 / 100
	const at = 100
	changed := func(ds []Decision) int {
		for i, d := range ds {
			if d.WorkloadChanged {
				return i
			}
		}
		return -1
	}
	var burst, soon, never int
	for seed := range uint64(20) {
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := run(t, mustNew(t, Options{}), g, at+10, obj, func(i int) Workload {
			if i == at || i == at+1 {
				return slow
			}
			return EagerPyTorchH100
		})
		if changed(ds[at:]) >= 0 {
			burst++
		}
		g = NewSimGPU(seed)
		g.ShareUnknown = true
		ds = run(t, mustNew(t, Options{}), g, at+40, obj, func(i int) Workload {
			if i >= at {
				return slow
			}
			return EagerPyTorchH100
		})
		switch i := changed(ds[at:]); {
		case i < 0:
			never++
			t.Errorf("seed %d: a lasting 36%% slowdown not learnt in 40 windows: %v", seed, summary(ds[at:]))
		case i <= 4:
			soon++
		}
	}
	if burst > 5 {
		t.Errorf("a two-window burst was taken for a workload change in %d of 20 seeds; want at most 5", burst)
	}
	if soon < 8 {
		t.Errorf("a lasting slowdown was learnt again within 5 windows in %d of 20 seeds; want >= 8", soon)
	}
	t.Logf("burst taken for a change: %d of 20; lasting change learnt within 5 windows: %d, within 40: %d", burst, soon, 20-never)
}

// twoHintedLCsH100 is two synthetic LCs with hints beside two BE of
// weights 3:1 (lc1's p50), from the H100 run of must-show 4 with the
// slice overhead (docs/SLO.md): within its objective under a 50 us unit
// timeslice, 4.9x under 100 us and 11x under 200 us, where the spinners'
// lead no longer covers the two BE's turns.
var twoHintedLCsH100 = Workload{
	Name: "two-hinted-lcs", Baseline: 31 * time.Microsecond, Noise: 0.05, Requests: 280,
	Points: []Point{
		{50 * time.Microsecond, 1.0, 0.215, true},
		{100 * time.Microsecond, 4.9, 0.42, true},
		{200 * time.Microsecond, 11, 0.60, true},
		{time.Millisecond, 30, 0.85, false},
	},
}

func TestRelearningResumesBelowSafe(t *testing.T) {
	// Under a 50 us floor the LCs settle at 50 us; then they slow by 40%
	// for good, under that setting. The controller learns them again
	// there and resumes from 50 us, not from the safe 200 us, where they
	// would miss by 11x; nor does it explore 200 us again before its
	// back-off ends.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	floor := 50 * time.Microsecond
	slow := twoHintedLCsH100
	slow.Baseline = slow.Baseline * 140 / 100
	relearnt := 0
	for seed := range uint64(10) {
		c := mustNew(t, Options{})
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := runBounded(c, g, 120, obj, func(i int) Workload {
			if i >= 60 {
				return slow
			}
			return twoHintedLCsH100
		}, floor, 0)
		changedAt := -1
		for i, d := range ds[60:] {
			if d.WorkloadChanged {
				changedAt = 60 + i
				break
			}
		}
		if changedAt < 0 {
			continue // the slowdown was not taken for a change in this seed
		}
		relearnt++
		// The calibration goes back to the arm it left, 50 us; what
		// 200 us showed was forgotten with the change, and it is tried
		// again at most once, for the dwell (its first window mixes
		// 50 us, the second decides).
		run := 0
		for i, d := range ds[changedAt:] {
			if d.BETimeslice >= 200*time.Microsecond {
				run++
			} else {
				run = 0
			}
			if run > 2 || i <= 7 && d.BETimeslice != floor {
				t.Errorf("seed %d: window %d after the change: %v (%s): %s", seed, i, d.BETimeslice, d.Cause, d.Reason)
				break
			}
		}
	}
	if relearnt < 5 {
		t.Errorf("the lasting slowdown was learnt again in %d of 10 seeds; want at least 5", relearnt)
	}
}

func TestCalibrationIsNotAWorkloadChange(t *testing.T) {
	// An LC warms up as it is first learnt: its first windows run 1.5-2x
	// what it settles at (as an eager PyTorch LC did after it came from
	// a CUDA graph on the H100). Calibration takes the median; the
	// windows after the warm-up are not a new workload.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for seed := range uint64(10) {
		c := mustNew(t, Options{})
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := run(t, c, g, 40, obj, func(i int) Workload {
			w := EagerPyTorchH100
			w.Noise = 0.02
			if i >= 1 && i < 5 {
				w.Baseline = w.Baseline * time.Duration(20-i) / 10
			}
			return w
		})
		for i, d := range ds {
			if d.WorkloadChanged {
				t.Errorf("seed %d: window %d taken for a workload change: %s", seed, i, d.Reason)
				break
			}
		}
	}
}

// eagerSlowBeside is an eager LC whose latency beside BE under the
// shortest rung is 1.30x its standalone latency, as eager LCs were in
// some repetitions (docs/SLO-H100.md): 200 us - 1 ms within 1.05x, 2-3 ms
// past it; BE shares as EagerPyTorchH100.
var eagerSlowBeside = Workload{
	Name: "eager-slow-beside", Baseline: 6 * time.Millisecond, Noise: 0.08, ShareNoise: 0.03, Requests: 50,
	Points: []Point{
		{time.Microsecond, 1.30, 0.635, false},
		{200 * time.Microsecond, 1.02, 0.761, false},
		{time.Millisecond, 1.04, 0.871, false},
		{2 * time.Millisecond, 1.12, 0.896, false},
		{3 * time.Millisecond, 1.17, 0.905, false},
	},
}

func pauses(ds []Decision) (windows, longest int) {
	run := 0
	for _, d := range ds {
		if d.PauseBE {
			windows++
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return windows, longest
}

func TestPauseLearnsTheLCAlone(t *testing.T) {
	// Learnt beside BE under 1 us, the baseline is 1.30x the LC alone,
	// and the search holds the LC within 1.05x of that: at 2-3 ms, 1.12-
	// 1.17x of standalone. Learnt with BE stopped it is the standalone
	// latency, and the search holds 1 ms or so.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	med := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	var paused, beside []float64
	for seed := range uint64(20) {
		for _, pw := range []int{5, 0} {
			c := mustNew(t, pauseOpts(pw))
			ds := run(t, c, NewSimGPU(seed), 120, obj, steady(eagerSlowBeside))
			lc, _ := outcome(ds[60:], eagerSlowBeside)
			n, longest := pauses(ds)
			if pw == 0 {
				beside = append(beside, lc)
				if n > 0 {
					t.Errorf("seed %d: BE stopped %d windows without PauseWindows", seed, n)
				}
				continue
			}
			paused = append(paused, lc)
			// One pause (a window to settle, then 3 alone), and one more
			// at most for a workload change the noise mimics.
			if !ds[0].PauseBE || longest != pw+1 || n > 2*(pw+1) {
				t.Errorf("seed %d: BE stopped %d windows, %d at most in a row, first window %v; want %d from the first, %d at most: %v",
					seed, n, longest, ds[0].PauseBE, pw+1, 2*(pw+1), summary(ds))
			}
			if lc > 1.15 {
				t.Errorf("seed %d: LC %.3fx of standalone over the last 60 windows, want <= 1.15x: %v", seed, lc, summary(ds))
			}
		}
	}
	// Each window scatters by 8%, more than the objective's 5%: the
	// search spends some windows at 2 ms (1.12x) before it can tell that
	// it misses, so the median is a little over 1.05x; beside BE it
	// settles where every window is over.
	if p, b := med(paused), med(beside); p > 1.08 || b < 1.12 {
		t.Errorf("median LC vs standalone: %.3fx with the baseline learnt alone (want <= 1.08x), %.3fx beside BE under 1 us (want >= 1.12x: the case this fixes)", p, b)
	}
}

func TestPauseNotKeptCalibratesBeside(t *testing.T) {
	// A daemon that cannot stop BE (BEPaused false): two windows asked
	// for, then the calibration beside BE under the shortest rung, and
	// no pause asked for again.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for seed := range uint64(10) {
		g := NewSimGPU(seed)
		g.IgnorePause = true
		c := mustNew(t, pauseOpts(3))
		ds := run(t, c, g, 120, obj, steady(EagerPyTorchH100))
		n, _ := pauses(ds)
		if n != 2 || !ds[0].PauseBE || !ds[1].PauseBE {
			t.Fatalf("seed %d: %d windows asked to stop BE, want the first 2: %v", seed, n, summary(ds))
		}
		if d := ds[2]; d.BETimeslice != time.Microsecond || d.Cause != CauseCalibrate || !strings.Contains(d.Reason, "not kept stopped") {
			t.Errorf("seed %d: third decision %+v; want a calibration at 1us saying BE was not kept stopped", seed, d)
		}
		if lc, share := outcome(ds[60:], EagerPyTorchH100); lc > 1.13 || share < 0.80 {
			t.Errorf("seed %d: LC %.3fx, BE %.1f%% over the last 60 windows after falling back", seed, lc, 100*share)
		}
	}
}

func TestPauseIsBoundedWhenSignalsGo(t *testing.T) {
	// The LC stops pushing during the pause: BE resumes (no decision asks
	// for it stopped without a signal), the pause is taken up again when
	// the signal returns, and no calibration stops BE for more than
	// PauseWindows + pauseSlack windows in all.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for seed := range uint64(10) {
		g := NewSimGPU(seed)
		c := mustNew(t, pauseOpts(3))
		var ds []Decision
		prev := c.Current()
		for i := range 60 {
			g.Missing = i == 2 || i == 3 || (i >= 20 && i < 40 && i%2 == 0)
			o := g.Window(EagerPyTorchH100, obj, c.Current(), prev)
			prev = c.Current()
			d := c.Observe(o)
			if g.Missing && d.PauseBE {
				t.Fatalf("seed %d window %d: BE stopped without an LC signal: %+v", seed, i, d)
			}
			g.Paused = d.PauseBE
			ds = append(ds, d)
		}
		if n, longest := pauses(ds[:20]); n > 3+calSlack || longest > 3+1 {
			t.Errorf("seed %d: %d windows stopped in the first calibration (%d in a row): %v", seed, n, longest, summary(ds))
		}
		if r := c.refs["lc p50@"]; r == nil || r.value == 0 {
			t.Errorf("seed %d: no baseline after 60 windows: %v", seed, summary(ds))
		}
	}
}

func TestOneWindowIsNoChange(t *testing.T) {
	// One window far off (a tail's few worst requests, a host hiccup) is
	// never a change on its own, paused calibration or not: it counts
	// for half of the change detector's threshold at most, and is not
	// learnt from until the next window tells a change from a burst.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	spike := EagerPyTorchH100
	spike.Baseline *= 3
	for seed := range uint64(10) {
		for _, pw := range []int{5, 0} {
			ds := run(t, mustNew(t, pauseOpts(pw)), NewSimGPU(seed), 70, obj, func(i int) Workload {
				if i == 60 {
					return spike
				}
				return EagerPyTorchH100
			})
			changed := slices.ContainsFunc(ds[60:], func(d Decision) bool { return d.WorkloadChanged })
			if n, _ := pauses(ds[60:]); changed || n > 0 {
				t.Errorf("seed %d pause %d: one window at 3x taken for a change (BE stopped %d windows): %v", seed, pw, n, summary(ds[55:]))
			}
		}
	}
}

// syntheticTail is the synthetic LC with hints under a p99 objective:
// 285 requests a 1 s window, whose p99 (their third-worst) ranged
// 42-254 us from window to window on the H100 even with BE stopped: a
// few requests in a hundred wait on the host. Its response to the BE
// timeslice is modelled (1 us - 200 us, under the ceiling gpreemptd sets
// for a hinted LC with a tail objective).
var syntheticTail = Workload{
	Name: "synthetic-tail", Baseline: 60 * time.Microsecond, Noise: 0.03, ShareNoise: 0.01, Requests: 285,
	Spread: 0.15, Hiccups: 0.015, HiccupMean: 3,
	Points: []Point{
		{time.Microsecond, 1.00, 0.880, false},
		{50 * time.Microsecond, 1.03, 0.884, false},
		{200 * time.Microsecond, 1.08, 0.889, false},
	},
}

func TestTailChangesReadFromMedian(t *testing.T) {
	// A tail objective's windows scatter by multiples (a p99 of 285
	// requests is their third-worst); the LC's median does not. Read
	// from the windows' tail, runs of high ones were taken for new
	// workloads, and with pause calibration each cost BE its share for
	// the pause; read from the median, a steady LC is not learnt again,
	// and BE keeps more.
	obj := Objective{Quantile: 0.99, Inflation: 1.15}
	const seeds, n = 30, 120
	type tally struct {
		relearnt, paused int // paused: the longest run of windows a seed had BE stopped
		share, worst     float64
	}
	play := func(pause int, noMedian bool) (got tally) {
		for seed := range uint64(seeds) {
			g := NewSimGPU(seed)
			g.NoMedian = noMedian
			ds := runBounded(mustNew(t, pauseOpts(pause)), g, n, obj, steady(syntheticTail), 0, 200*time.Microsecond)
			for _, d := range ds[20:] {
				if d.WorkloadChanged {
					got.relearnt++
				}
			}
			lc, share := outcome(ds[20:], syntheticTail)
			got.share += share / seeds
			_, longest := pauses(ds)
			got.paused = max(got.paused, longest)
			got.worst = max(got.worst, lc)
		}
		return got
	}
	for _, pause := range []int{0, 5} {
		tail, median := play(pause, true), play(pause, false)
		t.Logf("pause %d: learnt again %d times read from the tail, %d from the median; BE %.3f, %.3f; LC at most %.3fx, %.3fx",
			pause, tail.relearnt, median.relearnt, tail.share, median.share, tail.worst, median.worst)
		if median.relearnt > 2 || median.relearnt > tail.relearnt {
			t.Errorf("pause %d: a steady LC learnt again %d times over %d seeds read from its median (%d from its tail)", pause, median.relearnt, seeds, tail.relearnt)
		}
		if median.share < tail.share-0.002 {
			t.Errorf("pause %d: BE %.3f read from the median, %.3f from the tail", pause, median.share, tail.share)
		}
		// Each pause: its windows, and the one that drains BE.
		if pause > 0 && median.paused > pause+1 {
			t.Errorf("pause %d: BE stopped %d windows in a row in a seed read from the median (%d from the tail): its p99 taken for a change within the pause", pause, median.paused, tail.paused)
		}
		if median.worst > 1.08 {
			t.Errorf("pause %d: LC at %.3fx its latency alone in a seed, more than the knee's 1.08x", pause, median.worst)
		}
	}
}

func TestTailBodyChangeIsSeen(t *testing.T) {
	// The LC's latency doubles at every quantile half-way (a new model, a
	// graph LC turned eager): read from the median, seen within the two
	// windows a change takes, or, where it came as the search moved, once
	// the search is back under an arm it has measured for a few windows
	// (a young estimate is no level to stray from).
	obj := Objective{Quantile: 0.99, Inflation: 1.15}
	slower := syntheticTail
	slower.Baseline *= 2
	for _, c := range []struct {
		pause, within int
	}{{0, 6}, {5, 6}} {
		late := 0
		for seed := range uint64(20) {
			// The change comes once a recheck of a reference learnt from a
			// few windows' tails has had its time (no arm meeting the
			// objectives for a HalfLife after the first calibration).
			ds := runBounded(mustNew(t, pauseOpts(c.pause)), NewSimGPU(seed), 140, obj, func(i int) Workload {
				if i >= 100 {
					return slower
				}
				return syntheticTail
			}, 0, 200*time.Microsecond)
			seen := slices.IndexFunc(ds[100:], func(d Decision) bool { return d.WorkloadChanged })
			if seen < 0 || seen > c.within {
				late++
				t.Logf("pause %d seed %d: seen at %d: %v", c.pause, seed, seen, summary(ds[95:]))
			}
		}
		if late > 2 {
			t.Errorf("pause %d: the change seen later than %d windows after it, or not at all, in %d of 20 seeds", c.pause, c.within, late)
		}
	}
}

func TestSearchPassesTwoDips(t *testing.T) {
	// After a graph LC turned eager on the H100 (2026-11-23), the eager
	// LC missed mildly at 200 us and at 500 us against its baseline
	// learnt beside BE at 1 us, and 1 ms had run it at 0.94x: the search
	// passes both dips on its way and reaches 1 ms without first going
	// back under them. The same curve with a far miss at 500 us is left
	// the usual way.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	twoDips := Workload{Name: "eager-two-dips", Baseline: 6 * time.Millisecond, Noise: 0.03, ShareNoise: 0.03, Requests: 50,
		Points: []Point{
			{time.Microsecond, 1.00, 0.635, false},
			{50 * time.Microsecond, 1.01, 0.70, false},
			{200 * time.Microsecond, 1.18, 0.761, false},
			{500 * time.Microsecond, 1.15, 0.82, false},
			{time.Millisecond, 0.94, 0.871, false},
			{2 * time.Millisecond, 1.3, 0.896, false},
		},
	}
	far := twoDips
	far.Points = slices.Clone(twoDips.Points)
	far.Points[3].LCRatio = 1.6
	for _, c := range []struct {
		w       Workload
		reaches bool
	}{{twoDips, true}, {far, false}} {
		late := 0
		for seed := range uint64(20) {
			g := NewSimGPU(seed)
			g.ShareUnknown = true
			ds := run(t, mustNew(t, Options{}), g, 40, obj, steady(c.w))
			// 8 windows to learn the LC, 3 at 200 us, 3 at 500 us.
			first := firstAt(ds, time.Millisecond)
			if c.reaches && (first < 0 || first > 16) {
				late++
				t.Logf("seed %d: 1 ms at window %d: %v", seed, first, summary(ds))
			}
			if !c.reaches && first >= 0 && first < 20 {
				t.Errorf("seed %d: 1 ms tried at window %d, past a rung that missed by 1.6x: %v", seed, first, summary(ds))
			}
		}
		if late > 1 {
			t.Errorf("%s: 1 ms reached later than window 16, or not in 40, in %d of 20 seeds", c.w.Name, late)
		}
	}
}

// graphThen plays 20 seeds of 180 windows, the synthetic LC with hints
// for 60 and w after, BE share unknown (as gpreemptd before it has seen
// BE alone). Per seed: the windows from the change to the first at 1 ms
// (120: none), the LC's mean over the last 60 windows, and the decisions.
func graphThen(t *testing.T, obj Objective, w Workload) (at []int, lcs []float64, runs [][]Decision) {
	t.Helper()
	for seed := range uint64(20) {
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := run(t, mustNew(t, Options{}), g, 180, obj, func(i int) Workload {
			if i < 60 {
				return GraphHintsH100
			}
			return w
		})
		first := firstAt(ds[60:], time.Millisecond)
		if first < 0 {
			first = len(ds) - 60
		}
		lc, _ := outcome(ds[120:], w)
		at, lcs, runs = append(at, first), append(lcs, lc), append(runs, ds)
	}
	return at, lcs, runs
}

func TestSearchPassesAMildMissItExploredTo(t *testing.T) {
	// After a graph LC turned eager on the H100 (bd2c6ec, 2026-11-23),
	// the eager LC met its objective at 200 us (0.99-1.00x) and missed it
	// mildly at 500 us (1.04x); 1 ms, where it had run at 0.94x, was not
	// tried within 10 s of the change in 2 of 3 repetitions: the search
	// went back under 500 us and explored again from there. A rung the
	// search explored to from the safe setting or under is passed like a
	// dip; one that misses by far is not, and where every longer rung
	// misses too the search settles back where it met the objective.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	dip := Workload{Name: "eager-explored-dip", Baseline: 6 * time.Millisecond, Noise: 0.04, ShareNoise: 0.03, Requests: 25,
		Points: []Point{
			{time.Microsecond, 1.00, 0.635, false},
			{50 * time.Microsecond, 1.02, 0.70, false},
			{200 * time.Microsecond, 1.035, 0.761, false},
			{500 * time.Microsecond, 1.10, 0.82, false},
			{time.Millisecond, 0.94, 0.871, false},
			{2 * time.Millisecond, 1.3, 0.896, false},
		},
	}
	far := dip
	far.Name, far.Points = "eager-explored-far-miss", slices.Clone(dip.Points)
	far.Points[3].LCRatio = 1.6
	rising := dip
	rising.Name, rising.Points = "eager-rising", slices.Clone(dip.Points)
	rising.Points[4].LCRatio = 1.15
	for _, c := range []struct {
		w Workload
		// reach: 1 ms is reached within 20 windows of the change (10 s
		// of 500 ms windows) in the median seed; else not within 20.
		reach bool
	}{{dip, true}, {far, false}, {rising, true}} {
		at, lcs, runs := graphThen(t, obj, c.w)
		for seed, first := range at {
			if !c.reach && first <= 20 {
				t.Errorf("%s seed %d: 1 ms tried %d windows after the change, past a rung that missed by 1.6x: %v", c.w.Name, seed, first, summary(runs[seed][60:90]))
			}
		}
		slices.Sort(at)
		slices.Sort(lcs)
		t.Logf("%s: windows from the change to 1 ms %v; LC over the last 60 windows, median %.3fx", c.w.Name, at, lcs[len(lcs)/2])
		if med := at[len(at)/2]; c.reach && med > 20 {
			t.Errorf("%s: 1 ms reached a median of %d windows after the change; want <= 20", c.w.Name, med)
		}
		// Settled at 1 ms where it meets the objective (1.05x its
		// latency under 1 us, where it was learnt); else mostly at
		// 200 us (1.035x), the windows of re-exploring 500 us and past
		// it included (held at 500 us: 1.10x).
		want := 1.05
		if c.w.Name != dip.Name {
			want = 1.09
		}
		if med := lcs[len(lcs)/2]; med > want {
			t.Errorf("%s: LC at %.3fx over the last 60 windows (median seed); want <= %.2fx", c.w.Name, med, want)
		}
	}
}

func TestSearchProbesPastAnUndecidedRung(t *testing.T) {
	// After a graph LC turned eager on the H100 (8f05d77, 2026-11-23) the
	// eager LC sat at 0.87-1.15x its objective under 200 us for 11
	// windows before the search tried 500 us; 1 ms came 11.8 s after the
	// change. A mean a few percent over the objective in windows that
	// scatter by 8% is not a confident miss within the 16 windows a stay
	// is judged by, so the search waited for the mean to fall under 1. A
	// rung left undecided so, where a mild miss would be passed, is
	// passed after the windows a probe waits; where the longer rung
	// misses by far, the search settles where the objective is met.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	undecided := Workload{Name: "eager-undecided", Baseline: 6 * time.Millisecond, Noise: 0.08, ShareNoise: 0.03, Requests: 25,
		Points: []Point{
			{time.Microsecond, 1.00, 0.635, false},
			{50 * time.Microsecond, 1.02, 0.70, false},
			{200 * time.Microsecond, 1.085, 0.761, false},
			{500 * time.Microsecond, 1.08, 0.82, false},
			{time.Millisecond, 0.94, 0.871, false},
			{2 * time.Millisecond, 1.3, 0.896, false},
		},
	}
	far := undecided
	far.Name, far.Points = "eager-undecided-far-miss", slices.Clone(undecided.Points)
	far.Points[3].LCRatio = 1.6
	for _, c := range []struct {
		w Workload
		// reach: 1 ms within 20 windows of the change (10 s of 500 ms
		// windows) in 18 seeds of 20; else in none. Waiting for the
		// mean to fall under 1 took 21-53 windows in 9 seeds of 20.
		reach bool
		// lc: the most the LC may run over its standalone latency in
		// the last 60 windows (median seed); with 500 us missing by
		// far, 200 us is kept (1.085x).
		lc float64
	}{{undecided, true, 1.0}, {far, false, 1.09}} {
		at, lcs, _ := graphThen(t, obj, c.w)
		slices.Sort(at)
		slices.Sort(lcs)
		t.Logf("%s: windows from the change to 1 ms %v; LC over the last 60 windows, median %.3fx", c.w.Name, at, lcs[len(lcs)/2])
		if c.reach && at[17] > 20 {
			t.Errorf("%s: 1 ms reached more than 20 windows after the change in %d seeds of 20; want 2 at most", c.w.Name, 20-slices.IndexFunc(at, func(n int) bool { return n > 20 }))
		}
		if !c.reach && at[0] <= 20 {
			t.Errorf("%s: 1 ms reached %d windows after the change, past a rung that missed by 1.6x", c.w.Name, at[0])
		}
		if med := lcs[len(lcs)/2]; med > c.lc {
			t.Errorf("%s: LC at %.3fx over the last 60 windows (median seed); want <= %.2fx", c.w.Name, med, c.lc)
		}
	}
}

func TestEqualRungsDoNotFlap(t *testing.T) {
	// A CUDA-graph LC beside PyTorch training on the H100 (f8c35d2,
	// 2026-11-23, 500 ms windows) met its objective at 1 us and 50 us
	// alike, with BE at ~93% under both; the search went 1 us -> 50 us
	// (explore) -> 1 us (known_better, on one window's share at 50 us)
	// every 1.5 s. The search no longer explores to a rung just seen to
	// give BE less share.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	w := Workload{Name: "graph-beside-training", Baseline: 1500 * time.Microsecond, Noise: 0.02, ShareNoise: 0.03, Requests: 25,
		Points: []Point{
			{time.Microsecond, 1.0, 0.93, false},
			{50 * time.Microsecond, 1.0, 0.93, false},
			{200 * time.Microsecond, 4.5, 0.72, false},
			{500 * time.Microsecond, 5, 0.8, false},
		}}
	var ch []int
	for seed := range uint64(20) {
		ds := run(t, mustNew(t, Options{}), NewSimGPU(seed), 120, obj, steady(w))
		ch = append(ch, changes(ds[40:]))
		if lc, _ := outcome(ds[40:], w); lc > 1.25 {
			t.Errorf("seed %d: LC at %.2fx over the last 80 windows: %v", seed, lc, summary(ds[40:]))
		}
	}
	slices.Sort(ch)
	t.Logf("changes over the last 80 windows: %v", ch)
	// 6 are the try of 200 us (a far miss) and back, every 30 windows;
	// exploring again at once gave 15-25 in 5 seeds of 20, 13 at most now.
	if ch[len(ch)-1] > 14 {
		t.Errorf("up to %d changes in 80 windows; want <= 14", ch[len(ch)-1])
	}
}

func TestPassesAreBounded(t *testing.T) {
	// A chain of mild misses leads to a far one: 200 us undecided, 500 us
	// a mild miss, 1 ms undecided, 2 ms a far miss (an eager LC a few
	// percent either side of its objective over several rungs). Each arm
	// past a mild miss may be tried; the far miss costs one try of the
	// dwell (two windows) per HalfLife at most.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	w := Workload{Name: "chain", Baseline: 6 * time.Millisecond, Noise: 0.01, ShareNoise: 0.03, Requests: 50,
		Points: []Point{
			{time.Microsecond, 1.00, 0.635, false},
			{50 * time.Microsecond, 1.02, 0.70, false},
			{200 * time.Microsecond, 1.075, 0.761, false},
			{500 * time.Microsecond, 1.12, 0.82, false},
			{time.Millisecond, 1.08, 0.871, false},
			{2 * time.Millisecond, 1.6, 0.896, false},
		},
	}
	for seed := range uint64(20) {
		g := NewSimGPU(seed)
		g.ShareUnknown = true
		ds := run(t, mustNew(t, Options{}), g, 40, obj, steady(w))
		if n := slices.IndexFunc(ds, func(d Decision) bool { return d.BETimeslice == 2*time.Millisecond }); n >= 0 {
			if m := len(slices.DeleteFunc(slices.Clone(ds), func(d Decision) bool { return d.BETimeslice != 2*time.Millisecond })); m > 2 {
				t.Errorf("seed %d: %d windows at 2 ms, a far miss, in 40: %v", seed, m, summary(ds))
			}
		}
	}
}

func TestDominatedRungIsLeft(t *testing.T) {
	// The synthetic LC with hints beside fixed-work BE kernels on the H100
	// (6b35629, 2026-11-23, must2s): under the 50 us spinner ceiling the
	// search held 50 us, where the LC ran 1.07x standalone against 1.03x
	// under 1 us, and BE got 88.3% against 88.9%: gpreemptd measured 1 us
	// 0.4 points of BE share above 50 us, under knownBetterMargin, and
	// stayed. A rung that gives BE no more than a shorter one that meets
	// every objective with headroom, with the LC slower, buys nothing: the
	// search leaves it, and does not explore it again while what it
	// showed is fresh.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	w := Workload{Name: "synthetic-hints-fixed-work", Baseline: 36 * time.Microsecond, Noise: 0.01, ShareNoise: 0.003, Requests: 280,
		Points: []Point{
			{time.Microsecond, 1.03, 0.889, true},
			{50 * time.Microsecond, 1.07, 0.883, true},
			{200 * time.Microsecond, 4, 0.88, false},
		}}
	var at1 []int
	for seed := range uint64(20) {
		c := mustNew(t, Options{})
		ds := runBounded(c, NewSimGPU(seed), 120, obj, steady(w), 0, 50*time.Microsecond)
		tail := ds[40:]
		n := 0
		for _, d := range tail {
			if d.BETimeslice == time.Microsecond {
				n++
			}
		}
		at1 = append(at1, n)
		lc, share := outcome(tail, w)
		if lc > 1.045 || share < 0.886 || changes(tail) > 8 {
			t.Errorf("seed %d: LC %.3fx, BE %.3f, %d changes over the last 80 windows: %v", seed, lc, share, changes(tail), summary(ds))
		}
	}
	slices.Sort(at1)
	t.Logf("windows of the last 80 at 1us: %v", at1)
	if at1[0] < 60 {
		t.Errorf("as few as %d of the last 80 windows at 1us, want >= 60", at1[0])
	}
}

func TestDominanceDoesNotFlap(t *testing.T) {
	// The eager LC on the H100 (4471a53, must1) met its objective at 1 us
	// and 50 us alike, BE at 67.9% and 67.7%, its windows scattering by 8%:
	// the search went 50 us -> 1 us -> 50 us, each move for an LC
	// "faster" by a fraction of a point. A setting dominates another only
	// by more than its windows' scatter explains.
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	w := Workload{Name: "eager-equal-short-rungs", Baseline: 6 * time.Millisecond, Noise: 0.08, ShareNoise: 0.03, Requests: 50,
		Points: []Point{
			{time.Microsecond, 1.0, 0.679, false},
			{50 * time.Microsecond, 1.0, 0.677, false},
			{200 * time.Microsecond, 1.2, 0.76, false},
			{time.Millisecond, 1.25, 0.87, false},
		}}
	worst, total := 0, 0
	for seed := range uint64(20) {
		ds := run(t, mustNew(t, Options{}), NewSimGPU(seed), 120, obj, steady(w))
		n := 0
		for _, d := range ds {
			if d.Changed && strings.Contains(d.Reason, "gives BE no more") {
				n++
			}
		}
		worst, total = max(worst, n), total+n
	}
	t.Logf("moves for a dominating setting: %d over 20 seeds, at most %d in one", total, worst)
	if worst > 1 || total > 6 {
		t.Errorf("moves for a dominating setting between two equal ones: %d over 20 seeds, %d in one; want at most 6, and 1", total, worst)
	}
}

// pauseOpts are the options of a controller that learns references with
// BE stopped for pw windows (0: one that cannot stop BE).
func pauseOpts(pw int) Options {
	if pw == 0 {
		return Options{NoPause: true}
	}
	return Options{CalibrateWindows: pw}
}

// TestABurstIsNotLearnt: one window at 5x under an arm measured for long
// enough to compare with is held from its estimate (it may begin a change,
// and a burst that passes is not the arm's): the arm's mean is what it was.
func TestABurstIsNotLearnt(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	burst := graphOverShortest
	burst.Baseline *= 5
	checked := 0
	for seed := range uint64(20) {
		c, g := mustNew(t, Options{}), NewSimGPU(seed)
		run(t, c, g, 60, obj, func(int) Workload { return graphOverShortest })
		mean := func() (m float64) {
			for _, e := range c.est(c.cur).lc {
				m = e.Mean()
			}
			return m
		}
		if w := c.evidence(c.cur); w < levelWindows {
			t.Fatalf("seed %d: the arm in force rests on %.1f windows", seed, w)
		}
		before, at := mean(), c.cur
		o := g.WindowArm(burst, obj, c.cur, c.cur)
		if d := c.Observe(o); c.cur != at || d.WorkloadChanged {
			continue // moved or relearnt: a decision, not the estimate, took it
		}
		if checked++; math.Abs(mean()-before) > 1e-9*before {
			t.Errorf("seed %d: a 5x window moved the arm's estimate from %.4f to %.4f", seed, before, mean())
		}
	}
	if checked < 10 {
		t.Errorf("the arm in force was kept through the burst in %d of 20 seeds; want >= 10 to judge", checked)
	}
}

// TestSimEngineLag: with aligned windows, the window after a move that
// turned pre-preemption on, or the gate of an LC that gates itself, plays
// the word before under the new BE timeslice and is not aligned (as the
// daemon's loop reports it); the daemon's own gate holds at once.
func TestSimEngineLag(t *testing.T) {
	w := Workload{Name: "lag", Baseline: time.Millisecond, Requests: 100,
		Points:   []Point{{time.Microsecond, 1, 0.8, false}, {time.Millisecond, 1.5, 0.9, false}},
		Unhinted: []Point{{time.Microsecond, 3, 0.85, false}, {time.Millisecond, 4, 0.9, false}},
		Gated:    []Point{{time.Microsecond, 0.9, 0.7, false}, {time.Millisecond, 0.9, 0.75, false}}}
	us, ms := time.Microsecond, time.Millisecond
	for _, tc := range []struct {
		name        string
		self        bool
		prev, a     Arm
		want        float64 // latency over Baseline
		wantAligned bool
	}{
		{"pre-preemption on", false, Arm{BETimeslice: ms}, Arm{BETimeslice: us, Prepreempt: true}, 3, false},
		{"pre-preemption off", false, Arm{BETimeslice: us, Prepreempt: true}, Arm{BETimeslice: us}, 1, false},
		{"the daemon's gate on", false, Arm{BETimeslice: us}, Arm{BETimeslice: us, Gate: true}, 0.9, true},
		{"a self-gated LC's gate on", true, Arm{BETimeslice: us}, Arm{BETimeslice: us, Gate: true}, 3, false},
		{"only the timeslice", true, Arm{BETimeslice: ms}, Arm{BETimeslice: us}, 3, true},
	} {
		g := NewSimGPU(1)
		g.Aligned, g.SelfGated = true, tc.self
		o := g.WindowArm(w, Objective{Quantile: 0.5, Inflation: 1.05}, tc.a, tc.prev)
		if got := float64(o.LC[0].Latency) / float64(w.Baseline); got != tc.want || o.Aligned != tc.wantAligned {
			t.Errorf("%s: latency %.2fx, aligned %v; want %.2fx, %v", tc.name, got, o.Aligned, tc.want, tc.wantAligned)
		}
	}
}
