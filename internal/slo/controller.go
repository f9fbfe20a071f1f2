// Package slo chooses, per GPU, the Arm (a BE timeslice, the request gate, pre-preemption) that gives best-effort
// (BE) work the most GPU every latency-critical (LC) objective allows, from measured LC latency and BE progress;
// the controller is a state machine over Phase (docs/SLO.md holds its transition table).
package slo

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// DefaultLadder: the fastest yield, the class default, and longer ones a launch-bound LC may need.
var DefaultLadder = []time.Duration{
	time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond,
}

// Options tune a Controller; zero fields take the defaults in brackets.
type Options struct {
	Ladder   []time.Duration // ascending BE timeslices [DefaultLadder]
	Static   time.Duration   // the policy's own BE timeslice: the static arm, always offered [200us]
	Safe     time.Duration   // the BE timeslice while LC latency is unknown [Static]
	Window   time.Duration   // one observation's length: the budgets are in time [1s]
	NoPause  bool            // BE cannot be stopped: references are learnt beside it
	PauseMax int             // windows one pause lasts at most, the first draining BE's queued work [6]
}

// The model's numbers, each with why this value.
const (
	minSamples    = 20               // requests (tokens for tpot_) one measurement needs: windows accumulate until it has them
	minRequests   = 10               // requests one measurement spans at least: a request's token intervals move together
	halfLife      = 120              // windows that halve what an arm showed (workloads drift)
	z             = 2                // bounds' width in standard errors
	margin        = 0.02             // BE share a move for BE's sake must add (a training BE scatters by a few points)
	maxAccumulate = 30               // windows one measurement is expected within (a request a second counts in 20): undecided for two, an arm is left
	idleAfter     = 10               // windows with no LC sample before the safe arm (a slow LC is quiet a few); of pauses, before its reference is learnt beside BE
	budget        = 0.1              // of any minute BE may be stopped to learn LCs alone; of windows a settled search explores
	stableGap     = 30 * time.Second // once converged, least time from a change to another but to protect the LC: a steady LC that meets sees a change at most this often
	priorWeight   = 2                // measurements the prior scatter weighs as: two that happen to agree do not make a noisy LC steady
	priorScatter  = 0.1              // a measurement's relative scatter until learnt; how much better than a measured neighbour an unmeasured arm may be
	gateShare     = 0.75             // BE's share with the gate over without, until measured (only the order counts)
)

// LCSample is one LC process's latency over one window against one of its objectives.
type LCSample struct {
	Key        string // the process ("pid/start"): a new key, a new process
	Owner      string // whose budget its calibration draws on (uid, or pod)
	Objective  objective.Objective
	Points     []stats.Weighted // the window's own values of the objective's metric, or its quantile over its count
	Requests   int              // the requests Points come from, where one gives several (tokens); 0: each weight is one
	Standalone time.Duration    // the reference, if known; else it is learnt
	GateTraps  bool             // under the gate it does not run as alone: its launch probes stay on through its requests, or its engine gates itself
}

// Observation is one window under the arm in force, and what may be chosen next.
type Observation struct {
	LC             []LCSample
	BEShare        float64       // BE progress over BE alone; NaN: not measured
	MinBEShare     float64       // no arm known to give BE less is chosen; 0: none
	MinBETimeslice time.Duration // below it two BE on a GPU spend it switching; 0: the ladder's first
	Gate           bool          // the gate may hold BE for these LCs
	Prepreempt     time.Duration // an LC's engine may pre-preempt up to this BE timeslice; 0: no
	BEPaused       bool          // every BE was stopped through the window, as asked
	BEIdle         bool          // no BE launched work through the window of its own accord: the LC ran alone
	Aligned        bool          // every LC window began as the last decision took effect: the one after a move is the new arm's
}

// Causes of a decision (metric label values); Reason says the rest.
const (
	CauseWithin      = "within"       // kept: it meets the objectives, or is being measured
	CauseNoSignal    = "no_signal"    // no LC latency: kept, or the safe arm
	CauseViolation   = "violation"    // it misses an objective (its lower bound; or its mean, on a measurement made exploring it or over 60 windows and two measurements held): left
	CauseExplore     = "explore"      // an arm that might meet them with more BE tried
	CauseKnownBetter = "known_better" // an arm known to meet them gives BE more
	CauseAtLimit     = "at_limit"     // no arm known to meet them: the closest
	CauseCalibrate   = "calibrate"    // a reference learnt
	CauseFloor       = "floor"        // raised to the shortest BE timeslice allowed
	CauseUnavailable = "unavailable"  // the gate or pre-preemption no longer offered
)

