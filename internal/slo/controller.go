package slo

import (
	"fmt"
	"math"
	"time"
)

// DefaultLadder is the BE timeslices the controller chooses among: the
// fastest yield (1 us), the class default (200 us), and the longer ones a
// launch-bound LC may need (docs/SLO.md).
var DefaultLadder = []time.Duration{
	time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond,
}

// Options tune a Controller. The zero value gives the defaults.
type Options struct {
	// Ladder is the ascending BE timeslices to choose among.
	Ladder []time.Duration
	// Safe is the BE timeslice used until LC latency is known and when it
	// goes missing: the BE class default (200 us) unless set.
	Safe time.Duration
	// NoPause: BE cannot be stopped; relative objectives are measured
	// against the LC beside BE under the shortest BE timeslice.
	NoPause bool
	// CalibrateWindows is how many windows a reference latency is learnt
	// from: with BE stopped, a pause of one window more. Default 5.
	CalibrateWindows int

	// Dwell is how many windows an arm is kept before the next change,
	// the first of which mixes two arms and is not learnt from: each
	// change is a GSP RPC per BE channel group. Default 2.
	Dwell int
	// HalfLife is how many windows halve the weight of what an arm
	// showed: the workload drifts, and an arm not tried for long is worth
	// trying again. Default 40.
	HalfLife int
	// Z is the width of the confidence bounds in standard errors: the
	// bounds are tested every window, and a false miss sends BE back for
	// a while. Default 2.
	Z float64
	// ExploreFor is how many windows an arm is explored for before it is
	// left undecided; an arm is explored again once the windows it rests
	// on have decayed under half of that. Default 8.
	ExploreFor int
	// Margin is how much more BE share another arm must give before the
	// controller moves there for BE's sake: one window's share of a
	// training BE scatters by a few points. Default 0.02.
	Margin float64
	// PriorSpread is how much better than a measured neighbour that gives
	// BE less an arm not measured yet may turn out (relative latency, at
	// Z): a miss by up to 1/(1-Z*PriorSpread) (1.25x) may be passed for a
	// longer timeslice (LC latency need not grow with it), one by more is
	// where the LC waits out BE's timeslice. Default 0.1.
	PriorSpread float64
	// Scatter is one window's relative scatter assumed before it is
	// measured: wide, so that one window decides only a far miss. Default 0.1.
	Scatter float64
	// Drift and Threshold are the change detector's (a two-sided CUSUM
	// of standardized residuals): shifts smaller than Drift standard
	// deviations are ignored, and a change is declared when the sum
	// passes Threshold, each window counting for half of it at most (a
	// shift of 4.5 deviations is seen in 3 windows, of 2.5 in 6, of any
	// size in 2; one window, or a two-window burst of 4.5, is not one).
	// Default 0.5 and 12.
	Drift, Threshold float64
	// MissingAfter is how many windows without LC latency send the
	// controller to Safe. Default 3.
	MissingAfter int
	// MinRequests is how many requests a window needs to count: a
	// quantile of fewer says little. Default 20.
	MinRequests int
}

func (o Options) withDefaults() Options {
	if len(o.Ladder) == 0 {
		o.Ladder = DefaultLadder
	}
	if o.Safe <= 0 {
		o.Safe = 200 * time.Microsecond
	}
	for _, f := range []struct {
		p *int
		v int
	}{{&o.CalibrateWindows, 5}, {&o.Dwell, 2}, {&o.HalfLife, 40}, {&o.ExploreFor, 8}, {&o.MissingAfter, 3}, {&o.MinRequests, 20}} {
		if *f.p <= 0 {
			*f.p = f.v
		}
	}
	for _, f := range []struct {
		p *float64
		v float64
	}{{&o.Z, 2}, {&o.Margin, 0.02}, {&o.PriorSpread, 0.1}, {&o.Scatter, 0.1}, {&o.Drift, 0.5}, {&o.Threshold, 12}} {
		if !(*f.p > 0) {
			*f.p = f.v
		}
	}
	return o
}

