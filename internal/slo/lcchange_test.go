package slo

import (
	"math"
	"testing"
	"time"
)

// TestIntermittentNewLCIsLearnt: a second LC that counts only every other
// window (it pushes every 2 s against 1 s windows, or its request count
// hovers around MinRequests) beside one that counts every window keeps
// the calibration going in its off windows, so it is learnt and the arm
// does not flip every window.
func TestIntermittentNewLCIsLearnt(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	c := mustNew(t, Options{})
	a := func() LCSample {
		return LCSample{Key: "a", Objective: obj, Latency: time.Millisecond, Requests: 100}
	}
	// A alone: calibrated, search under way.
	for range 40 {
		c.Observe(Observation{LC: []LCSample{a()}, BEShare: math.NaN()})
	}
	var ds []Decision
	for i := range 40 {
		o := Observation{LC: []LCSample{a()}, BEShare: math.NaN()}
		if i%2 == 0 {
			o.LC = append(o.LC, LCSample{Key: "b", Objective: obj, Latency: 2 * time.Millisecond, Requests: 100})
		}
		ds = append(ds, c.Observe(o))
	}
	n := changes(ds)
	t.Logf("changes in 40 windows: %d: %v", n, summary(ds))
	if r := c.refs["b p50@"]; r == nil || r.value == 0 {
		t.Errorf("b's reference never learnt after 20 counted windows: %+v", r)
	}
	if n > 10 {
		t.Errorf("%d changes in 40 windows (dwell is 2 windows)", n)
	}
}

// TestIntermittentNewLCPausesBounded: the same stops BE for a bounded
// number of windows, not every other window.
func TestIntermittentNewLCPausesBounded(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	c := mustNew(t, Options{CalibrateWindows: 5})
	paused := false
	obs := func(withB bool) Observation {
		o := Observation{LC: []LCSample{{Key: "a", Objective: obj, Latency: time.Millisecond, Requests: 100}}, BEShare: math.NaN(), BEPaused: paused}
		if withB {
			o.LC = append(o.LC, LCSample{Key: "b", Objective: obj, Latency: 2 * time.Millisecond, Requests: 100})
		}
		return o
	}
	for range 40 {
		d := c.Observe(obs(false))
		paused = d.PauseBE
	}
	stopped := 0
	for i := range 60 {
		d := c.Observe(obs(i%2 == 0))
		paused = d.PauseBE
		if d.PauseBE {
			stopped++
		}
	}
	t.Logf("BE stopped in %d of 60 windows", stopped)
	if stopped > 3*(5+1+3) {
		t.Errorf("BE stopped in %d of 60 windows: the pause is not bounded", stopped)
	}
}

// TestBelowMinimumNeedsAKnownShare: be_below_minimum is never reported
// with BE share unknown, at_limit included.
func TestBelowMinimumNeedsAKnownShare(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	// Learnt alone (calibrate: pause), the LC runs 1.15-1.2x its
	// standalone latency beside BE under every rung: nothing meets
	// (docs/SLO.md, "Nothing meets"), the at_limit path.
	w := Workload{Baseline: time.Millisecond, Requests: 100, Noise: 0.01, Points: []Point{
		{time.Microsecond, 1.2, 0.6, false}, {200 * time.Microsecond, 1.15, 0.8, false}, {3 * time.Millisecond, 1.2, 0.9, false}}}
	c := mustNew(t, Options{CalibrateWindows: 3})
	g := NewSimGPU(1)
	g.ShareUnknown = true
	flagged, atLimit := 0, 0
	prev := c.Current()
	for range 100 {
		o := g.Window(w, obj, c.Current(), prev)
		o.MinBEShare = 0.85
		prev = c.Current()
		d := c.Observe(o)
		g.Paused = d.PauseBE
		if d.Cause == CauseAtLimit {
			atLimit++
		}
		if d.BEBelowMinimum {
			if !math.IsNaN(d.BEShare) {
				t.Fatalf("precondition: share known")
			}
			flagged++
		}
	}
	if atLimit == 0 {
		t.Fatal("setup: no at_limit decision")
	}
	if flagged > 0 {
		t.Errorf("be_below_minimum reported in %d windows with BE share unknown", flagged)
	}
}

func TestObjectiveBoundChangeKeepsBaselines(t *testing.T) {
	loose, tight := Objective{Quantile: 0.5, Inflation: 1.30}, Objective{Quantile: 0.5, Inflation: 1.05}
	c := mustNew(t, Options{})
	g := NewSimGPU(3)
	g.ShareUnknown = true
	w := EagerPyTorchH100
	w.Noise = 0.01
	ds := runBounded(c, g, 60, loose, steady(w), 0, 0)
	t.Logf("loose: %v", summary(ds))
	ds = runBounded(c, g, 30, tight, steady(w), 0, 0)
	t.Logf("tight: %v", summary(ds))
	for i, d := range ds[10:17] {
		t.Logf("  %d %v %s wc=%v: %s", i+10, d.BETimeslice, d.Cause, d.WorkloadChanged, d.Reason)
	}
	for i, d := range ds {
		if d.Cause == CauseCalibrate && i < 2 {
			t.Errorf("window %d after the bound changed: %s (%s)", i, d.Cause, d.Reason)
		}
		if d.Cause == CauseKnownBetter {
			r, _ := w.At(d.BETimeslice)
			t.Errorf("window %d after the bound changed: known_better to %v (LC %.2fx its 1 us latency, over 1.05x): %s", i, d.BETimeslice, r/1.01, d.Reason)
		}
	}
}

