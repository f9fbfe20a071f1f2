// Package slo chooses, per GPU, what gives best-effort (BE) work the most
// GPU that every latency-critical (LC) process's objective allows: a BE
// timeslice, the request gate, pre-preemption (an Arm), from measured LC
// latency and BE progress. docs/SLO.md explains its decisions.
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

// DefaultLadder: the fastest yield (1 us), the class default (200 us), and
// the longer BE timeslices a launch-bound LC may need.
var DefaultLadder = []time.Duration{
	time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond,
}

// Options tune a Controller; zero fields take the defaults in brackets.
type Options struct {
	Ladder           []time.Duration // ascending BE timeslices [DefaultLadder]
	Safe             time.Duration   // the BE timeslice while LC latency is unknown [200us]
	NoPause          bool            // BE cannot be stopped: references are learnt beside it
	CalibrateWindows int             // windows a reference is the median of (two odd ones are outvoted; each paused one costs BE) [5]
	MinRequests      int             // requests a window needs to count (a quantile of fewer says little) [20]
	MissingAfter     int             // windows without LC latency before the safe arm (a window or two is an LC idling) [3]
	Dwell            int             // windows an arm is kept, the first not learnt unless Aligned (it mixes two arms; a change is a GSP RPC per BE group) [2]
	HalfLife         int             // windows that halve what an arm showed (workloads drift; an arm not tried lately is worth a try) [40]
	Z                float64         // bounds' width in standard errors (tested every window; a false miss costs BE a while) [2]
	ExploreFor       int             // most windows an arm is explored undecided (a noisy LC a few percent under takes many to prove) [8]
	Margin           float64         // BE share a move for BE's sake must add: the only hysteresis (a training BE's share scatters by a few points) [0.02]
	Threshold        float64         // the change detector's CUSUM, in deviations: 4.5 a window is seen in 3, 2.5 in 6, a burst not [12]
}

// DefaultMinRequests is Options.MinRequests's default.
const DefaultMinRequests = 20

func (o Options) withDefaults() Options {
	if len(o.Ladder) == 0 {
		o.Ladder = DefaultLadder
	}
	o.Safe = cmp.Or(o.Safe, 200*time.Microsecond)
	for p, v := range map[*int]int{&o.CalibrateWindows: 5, &o.Dwell: 2, &o.HalfLife: 40, &o.ExploreFor: 8, &o.MissingAfter: 3, &o.MinRequests: DefaultMinRequests} {
		*p = cmp.Or(*p, v)
	}
	for p, v := range map[*float64]float64{&o.Z: 2, &o.Margin: 0.02, &o.Threshold: 12} {
		*p = cmp.Or(*p, v)
	}
	return o
}

// The model's fixed numbers, each with why this value.
const (
	settle        = 1                 // windows after a move that show what was before: it lands mid-window; a paused BE's queue drains in the next
	drift         = 0.5               // deviations a residual must pass to add to a change: the CUSUM's half of the least shift worth seeing (one)
	changeWindows = 2                 // fewest windows a change is seen in: one adds Threshold/changeWindows at most (a burst is no change)
	minWeight     = 0.05              // an estimate's least weight: one window 4.3 HalfLifes old, an arm tried once worth trying again
	forgotten     = minWeight / 100   // weight an estimate is dropped under: it no longer counts, and processes gone cost nothing
	priorWindows  = 4                 // windows the prior scatter weighs as: a few that happen to agree do not make a noisy LC steady
	levelWindows  = priorWindows      // windows an arm rests on before the detector compares with it: until then its deviation is the prior's
	priorSpread   = 0.1               // how much better at Z an unmeasured arm may be than a neighbour giving BE less: past 1.25x the LC waits out BE
	scatterPrior  = 0.1               // a window's relative scatter until measured: wide, so that one window decides only a far miss
	scatterFloor  = scatterPrior / 10 // the least scatter learnt: a window that repeats the last is no evidence of none
	scatterAfter  = 3                 // windows of scatter learnt before it replaces scatterPrior: two that agree say little
	scatterClip   = 3                 // deviations a window's scatter is clipped at: a step further is the change detector's
	leastChange   = scatterPrior / 4  // a deviation for the detector at least: half the finest objective margin (5%); less is drift
	refHalfLives  = 2                 // HalfLifes a reference outlives its process's last window: its estimates weigh a quarter by then
	calSlack      = 3                 // windows a pause may run past its own (too few requests, an LC arriving) before BE runs one
	calRounds     = 3                 // pauses that run long, or without a window of the LC alone, before references are learnt beside BE
	calMisses     = 2                 // windows BE is not kept stopped before pausing is given up (one may be a BE starting mid-window)
	maxBackoff    = 4                 // back-offs from exploring an arm, each twice the last, to 8 HalfLifes: else arms near an LC's edge are tried each HalfLife
	gateShare     = 0.75              // BE's share with the gate over without, until measured (only the order counts): an LC busy a quarter of the time
	spinShare     = 0.99              // the same with pre-preemption: a spinner takes a little
)

