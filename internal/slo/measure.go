package slo

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// An estimate's weight: aged is one measurement's n windows old. It decides once it rests on one measurement a halfLife old
// at least (its interval widened by the prior; halfLife says when a measurement has faded to half), forgotten at a hundredth.
func aged(n float64) float64         { return math.Exp2(-n / halfLife) }
func decides(w float64) bool         { return w >= aged(halfLife) }
func known(e *stats.Forgetting) bool { return e != nil && decides(e.W) }
func forgotten(w float64) bool       { return w < aged(halfLife)/100 }

// armEst is what one arm showed: each objective's latency/target (by objective key) and its measurements' own squared errors, BE's share.
type armEst struct {
	lc, own map[string]*stats.Forgetting
	share   stats.Forgetting
}

func (c *Controller) est(a Arm) *armEst {
	if c.arms[a] == nil {
		c.arms[a] = &armEst{lc: map[string]*stats.Forgetting{}, own: map[string]*stats.Forgetting{}}
	}
	return c.arms[a]
}

// decay fades every estimate by f, and drops the forgotten (of processes gone).
func (c *Controller) decay(f float64) {
	for _, r := range c.refs {
		r.est.Decay(f)
	}
	for a, e := range c.arms {
		maps.DeleteFunc(e.lc, func(_ string, x *stats.Forgetting) bool { x.Decay(f); return forgotten(x.W) })
		maps.DeleteFunc(e.own, func(_ string, x *stats.Forgetting) bool { x.Decay(f); return forgotten(x.W) })
		if e.share.Decay(f); len(e.lc) == 0 && forgotten(e.share.W) {
			delete(c.arms, a)
		}
	}
	maps.DeleteFunc(c.scatter, func(_ string, x *stats.Scatter) bool { x.Decay(f); return forgotten(x.Own.W + x.Off.W) }) // as long as its arms' estimates
}

// accum gathers one objective's samples under the arm in force, however many windows a slow LC takes, and keeps its last measurement.
type accum struct {
	LCResult
	pts, alone []stats.Weighted // alone: the LC alone from pts' first to the measurement
	reqs, lone int              // the requests each comes from
	from       int              // the window of pts' first (0: none yet)
	ref        time.Duration    // the LC alone it is judged by, where known (0: not)
}

// restart drops what accumulated toward the next measurement: it counted, or the arm moved.
func (a *accum) restart() { a.pts, a.reqs, a.alone, a.lone, a.from = nil, 0, nil, 0, 0 }

// reference is what a relative objective is measured against, learnt alone or beside BE whenever the LC runs so (one early measurement is no reference).
type reference struct {
	how, owner string
	passive    bool // an absolute objective's: learnt while BE idles anyway, never paused for (it only names a bound)
	pts        []stats.Weighted
	reqs       int
	est        stats.Forgetting // the measurements made so, in ns
	value      time.Duration    // their mean; 0 while none
	se         float64          // the last one's relative standard error, from its samples (NaN: not known): more than its mean's, standing for a bias every measurement judged by it shares
	under      Arm              // beside BE: the shortest arm it is learnt under
	was        time.Duration    // its value under the arm before: the arms' estimates move once from it to the first value under this
	silent     int              // windows alone, of pauses that taught it nothing
	gotAt      int              // the last window it took samples in
	last       int              // the window its process last gave a sample
}

// learning reports whether it is yet to be learnt how (objective.Standalone: a pause would teach it).
func (r *reference) learning(c *Controller, how string) bool {
	return r.value == 0 && r.how == how && !r.passive && c.tick-r.last < idleAfter
}

// String names the reference as the status shows it.
func (r *reference) String(c *Controller) string {
	what := "standalone (BE stopped or idle)"
	if r.how == objective.Shortest {
		what = fmt.Sprintf("beside BE under %v%s", cmp.Or(r.under, c.shortest()).BETimeslice, map[bool]string{true: fmt.Sprintf(" (no sample in %d windows alone)", r.silent)}[r.silent >= idleAfter])
	}
	if r.value == 0 {
		return fmt.Sprintf("%s: learning (%d of %d samples, %d of %d requests)", what, stats.Weight(r.pts), minSamples, r.reqs, minRequests/2)
	}
	return fmt.Sprintf("%s %v, its last sample %v ago", what, r.value.Round(time.Microsecond), time.Duration(c.tick-r.gotAt)*c.opts.Window) // a gate arm with probes kept teaches it nothing: how stale it is
}

// shortest is the arm references are learnt under beside BE: the shortest rung BE's minimum allows, no gate, hinted.
func (c *Controller) shortest() Arm {
	for r := c.set.lo; ; r++ {
		if a := c.set.clamp(Arm{BETimeslice: c.set.ladder[r], Prepreempt: true}); !c.short(a) || r == len(c.set.ladder)-1 {
			return a
		}
	}
}

