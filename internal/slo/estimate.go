package slo

import (
	"math"
	"slices"
	"time"
)

// est is a forgetting estimate of one quantity under one arm: weighted
// sums of the windows' values, every weight halved each HalfLife windows.
// Its weight w is the effective number of windows it rests on: it grows
// while the arm is in force and decays while it is not, so what an arm
// showed long ago is trusted less, and the arm is worth trying again.
type est struct{ w, sx, sxx float64 }

// minWeight is the least weight an estimate counts with (a window seen
// about 4 half-lives ago).
const minWeight = 0.05

func (e *est) add(x float64) {
	if !math.IsNaN(x) && !math.IsInf(x, 0) {
		e.w, e.sx, e.sxx = e.w+1, e.sx+x, e.sxx+x*x
	}
}

func (e *est) decay(f float64) { e.w, e.sx, e.sxx = e.w*f, e.sx*f, e.sxx*f }

func (e *est) known() bool { return e != nil && e.w >= minWeight }

func (e *est) mean() float64 { return e.sx / e.w }

// sd is one window's standard deviation, pooled with a prior relative
// scatter (the LC's, learnt under every arm) that weighs as priorWindows
// windows: a few windows that happen to agree do not make a noisy LC look
// steady.
func (e *est) sd(scatter float64) float64 {
	m := e.mean()
	p := scatter * math.Abs(m)
	return math.Sqrt((max(0, e.sxx-e.sx*m) + priorWindows*p*p) / (e.w + priorWindows))
}

const priorWindows = 4

// bounds are the mean's confidence bounds, z standard errors either side.
func (e *est) bounds(z, scatter float64) (lo, hi float64) {
	se := e.sd(scatter) / math.Sqrt(e.w)
	return e.mean() - z*se, e.mean() + z*se
}

// armEst is what one arm showed.
type armEst struct {
	// lc is each objective's latency/target, by objective key (process
	// and objective).
	lc map[string]*est
	// shown is each process's median latency in seconds (its one judged
	// quantile where it pushes no median): changes are read from it, for
	// a tail's windows scatter by multiples (a p99 of 300 requests is
	// their third-worst).
	shown map[string]*est
	share est
}

func newArmEst() *armEst { return &armEst{lc: map[string]*est{}, shown: map[string]*est{}} }

func (a *armEst) decay(f float64) {
	for _, e := range a.lc {
		e.decay(f)
	}
	for _, e := range a.shown {
		e.decay(f)
	}
	a.share.decay(f)
}

func get(m map[string]*est, k string) *est {
	e := m[k]
	if e == nil {
		e = &est{}
		m[k] = e
	}
	return e
}

// Feasibility of an arm against every objective in force.
type feasibility int

const (
	possible   feasibility = iota // neither bound decides: it might meet them
	feasible                      // every upper bound meets its objective
	infeasible                    // a lower bound misses one
)

// feasibility of arm a: from its own estimates where it has them; where it
// has none, from its neighbours', with a wide prior: an arm that gives BE
// less than a measured neighbour might meet what that one missed; one
// that gives BE more is predicted no better than PriorSpread (at Z) under
// its neighbour's latency, so past an arm that misses by multiples (the
// LC waits out BE's timeslice) a longer one is not tried.
func (c *Controller) feasibility(a Arm) feasibility {
	if len(c.active) == 0 {
		return possible
	}
	out := feasible
	for k := range c.active {
		lo, hi := c.lcBounds(a, k)
		switch {
		case lo > 1:
			return infeasible
		case !(hi <= 1):
			out = possible
		}
	}
	return out
}

// scatterOf is one window's relative scatter of quantity k (an
// objective's latency/target, or a process's median), learnt over every
// arm: an LC's own noise (its CPU side, a few requests in a tail) is the
// same under each; Options.Scatter until three windows have shown it.
func (c *Controller) scatterOf(k string) float64 {
	if e := c.scatter[k]; e.known() && e.w >= 3 {
		return math.Sqrt(e.mean())
	}
	return c.opts.Scatter
}

// learnScatter folds x, a window of k under an arm whose estimate is e
// (before x), into k's scatter.
func (c *Controller) learnScatter(k string, e *est, x float64) {
	if e.known() && e.w >= 1 && e.mean() != 0 {
		// At most three deviations of what was learnt: a step is the
		// change detector's, not scatter.
		sc := c.scatterOf(k)
		d := max(-3*sc, min(3*sc, (x-e.mean())/e.mean()))
		get(c.scatter, k).add(d * d * e.w / (e.w + 1)) // the deviation from a mean that includes x would be smaller
	}
}

// lcBounds are the bounds of objective k's latency/target under a.
func (c *Controller) lcBounds(a Arm, k string) (lo, hi float64) {
	if e := c.est(a).lc[k]; e.known() {
		return e.bounds(c.opts.Z, c.scatterOf(k))
	}
	lo = math.Inf(-1)
	for _, n := range c.set.neighbours(a) {
		if e := c.est(n).lc[k]; e.known() && !protects(c.set, n, a) {
			lo = max(lo, e.mean()*(1-c.opts.Z*c.opts.PriorSpread))
		}
	}
	return lo, math.Inf(1)
}

// evidence is the fewest windows a's estimates rest on, over the
// objectives in force.
func (c *Controller) evidence(a Arm) float64 {
	w := math.Inf(1)
	for k := range c.active {
		if e := c.est(a).lc[k]; e != nil {
			w = min(w, e.w)
		} else {
			w = 0
		}
	}
	if math.IsInf(w, 1) {
		return 0
	}
	return w
}

// worstMean is the highest mean latency/target under a (NaN: not known
// for every objective).
func (c *Controller) worstMean(a Arm) float64 {
	w := math.NaN()
	for k := range c.active {
		e := c.est(a).lc[k]
		if !e.known() {
			return math.NaN()
		}
		if m := e.mean(); !(m <= w) {
			w = m
		}
	}
	return w
}

// share is what a is expected to leave BE: measured, else scaled from the
// nearest measured arm by the prior order, else the prior order alone
// (BE share unknown: only the order matters).
func (c *Controller) share(a Arm) float64 {
	if e := &c.est(a).share; e.known() {
		return e.mean()
	}
	best, dist := Arm{}, math.MaxInt
	for b, e := range c.arms {
		if d := armDistance(c.set, a, b); e.share.known() && c.set.rung(b) >= 0 && d < dist {
			best, dist = b, d
		}
	}
	if dist == math.MaxInt {
		return c.set.priorShare(a)
	}
	return min(1, c.est(best).share.mean()*c.set.priorShare(a)/c.set.priorShare(best))
}

func armDistance(s arms, a, b Arm) int {
	d := abs(s.rung(a) - s.rung(b))
	if a.Gate != b.Gate {
		d++
	}
	if a.Prepreempt != b.Prepreempt {
		d++
	}
	return d
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// median of vs (the mean of the middle two for an even count); vs is
// reordered.
func median(vs []time.Duration) time.Duration {
	if len(vs) == 0 {
		return 0
	}
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