// LCSample is one LC process's latency over one window against one of its
// objectives (two objectives: two samples with one Key).
type LCSample struct {
	Key        string // the process ("pid/start"): a new key, a new process
	Objective  objective.Objective
	Latency    time.Duration // at the objective's quantile
	Standalone time.Duration // the reference, if known; else it is learnt
	Requests   int
	Median     time.Duration // 0: not pushed; changes are read from it
}

// Observation is one window under the arm in force, and what may be
// chosen next.
type Observation struct {
	LC         []LCSample
	BEShare    float64 // BE progress over BE alone; NaN: not measured
	MinBEShare float64 // 0: none
	// The BE timeslice's bounds (0: the ladder's ends): below a floor two BE spend the GPU
	// switching.
	MinBETimeslice, MaxBETimeslice time.Duration
	Gate                           bool          // the gate may hold BE for these LCs
	Prepreempt                     time.Duration // an LC's engine may pre-preempt up to this BE timeslice; 0: no
	BEPaused                       bool          // every BE was stopped through the window, as asked
	// Aligned: every LC window began as the last decision took effect for its LC (reporters push just
	// before the daemon reads; an engine takes pre-preemption at that push): the window is learnt.
	Aligned bool
}

// Causes of a decision (metric label values); Reason says the rest.
const (
	CauseDwell       = "dwell"        // kept: too soon after a change
	CauseWithin      = "within"       // kept: it meets the objectives, or is being explored
	CauseNoSignal    = "no_signal"    // no LC latency: kept, or the safe arm
	CauseViolation   = "violation"    // its lower bound misses an objective: left
	CauseExplore     = "explore"      // an arm that might meet them with more BE tried
	CauseKnownBetter = "known_better" // an arm known to meet them gives BE more
	CauseAtLimit     = "at_limit"     // no arm known to meet them: the closest
	CauseCalibrate   = "calibrate"    // a reference learnt
	CauseChange      = "change"       // the LC's response changed under the arm
	CauseFloor       = "floor"        // raised to the shortest BE timeslice allowed
	CauseCeiling     = "ceiling"      // lowered to the longest allowed
	CauseUnavailable = "unavailable"  // the gate or pre-preemption no longer offered
)

const (
	phaseFallback    = "fallback"    // no LC latency: the safe arm
	phaseCalibrating = "calibrating" // learning references
	phaseDeciding    = "deciding"    // choosing among arms by their estimates
)

// LCResult is a sample against its objective.
type LCResult struct {
	Key       string        `json:"key"`
	Objective string        `json:"objective"`
	Latency   time.Duration `json:"latency"`
	Target    time.Duration `json:"target"`              // 0: reference not known yet
	Reference string        `json:"reference,omitempty"` // what a relative objective is measured against
	Ratio     float64       `json:"ratio"`               // Latency/Target; NaN: did not count
	Requests  int           `json:"requests"`
}

// Decision is the answer to one observation.
type Decision struct {
	Arm                                        Arm           `json:"arm"`
	BETimeslice                                time.Duration `json:"be_timeslice"`
	Changed                                    bool          `json:"changed"`
	Phase                                      string        `json:"phase"`
	Cause                                      string        `json:"cause"`
	Reason                                     string        `json:"reason"`
	WorkloadChanged                            bool          `json:"workload_changed,omitempty"` // the other arms were forgotten
	LC                                         []LCResult    `json:"lc,omitempty"`
	Worst                                      float64       `json:"worst_lc_vs_objective"` // highest latency/target; NaN: none
	BEShare                                    float64       `json:"be_share"`
	BEBelowMinimum                             bool          `json:"be_below_minimum,omitempty"` // no arm known to meet them gives BE its minimum
	Fallback                                   bool          `json:"fallback,omitempty"`
	PauseBE                                    bool          `json:"pause_be,omitempty"` // stop every BE through the next window
	Aligned                                    bool          `json:"aligned,omitempty"`  // Observation.Aligned
	PausedWindows, CalibrationWindows, Windows int           // what references cost: windows BE was paused, of calibration, of all
}