// requests: how many requests s's points come from; enough: whether p from n requests, m at least, is a measurement.
func requests(s LCSample) int                  { return cmp.Or(s.Requests, stats.Weight(s.Points)) }
func enough(p []stats.Weighted, n, m int) bool { return stats.Weight(p) >= minSamples && n >= m }

// measure folds each sample into its reference (whenever the LC runs so) or the arm in force's measurement; BE share where BE ran.
func (c *Controller) measure(d *Decision, o Observation) {
	asked := c.stops[c.tick] != nil
	drain := asked != (c.stops[c.tick-1] != nil) // BE's queued work runs on, or it starts again
	mixed := drain || c.moved == c.tick-1 && !o.Aligned
	alone := asked && o.BEPaused && !drain || o.BEIdle && !asked
	underArm := !alone && !mixed && !asked
	bare := func(s LCSample) bool { return !c.cur.Gate || !s.GateTraps } // the LC as its users run it alone: a gate's traps are a cost of sharing
	given := func(s LCSample) bool { return stats.Weight(s.Points) > 0 } // a window without its sample says nothing of how it runs
	if o.BEIdle && (!c.cur.Gate || slices.ContainsFunc(o.LC, given) && !slices.ContainsFunc(o.LC, func(s LCSample) bool { return given(s) && !bare(s) })) {
		c.idleAt = c.tick
	}
	c.quiet++
	for _, s := range o.LC {
		k, n := s.Key+" "+s.Objective.String(), stats.Weight(s.Points)
		if n > 0 {
			c.active[k], c.quiet = c.tick, 0
		}
		a := cmp.Or(c.acc[k], &accum{LCResult: LCResult{Key: s.Key, Objective: s.Objective.String(), Ratio: math.NaN()}})
		c.acc[k], a.Reference, a.Counted = a, "", false
		ref, refSE := s.Standalone, 0.0 // refSE: the reference's own relative error (NaN: not known, nor then the measurement's)
		var r *reference
		if ref <= 0 {
			if r = c.refFor(s); n > 0 {
				r.last = c.tick
			}
			if alone && bare(s) && r.how == objective.Standalone || r.how == objective.Shortest && !mixed && !asked && c.cur == c.shortest() {
				if r.how == objective.Shortest && r.under != c.cur { // beside BE under another arm: another reference, not the LC's drift
					r.under, r.pts, r.reqs, r.est, r.was = c.cur, nil, 0, stats.Forgetting{}, r.value
				}
				r.pts, r.reqs, r.gotAt = append(r.pts, s.Points...), r.reqs+requests(s), c.tick
				if enough(r.pts, r.reqs, minRequests/2) { // one of many its mean takes, where an arm's is judged alone
					r.est.Add(float64(stats.WeightedQuantile(r.pts, s.Objective.Quantile)))
					for _, e := range c.arms { // the arms judged by its value under the arm before move once to this one
						if x := e.lc[k]; x != nil && r.was > 0 && s.Objective.Relative() {
							x.Scale(float64(r.was) / r.est.Mean())
						}
					}
					r.value, r.se, r.pts, r.reqs, r.was = time.Duration(r.est.Mean()), stats.QuantileSE(r.pts, s.Objective.Quantile, r.reqs), nil, 0, 0 // arms measured before stay judged by the reference of their time: the LC drifts
				}
			}
			ref, refSE = r.value, map[bool]float64{true: r.se}[s.Objective.Relative()] // an absolute target takes no reference
			if s.Objective.Relative() {
				a.Reference = r.String(c)
			}
		}
		if underArm && n > 0 {
			a.pts, a.reqs, a.from = append(a.pts, s.Points...), a.reqs+requests(s), cmp.Or(a.from, c.tick)
		}
		span := r != nil && r.how == objective.Standalone && s.Objective.Relative() // the LC alone through the span judges it once enough: its speed drifts
		if s.Objective.Reference != objective.Shortest && (r == nil || r.how == objective.Standalone) {
			if a.ref = ref; span && alone && bare(s) && len(a.pts) > 0 {
				a.alone, a.lone = append(a.alone, s.Points...), a.lone+requests(s)
			}
		}
		w := c.tick - a.from + 1 // the span's windows so far: it waits, maxAccumulate at most, while BE idles often enough to give them within two (undecided that long, an arm is left)
		waits := span && a.lone > 0 && w <= maxAccumulate && stats.Weight(a.alone)*2*maxAccumulate >= minSamples/2*w && a.lone*2*maxAccumulate >= minRequests/2*w
		if span && ref > 0 && stats.Weight(a.alone) >= minSamples/2 && a.lone >= minRequests/2 {
			ref, waits, refSE = stats.WeightedQuantile(a.alone, s.Objective.Quantile), false, stats.QuantileSE(a.alone, s.Objective.Quantile, a.lone)
			a.ref, a.Reference = ref, fmt.Sprintf("standalone through this measurement (BE idle) %v, %d samples", ref.Round(time.Microsecond), stats.Weight(a.alone))
		}
		if a.Target = s.Objective.Target(ref); a.Target > 0 && enough(a.pts, a.reqs, minRequests) && !waits {
			a.Latency = stats.WeightedQuantile(a.pts, s.Objective.Quantile)
			a.Ratio, a.Counted, a.Made = float64(a.Latency)/float64(a.Target), true, a.Made+1
			c.record(k, c.cur, a.Ratio, math.Hypot(stats.QuantileSE(a.pts, s.Objective.Quantile, a.reqs), refSE))
			a.restart()
			c.counted[k]++
		}
		a.Pending = stats.Weight(a.pts)
		d.LC = append(d.LC, a.LCResult)
	}
	maps.DeleteFunc(c.active, func(_ string, t int) bool { return c.tick-t >= idleAfter+maxAccumulate }) // a process gone, or an objective changed
	maps.DeleteFunc(c.acc, func(k string, _ *accum) bool { _, ok := c.active[k]; return !ok })
	maps.DeleteFunc(c.refs, func(_ string, r *reference) bool { return c.tick-r.last > 2*halfLife })
	if underArm && !math.IsNaN(o.BEShare) {
		c.est(c.cur).share.Add(o.BEShare)
	}
	d.Worst = c.worstMean(c.cur)
}