// LCSample is one LC process's latency over one window, against one of
// its objectives (a process with two objectives gives two samples with
// the same Key).
type LCSample struct {
	// Key names the process (e.g. "pid/starttime"): a new key is a new
	// process, learnt anew.
	Key       string
	Objective Objective
	// Latency is the window's latency at the objective's quantile.
	Latency time.Duration
	// Standalone, when known, is the objective's reference; otherwise
	// the controller learns it.
	Standalone time.Duration
	Requests   int
	// Median is the window's median latency (0: not reported); changes
	// are read from it.
	Median time.Duration
}

// Observation is what was measured over one window under the arm in
// force (the Controller's Arm at the window's start), and what may be
// chosen next.
type Observation struct {
	LC []LCSample
	// BEShare is BE progress relative to BE alone, in [0, 1]; NaN when
	// not measured.
	BEShare float64
	// MinBEShare is the BE classes' minimum share (0: none).
	MinBEShare float64
	// MinBETimeslice and MaxBETimeslice bound the BE timeslice (0: the
	// ladder's ends): two BE processes switch among themselves at the BE
	// timeslice, and below a floor spend the GPU on it.
	MinBETimeslice, MaxBETimeslice time.Duration
	// Gate: the request gate may hold BE for these LCs (the gate arms).
	Gate bool
	// Prepreempt: an LC has a hint engine, which may pre-preempt at BE
	// timeslices up to this (0: no pre-preemption arms).
	Prepreempt time.Duration
	// BEPaused: every BE process was stopped through the window, as the
	// previous decision asked (Decision.PauseBE).
	BEPaused bool
}

// Causes of a decision, a small fixed set (metric label values); Reason
// says the rest in words.
const (
	CauseDwell       = "dwell"        // kept: too soon after a change
	CauseWithin      = "within"       // kept: the arm meets the objectives, or is being explored
	CauseNoSignal    = "no_signal"    // no LC latency: kept, or sent to the safe arm
	CauseViolation   = "violation"    // the arm's lower bound misses an objective: left
	CauseExplore     = "explore"      // an arm that might meet the objectives with more BE share tried
	CauseKnownBetter = "known_better" // an arm known to meet every objective gives BE more
	CauseAtLimit     = "at_limit"     // no arm is known to meet the objectives: the closest kept
	CauseCalibrate   = "calibrate"    // a reference latency learnt
	CauseChange      = "change"       // the LC's response changed under the same arm
	CauseFloor       = "floor"        // raised to the shortest BE timeslice allowed now
	CauseCeiling     = "ceiling"      // lowered to the longest BE timeslice allowed now
	CauseUnavailable = "unavailable"  // the gate or pre-preemption is no longer offered
)

// Phases of the controller.
const (
	phaseFallback    = "fallback"    // no LC latency: the safe arm
	phaseCalibrating = "calibrating" // learning reference latencies
	phaseDeciding    = "deciding"    // choosing among arms by their estimates
)

// LCResult is how one LC sample compared with its objective.
type LCResult struct {
	Key       string        `json:"key"`
	Objective string        `json:"objective"`
	Latency   time.Duration `json:"latency"`
	// Target is the latency the objective allows (0: reference not
	// known yet).
	Target time.Duration `json:"target"`
	// Reference names what a relative objective is measured against.
	Reference string `json:"reference,omitempty"`
	// Ratio is Latency/Target; NaN when the sample did not count.
	Ratio    float64 `json:"ratio"`
	Requests int     `json:"requests"`
}

// Decision is the controller's answer to one observation.
type Decision struct {
	Arm         Arm           `json:"arm"`
	BETimeslice time.Duration `json:"be_timeslice"`
	// Changed: Arm differs from the previous decision's.
	Changed bool   `json:"changed"`
	Phase   string `json:"phase"`
	Cause   string `json:"cause"`
	Reason  string `json:"reason"`
	// WorkloadChanged: the LC's response under the arm changed; what
	// the other arms showed was forgotten.
	WorkloadChanged bool       `json:"workload_changed,omitempty"`
	LC              []LCResult `json:"lc,omitempty"`
	// Worst is the highest latency/target this window (NaN: none).
	Worst   float64 `json:"worst_lc_vs_objective"`
	BEShare float64 `json:"be_share"`
	// BEBelowMinimum: no arm known to meet every LC objective gives BE
	// its minimum share (with BE share measured).
	BEBelowMinimum bool `json:"be_below_minimum,omitempty"`
	Fallback       bool `json:"fallback,omitempty"`
	// PauseBE: stop every BE process through the next window: a
	// standalone reference is being learnt.
	PauseBE bool `json:"pause_be,omitempty"`
	// What learning references has cost so far: windows with BE
	// stopped, windows of calibration in all, of Windows observed.
	PausedWindows      int `json:"paused_windows"`
	CalibrationWindows int `json:"calibration_windows"`
	Windows            int `json:"windows"`
}