// PhaseKind names a controller's phase.
type PhaseKind uint8

const (
	Fallback    PhaseKind = iota // no LC latency: the safe arm
	Calibrating                  // learning references: BE stopped (within its budget), idle, or the shortest arm
	Settled                      // on the arm with the most BE known to meet every objective (or measuring it)
	Exploring                    // measuring an arm that might meet them with more BE
	Recovering                   // the arm in force missed: stepping toward the LC until one meets
)

func (k PhaseKind) String() string {
	return [...]string{"fallback", "calibrating", "settled", "exploring", "recovering"}[k]
}

// Phase is where a controller is, with the data of that phase.
type Phase struct {
	Kind  PhaseKind
	Since int  // the window it began in
	From  Arm  // Calibrating, Exploring: the arm it goes back to
	Pause int  // Calibrating: windows of the pause in force (0: BE runs)
	Limit bool // Settled, Exploring from there: no arm is known to meet every objective; the closest is held
}

// LCResult is a sample against its objective.
type LCResult struct {
	Key, Objective  string
	Latency, Target time.Duration // Latency: the last measurement's (0: none yet); Target: the objective's in force (0: reference not known yet)
	Reference       string        // what a relative objective is measured against
	Ratio           float64       // the last measurement's latency over the target it was judged by; NaN: none
	Pending, Made   int           // samples accumulated toward the next measurement; measurements made
	Counted         bool          // a measurement completed this window
}

// Decision is the answer to one observation.
type Decision struct {
	Arm                                        Arm
	Phase, Cause, Reason, Bound                string // Bound: at the limit, what stands in the way
	LC                                         []LCResult
	Worst, BEShare                             float64   // Worst: the highest latency/target measured; NaN: none
	BEBelowMinimum                             bool      // the arm held gives BE less than its minimum
	Changed, PauseBE, Aligned, Converged       bool      // PauseBE: stop every BE through the next window; Aligned: Observation.Aligned; Converged: explorations budgeted
	PausedWindows, CalibrationWindows, Windows int       // what references cost: windows BE was stopped, of calibration, of all
	Arms                                       []ArmView // the frontier: the arm in force and each measured or backed off, in the ladder's order
}

// ArmView is what the search knows of one arm, against the worst of the objectives in force.
type ArmView struct {
	Arm                    Arm
	Worst, Lo, Hi, BEShare float64 // latency/target: the mean (NaN: not known) and its bounds; BE's share measured (NaN: not)
	Verdict                string  // "meets", "misses" or "might meet" every LC objective, then ", BE under its minimum" where known to
	RetryIn                int     // windows its back-off from exploring has left (0: none; the arm in force none)
}

// Controller chooses an arm per window. Not safe for concurrent use.
type Controller struct {
	opts               Options
	set                arms
	tick               int
	phase              Phase
	cur                Arm
	moved, missed      int            // the window of the last decision that changed the arm; the last such that left one missing (a violation, at the limit)
	counted            map[string]int // measurements made under the arm in force since it was taken, by objective key (its estimate may predate them)
	arms               map[Arm]*armEst
	scatter            map[string]*stats.Scatter // one measurement's, by objective key: each one's own errors and how far each fell from its arm's before
	acc                map[string]*accum         // measurements accumulating under cur, by objective key
	active             map[string]int            // objective keys by the window they last gave a sample
	refs               map[string]*reference
	left               map[Arm]backoff
	quiet, idleAt      int              // windows in a row without an LC sample; the last BE idled through of its own accord, its LCs as alone
	minShare           float64          // no arm chosen may be known to give BE less (Observation.MinBEShare)
	stops              map[int][]string // the windows of the last minute BE was stopped through, and the owners of the LCs it was for
	nextExplore        int              // the first window a settled search may explore in (0: not converged yet: not held back)
	budgeted           int              // the first window the budget allows an exploration in after the last (before convergence too)
	paused, calibrated int
}

