package slo

import (
	"fmt"
	"maps"
	"math"
	"slices"
)

// decide chooses the next arm (docs/SLO.md's choice rule): one that misses is left after its Dwell
// for the best known to meet every objective, else one that might, else the closest; one explored
// is kept ExploreFor windows or until its bounds decide; then the best known is taken if it gives
// Margin more or the arm in force is not known to meet them; else the best that might is explored.
func (c *Controller) decide(d Decision, o Observation) Decision {
	cur, f := c.cur, c.feasibility(c.cur)
	best, hasBest := c.best()
	short := o.MinBEShare > 0 && !math.IsNaN(o.BEShare)
	d.BEBelowMinimum = short && hasBest && c.share(best) < o.MinBEShare
	switch {
	case f == infeasible && c.since >= c.opts.Dwell:
		c.exploring, d.Cause = false, CauseViolation
		c.leftUnproven(cur)
		miss := fmt.Sprintf("LC at %.2fx its objective under %v (mean of %.1f windows): ", c.worstMean(cur), cur, c.evidence(cur))
		if hasBest {
			return c.move(d, best, miss+fmt.Sprintf("to %v, which meets every objective", best))
		}
		if a, ok := c.candidate(nil); ok {
			c.exploring = true
			return c.move(d, a, miss+fmt.Sprintf("trying %v, which might meet them", a))
		}
		d.Cause, d.BEBelowMinimum = CauseAtLimit, short
		closest := c.closest()
		return c.move(d, closest, miss+fmt.Sprintf("no arm meets it: %v comes closest (%.2fx)", closest, c.worstMean(closest)))
	case c.since < c.opts.Dwell:
		d.Cause = CauseDwell
		return c.stay(d, "dwelling after a change")
	case c.exploring && f == possible && c.since < c.opts.Dwell+c.opts.ExploreFor:
		// A mean a few percent under the objective takes many windows to
		// prove, and the next arm may do better.
		if a, ok := c.candidate(&cur); ok && c.worstMean(cur) <= 1 {
			d.Cause, c.exploring = CauseExplore, true
			return c.move(d, a, fmt.Sprintf("LC at %.2fx its objective under %v so far: trying %v, which might meet it with %s", c.worstMean(cur), cur, a, c.shareText(a)))
		}
		d.Cause = CauseWithin
		return c.stay(d, fmt.Sprintf("exploring %v: LC at %.2fx its objective so far", cur, c.worstMean(cur)))
	}
	leave := hasBest && best != cur && (f != feasible || c.better(best, cur))
	if f != feasible && (c.exploring || leave) { // left or explored undecided: tried again after a while
		c.leftUnproven(cur)
	}
	c.exploring = false
	if leave {
		d.Cause = CauseKnownBetter
		return c.move(d, best, fmt.Sprintf("%v meets every objective with %s", best, c.shareText(best)))
	}
	if a, ok := c.candidate(&best); ok {
		d.Cause, c.exploring = CauseExplore, true
		return c.move(d, a, fmt.Sprintf("LC at %.2fx its objective under %v: trying %v, which might meet it with %s", c.worstMean(cur), cur, a, c.shareText(a)))
	}
	if f != feasible && !hasBest && !(c.worstMean(cur) <= 1) {
		d.Cause, d.BEBelowMinimum = CauseAtLimit, short
		return c.stay(d, fmt.Sprintf("LC at %.2fx its objective under %v, and no arm is known to meet it", c.worstMean(cur), cur))
	}
	d.Cause = CauseWithin
	return c.stay(d, "within objectives")
}

// closest is the arm missing the objectives by least, by its worst upper bound: a well-measured arm
// in force keeps its place against faded estimates whose bounds have widened (hopping among near
// misses would only move BE around); the arm in force on a tie, and while none is measured.
func (c *Controller) closest() Arm {
	worstUpper := func(a Arm) float64 {
		w := math.Inf(-1)
		for k := range c.active {
			_, hi := c.lcBounds(a, k)
			w = max(w, hi)
		}
		if math.IsNaN(w) {
			return math.Inf(1)
		}
		return w
	}
	best, m := c.cur, worstUpper(c.cur)
	for _, a := range c.set.all() {
		if x := worstUpper(a); x < m {
			best, m = a, x
		}
	}
	return best
}

// best is the arm known to meet every objective that gives BE the most (the one in force on a tie,
// and where none is known).
func (c *Controller) best() (best Arm, ok bool) {
	best = c.cur
	for _, a := range c.set.all() {
		if c.feasibility(a) == feasible && (!ok || c.share(a) > c.share(best) || a == c.cur && c.share(a) == c.share(best)) {
			best, ok = a, true
		}
	}
	return best, ok
}

// candidate is the arm to explore expected to give BE the most, more than than (nil: any): one
// that might meet the objectives, not left unproven lately, measured or next to the arm in force
// or one measured (the search extends what it knows a step at a time).
func (c *Controller) candidate(than *Arm) (best Arm, ok bool) {
	for _, a := range c.set.all() {
		frontier := c.evidence(a) > 0
		for _, n := range c.set.neighbours(a) {
			frontier = frontier || n == c.cur || c.evidence(n) >= minWeight
		}
		if a != c.cur && c.tick >= c.left[a].until && frontier && c.feasibility(a) == possible &&
			(than == nil || c.better(a, *than)) && (!ok || c.share(a) > c.share(best)) {
			best, ok = a, true
		}
	}
	return best, ok
}

// better reports whether a is expected to give BE more than b: by Margin where both are measured,
// else in the prior order.
func (c *Controller) better(a, b Arm) bool {
	if known(&c.est(a).share) && known(&c.est(b).share) {
		return c.share(a) > c.share(b)+c.opts.Margin
	}
	return c.share(a) > c.share(b)
}

func (c *Controller) shareText(a Arm) string {
	if e := &c.est(a).share; known(e) {
		return fmt.Sprintf("BE at %.1f%%", 100*e.Mean())
	}
	return "more BE share expected"
}

// backoff: times left, when it may be explored again, the objectives it was not proven for.
type backoff struct {
	n, until int
	by       []string
}

// leftUnproven backs arm a off from exploring: it was left missing or undecided; each time again it
// waits twice as long, maxBackoff times.
func (c *Controller) leftUnproven(a Arm) {
	n := min(c.left[a].n+1, maxBackoff)
	by := slices.DeleteFunc(slices.Collect(maps.Keys(c.active)), func(k string) bool { _, hi := c.lcBounds(a, k); return hi <= 1 })
	c.left[a] = backoff{n, c.tick + c.opts.HalfLife<<(n-1), by}
}
