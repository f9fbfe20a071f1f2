package slo

import (
	"maps"
	"math"
	"slices"
	"time"
)

// est is a forgetting estimate of one quantity under one arm: weighted
// sums of its windows, each weight halved every HalfLife windows; w is
// the windows it effectively rests on.
type est struct{ w, sx, sxx float64 }

func (e *est) add(x float64) {
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		e.w, e.sx, e.sxx = e.w+1, e.sx+x, e.sxx+x*x
	}
}

func (e *est) decay(f float64) { e.w, e.sx, e.sxx = e.w*f, e.sx*f, e.sxx*f }
func (e *est) known() bool     { return e != nil && e.w >= minWeight }
func (e *est) mean() float64   { return e.sx / e.w }

// sd is one window's standard deviation, pooled with a prior relative
// scatter (the LC's, learnt under every arm): a few windows that happen
// to agree do not make a noisy LC look steady.
func (e *est) sd(scatter float64) float64 {
	m, p := e.mean(), scatter*e.mean()
	return math.Sqrt((max(0, e.sxx-e.sx*m) + priorWindows*p*p) / (e.w + priorWindows))
}

// bounds are the mean's confidence bounds, z standard errors either side.
func (e *est) bounds(z, scatter float64) (lo, hi float64) {
	se := e.sd(scatter) / math.Sqrt(e.w)
	return e.mean() - z*se, e.mean() + z*se
}

// armEst is what one arm showed: each objective's latency/target (by
// objective key), each process's median in seconds (changes are read from
// it: a tail's windows scatter by multiples), BE share.
type armEst struct {
	lc, shown map[string]*est
	share     est
}

func decayAll(m map[string]*est, f float64) {
	for _, e := range m {
		e.decay(f)
	}
}

// decay fades every estimate by f and drops those that faded to nothing:
// of processes gone (keys are per process), of arms long not visited.
func (c *Controller) decay(f float64) {
	for _, e := range c.arms {
		decayAll(e.lc, f)
		decayAll(e.shown, f)
		e.share.decay(f)
	}
	decayAll(c.scatter, f)
	gone := func(_ string, e *est) bool { return e.w < forgotten }
	for a, e := range c.arms {
		maps.DeleteFunc(e.lc, gone)
		maps.DeleteFunc(e.shown, gone)
		if len(e.lc) == 0 && len(e.shown) == 0 && e.share.w < forgotten {
			delete(c.arms, a)
		}
	}
	maps.DeleteFunc(c.scatter, gone)
}

func get(m map[string]*est, k string) *est {
	if m[k] == nil {
		m[k] = &est{}
	}
	return m[k]
}

// scatterOf is one window's relative scatter of quantity k, learnt over
// every arm (an LC's own noise is the same under each), at least
// scatterFloor; scatterPrior until scatterAfter windows have shown it.
func (c *Controller) scatterOf(k string) float64 {
	if e := c.scatter[k]; e.known() && e.w >= scatterAfter {
		return max(math.Sqrt(e.mean()), scatterFloor)
	}
	return scatterPrior
}

// learnScatter folds x, a window of k under an arm whose estimate is e
// (before x), into k's scatter: at most scatterClip deviations, scaled
// for the mean that x is not part of.
func (c *Controller) learnScatter(k string, e *est, x float64) {
	if e.known() && e.w >= 1 && e.mean() != 0 {
		sc := c.scatterOf(k)
		d := max(-scatterClip*sc, min(scatterClip*sc, (x-e.mean())/e.mean()))
		get(c.scatter, k).add(d * d * e.w / (e.w + 1))
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

// lcBounds are the bounds of objective k's latency/target under a: its
// own, else its neighbours' with a wide prior. An arm that gives BE less
// than a measured neighbour might meet what that one missed; one that
// gives BE more is no better than priorSpread (at Z) under its
// neighbour.
func (c *Controller) lcBounds(a Arm, k string) (lo, hi float64) {
	if e := c.est(a).lc[k]; e.known() {
		return e.bounds(c.opts.Z, c.scatterOf(k))
	}
	lo = math.Inf(-1)
	for _, n := range c.set.neighbours(a) {
		if e := c.est(n).lc[k]; e.known() && !protects(c.set, n, a) {
			lo = max(lo, e.mean()*(1-c.opts.Z*priorSpread))
		}
	}
	return lo, math.Inf(1)
}

// evidence is the fewest windows a's estimates rest on, over the
// objectives in force; worstMean their highest mean (NaN: not known for
// every objective).
func (c *Controller) evidence(a Arm) float64  { w, _ := c.measured(a); return w }
func (c *Controller) worstMean(a Arm) float64 { _, m := c.measured(a); return m }

func (c *Controller) measured(a Arm) (w, worst float64) {
	w, worst = math.Inf(1), math.Inf(-1)
	for k := range c.active {
		e := c.est(a).lc[k]
		if !e.known() {
			return 0, math.NaN()
		}
		w, worst = min(w, e.w), max(worst, e.mean())
	}
	if math.IsInf(w, 1) {
		return 0, math.NaN()
	}
	return w, worst
}

// share is what a is expected to leave BE: measured, else the nearest
// measured arm's scaled by the prior order, else the prior order (BE
// share unknown: only the order matters).
func (c *Controller) share(a Arm) float64 {
	if e := &c.est(a).share; e.known() {
		return e.mean()
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
		if e := c.arms[b]; e != nil && e.share.known() && d < dist {
			near, dist = b, d
		}
	}
	if dist == math.MaxInt {
		return c.set.priorShare(a)
	}
	return min(1, c.est(near).share.mean()*c.set.priorShare(a)/c.set.priorShare(near))
}

// median of vs (the mean of the middle two for an even count); vs is
// reordered.
func median(vs []time.Duration) time.Duration {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	return (vs[(len(vs)-1)/2] + vs[len(vs)/2]) / 2
}