// New returns a controller at the safe arm.
func New(opts Options) (*Controller, error) {
	if len(opts.Ladder) == 0 {
		opts.Ladder = DefaultLadder
	}
	opts.Static = cmp.Or(opts.Static, 200*time.Microsecond)
	opts.Safe, opts.Window, opts.PauseMax = cmp.Or(opts.Safe, opts.Static), cmp.Or(opts.Window, time.Second), cmp.Or(opts.PauseMax, 6)
	for i, ts := range opts.Ladder {
		if ts < time.Microsecond || ts%time.Microsecond != 0 || i > 0 && ts <= opts.Ladder[i-1] {
			return nil, fmt.Errorf("%w: ladder %v: want ascending whole microseconds >= 1us", objective.ErrInvalid, opts.Ladder)
		}
	}
	opts.Ladder = slices.Compact(slices.Sorted(slices.Values(append(slices.Clip(opts.Ladder), opts.Static)))) // the static arm is a rung of its own
	c := &Controller{opts: opts, arms: map[Arm]*armEst{}, acc: map[string]*accum{}, active: map[string]int{},
		refs: map[string]*reference{}, left: map[Arm]backoff{}, stops: map[int][]string{}, counted: map[string]int{}, scatter: map[string]*stats.Scatter{}}
	c.offer(Observation{})
	c.cur, c.phase = c.safe(), Phase{Kind: Settled}
	return c, nil
}

// Arm is the arm in force.
func (c *Controller) Arm() Arm { return c.cur }

// offer takes what o allows: the rungs from its floor, the gate, pre-preemption, BE's minimum share.
func (c *Controller) offer(o Observation) {
	lo, _ := slices.BinarySearch(c.opts.Ladder, o.MinBETimeslice) // the first rung at the floor or above, else the last
	c.set = arms{ladder: c.opts.Ladder, lo: min(lo, len(c.opts.Ladder)-1), gate: o.Gate, prepreempt: o.Prepreempt, static: Arm{BETimeslice: c.opts.Static}}
	c.minShare = o.MinBEShare
}

// safe is the arm while LC latency is unknown: the rung nearest Safe, no gate; with a hint engine, the longest rung that pre-preempts.
func (c *Controller) safe() Arm {
	near := slices.MinFunc(c.set.ladder, func(x, y time.Duration) int { return cmp.Compare((x - c.opts.Safe).Abs(), (y - c.opts.Safe).Abs()) })
	a := c.set.clamp(Arm{BETimeslice: near})
	for c.set.prepreempt > 0 && a.BETimeslice > c.set.prepreempt && c.set.rung(a) > c.set.lo {
		a.BETimeslice = c.set.ladder[c.set.rung(a)-1]
	}
	a.Prepreempt = a.BETimeslice <= c.set.prepreempt
	return a
}

// minuteWindows is how many windows make a minute, the span of the pause budget.
func (c *Controller) minuteWindows() int { return max(1, int(time.Minute/c.opts.Window)) }

// Observe takes one window's measurements, made under Arm, and decides the next arm.
func (c *Controller) Observe(o Observation) Decision {
	c.tick++
	c.decay(aged(1))
	c.offer(o)
	d := Decision{Worst: math.NaN(), BEShare: o.BEShare, Aligned: o.Aligned}
	c.measure(&d, o)
	c.step(&d, o)
	if c.phase.Kind == Calibrating {
		c.calibrated++
	}
	d.Arm, d.Phase, d.BEBelowMinimum, d.Converged = c.cur, c.phase.Kind.String(), c.short(c.cur), c.nextExplore > 0
	d.PausedWindows, d.CalibrationWindows, d.Windows, d.Arms = c.paused, c.calibrated, c.tick, c.frontier()
	return d
}

// frontier views the arm in force and each arm known by its measurements or backed off.
func (c *Controller) frontier() (out []ArmView) {
	for _, a := range c.set.all() {
		out = append(out, c.view(a))
	}
	return slices.DeleteFunc(out, func(v ArmView) bool {
		return v.Arm != c.cur && math.IsNaN(v.Worst) && math.IsNaN(v.BEShare) && v.RetryIn == 0
	})
}