// Controller chooses an arm per window. Not safe for concurrent use.
type Controller struct {
	opts   Options
	set    arms
	tick   int
	phase  string
	cur    Arm
	since  int // windows observed under cur (the first mixes)
	arms   map[Arm]*armEst
	active map[string]int // objective keys counted recently, with the window
	refs   map[string]*reference
	// scatter is each quantity's squared relative deviation (scatterOf).
	scatter map[string]*est
	// exploring: cur is being explored (ExploreFor windows at most);
	// left: how each arm was left unproven (leftUnproven).
	exploring bool
	left      map[Arm]struct{ n, until int }
	cusum     [2]float64
	missing   int
	// pausing: the last decision stopped BE; wasPaused: the window being
	// observed was to run without BE; noPause: BE could not be stopped.
	pausing, wasPaused, noPause bool
	cal                         calibration
	relearnt                    int // window references were last relearnt for a change
	pausedWindows               int
	calibrationWindows          int
}

// New returns a controller at the safe arm.
func New(opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	for i, ts := range opts.Ladder {
		if ts < time.Microsecond || ts%time.Microsecond != 0 || i > 0 && ts <= opts.Ladder[i-1] {
			return nil, fmt.Errorf("%w: ladder %v: want ascending whole microseconds >= 1us", ErrInvalid, opts.Ladder)
		}
	}
	c := &Controller{opts: opts, phase: phaseDeciding, arms: map[Arm]*armEst{}, active: map[string]int{},
		refs: map[string]*reference{}, scatter: map[string]*est{}, left: map[Arm]struct{ n, until int }{}, relearnt: math.MinInt / 2}
	c.set = arms{ladder: opts.Ladder, hi: len(opts.Ladder) - 1}
	c.cur = c.safe()
	return c, nil
}

// Current is the BE timeslice in force.
func (c *Controller) Current() time.Duration { return c.cur.BETimeslice }

// Arm is the arm in force.
func (c *Controller) Arm() Arm { return c.cur }

// safe is the arm used until LC latency is known: the rung nearest
// Options.Safe, with pre-preemption at the longest rung that allows it
// where an LC has a hint engine (a hinted LC waits out a longer BE
// timeslice), without the gate.
func (c *Controller) safe() Arm {
	best := 0
	for i, ts := range c.set.ladder {
		if (ts - c.opts.Safe).Abs() < (c.set.ladder[best] - c.opts.Safe).Abs() {
			best = i
		}
	}
	a := c.set.clamp(Arm{BETimeslice: c.set.ladder[best]})
	if c.set.prepreempt > 0 {
		for a.BETimeslice > c.set.prepreempt && c.set.rung(a) > c.set.lo {
			a.BETimeslice = c.set.ladder[c.set.rung(a)-1]
		}
		a.Prepreempt = a.BETimeslice <= c.set.prepreempt
	}
	return a
}

func (c *Controller) est(a Arm) *armEst {
	e := c.arms[a]
	if e == nil {
		e = newArmEst()
		c.arms[a] = e
	}
	return e
}

// Observe takes one window's measurements, made under Arm, and decides
// the next arm.
func (c *Controller) Observe(o Observation) Decision {
	c.tick++
	c.since++
	c.wasPaused, c.pausing = c.pausing, false
	f := math.Exp2(-1 / float64(c.opts.HalfLife))
	for _, e := range c.arms {
		e.decay(f)
	}
	for _, e := range c.scatter {
		e.decay(f)
	}
	c.set = arms{ladder: c.opts.Ladder, lo: c.floor(o.MinBETimeslice), gate: o.Gate, prepreempt: o.Prepreempt}
	c.set.hi = max(c.ceiling(o.MaxBETimeslice), c.set.lo)
	d := c.observe(o)
	if !d.PauseBE {
		c.cal.paused = 0
	}
	d.Arm, d.BETimeslice, d.Phase, d.Fallback = c.cur, c.cur.BETimeslice, c.phase, c.phase == phaseFallback
	d.PausedWindows, d.CalibrationWindows, d.Windows = c.pausedWindows, c.calibrationWindows, c.tick
	return d
}