// Controller chooses an arm per window. Not safe for concurrent use.
type Controller struct {
	opts                 Options
	set                  arms
	tick                 int
	phase                string
	cur                  Arm
	since                int // windows under cur (the first mixes)
	arms                 map[Arm]*armEst
	active               map[string]int // objective keys counted lately: the window
	refs                 map[string]*reference
	scatter              map[string]*est // squared relative deviations (scatterOf)
	exploring            bool
	left                 map[Arm]backoff // leftUnproven
	cusum                [2]float64
	missing              int
	pausing, wasPaused   bool // the last decision paused BE; the window observed was to
	cal                  calibration
	relearnt             int  // window references were last relearnt for a change
	owed                 bool // a change came within a HalfLife of that: relearnt once one has passed
	limitSince, rechecks int  // window since no arm met the objectives (0: one does); rechecks since, each twice as late
	paused, calibrated   int  // windows, for Decision
}

// New returns a controller at the safe arm.
func New(opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	for i, ts := range opts.Ladder {
		if ts < time.Microsecond || ts%time.Microsecond != 0 || i > 0 && ts <= opts.Ladder[i-1] {
			return nil, fmt.Errorf("%w: ladder %v: want ascending whole microseconds >= 1us", objective.ErrInvalid, opts.Ladder)
		}
	}
	c := &Controller{opts: opts, phase: phaseDeciding, arms: map[Arm]*armEst{}, active: map[string]int{},
		refs: map[string]*reference{}, scatter: map[string]*est{}, left: map[Arm]backoff{}, relearnt: math.MinInt / 2,
		set: arms{ladder: opts.Ladder, hi: len(opts.Ladder) - 1}}
	c.cur = c.safe()
	return c, nil
}

// Current is the BE timeslice in force; Arm the arm.
func (c *Controller) Current() time.Duration { return c.cur.BETimeslice }
func (c *Controller) Arm() Arm               { return c.cur }

// safe is the arm while LC latency is unknown: the rung nearest Safe, without the gate, and where
// an LC has a hint engine the longest rung that pre-preempts, pre-preempting (a hinted LC waits out
// a longer one).
func (c *Controller) safe() Arm {
	near := slices.MinFunc(c.set.ladder, func(x, y time.Duration) int { return cmp.Compare((x - c.opts.Safe).Abs(), (y - c.opts.Safe).Abs()) })
	a := c.set.clamp(Arm{BETimeslice: near})
	for c.set.prepreempt > 0 && a.BETimeslice > c.set.prepreempt && c.set.rung(a) > c.set.lo {
		a.BETimeslice = c.set.ladder[c.set.rung(a)-1]
	}
	a.Prepreempt = a.BETimeslice <= c.set.prepreempt
	return a
}

func (c *Controller) est(a Arm) *armEst {
	if c.arms[a] == nil {
		c.arms[a] = &armEst{lc: map[string]*est{}, shown: map[string]*est{}}
	}
	return c.arms[a]
}

// Observe takes one window's measurements, made under Arm, and decides the next arm.
func (c *Controller) Observe(o Observation) Decision {
	c.tick++
	c.since++
	c.wasPaused, c.pausing = c.pausing, false
	if o.Aligned && c.since == settle && !c.wasPaused {
		c.since++ // nothing before to settle (BE's drain after a pause is calibration's; engines learn a move at the push ending the window)
	}
	c.decay(math.Exp2(-1 / float64(c.opts.HalfLife)))
	c.set = arms{ladder: c.opts.Ladder, hi: len(c.opts.Ladder) - 1, gate: o.Gate, prepreempt: o.Prepreempt}
	for c.set.lo < c.set.hi && c.set.ladder[c.set.lo] < o.MinBETimeslice {
		c.set.lo++
	}
	for o.MaxBETimeslice > 0 && c.set.hi > c.set.lo && c.set.ladder[c.set.hi] > o.MaxBETimeslice {
		c.set.hi--
	}
	d := c.observe(o)
	if !d.PauseBE {
		c.cal.paused = 0
	}
	d.Arm, d.BETimeslice, d.Phase, d.Fallback = c.cur, c.cur.BETimeslice, c.phase, c.phase == phaseFallback
	d.PausedWindows, d.CalibrationWindows, d.Windows, d.Aligned = c.paused, c.calibrated, c.tick, o.Aligned
	return d
}