func (c *Controller) refFor(s LCSample) *reference {
	rel := s.Objective.Relative() // an absolute objective's reference is apart from a relative one's on the same quantile
	k := s.Key + " " + s.Objective.Name() + "@" + map[bool]string{true: s.Objective.Reference, false: "passive"}[rel]
	if c.refs[k] == nil {
		shortest := rel && (s.Objective.Reference == objective.Shortest || !c.canPause())
		how := map[bool]string{true: objective.Shortest, false: objective.Standalone}[shortest]
		c.refs[k] = &reference{how: how, owner: s.Owner, last: c.tick, passive: !rel}
	}
	return c.refs[k]
}

// canPause: BE may be stopped, and the budget holds a drain window and one to learn in (a window over 3 s leaves it none).
func (c *Controller) canPause() bool {
	return !c.opts.NoPause && int(budget*float64(c.minuteWindows())) >= 2
}

// pauseAllowed: BE may be stopped through the next window, under the minute's budget and an owner's share (a tenant churning LCs spends no other's).
func (c *Controller) pauseAllowed(owners []string) bool {
	minute := c.minuteWindows()
	maps.DeleteFunc(c.stops, func(t int, _ []string) bool { return t <= c.tick+1-minute })
	limit := int(budget * float64(minute))
	distinct := slices.Compact(slices.Sorted(slices.Values(owners)))
	return len(c.stops) < limit && slices.ContainsFunc(distinct, func(o string) bool {
		used := len(slices.DeleteFunc(slices.Collect(maps.Values(c.stops)), func(os []string) bool { return !slices.Contains(os, o) }))
		return used < max(1, limit/len(distinct))
	})
}

// calibrate runs one window of calibration: references are learnt while BE idles, else with BE stopped within budget, else beside it.
func (c *Controller) calibrate(d *Decision, o Observation) {
	p := &c.phase
	alone, ran := p.Pause-1, p.Pause // windows of the pause the LCs ran alone in: all but the first, which drains BE's work
	if p.Pause > 0 && !o.BEPaused && c.stops[c.tick] != nil {
		p.Pause, alone = c.opts.PauseMax, c.opts.PauseMax-1 // BE was not kept stopped: over, and it counts as a pause that taught nothing
	}
	owners, shortest := c.toLearn()
	if p.Pause > 0 && (len(owners) == 0 || p.Pause >= c.opts.PauseMax || !c.pauseAllowed(owners)) {
		for _, r := range c.refs { // a pause that taught a reference nothing counts its windows alone against it
			if r.learning(c, objective.Standalone) && r.gotAt <= c.tick-ran {
				if r.silent += max(0, alone); r.silent >= idleAfter { // as long as an LC is quiet before the safe arm
					r.how = objective.Shortest
				}
			}
		}
		p.Pause = 0
		owners, shortest = c.toLearn()
	}
	from, idle := c.set.clamp(p.From), c.idleLately()
	switch {
	case len(owners) == 0 && !shortest:
		c.enter(Phase{Kind: Settled})
		c.to(d, CauseCalibrate, from, fmt.Sprintf("references learnt: back to %v", from))
	case len(owners) > 0 && c.canPause() && !idle && (p.Pause > 0 || c.pauseAllowed(owners)):
		p.Pause, d.PauseBE, c.paused = p.Pause+1, true, c.paused+1
		c.stops[c.tick+1] = owners
		c.to(d, CauseCalibrate, c.set.clamp(Arm{BETimeslice: c.cur.BETimeslice, Prepreempt: c.cur.Prepreempt}), // the gate's probes off, as alone
			fmt.Sprintf("learning an LC's standalone latency with BE stopped (window %d of at most %d)", p.Pause, c.opts.PauseMax))
	case shortest:
		c.to(d, CauseCalibrate, c.shortest(), fmt.Sprintf("learning an LC's latency beside BE under the shortest arm, %v", c.shortest()))
	default: // nothing to learn by now: the references come as BE idles or the budget allows
		c.enter(Phase{Kind: Settled})
		c.to(d, CauseCalibrate, from, map[bool]string{false: "a reference waits for the pause budget (BE stopped at most 10% of any minute); searching meanwhile",
			true: "a reference is learnt while BE idles of its own accord; searching meanwhile"}[idle])
	}
}