func (c *Controller) observe(o Observation) Decision {
	paused := c.wasPaused && o.BEPaused
	d, counted, needRef := c.judge(o, paused)
	if !counted {
		c.missing++
	} else {
		c.missing = 0
	}
	if to := c.set.clamp(c.cur); to != c.cur {
		switch r := c.set.rung(c.cur); {
		case r < c.set.lo:
			d.Cause = CauseFloor
		case r > c.set.hi:
			d.Cause = CauseCeiling
		default:
			d.Cause = CauseUnavailable
		}
		return c.move(d, to, fmt.Sprintf("%v is not allowed now", c.cur))
	}
	if !counted {
		d.Cause = CauseNoSignal
		if c.missing >= c.opts.MissingAfter && c.phase != phaseFallback {
			c.phase = phaseFallback
			return c.move(d, c.safe(), fmt.Sprintf("no LC latency for %d windows: the safe arm", c.missing))
		}
		return c.stay(d, "no LC latency this window")
	}
	if c.phase == phaseFallback {
		c.phase, c.since = phaseDeciding, 1 // judged against nothing learnt: not the arm's
	}
	if needRef {
		return c.calibrate(d, o)
	}
	if c.phase == phaseCalibrating {
		return c.endCalibration(d)
	}
	if c.since >= 2 && !c.wasPaused {
		changed, judged := c.changed(o)
		if changed {
			d.WorkloadChanged, d.Cause = true, CauseChange
			if c.relearn() {
				return c.calibrate(d, o)
			}
			return c.stay(d, "the LC's response changed under this arm: what the other arms showed is forgotten")
		}
		// While the detector is half way to a change the windows that
		// took it there are not learnt: else a young estimate follows a
		// step and hides it, and a burst that passes is not the arm's.
		if !judged || max(c.cusum[0], c.cusum[1]) < c.opts.Threshold/2 {
			c.learn(o)
		}
	}
	return c.decide(d, o)
}

// judge compares each sample with its objective, learns references from
// the window where it teaches them, and reports whether any LC counted
// and whether a reference of an objective in force is still to learn.
func (c *Controller) judge(o Observation, paused bool) (d Decision, counted, needRef bool) {
	d = Decision{Worst: math.NaN(), BEShare: o.BEShare}
	for _, s := range o.LC {
		res := LCResult{Key: s.Key, Objective: s.Objective.String(), Latency: s.Latency, Requests: s.Requests, Ratio: math.NaN()}
		if s.Requests < c.opts.MinRequests || s.Latency <= 0 {
			d.LC = append(d.LC, res)
			continue
		}
		counted = true
		ref := s.Standalone
		if s.Objective.Relative() && ref <= 0 {
			r := c.refFor(s)
			c.learnRef(r, s, paused)
			ref, res.Reference = r.value, r.String(c)
		} else if s.Objective.Relative() {
			res.Reference = "given"
		}
		if res.Target = s.Objective.Target(ref); res.Target > 0 {
			res.Ratio = float64(s.Latency) / float64(res.Target)
			c.active[objKey(s)] = c.tick
			if !(res.Ratio <= d.Worst) {
				d.Worst = res.Ratio
			}
		}
		d.LC = append(d.LC, res)
	}
	for k, t := range c.active {
		if c.tick-t >= c.opts.MissingAfter {
			delete(c.active, k)
		}
	}
	for k, r := range c.refs {
		switch {
		case c.tick-r.last > 2*c.opts.HalfLife:
			delete(c.refs, k)
		case r.value == 0 && c.tick-r.last < c.opts.MissingAfter:
			needRef = true // an LC that counts now and then keeps its calibration going
		}
	}
	return d, counted, needRef
}

func objKey(s LCSample) string { return s.Key + " " + s.Objective.String() }

func shownKey(process string) string { return process + " shown" }

// learn folds the window into the arm in force.
func (c *Controller) learn(o Observation) {
	e := c.est(c.cur)
	for _, s := range c.counted(o) {
		k, r := objKey(s), c.ratio(s)
		c.learnScatter(k, get(e.lc, k), r)
		e.lc[k].add(r)
	}
	for k, x := range shownOf(c.counted(o)) {
		c.learnScatter(shownKey(k), get(e.shown, k), x)
		e.shown[k].add(x)
	}
	e.share.add(o.BEShare)
}