func (c *Controller) observe(o Observation) Decision {
	d, ss, needRef := c.judge(o)
	if c.missing++; len(ss) > 0 {
		c.missing = 0
	}
	to := c.set.clamp(c.cur)
	if c.tick == 1 {
		to = c.safe() // the arms offered are known from the first window
	}
	if to != c.cur {
		if d.Cause = CauseUnavailable; c.set.rung(c.cur) < c.set.lo {
			d.Cause = CauseFloor
		} else if c.set.rung(c.cur) > c.set.hi {
			d.Cause = CauseCeiling
		}
		return c.move(d, to, fmt.Sprintf("the arms allowed now put the search at %v", to))
	}
	if c.missing > 0 {
		d.Cause, c.limitSince = CauseNoSignal, 0
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
	if c.since > settle && !c.wasPaused {
		changed, hold := c.changed(ss)
		if changed {
			d.WorkloadChanged, d.Cause, d.Reason = true, CauseChange, "the LC's response changed under this arm: "
			if c.relearn() {
				return c.calibrate(d, o)
			}
			return c.stay(d, "what the other arms showed is forgotten; references are learnt again a HalfLife after the last time")
		}
		// Windows that may begin a change are not learnt: a young estimate
		// would follow a step and hide it; a burst that passes is not the arm's.
		if !hold {
			c.learn(ss, o.BEShare)
		}
	}
	// References are learnt again for a change seen within a HalfLife of the last time (owed), and
	// once no arm has met the objectives for a while, each time after twice as long: they may be of
	// a workload that was (a change that came as the search moved is seen by no arm).
	recheck := c.limitSince > 0 && c.tick-c.limitSince >= c.opts.HalfLife<<c.rechecks
	if recheck && c.resetRefs() || !recheck && c.owed && c.relearn() {
		if recheck {
			c.rechecks, c.owed = min(c.rechecks+1, maxBackoff), false
		}
		d.Cause, d.Reason = CauseCalibrate, "references learnt again, for a change or as no arm met the objectives: "
		return c.calibrate(d, o)
	}
	d = c.decide(d, o)
	switch _, ok := c.best(); {
	case ok: // an arm is known to meet them: the rechecks' back-off lapses
		c.limitSince, c.rechecks = 0, 0
	case c.worstMean(c.cur) <= 1:
		c.limitSince = 0
	case c.worstMean(c.cur) > 1: // not while the arm in force is unmeasured
		c.limitSince = cmp.Or(c.limitSince, c.tick)
	}
	return d
}

// sample counted, with its latency/target (NaN: reference not known).
type sample struct {
	LCSample
	ratio float64
}

// judge compares each sample with its objective and learns references from the window where it
// teaches them. It returns the samples that counted, and whether a reference of an LC in force is
// to be learnt.
func (c *Controller) judge(o Observation) (d Decision, ss []sample, needRef bool) {
	d = Decision{Worst: math.NaN(), BEShare: o.BEShare}
	for _, s := range o.LC {
		res := LCResult{Key: s.Key, Objective: s.Objective.String(), Latency: s.Latency, Requests: s.Requests, Ratio: math.NaN()}
		if s.Requests >= c.opts.MinRequests && s.Latency > 0 {
			ref := s.Standalone
			if s.Objective.Relative() && ref <= 0 {
				r := c.refFor(s)
				c.learnRef(r, s, c.wasPaused && o.BEPaused)
				ref, res.Reference = r.value, r.String(c)
			}
			if res.Target = s.Objective.Target(ref); res.Target > 0 {
				res.Ratio = float64(s.Latency) / float64(res.Target)
				c.active[objKey(s)] = c.tick
				if !(res.Ratio <= d.Worst) {
					d.Worst = res.Ratio
				}
			}
			ss = append(ss, sample{s, res.Ratio})
		}
		d.LC = append(d.LC, res)
	}
	maps.DeleteFunc(c.active, func(_ string, t int) bool { return c.tick-t >= c.opts.MissingAfter })
	for k, r := range c.refs {
		switch {
		case c.tick-r.last > refHalfLives*c.opts.HalfLife:
			delete(c.refs, k)
		case r.value == 0 && c.tick-r.last < c.opts.MissingAfter:
			needRef = true // an LC that counts now and then keeps its calibration going
		}
	}
	return d, ss, needRef
}

func objKey(s LCSample) string { return s.Key + " " + s.Objective.String() }

// learn folds the window into the arm in force: each objective's latency/target, each process's
// median, BE share.
func (c *Controller) learn(ss []sample, share float64) {
	e := c.est(c.cur)
	for _, s := range ss {
		if k := objKey(s.LCSample); !math.IsNaN(s.ratio) {
			c.learnScatter(k, get(e.lc, k), s.ratio)
			e.lc[k].Add(s.ratio)
		}
	}
	for k, x := range shownOf(ss) {
		c.learnScatter(k+" shown", get(e.shown, k), x)
		e.shown[k].Add(x)
	}
	e.share.Add(share)
}

// shownOf is what each process showed this window, in seconds: its median, else its lowest quantile
// judged.
func shownOf(ss []sample) map[string]float64 {
	out := map[string]float64{}
	for _, s := range ss {
		x := cmp.Or(s.Median, s.Latency).Seconds()
		if v, ok := out[s.Key]; !math.IsNaN(s.ratio) && (!ok || s.Median <= 0 && x < v) {
			out[s.Key] = x
		}
	}
	return out
}

// changed runs the change detector on the window's residuals against the arm in force, and on a
// change forgets every other arm: they showed the workload that was. hold: the window may begin a
// change (past a deviation and a half, the sum half way), where a smaller shift is followed.
func (c *Controller) changed(ss []sample) (changed, hold bool) {
	z, n := math.NaN(), 0
	for k, x := range shownOf(ss) {
		if s := c.est(c.cur).shown[k]; known(s) && s.W >= levelWindows {
			n++
			if r := (x - s.Mean()) / max(s.SD(c.scatterOf(k+" shown"), priorWindows), leastChange*s.Mean()); !(math.Abs(r) <= math.Abs(z)) {
				z = r
			}
		}
	}
	if math.IsNaN(z) {
		return false, false // an arm not measured enough yet
	}
	most := c.opts.Threshold/changeWindows + drift
	z = max(-most, min(most, stats.MostDeviant(z, n)))
	c.cusum = [2]float64{max(0, c.cusum[0]+z-drift), max(0, c.cusum[1]-z-drift)}
	if changed = !(max(c.cusum[0], c.cusum[1]) < c.opts.Threshold); changed {
		c.forget()
	}
	return changed, math.Abs(z) > 1+drift && max(c.cusum[0], c.cusum[1]) >= c.opts.Threshold/changeWindows
}

// forget drops what every arm showed, their back-offs and the rechecks': a workload that was.
func (c *Controller) forget() {
	c.cusum, c.exploring, c.arms, c.scatter, c.left, c.rechecks = [2]float64{}, false, map[Arm]*armEst{}, map[string]*est{}, map[Arm]backoff{}, 0
}

// relearn has the references of the LCs in force learnt again after a change, at most once a
// HalfLife (what it costs BE is bounded so), else owes it: a stale reference is kept for good.
func (c *Controller) relearn() bool {
	if c.owed = c.tick-c.relearnt < c.opts.HalfLife; !c.owed && c.resetRefs() {
		c.relearnt = c.tick
	}
	return c.relearnt == c.tick
}

// resetRefs has the references of the LCs in force learnt again, each keeping its value to compare
// with the new one; it reports whether there were any. Reset, not dropped: the pause begins now.
func (c *Controller) resetRefs() (any bool) {
	for _, r := range c.refs {
		if c.tick-r.last < c.opts.MissingAfter {
			r.was, r.value, r.vals, r.medians, r.far, any = cmp.Or(r.value, r.was), 0, nil, nil, 0, true
		}
	}
	return any
}

func (c *Controller) move(d Decision, to Arm, why string) Decision {
	if d.Changed = to != c.cur; d.Changed {
		c.cur, c.since = to, 0
	}
	return c.stay(d, why)
}

func (c *Controller) stay(d Decision, why string) Decision { d.Reason += why; return d }
