package slo

import (
	"math"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// est is a forgetting estimate of one quantity under one arm, each window's weight halved every
// HalfLife windows.
type est = stats.Forgetting

func known(e *est) bool { return e != nil && e.W >= minWeight }

// armEst is what one arm showed: each objective's latency/target (by objective key), each process's
// median in seconds (changes are read from it: a tail's windows scatter by multiples), BE share.
type armEst struct {
	lc, shown map[string]*est
	share     est
}

// fade decays m's estimates by f and drops those faded to nothing (of processes gone: keys are per
// process).
func fade(m map[string]*est, f float64) {
	for k, e := range m {
		if e.Decay(f); e.W < forgotten {
			delete(m, k)
		}
	}
}

// decay fades every estimate by f, and drops arms long not visited.
func (c *Controller) decay(f float64) {
	for a, e := range c.arms {
		fade(e.lc, f)
		fade(e.shown, f)
		if e.share.Decay(f); len(e.lc) == 0 && len(e.shown) == 0 && e.share.W < forgotten {
			delete(c.arms, a)
		}
	}
	fade(c.scatter, f)
}

func get(m map[string]*est, k string) *est {
	if m[k] == nil {
		m[k] = &est{}
	}
	return m[k]
}

// scatterOf is one window's relative scatter of quantity k, learnt over every arm (an LC's own
// noise is the same under each), at least scatterFloor; scatterPrior until scatterAfter windows
// have shown it.
func (c *Controller) scatterOf(k string) float64 {
	if e := c.scatter[k]; known(e) && e.W >= scatterAfter {
		return max(math.Sqrt(e.Mean()), scatterFloor)
	}
	return scatterPrior
}

// learnScatter folds x, a window of k under an arm whose estimate is e (before x), into k's
// scatter: at most scatterClip deviations, scaled for the mean that x is not part of.
func (c *Controller) learnScatter(k string, e *est, x float64) {
	if known(e) && e.W >= 1 && e.Mean() != 0 {
		sc := c.scatterOf(k)
		d := max(-scatterClip*sc, min(scatterClip*sc, (x-e.Mean())/e.Mean()))
		get(c.scatter, k).Add(d * d * e.W / (e.W + 1))
	}
}

// Feasibility of an arm against every objective in force.
type feasibility int

const (
	possible   feasibility = iota // neither bound decides
	feasible                      // every upper bound meets its objective
	infeasible                    // a lower bound misses one
)

func (c *Controller) feasibility(a Arm) feasibility {
	out := feasible
	if len(c.active) == 0 {
		out = possible
	}
	for k := range c.active {
		switch lo, hi := c.lcBounds(a, k); {
		case lo > 1:
			return infeasible
		case !(hi <= 1):
			out = possible
		}
	}
	return out
}

// lcBounds are the bounds of objective k's latency/target under a: its own, else its neighbours'
// with a wide prior. An arm that gives BE less than a measured neighbour might meet what that one
// missed; one that gives BE more is no better than priorSpread (at Z) under its neighbour.
func (c *Controller) lcBounds(a Arm, k string) (lo, hi float64) {
	if e := c.est(a).lc[k]; known(e) {
		return e.Bounds(c.opts.Z, c.scatterOf(k), priorWindows)
	}
	lo = math.Inf(-1)
	for _, n := range c.set.neighbours(a) {
		if e := c.est(n).lc[k]; known(e) && !protects(c.set, n, a) {
			lo = max(lo, e.Mean()*(1-c.opts.Z*priorSpread))
		}
	}
	return lo, math.Inf(1)
}

// evidence is the fewest windows a's estimates rest on, over the objectives in force; worstMean
// their highest mean (NaN: not known for every objective).
func (c *Controller) evidence(a Arm) float64  { w, _ := c.measured(a); return w }
func (c *Controller) worstMean(a Arm) float64 { _, m := c.measured(a); return m }

func (c *Controller) measured(a Arm) (w, worst float64) {
	w, worst = math.Inf(1), math.Inf(-1)
	for k := range c.active {
		e := c.est(a).lc[k]
		if !known(e) {
			return 0, math.NaN()
		}
		w, worst = min(w, e.W), max(worst, e.Mean())
	}
	if math.IsInf(w, 1) {
		return 0, math.NaN()
	}
	return w, worst
}

// share is what a is expected to leave BE: measured, else the nearest measured arm's scaled by the
// prior order, else the prior order (BE share unknown: only the order matters).
func (c *Controller) share(a Arm) float64 {
	if e := &c.est(a).share; known(e) {
		return e.Mean()
	}
	near, dist := Arm{}, math.MaxInt
	for _, b := range c.set.all() { // in order: a tie goes the same way every time
		d := max(c.set.rung(a)-c.set.rung(b), c.set.rung(b)-c.set.rung(a))
		if a.Gate != b.Gate {
			d++
		}
		if a.Prepreempt != b.Prepreempt {
			d++
		}
		if e := c.arms[b]; e != nil && known(&e.share) && d < dist {
			near, dist = b, d
		}
	}
	if dist == math.MaxInt {
		return c.set.priorShare(a)
	}
	return min(1, c.est(near).share.Mean()*c.set.priorShare(a)/c.set.priorShare(near))
}
