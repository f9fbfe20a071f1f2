package slo

import (
	"testing"
	"time"
)

// flatAtLimit is an LC no arm serves: 1.22-1.26x its latency alone under
// every BE timeslice, against p50<=1.05x.
var flatAtLimit = Workload{Name: "flat", Baseline: time.Millisecond, Noise: 0.05, ShareNoise: 0.02, Requests: 200, Points: []Point{
	{time.Microsecond, 1.26, 0.80, false}, {200 * time.Microsecond, 1.22, 0.85, false},
	{time.Millisecond, 1.24, 0.90, false}, {3 * time.Millisecond, 1.25, 0.93, false}}}

// pauseStarts are the windows where a run of decisions stopping BE begins.
func pauseStarts(ds []Decision) (out []int) {
	for i, d := range ds {
		if d.PauseBE && (i == 0 || !ds[i-1].PauseBE) {
			out = append(out, i)
		}
	}
	return out
}

// TestRechecks: references learnt again because no arm met the objectives
// cost BE what docs/SLO.md says, and no more: a pause never follows another
// within a HalfLife; the back-off lapses once an arm is known to meet them;
// a tail objective's references are judged moved by the LC's median, not
// by a p99 that scatters by multiples.
func TestRechecks(t *testing.T) {
	p50 := Objective{Quantile: 0.5, Inflation: 1.05}
	t.Run("no pause right after another", func(t *testing.T) {
		slower := flatAtLimit
		slower.Baseline = 3 * time.Millisecond / 2
		for seed := range uint64(10) {
			ds := scenario{obj: p50, n: 400, w: func(i int) (Workload, string) {
				if i >= 110 {
					return slower, ""
				}
				return flatAtLimit, ""
			}}.play(seed)
			starts := pauseStarts(ds)
			for i := 1; i < len(starts); i++ {
				if starts[i]-starts[i-1] < 40 {
					t.Errorf("seed %d: pauses at windows %v: two within a HalfLife", seed, starts)
					break
				}
			}
		}
	})
	t.Run("the back-off lapses", func(t *testing.T) {
		for seed := range uint64(5) {
			c, g := mustNew(t, Options{}), NewSimGPU(seed)
			run(t, c, g, 300, p50, steady(flatAtLimit))
			if c.rechecks < 2 {
				t.Fatalf("seed %d: precondition: %d rechecks after 300 windows at the limit", seed, c.rechecks)
			}
			// The same LC alone, now served: its references do not move.
			served := flatAtLimit
			served.Points = []Point{{time.Microsecond, 0.98, 0.80, false}, {200 * time.Microsecond, 0.99, 0.85, false},
				{time.Millisecond, 1.01, 0.90, false}, {3 * time.Millisecond, 1.3, 0.93, false}}
			lapsed := false
			for range 30 {
				run(t, c, g, 10, p50, steady(served))
				lapsed = lapsed || c.rechecks == 0
			}
			if !lapsed {
				t.Errorf("seed %d: %d rechecks still owed their back-off through 300 windows that an arm met", seed, c.rechecks)
			}
		}
	})
	t.Run("a tail's references", func(t *testing.T) {
		obj := Objective{Quantile: 0.99, Inflation: 1.15}
		for seed := range uint64(20) {
			ds := runBounded(mustNew(t, pauseOpts(5)), NewSimGPU(seed), 600, obj, steady(syntheticTail), 0, 200*time.Microsecond)
			// Where its first reference was drawn low, no arm meets it:
			// the first calibration, then rechecks 40, 80, 160 and 320
			// windows apart at most, each finding the LC's median where
			// it was (read from its p99, one would seem moved every time,
			// and the back-off would never build up).
			if n, _ := pauses(ds); n > 5*6 {
				t.Errorf("seed %d: a steady tail LC had BE stopped %d of 600 windows, at %v", seed, n, pauseStarts(ds))
			}
		}
	})
}