// view is what the search knows of a; its bounds are the worst of every objective's (one's may come from a neighbour's).
func (c *Controller) view(a Arm) ArmView {
	v := ArmView{Arm: a, Worst: c.worstMean(a), BEShare: map[bool]float64{true: c.share(a), false: math.NaN()}[known(&c.est(a).share)],
		Verdict: [...]string{"might meet", "meets", "misses"}[c.lcFeasibility(a)] + map[bool]string{true: ", BE under its minimum"}[c.short(a)], RetryIn: map[bool]int{false: max(0, c.left[a].until-c.tick)}[a == c.cur]}
	v.Lo, v.Hi = c.bounds(a)
	return v
}

// bounds are a's worst lower and upper bounds over every objective.
func (c *Controller) bounds(a Arm) (lo, hi float64) {
	lo, hi = math.Inf(-1), math.Inf(-1)
	for k := range c.active {
		l, h := c.lcBounds(a, k)
		lo, hi = max(lo, l), max(hi, h)
	}
	return lo, hi
}

// step is the one transition function: from the phase in force and the window, the next phase and arm.
func (c *Controller) step(d *Decision, o Observation) {
	k := c.phase.Kind
	switch to := map[bool]Arm{true: c.safe(), false: c.set.clamp(c.cur)}[c.tick == 1]; { // the arms offered are known from the first window
	case to != c.cur:
		c.to(d, map[bool]string{true: CauseFloor, false: CauseUnavailable}[c.tick > 1 && c.set.rung(c.cur) < c.set.lo], to, fmt.Sprintf("the arms allowed now put the search at %v", to))
	case c.quiet >= idleAfter && k != Fallback:
		c.enter(Phase{Kind: Fallback})
		c.to(d, CauseNoSignal, c.safe(), fmt.Sprintf("no LC latency for %d windows: the safe arm", c.quiet))
	case k == Fallback && c.quiet == 0:
		c.enter(Phase{Kind: Settled})
		c.keep(d, CauseNoSignal, "LC latency again: measuring the arm in force")
	case c.quiet > 0 && k != Calibrating: // nothing new to decide on (a slow LC's windows between requests)
		c.keep(d, CauseNoSignal, "no LC latency this window")
	case k == Calibrating || c.calibrationDue():
		if from := map[bool]Arm{true: c.phase.From, false: c.cur}[k == Exploring]; k != Calibrating {
			c.enter(Phase{Kind: Calibrating, From: from}) // an exploration cut short goes back where it came from
		}
		c.calibrate(d, o)
	case k == Settled:
		c.settled(d)
	case k == Exploring:
		c.exploring(d)
	default: // Recovering
		switch c.feasibility(c.cur) {
		case feasible:
			c.enter(Phase{Kind: Settled})
			c.keep(d, CauseWithin, fmt.Sprintf("%v meets every objective", c.cur))
		case infeasible:
			c.rescue(d)
		default:
			c.undecided(d)
		}
	}
}

// exploring measures the arm explored until it meets, misses, or is undecided for two measurements; one missing on average once measured
// anew is left then: adopting takes an interval, leaving does not (where nothing meets, all may); once converged, within stableGap only by its interval.
func (c *Controller) exploring(d *Decision) {
	switch f := c.feasibility(c.cur); {
	case f == infeasible:
		c.backOff(c.cur)
		why := map[bool]string{false: fmt.Sprintf("LC at %.2fx", c.worstMean(c.cur)), true: fmt.Sprintf("BE at %.0f%%, under its minimum", 100*c.share(c.cur))}[c.short(c.cur)]
		c.endExplore(d, CauseViolation, fmt.Sprintf("%v misses an objective (%s): back to %v", c.cur, why, c.phase.From))
	case c.steadying():
		c.keep(d, CauseExplore, c.measuring())
	case f == feasible && decides(c.evidence(c.cur)):
		c.endExplore(d, CauseWithin, fmt.Sprintf("%v meets every objective with %s; %v %s them with %s%s", c.cur, c.shareText(c.cur), c.phase.From,
			[...]string{"might meet", "meets", "misses"}[c.lcFeasibility(c.phase.From)], c.shareText(c.phase.From), map[bool]string{true: ", under BE's minimum"}[c.short(c.phase.From)]))
	case c.missesOn(1) && !c.phase.Limit:
		c.backOff(c.cur)
		c.endExplore(d, CauseViolation, fmt.Sprintf("%v misses on average (LC at %.2fx): back to %v", c.cur, c.worstMean(c.cur), c.phase.From))
	case c.tick-c.phase.Since >= 2*maxAccumulate:
		c.backOff(c.cur)
		c.endExplore(d, CauseWithin, fmt.Sprintf("%v left undecided after %d windows: back to %v", c.cur, c.tick-c.phase.Since, c.phase.From))
	default:
		c.keep(d, CauseExplore, c.measuring())
	}
}