// TestBaselineDoesNotCreep: the longer timeslices that slow an LC never
// become its reference, however long the search stays at one: else the
// next longer rung is judged against it, and an LC 4% slower per rung
// climbs the ladder 1.05x at a time. Learnt beside BE (NoPause), the
// reference stays the one learnt under the shortest rung.
func TestBaselineDoesNotCreep(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	w := Workload{Baseline: time.Millisecond, Requests: 200, Noise: 0.005, Points: []Point{
		{time.Microsecond, 1.00, 0.60, false}, {50 * time.Microsecond, 1.04, 0.65, false},
		{200 * time.Microsecond, 1.08, 0.70, false}, {500 * time.Microsecond, 1.12, 0.75, false},
		{time.Millisecond, 1.17, 0.80, false}, {2 * time.Millisecond, 1.22, 0.85, false},
		{3 * time.Millisecond, 1.27, 0.90, false}}}
	c := mustNew(t, Options{NoPause: true})
	g := NewSimGPU(2)
	ds := runBounded(c, g, 1500, obj, steady(w), 0, 0)
	if r := c.refs["lc p50@"]; r == nil || r.how != RefShortest || r.value > 1020*time.Microsecond {
		t.Errorf("reference %+v, want the LC's latency under 1us", r)
	}
	if lc, _ := outcome(ds[1000:], w); lc > 1.06 {
		t.Errorf("windows 1000-1500: LC at %.2fx its latency under the shortest rung (objective 1.05x)", lc)
	}
}

// TestIntermittentSoleLCPauseIsBounded: an LC alone on its GPUs that
// counts only some windows (it pushes every 2 s against 1 s windows, or
// its request count hovers around MinRequests) resumes BE in each window
// without it, and the next pause begins with a window to drain BE: if no
// window of it alone comes of three pauses, its reference is learnt
// beside BE, and BE is not stopped every other window for good.
func TestIntermittentSoleLCPauseIsBounded(t *testing.T) {
	obj := Objective{Quantile: 0.5, Inflation: 1.05}
	for _, tc := range []struct {
		name    string
		counts  func(i int) bool
		learnt  string // how its reference is learnt
		stopped int    // most windows BE may be stopped in 400
	}{
		{"every other window", func(i int) bool { return i%2 == 0 }, RefShortest, 3},
		{"two of three", func(i int) bool { return i%3 != 2 }, RefShortest, 6},
		{"every window", func(int) bool { return true }, RefStandalone, 5 + 1},
		{"all but a few", func(i int) bool { return i != 3 && i != 5 }, RefStandalone, 5 + 1 + 3}, // two pauses cut short
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := mustNew(t, Options{CalibrateWindows: 5})
			paused, stopped := false, 0
			for i := range 400 {
				o := Observation{BEShare: math.NaN(), BEPaused: paused}
				if tc.counts(i) {
					o.LC = []LCSample{{Key: "a", Objective: obj, Latency: time.Millisecond, Requests: 100}}
				}
				d := c.Observe(o)
				if paused = d.PauseBE; paused {
					stopped++
				}
			}
			r := c.refs["a p50@"]
			if r == nil || r.value == 0 || r.how != tc.learnt {
				t.Errorf("reference %+v; want one learnt %s", r, tc.learnt)
			}
			if stopped > tc.stopped {
				t.Errorf("BE stopped in %d of 400 windows; want at most %d", stopped, tc.stopped)
			}
		})
	}
}

// TestChangeDetectorOverManyLCs: the detector sums one residual a window,
// the most deviant of the LC processes'. Taken as it is, the most
// deviant of several processes' noise is a deviation or two out every
// window, and the sum passes Threshold on noise alone; as its chance
// among them, the detector declares as few changes on noise as for one
// LC, and still sees one LC of several slow down.
func TestChangeDetectorOverManyLCs(t *testing.T) {
	obj := Objective{Quantile: 0.5, Absolute: 8 * time.Millisecond}
	for _, tc := range []struct {
		name     string
		lcs      int
		slowFrom int     // window from which LC "a" is slower (0: never)
		slow     float64 // by this factor
		most     int     // most changes declared over the seeds
		least    int     // least
	}{
		{"one LC, steady", 1, 0, 1, 1, 0},
		{"four LCs, steady", 4, 0, 1, 1, 0},
		{"eight LCs, steady", 8, 0, 1, 2, 0},
		{"four LCs, one 1.5x slower", 4, 1000, 1.5, 3 * 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			changes := 0
			for seed := uint64(1); seed <= 3; seed++ {
				c, g := mustNew(t, Options{}), NewSimGPU(seed)
				w := EagerPyTorchH100
				prev := c.Arm()
				first := -1
				for i := range 2000 {
					var o Observation
					for k := range tc.lcs {
						g.Key = string(rune('a' + k))
						one := g.WindowArm(w, obj, c.Arm(), prev)
						if k == 0 && tc.slowFrom > 0 && i >= tc.slowFrom {
							one.LC[0].Latency = time.Duration(float64(one.LC[0].Latency) * tc.slow)
						}
						one.LC = append(o.LC, one.LC...) // the window's BE share is the last process's
						o = one
					}
					prev = c.Arm()
					if d := c.Observe(o); d.WorkloadChanged {
						changes++
						if first < 0 && i >= tc.slowFrom {
							first = i
						}
					}
				}
				if tc.slowFrom > 0 && (first < 0 || first > tc.slowFrom+10) {
					t.Errorf("seed %d: LC a 1.5x slower from window %d: first change seen at %d", seed, tc.slowFrom, first)
				}
			}
			if changes > tc.most || changes < tc.least {
				t.Errorf("%d changes declared over 3 x 2000 windows; want %d to %d", changes, tc.least, tc.most)
			}
		})
	}
}