// counted are the samples that counted this window with a known target.
func (c *Controller) counted(o Observation) []LCSample {
	var out []LCSample
	for _, s := range o.LC {
		if s.Requests >= c.opts.MinRequests && s.Latency > 0 && !math.IsNaN(c.ratio(s)) {
			out = append(out, s)
		}
	}
	return out
}

func (c *Controller) ratio(s LCSample) float64 {
	ref := s.Standalone
	if s.Objective.Relative() && ref <= 0 {
		if r := c.refs[s.Key+" "+s.Objective.name()+"@"+s.Objective.Reference]; r != nil {
			ref = r.value
		}
	}
	if t := s.Objective.Target(ref); t > 0 {
		return float64(s.Latency) / float64(t)
	}
	return math.NaN()
}

// shownOf is what each process showed this window: its median, else its
// lowest judged quantile, in seconds.
func shownOf(ss []LCSample) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		x := s.Median
		if x <= 0 {
			x = s.Latency
		}
		if v, ok := out[s.Key]; !ok || s.Median <= 0 && x.Seconds() < v {
			out[s.Key] = x.Seconds()
		}
	}
	return out
}

// changed runs the change detector on the window's residuals against
// what the arm in force has shown, and on a change forgets every other
// arm: they showed the workload that was. judged: the arm had shown
// something to compare the window with.
func (c *Controller) changed(o Observation) (changed, judged bool) {
	e := c.est(c.cur)
	z := math.NaN()
	for k, x := range shownOf(c.counted(o)) {
		// An arm measured for a few windows is still being learnt: its
		// mean is no level to stray from.
		if s := e.shown[k]; s.known() && s.w >= float64(c.opts.ExploreFor)/2 {
			if r := (x - s.mean()) / s.sd(c.scatterOf(shownKey(k))); !(math.Abs(r) <= math.Abs(z)) {
				z = r
			}
		}
	}
	if math.IsNaN(z) {
		return false, false // nothing to compare with: an arm not measured yet
	}
	// One window counts for half a change at most: a burst of one window
	// (a tail's few worst requests) is not one.
	half := c.opts.Threshold/2 + c.opts.Drift
	z = max(-half, min(half, z))
	c.cusum[0] = max(0, c.cusum[0]+z-c.opts.Drift)
	c.cusum[1] = max(0, c.cusum[1]-z-c.opts.Drift)
	if max(c.cusum[0], c.cusum[1]) < c.opts.Threshold {
		return false, true
	}
	c.cusum = [2]float64{}
	clear(c.arms)
	clear(c.scatter)
	clear(c.left)
	c.exploring = false
	return true, true
}

// relearn drops the references of the LCs in force, to learn them again
// after a change, at most once per HalfLife windows (what it costs BE is
// bounded so); it reports whether it did.
func (c *Controller) relearn() bool {
	if c.tick-c.relearnt < c.opts.HalfLife {
		return false
	}
	n := 0
	for k, r := range c.refs {
		if c.tick-r.last < c.opts.MissingAfter {
			delete(c.refs, k)
			n++
		}
	}
	if n > 0 {
		c.relearnt = c.tick
	}
	return n > 0
}

func (c *Controller) move(d Decision, to Arm, why string) Decision {
	d.Changed = to != c.cur
	if d.Changed {
		c.cur, c.since = to, 0
	}
	d.Reason += why
	return d
}

func (c *Controller) stay(d Decision, why string) Decision {
	d.Reason += why
	return d
}

// floor is the shortest rung at or above min (the longest when none is).
func (c *Controller) floor(min time.Duration) int {
	for i, ts := range c.opts.Ladder {
		if ts >= min {
			return i
		}
	}
	return len(c.opts.Ladder) - 1
}

// ceiling is the longest rung at or below max (the shortest when none is;
// the longest for 0).
func (c *Controller) ceiling(max time.Duration) int {
	hi := len(c.opts.Ladder) - 1
	if max <= 0 {
		return hi
	}
	for hi > 0 && c.opts.Ladder[hi] > max {
		hi--
	}
	return hi
}