// settled keeps the arm in force while it meets, leaves it when it misses or a measured arm gives BE more, explores within the budget.
func (c *Controller) settled(d *Decision) {
	f := c.feasibility(c.cur)
	if c.phase.Limit = c.phase.Limit && f != feasible; f == infeasible && !c.phase.Limit {
		c.rescue(d)
		return
	}
	held := c.steadying() && c.worstMean(c.cur) <= 1 // meeting on its mean (at the limit, atLimit moves): an interval that straddles is no miss to protect from
	if best, ok := c.best(); ok && best != c.cur && !held && (f != feasible || c.share(best) > c.share(c.cur)+margin) {
		why := map[bool]string{true: fmt.Sprintf("%v is not known to meet every objective (LC at %.2fx): ", c.cur, c.worstMean(c.cur))}[f != feasible]
		c.to(d, CauseKnownBetter, best, why+fmt.Sprintf("%v meets every objective with %s", best, c.shareText(best)))
		return
	}
	if f == possible && !(c.worstMean(c.cur) <= 1) && !c.phase.Limit {
		c.undecided(d)
		return
	}
	a, ok := c.candidate()
	if c.nextExplore == 0 && (!ok || c.left[a].n > 0) {
		c.nextExplore = max(c.tick, c.moved+int(stableGap/c.opts.Window), c.budgeted) // converged (nothing to explore, or an arm explored again): explorations budgeted, the last one's counted, the first stableGap after the last change
	}
	if ok && c.tick >= c.nextExplore && !c.steadying() && (c.missed == 0 || c.tick-c.missed >= int(stableGap/c.opts.Window)) { // after a miss, stableGap before the next exploration (two more changes)
		c.enter(Phase{Kind: Exploring, From: c.cur, Limit: c.phase.Limit})
		c.to(d, CauseExplore, a, fmt.Sprintf("LC at %.2fx its objective under %v: trying %v, which might meet it with %s", c.worstMean(c.cur), c.cur, a, c.shareText(a)))
		return
	}
	if c.phase.Limit { // an arm missing is rescued above, and one known to meet is taken
		c.atLimit(d)
		return
	}
	c.keep(d, CauseWithin, "within objectives")
}

// missesOn: every objective is measured under the arm in force, and one missing on its mean has n measurements of its own there.
func (c *Controller) missesOn(n int) bool {
	return c.worstMean(c.cur) > 1 && slices.ContainsFunc(slices.Collect(maps.Keys(c.active)), func(k string) bool {
		return c.counted[k] >= n && c.est(c.cur).lc[k].Mean() > 1
	})
}

// steadying: converged, and within stableGap of the last change, when only the LC's protection changes the arm again.
func (c *Controller) steadying() bool {
	return c.nextExplore > 0 && c.tick-c.moved < int(stableGap/c.opts.Window)
}

// undecided keeps measuring an arm that may miss, and leaves it once it has missed on average over two measurements' span and two of its own.
func (c *Controller) undecided(d *Decision) {
	if c.tick-c.moved >= 2*maxAccumulate && c.missesOn(2) {
		c.rescue(d)
		return
	}
	c.keep(d, CauseWithin, c.measuring())
}

func (c *Controller) measuring() string {
	m := c.worstMean(c.cur)
	return fmt.Sprintf("measuring %v: %s", c.cur, map[bool]string{true: "no measurement of it yet", false: fmt.Sprintf("LC at %.2fx its objective so far", m)}[math.IsNaN(m)])
}

// endExplore settles on the arm explored if it is the better, else where it came from.
func (c *Controller) endExplore(d *Decision, cause, why string) {
	from, n := c.phase.From, c.tick-c.phase.Since
	c.enter(Phase{Kind: Settled, Limit: c.phase.Limit && c.feasibility(c.cur) != feasible})
	c.budgeted = c.tick + max(int(math.Ceil(float64(n)*(1-budget)/budget)), int(stableGap/c.opts.Window)) // what it took, nine times over, and stableGap at least
	if c.nextExplore > 0 {
		c.nextExplore = c.budgeted
	}
	back := c.feasibility(c.cur) != feasible || c.feasibility(from) == feasible && c.share(from) >= c.share(c.cur)
	c.to(d, cause, map[bool]Arm{true: c.set.clamp(from), false: c.cur}[back], why)
}