// calibrationDue reports whether a calibration would learn something now.
func (c *Controller) calibrationDue() bool {
	owners, shortest := c.toLearn()
	return shortest || len(owners) > 0 && c.canPause() && !c.idleLately() && c.pauseAllowed(owners)
}

// toLearn lists the owners of the references a pause would teach; shortest: one is learnt there.
func (c *Controller) toLearn() (owners []string, shortest bool) {
	for _, r := range c.refs {
		if r.learning(c, objective.Standalone) {
			owners = append(owners, r.owner)
		}
		shortest = shortest || r.learning(c, objective.Shortest)
	}
	return owners, shortest
}

func (c *Controller) idleLately() bool { return c.idleAt > 0 && c.tick-c.idleAt < c.minuteWindows() }

// feasibility of an arm against every objective in force.
type feasibility int

const (
	possible   feasibility = iota // neither bound decides
	feasible                      // every upper bound meets its objective
	infeasible                    // a lower bound misses one
)

// feasibility is infeasible for an arm known to give BE less than its minimum: the policy bounds what an LC's objective may cost BE.
func (c *Controller) feasibility(a Arm) feasibility {
	if c.short(a) {
		return infeasible
	}
	return c.lcFeasibility(a)
}

// lcFeasibility is a's feasibility against the LC objectives alone.
func (c *Controller) lcFeasibility(a Arm) feasibility {
	out := map[bool]feasibility{true: possible, false: feasible}[len(c.active) == 0]
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

// lcBounds are objective k's latency/target bounds under a: its own, else giving BE more than a neighbour, no better than priorScatter under it.
func (c *Controller) lcBounds(a Arm, k string) (lo, hi float64) {
	if e := c.est(a).lc[k]; known(e) {
		return e.Bounds(z, c.scatter[k].Of(c.est(a).own[k], priorScatter, priorWeight), priorWeight)
	}
	lo = math.Inf(-1)
	for _, n := range c.set.neighbours(a) {
		if e := c.est(n).lc[k]; known(e) && !protects(c.set, n, a) {
			lo = max(lo, e.Mean()*(1-z*priorScatter))
		}
	}
	return lo, math.Inf(1)
}

// evidence is the least weight a's estimates of the objectives in force rest on; worstMean their highest mean (NaN: not all known).
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

// share is what a is expected to leave BE: measured, else the nearest measured arm's scaled by the prior order, else the prior order.
func (c *Controller) share(a Arm) float64 {
	if e := &c.est(a).share; known(e) {
		return e.Mean()
	}
	near, dist := Arm{}, math.MaxInt
	for _, b := range c.set.all() { // in order: a tie goes the same way every time
		d := max(c.set.rung(a)-c.set.rung(b), c.set.rung(b)-c.set.rung(a)) + map[bool]int{true: 1}[a.Gate != b.Gate] + map[bool]int{true: 1}[a.Prepreempt != b.Prepreempt]
		if e := c.arms[b]; e != nil && known(&e.share) && d < dist {
			near, dist = b, d
		}
	}
	if dist == math.MaxInt {
		return c.set.priorShare(a)
	}
	return min(1, c.est(near).share.Mean()*c.set.priorShare(a)/c.set.priorShare(near))
}

// record files measurement x of objective k (relative error se) under a: its estimate, a's own errors, the LC's scatter.
func (c *Controller) record(k string, a Arm, x, se float64) {
	e := c.est(a)
	e.own[k], e.lc[k] = cmp.Or(e.own[k], &stats.Forgetting{}), cmp.Or(e.lc[k], &stats.Forgetting{})
	c.scatter[k] = cmp.Or(c.scatter[k], &stats.Scatter{})
	c.scatter[k].Add(x, se, e.lc[k], aged(halfLife))
	e.own[k].Add(se * se)
	e.lc[k].Add(x)
}