// rescue leaves a missing arm for the best known to meet, else the most BE that might meet and protects the LC (BE, below its minimum), else the closest.
func (c *Controller) rescue(d *Decision) {
	miss := map[bool]string{false: fmt.Sprintf("LC at %.2fx its objective under %v: ", c.worstMean(c.cur), c.cur),
		true: fmt.Sprintf("BE at %.0f%% under %v, below its minimum: ", 100*c.share(c.cur), c.cur)}[c.short(c.cur)]
	c.backOff(c.cur)
	if best, ok := c.best(); ok {
		c.enter(Phase{Kind: Settled})
		c.to(d, CauseViolation, best, miss+fmt.Sprintf("to %v, which meets every objective", best))
		return
	}
	toBE := c.short(c.cur) && c.lcFeasibility(c.cur) != infeasible
	if to, found := c.most(func(a Arm) bool {
		return (toBE && c.better(a, c.cur) || !toBE && protects(c.set, c.cur, a)) && c.feasibility(a) == possible
	}); found {
		c.enter(Phase{Kind: Recovering})
		c.to(d, CauseViolation, to, miss+fmt.Sprintf("trying %v, which might meet them", to))
		return
	}
	c.enter(Phase{Kind: Settled, Limit: true})
	c.atLimit(d)
}

// atLimit holds the closest arm (most BE) and names what stands in the way; it leaves the arm in force only for one closer beyond both intervals, or as
// close with BE more by margin (noise reorders arms that miss alike), and not while its aged estimate is measured anew (one never measured is a guess).
func (c *Controller) atLimit(d *Decision) {
	a := c.closest()
	aged := slices.ContainsFunc(slices.Collect(maps.Keys(c.active)), func(k string) bool { e := c.est(c.cur).lc[k]; return e != nil && !known(e) })
	measuring := aged && !c.short(c.cur) && math.IsNaN(c.worstMean(c.cur)) && c.tick-c.moved < 2*maxAccumulate
	if measuring || c.short(a) == c.short(c.cur) && !c.clearlyCloser(a, c.cur) && !c.better(a, c.cur) {
		a = c.cur
	}
	d.Bound = map[bool]string{false: fmt.Sprintf("no arm meets every objective: %v comes closest (LC at %.2fx)", a, c.worstMean(a)),
		true: fmt.Sprintf("no arm meets every objective: %v, the closest when last measured, is measured anew", a)}[measuring]
	if slices.ContainsFunc(c.set.all(), func(b Arm) bool { return c.short(b) && c.lcFeasibility(b) == feasible }) {
		d.Bound += fmt.Sprintf("; the arms that meet them give BE less than its minimum share, %.0f%%", 100*c.minShare)
	}
	keys, missedAlone := slices.Sorted(maps.Keys(c.acc)), false
	for _, k := range keys {
		if m := c.acc[k]; m.Target > 0 && m.ref > m.Target { // an absolute bound the LC misses alone
			d.Bound += fmt.Sprintf("; this LC alone runs at %v, over its objective's %v: no arm meets it however BE is held", m.ref.Round(time.Microsecond), m.Target)
			missedAlone = true
		}
	}
	// Else what one switch per request (the vocabulary's figure; it only names the bound) costs an LC alone, where it fills the room its objective leaves.
	if i := slices.IndexFunc(keys, func(k string) bool { m := c.acc[k]; return m.ref > 0 && m.Target-m.ref <= class.SwitchTime }); i >= 0 && !missedAlone {
		ref := c.acc[keys[i]].ref
		d.Bound += fmt.Sprintf("; one BE-to-LC switch (~%v) per request is %.0f%% of this LC's %v alone, which no timeslice removes (pre-preemption hints would)",
			class.SwitchTime, 100*float64(class.SwitchTime)/float64(ref), ref.Round(time.Microsecond))
	}
	c.to(d, CauseAtLimit, a, d.Bound)
}

func (c *Controller) enter(p Phase) { p.Since = c.tick; c.phase = p }

// to decides arm a for cause; keep the arm in force.
func (c *Controller) keep(d *Decision, cause, why string) { c.to(d, cause, c.cur, why) }
func (c *Controller) to(d *Decision, cause string, a Arm, why string) {
	d.Cause, d.Reason = cause, why
	if a != c.cur {
		d.Changed, c.cur, c.moved = true, a, c.tick
		clear(c.counted)
		if cause == CauseViolation || cause == CauseAtLimit {
			c.missed = c.tick
		}
		for _, m := range c.acc { // a measurement is of one arm (an arm replaced mid-exploration too)
			m.restart()
		}
	}
}

type backoff struct{ n, until int } // times left, and when it may be explored again

// backOff holds arm a back from exploring, each time twice as long until that outlasts a measurement of it (nothing would remember why).
func (c *Controller) backOff(a Arm) {
	n := c.left[a].n + 1
	if n > 1 && forgotten(aged(float64(int(halfLife)<<(n-2)))) {
		n--
	}
	c.left[a] = backoff{n, c.tick + halfLife<<(n-1)}
}

// best is the arm known to meet every objective that gives BE the most.
func (c *Controller) best() (Arm, bool) {
	return c.most(func(a Arm) bool { return c.feasibility(a) == feasible && decides(c.evidence(a)) })
}

// most is the allowed arm where ok holds with the most BE (on a tie the one in force, else the first).
func (c *Controller) most(ok func(Arm) bool) (best Arm, found bool) {
	for _, a := range c.set.all() {
		if ok(a) && (!found || c.share(a) > c.share(best) || a == c.cur && c.share(a) == c.share(best)) {
			best, found = a, true
		}
	}
	return best, found
}

func (c *Controller) short(a Arm) bool {
	return c.minShare > 0 && known(&c.est(a).share) && c.share(a) < c.minShare
}

// candidate is the arm to explore expected to give BE more than the one in force by margin (at the limit: protecting the LC more,
// the workload may have eased): one that might meet, not backed off, measured or next to the arm in force or one shown to meet.
func (c *Controller) candidate() (Arm, bool) {
	return c.most(func(a Arm) bool {
		// the search widens through arms shown to meet (not past one undecided or missing); at the limit, through every arm measured
		frontier := c.evidence(a) > 0 || slices.ContainsFunc(c.set.neighbours(a), func(n Arm) bool {
			return n == c.cur || c.feasibility(n) == feasible || c.phase.Limit && decides(c.evidence(n))
		})
		gain := c.phase.Limit && protects(c.set, c.cur, a) || !c.phase.Limit && c.better(a, c.cur)
		return a != c.cur && c.tick >= c.left[a].until && frontier && c.feasibility(a) == possible && gain
	})
}

// closest is the measured arm missing by least (most BE within a quarter of the prior scatter), none short of BE's minimum if one isn't; else the arm in force.
func (c *Controller) closest() Arm {
	best, m := c.cur, c.worstMean(c.cur)
	for _, a := range c.set.all() {
		x, short := c.worstMean(a), c.short(a)
		closer := math.IsNaN(m) || x < m || x <= m*(1+priorScatter/4) && c.share(a) > c.share(best)
		if !math.IsNaN(x) && (short == c.short(best) && closer || c.short(best) && !short) {
			best, m = a, x
		}
	}
	return best
}

// clearlyCloser: b is unmeasured, or every objective's upper bound under a is below b's worst lower one.
func (c *Controller) clearlyCloser(a, b Arm) bool {
	_, hi := c.bounds(a)
	lo, _ := c.bounds(b)
	return math.IsNaN(c.worstMean(b)) || hi < lo
}

// better reports whether a is expected to give BE more than b: by margin where both are measured; else by the order,
// and of two it does not tell apart, the one that holds BE less (a spinner takes a little).
func (c *Controller) better(a, b Arm) bool {
	if known(&c.est(a).share) && known(&c.est(b).share) {
		return c.share(a) > c.share(b)+margin
	}
	return !protects(c.set, b, a) && (c.share(a) > c.share(b) || c.share(a) == c.share(b) && protects(c.set, a, b))
}

func (c *Controller) shareText(a Arm) string {
	e := &c.est(a).share
	return map[bool]string{true: fmt.Sprintf("BE at %.1f%%", 100*e.Mean()), false: "more BE share expected"}[known(e)]
}
