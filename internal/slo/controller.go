package slo

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// DefaultLadder is the BE timeslices the controller chooses among: the
// fastest yield (1 us), the class default (200 us), and the settings that
// were best for launch-bound LC on the H100 (500 us - 2 ms); 3 ms and more
// cost eager LC 17% at p50 there.
var DefaultLadder = []time.Duration{
	time.Microsecond, 50 * time.Microsecond, 200 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 3 * time.Millisecond,
}

// Options tune a Controller. The zero value gives the defaults.
type Options struct {
	// Ladder is the ascending list of BE timeslices to choose among.
	Ladder []time.Duration
	// Safe is the rung used until LC signals arrive and when they go
	// missing: the BE class default (200 us) unless set.
	Safe time.Duration
	// MinDwell is how many observations a setting is kept before the
	// next change (each change is one GSP RPC per BE group, 150-330 us,
	// and the first observation after a change is discarded as settling).
	// Default 2.
	MinDwell int
	// Violations is how many windows under a setting (after its settling
	// window) the controller needs before it can judge that the setting
	// misses an objective; ViolationWindow is how many of the most recent
	// it judges by. A setting misses when the mean of those windows' worst
	// LC latency/target is above 1 by more than violationZ standard
	// errors: one noisy window is not a violation, and an LC whose windows
	// scatter (an eager PyTorch LC's 1 s p50 spans +-20% under one
	// setting) needs more of them to be judged than a steady one. Default
	// 2 and 16.
	Violations      int
	ViolationWindow int
	// Headroom is how far under its objective every LC must be (as a
	// fraction of the target: 0.03 = 3%) before the controller tries a
	// longer BE timeslice. Default 0.03.
	Headroom float64
	// ExploreAfter is how many observations a good setting is kept before
	// the next longer one is tried. Default 3.
	ExploreAfter int
	// Stale is how many observations what was learnt of a rung is trusted
	// after it was last visited. Default 30.
	Stale int
	// Surprise is how far one window may stray from what the current rung
	// has shown (BE share in absolute points, LC latency/target relative)
	// before, three times in a row (or once by twice as much), everything
	// learnt of the other rungs is forgotten: the workload changed.
	// Default 0.08.
	Surprise float64
	// SkipBad is how many longer rungs known to miss an objective the
	// search may pass to try the next one beyond them (LC latency is not
	// monotonic in the BE timeslice; see nextToTry), and how many mild
	// or undecided misses in a row it may pass (passing). Default 2; -1:
	// none.
	SkipBad int
	// Forget is how many observations a rung found too slow for LC is
	// left alone before it is tried again; it doubles each time the rung
	// fails again (up to 16x). Default 8.
	Forget int
	// MissingAfter is how many observations without LC latency send the
	// controller to Safe. Default 3.
	MissingAfter int
	// MinRequests is how many LC requests an observation needs to count.
	// Default 20.
	MinRequests int
	// BaselineWindow is how many observations an LC's latencies are kept
	// for its baseline (see baseline). Default 120.
	BaselineWindow int
	// PauseWindows, when positive, is how many windows an LC's baseline
	// is learnt from with BE stopped (Decision.PauseBE), its standalone
	// latency, rather than beside BE under the shortest rung (0). The
	// pause lasts one window more (the first mixes) and is made again
	// when those windows age out (5 x BaselineWindow), or when the LC's
	// behaviour changes. Where BE cannot be kept stopped
	// (Observation.BEPaused false twice), the controller calibrates under
	// the shortest rung from then on.
	PauseWindows int
}

func (o Options) withDefaults() Options {
	if len(o.Ladder) == 0 {
		o.Ladder = DefaultLadder
	}
	if o.Safe <= 0 {
		o.Safe = 200 * time.Microsecond
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&o.MinDwell, 2)
	def(&o.Violations, 2)
	def(&o.ViolationWindow, 16)
	o.Violations = min(o.Violations, o.ViolationWindow)
	def(&o.ExploreAfter, 3)
	def(&o.Stale, 30)
	def(&o.Forget, 8)
	switch {
	case o.SkipBad == 0:
		o.SkipBad = 2
	case o.SkipBad < 0:
		o.SkipBad = 0
	}
	def(&o.MissingAfter, 3)
	def(&o.MinRequests, 20)
	def(&o.BaselineWindow, 120)
	if o.Headroom <= 0 {
		o.Headroom = 0.03
	}
	if o.Surprise <= 0 {
		o.Surprise = 0.08
	}
	return o
}

// LCSample is one LC process's latency over one observation window,
// against one of its objectives (a process with two objectives gives two
// samples with the same Key).
type LCSample struct {
	// Key names the process (e.g. "pid/starttime").
	Key       string
	Objective Objective
	// Latency is the window's latency at Objective.Quantile.
	Latency time.Duration
	// Standalone, when known (e.g. measured with BE idle), is the
	// baseline; otherwise the controller keeps the lowest latency seen.
	Standalone time.Duration
	Requests   int
	// Median is the window's median latency (0: not reported). With a
	// tail objective (above p50) a workload change is read from it, on
	// the objective's scale, rather than from the window's own tail: one
	// 1 s window of a synthetic LC on the H100 had 285 requests, its p99
	// their third-worst, which ranged 42-254 us from window to window
	// with BE stopped, and three such windows in a row were taken for a
	// new workload (the pause that followed cost BE its share for 3 s of
	// a 10 s measurement). A graph LC turned eager, or a new request
	// rate, moves the median; a setting that delays a few requests is
	// what the tail objective itself judges.
	Median time.Duration
}

// Observation is what was measured over one window under the setting in
// force (the Controller's Current at the window's start).
type Observation struct {
	LC []LCSample
	// BEShare is BE progress relative to BE alone, in [0, 1]; NaN when
	// not measured.
	BEShare float64
	// MinBEShare is the BE classes' minimum share (0: none).
	MinBEShare float64
	// MinBETimeslice is the shortest BE timeslice the controller may
	// choose now (0: the ladder's shortest). The BE timeslice is also how
	// often BE processes switch among themselves, each switch a context
	// save and restore: on the H100 two BE at 1 us (and 3 us) made no
	// progress while two LC ran beside them, so gpreemptd sets this to
	// slo.shared_floor (default: the safe setting) while two or more BE
	// processes share the GPU.
	MinBETimeslice time.Duration
	// BEPaused: every BE process was stopped through the window, as the
	// previous decision asked (Decision.PauseBE); the LC ran alone.
	BEPaused bool
	// MaxBETimeslice is the longest BE timeslice the controller may
	// choose now (0: the ladder's longest; below MinBETimeslice: that).
	// gpreemptd sets it under slo.prepreempt_below while an LC with a
	// tail objective uses hints: from that setting on the daemon tells
	// hint engines to stop, and such an LC waits out BE's timeslice (on
	// the H100 one try of 500 us set a synthetic LC's p99 at 10.6x).
	MaxBETimeslice time.Duration
}

// Causes of a decision, a small fixed set (metric label values); Reason
// says the rest in words.
const (
	CauseDwell       = "dwell"        // kept: too soon after a change
	CauseWithin      = "within"       // kept: objectives met, nothing better to try
	CauseNoSignal    = "no_signal"    // no LC latency: kept, or sent to the safe setting
	CauseViolation   = "violation"    // an objective missed: a shorter or known-good setting
	CauseExplore     = "explore"      // objectives met with headroom (or a probe): a longer BE timeslice tried
	CauseKnownBetter = "known_better" // a setting known to meet the objectives gives BE more
	CauseAtLimit     = "at_limit"     // an objective missed with the shortest BE timeslice
	CauseCalibrate   = "calibrate"    // an LC's standalone-like latency learnt under the shortest BE timeslice
	CauseFloor       = "floor"        // raised to the shortest BE timeslice allowed now (MinBETimeslice)
	CauseCeiling     = "ceiling"      // lowered to the longest BE timeslice allowed now (MaxBETimeslice)
)

// LCResult is how one LC sample compared with its objective.
type LCResult struct {
	Key       string        `json:"key"`
	Objective string        `json:"objective"`
	Latency   time.Duration `json:"latency"`
	// Target is the latency the objective allows (0: baseline not known).
	Target time.Duration `json:"target"`
	// Ratio is Latency/Target; NaN when the sample did not count (too few
	// requests, or no target yet).
	Ratio    float64 `json:"ratio"`
	Requests int     `json:"requests"`
	// base names the sample's baseline (process and quantile).
	base string
}

// Decision is the controller's answer to one observation.
type Decision struct {
	BETimeslice time.Duration `json:"be_timeslice"`
	// Changed: BETimeslice differs from the previous decision's.
	Changed bool `json:"changed"`
	// Cause is one of the Cause constants.
	Cause  string `json:"cause"`
	Reason string `json:"reason"`
	// WorkloadChanged: this window strayed from what the setting had
	// shown; what was learnt of the other settings was forgotten.
	WorkloadChanged bool `json:"workload_changed,omitempty"`
	// LC is each sample against its objective.
	LC []LCResult `json:"lc,omitempty"`
	// Worst is the highest latency/target among the LC processes (1 =
	// at its objective); NaN when no LC signal counted.
	Worst   float64 `json:"worst_lc_vs_objective"`
	BEShare float64 `json:"be_share"`
	// BEBelowMinimum: no setting known to meet every LC objective also
	// gives BE its minimum share; LC objectives take precedence.
	BEBelowMinimum bool `json:"be_below_minimum,omitempty"`
	Fallback       bool `json:"fallback,omitempty"`
	// PauseBE: stop every BE process through the next window (and keep
	// BETimeslice for when they resume): an LC's standalone latency is
	// being learnt (Options.PauseWindows). False: BE runs.
	PauseBE bool `json:"pause_be,omitempty"`
}

// rung is what the controller knows of one ladder setting.
type rung struct {
	ts      time.Duration
	worst   float64 // the worst LC latency/target: the mean of its last stay
	windows int     // how many windows that mean is of
	shown   float64 // the same read from medians (seen.shown), without the windows that strayed
	share   float64 // EWMA of BE share
	seen    int     // observations counted
	last    int     // tick of the last observation counted
	badTill int     // tick before which the rung is not explored again
	fails   int     // times it was left for missing an objective
	missBy  float64 // the worst LC latency/target (stay mean) when it last missed
	missAt  int     // tick of that miss
	// leftTill: the rung was left for one that dominates it (dominates);
	// not explored again before this tick.
	leftTill int
}

// Controller is the search. Not safe for concurrent use: the daemon calls
// Observe from its one control loop.
type Controller struct {
	opts        Options
	rungs       []rung
	cur         int
	lo          int // the shortest rung allowed now (Observation.MinBETimeslice)
	hi          int // the longest (Observation.MaxBETimeslice), >= lo
	tick        int
	since       int  // observations under cur
	calibrating bool // at the shortest rung to learn LC baselines
	lcStepped   bool // an LC's baseline dropped the windows before a change (baseline.step)
	// calScatter is scatter and shownScatter when the calibration running
	// began (beginCalibration).
	calScatter [2]float64
	// lcChanged: this window brought a new LC, or a changed objective
	// (forgetRungs).
	lcChanged bool
	stayed    []seen    // under cur, after settling, the last ViolationWindow windows
	steady    []float64 // their seen.shown but for the windows that strayed (what the setting shows)
	parked    []seen    // windows that strayed (surprised of them), not yet in stayed
	scatter   float64   // the variance of one window's worst LC latency/target under one setting, learnt over stays
	// upFromMet: the last move was to a longer rung, from one that met
	// every objective or was undecided (probe; its first window's far miss
	// is the new rung's).
	upFromMet bool
	// from is the rung the last move left.
	from int
	// dips counts the mild or undecided misses passed in a row
	// (pastTheDip, an undecided probe); above the safe rung at most
	// SkipBad are (passing).
	dips int
	// shownScatter is the same for seen.shown, what workload changes are
	// judged by (equal to scatter unless a tail objective is read from
	// medians).
	shownScatter float64
	missing      int
	surprised    int // consecutive surprising windows
	fallback     bool
	baselines    map[string]*baseline
	// resume is the rung in force when a workload change was seen (-1:
	// none): calibration returns to it rather than to a longer safe
	// setting.
	resume int
	calm   int // tick of the last window that did not stray
	// pausing: the last decision stopped BE (PauseBE); wasPaused: the
	// window being observed was asked to run without BE; pausedFor and
	// pauseMissed count this calibration's paused windows and those BE
	// was not kept stopped through; noPause: BE could not be kept
	// stopped, calibrate beside it.
	pausing, wasPaused                  bool
	pausedFor, pauseMissed, pauseRounds int
	noPause                             bool
}

// New returns a controller at the safe setting.
func New(opts Options) (*Controller, error) {
	opts = opts.withDefaults()
	for i := 1; i < len(opts.Ladder); i++ {
		if opts.Ladder[i] <= opts.Ladder[i-1] {
			return nil, fmt.Errorf("%w: ladder %v must be strictly ascending", ErrInvalid, opts.Ladder)
		}
	}
	c := &Controller{opts: opts, baselines: map[string]*baseline{}, scatter: priorScatter * priorScatter,
		shownScatter: priorScatter * priorScatter, resume: -1}
	for _, ts := range opts.Ladder {
		if ts < time.Microsecond || ts%time.Microsecond != 0 {
			return nil, fmt.Errorf("%w: ladder timeslice %v is not a whole number of microseconds >= 1us", ErrInvalid, ts)
		}
		c.rungs = append(c.rungs, rung{ts: ts, worst: math.NaN(), shown: math.NaN(), share: math.NaN()})
	}
	c.cur, c.hi = c.nearest(opts.Safe), len(c.rungs)-1
	return c, nil
}

// Current is the BE timeslice in force.
func (c *Controller) Current() time.Duration { return c.rungs[c.cur].ts }

// floor is the shortest rung at or above min (the longest when none is).
func (c *Controller) floor(min time.Duration) int {
	for i, r := range c.rungs {
		if r.ts >= min {
			return i
		}
	}
	return len(c.rungs) - 1
}

// ceiling is the longest rung at or below max (the shortest when none is;
// the longest for 0).
func (c *Controller) ceiling(max time.Duration) int {
	if max <= 0 {
		return len(c.rungs) - 1
	}
	hi := 0
	for i, r := range c.rungs {
		if r.ts <= max {
			hi = i
		}
	}
	return hi
}

// safe is the rung nearest Options.Safe within the bounds allowed now.
func (c *Controller) safe() int { return min(max(c.nearest(c.opts.Safe), c.lo), c.hi) }

func (c *Controller) nearest(ts time.Duration) int {
	best := 0
	for i, r := range c.rungs {
		if absDur(r.ts-ts) < absDur(c.rungs[best].ts-ts) {
			best = i
		}
	}
	return best
}

func absDur(d time.Duration) time.Duration {
	if d < 0 {
		return -d
	}
	return d
}

const shareEWMA = 0.25

// Observe takes one window's measurements, made under Current, and
// decides the next setting.
func (c *Controller) Observe(o Observation) Decision {
	c.tick++
	c.since++
	c.wasPaused, c.pausing = c.pausing, false
	d := c.observe(o)
	if c.wasPaused && !d.PauseBE {
		// BE resumes: the next window mixes the pause and the setting.
		c.since, c.stayed, c.parked, c.steady = 0, c.stayed[:0], c.parked[:0], c.steady[:0]
		c.upFromMet = false
	}
	return d
}

// pausedRung tags baseline windows the LC ran with BE stopped.
const pausedRung = -1

func (c *Controller) observe(o Observation) Decision {
	// A window with BE stopped teaches the LC's standalone latency, and
	// nothing of the setting; a window that was to run without BE and
	// did not teaches neither.
	tag, learn := c.cur, c.since > 1 || c.tick == 1
	if c.wasPaused {
		if learn = learn && o.BEPaused; learn {
			tag = pausedRung
		}
	}
	win, counted, baseReady, lc := c.worst(o.LC, tag, learn)
	if c.lcChanged {
		c.lcChanged = false
		c.forgetRungs()
		c.since = 1 // this window was judged against a baseline not yet learnt: not the setting's
	}
	if c.lcStepped {
		c.lcStepped = false
		c.forgetCalibration()
	}
	worst := win.worst
	d := Decision{Worst: worst, BEShare: o.BEShare, LC: lc}
	// A window without LC latency counts toward the fallback whatever
	// else moves BE in it (a floor or a ceiling).
	if counted {
		c.missing = 0
	} else {
		c.missing++
	}

	if c.lo = c.floor(o.MinBETimeslice); c.cur < c.lo {
		d.Cause = CauseFloor
		c.calibrating, c.resume = false, -1
		return c.move(d, c.lo, fmt.Sprintf("shortest BE timeslice allowed now is %v", c.rungs[c.lo].ts))
	}
	if c.hi = max(c.ceiling(o.MaxBETimeslice), c.lo); c.cur > c.hi {
		d.Cause = CauseCeiling
		return c.move(d, c.hi, fmt.Sprintf("longest BE timeslice allowed now is %v", c.rungs[c.hi].ts))
	}

	if !counted {
		d.Cause = CauseNoSignal
		if c.missing >= c.opts.MissingAfter && !c.fallback {
			c.fallback = true
			return c.move(d, c.safe(), fmt.Sprintf("no LC latency for %d windows: safe setting", c.missing))
		}
		d.Fallback = c.fallback
		return c.stay(d, "no LC latency this window")
	}
	if c.fallback {
		c.fallback = false
		c.since = 1
	}

	// The first window after a change mixes two settings: do not learn
	// from it.
	if c.since > 1 && !c.wasPaused {
		r := &c.rungs[c.cur]
		// While calibrating, windows are judged against a baseline still
		// being learnt: no surprise there. (On the H100 an eager LC that
		// had just come from a CUDA graph was taken for a new workload
		// twice during one calibration, and the run ended before the
		// search resumed.)
		if !c.calibrating && c.surprising(r, win.shown, o.BEShare, 1) {
			c.surprised++
		} else {
			c.surprised = 0
		}
		// One window twice as far is a change on its own, unless learning
		// the LC again stops BE: on the H100 one window of a synthetic
		// LC's p99 at 2.3x its objective (285 requests: its 3rd worst)
		// was taken for a change, and the pause cost BE 6 of the 10
		// measured seconds; a real change persists.
		if c.surprised >= surpriseRun || (c.surprised > 0 && !c.pauseOK() && c.surprising(r, win.shown, o.BEShare, 2)) {
			// Learn the new workload's baseline under the shortest BE
			// timeslice, not under the one it was found at.
			c.relearn(true)
			d.Reason, d.WorkloadChanged = "workload changed: ", true
			d.Cause = CauseCalibrate
			if c.pauseOK() {
				return c.pause(d, fmt.Sprintf("%s under %v, unlike before: learning it again with BE stopped", win, r.ts))
			}
			if c.cur != c.lo {
				return c.move(d, c.lo, fmt.Sprintf("%s under %v, unlike before: learning it again under the shortest BE timeslice", win, r.ts))
			}
			c.since = 1 // this window was judged against what is forgotten
			return c.stay(d, "learning it again")
		}
		if c.surprised > 0 {
			// Not yet a change: the setting is kept, and the window is
			// judged with the next one that does not stray (a burst that
			// passed counts against the setting like any window; it only
			// does not make the controller learn the LC again).
			c.parked = append(c.parked, win)
			d.Cause = CauseDwell
			return c.stay(d, fmt.Sprintf("%s under %v, unlike before (%d of %d windows in a row): watching whether it lasts", win, r.ts, c.surprised, surpriseRun))
		}
		c.stayed = append(append(c.stayed, c.parked...), win)
		if c.steady = append(c.steady, win.shown); len(c.steady) > c.opts.ViolationWindow {
			c.steady = c.steady[1:]
		}
		r.shown, _ = meanSD(c.steady)
		c.parked, c.calm = c.parked[:0], c.tick
		if n := len(c.stayed) - c.opts.ViolationWindow; n > 0 {
			c.stayed = c.stayed[n:]
		}
		// What the rung shows is the mean of this stay, once it has
		// one; an earlier stay's until then.
		var sd float64
		r.worst, sd = meanSD(worsts(c.stayed))
		r.windows = len(c.stayed)
		if len(c.stayed) >= 3 {
			c.scatter = scatterEWMA*sd*sd + (1-scatterEWMA)*c.scatter
			_, sd = meanSD(showns(c.stayed))
			c.shownScatter = scatterEWMA*sd*sd + (1-scatterEWMA)*c.shownScatter
		}
		r.share = blendShare(r.share, o.BEShare)
		r.seen++
		r.last = c.tick
	}
	// An LC whose standalone-like latency is not known yet is measured
	// under the shortest BE timeslice, the least interference the ladder
	// offers, for baselineMinWindows windows; then the search resumes
	// from the safe setting.
	if !baseReady {
		d.Cause = CauseCalibrate
		if c.pauseOK() {
			if c.wasPaused && !o.BEPaused {
				c.pauseMissed++
			}
			if c.pausedFor >= c.pauseWindows()+pauseSlack && c.pauseMissed < 2 {
				// Too long (a new LC came mid-pause, or windows with too
				// few requests): BE runs for a window, then the pause
				// is taken up again; thrice, and pausing ends.
				c.pausedFor, c.pauseRounds = 0, c.pauseRounds+1
				if c.pauseRounds < 3 {
					return c.stay(d, "BE resumed for a window: the pause ran long")
				}
			}
			if c.pausedFor < c.pauseWindows()+pauseSlack && c.pauseMissed < 2 {
				if !c.calibrating {
					c.resume = -1
				}
				return c.pause(d, fmt.Sprintf("learning an LC's standalone latency with BE stopped (%d windows)", c.opts.PauseWindows))
			}
			c.noPause = true
			d.Reason = fmt.Sprintf("BE not kept stopped (%d windows missed, %d pauses ran long): calibrating beside it from now on; ", c.pauseMissed, c.pauseRounds)
		}
		if c.cur != c.lo {
			c.beginCalibration()
			c.resume = -1
			return c.move(d, c.lo, fmt.Sprintf("learning an LC's standalone-like latency under the shortest BE timeslice (%d windows)", baselineMinWindows))
		}
		c.beginCalibration()
		return c.stay(d, "learning an LC's standalone-like latency")
	}
	if c.calibrating {
		c.calibrating, c.pausedFor, c.pauseMissed, c.pauseRounds = false, 0, 0, 0
		// After a workload change, back to the setting the search was
		// at when the change was seen if the safe one missed by far: on
		// the H100 two LCs with hints met their objectives under a 50 us
		// floor and missed by 11x under the safe 200 us, and going there
		// after relearning cost a repetition two such windows.
		to, why := c.safe(), "the safe"
		if r := min(max(c.resume, c.lo), c.hi); c.resume >= 0 && r < to {
			to, why = r, "where the search was when the change was seen,"
		}
		c.resume = -1
		if to != c.cur {
			d.Cause = CauseCalibrate
			return c.move(d, to, fmt.Sprintf("LC baselines known: back to %s %v", why, c.rungs[to].ts))
		}
		if c.wasPaused {
			d.Cause = CauseCalibrate
			return c.stay(d, fmt.Sprintf("LC baselines known: BE resumed at %v", c.rungs[to].ts))
		}
	}
	far := c.farMiss(win)
	if c.since < c.opts.MinDwell && !far {
		d.Cause = CauseDwell
		return c.stay(d, "dwelling after a change")
	}

	if far || c.violated() {
		r := &c.rungs[c.cur]
		of := fmt.Sprintf("mean of %d windows", len(c.stayed))
		if far {
			of = "one window, a far miss"
			r.worst, r.last = win.worst, c.tick
		}
		r.fails++
		r.badTill = c.tick + c.opts.Forget<<min(r.fails-1, 4)
		r.missBy, r.missAt = r.worst, c.tick
		d.Cause = CauseViolation
		if next, ok := c.pastTheDip(o.LC); ok {
			where := "at or under the safe setting"
			switch {
			case c.dips > 0:
				where = "past the dip"
			case c.cur > c.safe():
				where = fmt.Sprintf("explored to from %v", c.rungs[c.from].ts)
			}
			return c.pass(d, next, fmt.Sprintf("LC at %.2fx its objective under %v (%s), a mild miss %s: trying the longer %v, not yet measured", r.worst, r.ts, of, where, c.rungs[next].ts))
		}
		i, ok := c.bestFeasible(c.cur, c.opts.Headroom)
		if !ok {
			// A rung that met the objectives without headroom (the one a
			// probe left) beats a shorter one not known to meet them.
			i, ok = c.bestFeasible(c.cur, 0)
		}
		if ok {
			return c.move(d, i, fmt.Sprintf("LC at %.2fx its objective under %v (%s): back to %v, which met it", r.worst, r.ts, of, c.rungs[i].ts))
		}
		// Nothing known to meet the objectives: shorter BE timeslices
		// are the protective direction (LC waits less for BE to yield),
		// while one is left that was not measured recently.
		if c.cur > c.lo && !c.fresh(c.cur-1) {
			return c.move(d, c.cur-1, fmt.Sprintf("LC at %.2fx its objective under %v (%s): shorter BE timeslice", r.worst, r.ts, of))
		}
		if c.cur == c.lo && c.contradicted(lc) {
			// The LC misses where its baseline was learnt: it is not
			// what it was then (it went from a CUDA graph to eager
			// launches, or its own CPU-side work slowed it). Learn it
			// again rather than hold BE at its shortest timeslice
			// against a latency the LC no longer has.
			// What missed: the rung's mean, read before relearning
			// forgets it; the window's where it has none yet.
			by := r.worst
			if math.IsNaN(by) {
				by = worst
			}
			c.relearn(false)
			c.since = 1
			d.Cause, d.WorkloadChanged = CauseCalibrate, true
			return c.stay(d, fmt.Sprintf("workload changed: LC at %.2fx its objective under %v, where its baseline was learnt: learning it again", by, r.ts))
		}
		// Every shorter setting missed too, recently: the one that came
		// closest. LC latency is not monotonic in the BE timeslice: an
		// eager LC ran 1.0-1.2x its standalone latency under 200 us -
		// 1.5 ms on the H100, and more under 1 us (0.92-1.43x).
		d.BEBelowMinimum, d.Cause = o.MinBEShare > 0 && !math.IsNaN(o.BEShare), CauseAtLimit
		best := c.cur
		for i := c.lo; i <= c.hi; i++ {
			if c.fresh(i) && c.rungs[i].worst < c.rungs[best].worst {
				best = i
			}
		}
		if best != c.cur {
			return c.move(d, best, fmt.Sprintf("LC at %.2fx its objective under %v, and no setting meets it: back to %v, the closest (%.2fx)", r.worst, r.ts, c.rungs[best].ts, c.rungs[best].worst))
		}
		return c.stay(d, fmt.Sprintf("LC at %.2fx its objective, and no setting meets it: %v came closest", worst, r.ts))
	}

	// Not a miss: the objectives met, or the rung undecided (its mean
	// above 1 without a confident miss). Jump to a known better setting,
	// else try the next longer timeslice once this one has proven itself
	// with headroom (or a probe: without headroom, or undecided), unless
	// that rung recently failed or was just seen to give BE less.
	if i, ok := c.bestFeasible(-1, c.opts.Headroom); ok && c.surprised == 0 && i != c.cur && c.better(i, c.cur, knownBetterMargin) {
		d.Cause = CauseKnownBetter
		be := fmt.Sprintf("BE at %.1f%%", 100*c.rungs[i].share)
		if math.IsNaN(c.rungs[i].share) {
			be = "BE share unknown"
		}
		return c.move(d, i, fmt.Sprintf("%v met every objective with %s", c.rungs[i].ts, be))
	}
	if i, ok := c.dominating(); ok && c.surprised == 0 && c.since >= c.opts.ExploreAfter {
		d.Cause = CauseKnownBetter
		r, ri := c.rungs[c.cur], c.rungs[i]
		c.rungs[c.cur].leftTill = c.tick + c.opts.Stale
		return c.move(d, i, fmt.Sprintf("%v gives BE no more than %v (%.1f%% against %.1f%%) with the LC at %.2fx its objective against %.2fx: back to %v", r.ts, ri.ts, 100*r.share, 100*ri.share, r.worst, ri.worst, ri.ts))
	}
	if next, skipped := c.nextToTry(); c.since >= c.opts.ExploreAfter && len(c.stayed) > 0 && baseReady && next >= 0 && !c.knownWorse(next) &&
		(c.rungs[c.cur].worst <= 1-c.opts.Headroom || c.probe(next, o.LC)) {
		d.Cause = CauseExplore
		r := c.rungs[c.cur]
		why := fmt.Sprintf("LC at %.2fx its objective: trying a longer BE timeslice for more BE share", r.worst)
		if r.worst > 1 {
			why = fmt.Sprintf("LC at %.2fx its objective under %v (mean of %d windows), neither within it nor a confident miss: trying the longer %v, not yet measured", r.worst, r.ts, len(c.stayed), c.rungs[next].ts)
		}
		if skipped > 0 {
			why += fmt.Sprintf(" (past %d that missed it)", skipped)
		}
		if r.worst > 1 {
			// An undecided rung is passed like a mild miss, and counted
			// with them (passing).
			return c.pass(d, next, why)
		}
		return c.move(d, next, why)
	}
	if o.MinBEShare > 0 && !math.IsNaN(o.BEShare) && o.BEShare < o.MinBEShare {
		d.BEBelowMinimum = true
	}
	if c.rungs[c.cur].worst <= 1 {
		c.dips = 0 // the rung met them: no longer passing a dip
	}
	d.Cause = CauseWithin
	return c.stay(d, "within objectives")
}

// nextToTry is the next longer rung worth trying, past at most SkipBad
// rungs known to miss an objective (-1: none), and how many it passes.
// LC latency is not monotonic in the BE timeslice: an eager PyTorch LC on
// the H100 ran ~6% slower than under 1 us at 50-200 us, and at 1 ms as
// fast as under 1 us with BE at 87%, so one missed rung does not mean
// every longer one misses. A rung that missed by more than skipMildMiss
// is not passed: an LC that waits for BE's timeslice to end (a CUDA-graph
// LC past its spinner's lead) misses by multiples, and longer rungs cost
// it more; SkipBad bounds the rest, and each miss backs the rung off for
// twice as long as the last.
func (c *Controller) nextToTry() (next, skipped int) {
	for j := c.cur + 1; j <= c.hi; j++ {
		r := c.rungs[j]
		if c.tick < r.badTill || (c.fresh(j) && r.worst > 1) {
			// A rung that missed by far is where the LC waits out BE's
			// timeslice; longer ones only wait longer.
			miss := r.missBy
			if c.fresh(j) {
				miss = max(miss, r.worst)
			}
			if skipped++; skipped > c.opts.SkipBad || miss > skipMildMiss {
				return -1, skipped - 1
			}
			continue
		}
		return j, skipped
	}
	return -1, skipped
}

// probe reports whether rung next, never measured or not recently, is
// worth a try from a rung that meets every objective without headroom, or
// is undecided: when every objective bounds a median or a lower quantile,
// and the current rung has been kept ExploreAfter+probeAfter windows. A median
// moves little for a few windows under a worse setting, and LC latency is
// not monotonic in the BE timeslice (an eager PyTorch LC on the H100 ran
// at 0.99x its objective under 200 us, within it under 500 us and 1 ms);
// a tail objective is set by its worst windows, and a probe that misses
// sets it.
func (c *Controller) probe(next int, lc []LCSample) bool {
	if !c.untried(next) || c.since < c.opts.ExploreAfter+probeAfter || !medianOnly(lc) {
		return false
	}
	return c.rungs[c.cur].worst <= 1 || c.undecided(lc)
}

// undecided reports whether the current rung's mean is above 1, at most
// skipMildMiss, without being a confident miss, where a mild miss would be
// passed (passing). An eager LC whose windows scatter by 8-11% sitting 3%
// over its objective is not a confident miss within the 16
// windows a stay is judged by, and waiting for its mean to fall under 1
// held the search at 200 us for 11 windows (5.5 s) after a graph LC
// turned eager on the H100 (8f05d77, 2026-11-23), 1 ms reached 11.8 s
// after the change.
func (c *Controller) undecided(lc []LCSample) bool {
	return c.rungs[c.cur].worst > 1 && c.passing(lc)
}

// untried reports whether rung i is worth a try on a guess: not measured
// recently, and not once missed by multiples (where the LC waits out BE's
// timeslice, until the workload changes).
func (c *Controller) untried(i int) bool {
	return !c.fresh(i) && c.rungs[i].missBy <= skipMildMiss
}

// medianOnly reports whether every objective bounds a median or a lower
// quantile: a guess that misses moves a median little, and sets a tail.
func medianOnly(lc []LCSample) bool {
	return !slices.ContainsFunc(lc, func(s LCSample) bool { return s.Objective.Tail() })
}

// probeAfter is how many windows longer than ExploreAfter a rung without
// headroom, or undecided, is kept before a probe (its mean needs a few
// windows to be trusted as meeting the objective, or as not missing it by
// much).
const probeAfter = 1

// pastTheDip reports the next longer rung to try from a rung that just
// missed mildly (by at most skipMildMiss) where passing allows it, when
// the next longer rung has not been measured recently. An eager PyTorch LC
// misses at 200 us (1.1-1.2x on the H100, its dip) and runs within its
// objective at 500 us - 1.5 ms: going back under 200 us first, and
// climbing past it again rung by rung, is what made the search reach
// 1 ms 8-10 s after a graph LC turned eager. A longer rung that misses
// mildly too is passed the same way, up to SkipBad rungs in a row: after
// the same change on the H100 (2026-11-23) the eager LC missed at 200 us
// (1.13-1.15x) and at 500 us (1.06-1.12x) in two repetitions of three,
// and went back to 1 us, not trying 1 ms, where it had run at 0.94x. A
// rung that misses by more is left the usual way, back to what met the
// objectives.
//
// A rung explored to from the safe setting or under, which then misses
// mildly, is passed the same way: after the same change on the H100
// (bd2c6ec) the eager LC met 200 us (0.99-1.00x) and missed 500 us by
// 1.04x, and going back under it first put 1 ms past 10 s of the change
// in 2 of 3 repetitions. From a longer rung it is not: past 1 ms the
// eager LC's latency only grew (1.12x at 2 ms, 1.17x at 3 ms), and
// passing a mild miss there held the search at 2-3 ms.
//
// Not once a longer rung has missed recently: the dip then goes on past
// it. Against its standalone latency (learnt with BE stopped) the eager
// LC ran 1.0-1.2x under every rung from 200 us to 1.5 ms on the H100, and
// passing the dip each time its rung missed cycled the search through
// them for 40 windows without trying the shorter ones.
func (c *Controller) pastTheDip(lc []LCSample) (int, bool) {
	if !c.passing(lc) {
		return 0, false
	}
	next, _ := c.nextToTry()
	return next, next >= 0 && c.untried(next)
}

// passing reports whether a mild miss (or an undecided mean) at the
// current rung may be passed to a longer one: median objectives only, the
// rung's mean (or far-missing window) within skipMildMiss, no longer rung
// missed recently, and the rung at or under the safe setting, or, after
// fewer than SkipBad passes in a row, explored to from there and at most
// SkipBad rungs above it, or reached by a pass. Past 1 ms the eager PyTorch LC only got
// slower on the H100, and a search that explored past two missed rungs
// from 200 us to 1.5 ms, then probed on from there, tried 2 ms (1.25x)
// before going back (7073479, 2026-11-23).
func (c *Controller) passing(lc []LCSample) bool {
	safe := c.safe()
	where := c.cur <= safe || (c.dips < c.opts.SkipBad && ((c.upFromMet && c.from <= safe && c.cur <= safe+c.opts.SkipBad) || c.dips > 0))
	if c.opts.SkipBad == 0 || !where || c.rungs[c.cur].worst > skipMildMiss || !medianOnly(lc) {
		return false
	}
	for j := c.cur + 1; j <= c.hi; j++ {
		if r := c.rungs[j]; r.fails > 0 && c.tick-r.missAt <= c.opts.Stale {
			return false
		}
	}
	return true
}

// skipMildMiss is the most a rung may have missed an objective by (worst
// LC latency/target) for the search to pass it: the eager PyTorch LC's
// dip missed by 1.1-1.2x on the H100; a CUDA-graph LC missed by 1.4x at
// 500 us and 1.9x at 1 ms, and two synthetic LCs with hints by 2x at
// 500 us, 4x at 1 ms and 8-20x at 2 ms, where each try past the first
// cost their p99 100x.
const skipMildMiss = 1.25

// worst is the highest latency/target among LC samples that count (and
// the same read from medians: seen.shown), and each sample's comparison.
// baseReady: every LC's baseline rests on baselineMinWindows windows
// (until then no longer timeslice is tried: a target from one or two
// noisy windows would send the search too far).
//
// Each sample's latency is learnt (if learn) as seen under rung tag (a
// ladder index, or pausedRung); so is its median, for a tail objective
// relative to its baseline.
func (c *Controller) worst(lc []LCSample, tag int, learn bool) (w seen, counted, baseReady bool, rs []LCResult) {
	w, baseReady = seen{worst: math.Inf(-1), shown: math.Inf(-1)}, true
	medians := map[string]bool{} // added this window (two tail objectives share one)
	steps := map[string]int{}    // of those, the tick each stepped from (baseline.add)
	for _, s := range lc {
		res := LCResult{Key: s.Key, Objective: s.Objective.String(), Latency: s.Latency, Requests: s.Requests, Ratio: math.NaN(),
			base: baselineKey(s.Key, s.Objective.quantileName())}
		if s.Requests < c.opts.MinRequests || s.Latency <= 0 {
			rs = append(rs, res)
			continue
		}
		base, body := s.Standalone, time.Duration(0)
		if base <= 0 && s.Objective.Absolute <= 0 {
			// A window just after a change mixes two settings: judged,
			// not learnt from.
			b := c.baseline(res.base)
			if b.objective != res.Objective {
				// A new LC (or objective), or a bound changed by a reload:
				// what the settings showed was judged against other targets.
				c.lcChanged = c.lcChanged || b.objective != "" || !c.calibrating
				b.objective = res.Objective
			}
			b.tail = s.Objective.Tail()
			from := 0
			if b.tail && s.Median > 0 {
				// The tail's windows scatter by multiples (a synthetic
				// LC's p99 went 1x-2.3x its objective from one window to
				// the next on the H100): whether the LC changed while it
				// was learnt is read from its median.
				mk := baselineKey(s.Key, medianKey)
				m := c.baseline(mk)
				m.median = true
				var stepped int
				if body, stepped = m.add(c.tick, tag, s.Median, learn && !medians[mk], c.opts.BaselineWindow, c.pauseNeed()); !m.ready {
					body = 0
				}
				if stepped > 0 {
					steps[mk] = stepped
				}
				medians[mk], from = true, steps[mk]
			}
			var stepped int
			base, stepped = b.add(c.tick, tag, s.Latency, learn, c.opts.BaselineWindow, c.pauseNeed())
			if from > 0 {
				base = b.dropBefore(tag, from, c.pauseNeed())
			}
			baseReady = baseReady && b.ready
			c.lcStepped = c.lcStepped || stepped > 0 || from > 0
		}
		target := s.Objective.Target(base)
		res.Target = target
		if target <= 0 {
			rs = append(rs, res)
			continue
		}
		counted = true
		res.Ratio = float64(s.Latency) / float64(target)
		rs = append(rs, res)
		w.worst = max(w.worst, res.Ratio)
		shown := res.Ratio
		if body > 0 {
			// The median over its baseline, on the objective's scale
			// (the tail's baseline over its target).
			shown = float64(s.Median) / float64(body) * float64(base) / float64(target)
			w.fromMedian = true
		}
		w.shown = max(w.shown, shown)
	}
	for k, b := range c.baselines {
		if b.last <= c.tick-c.opts.BaselineWindow {
			delete(c.baselines, k) // an LC gone for a whole baseline window
			continue
		}
		// An LC still being learnt that did not count this window (it
		// pushes every other window, or hovers at MinRequests) keeps the
		// calibration going: ending it would move BE, and the LC's next
		// window, the first after a move, would not be learnt either.
		if !b.ready && !b.median && c.tick-b.last <= c.opts.MissingAfter {
			baseReady = false
		}
	}
	if !counted {
		return seen{worst: math.NaN(), shown: math.NaN()}, false, false, rs
	}
	return w, true, baseReady, rs
}

// baseline is the baseline at key, made if new.
func (c *Controller) baseline(key string) *baseline {
	b := c.baselines[key]
	if b == nil {
		b = &baseline{}
		c.baselines[key] = b
	}
	return b
}

// medianKey names the baseline of a process's median kept for its tail
// objective (seen.shown).
const medianKey = "median"

// seen is what one window showed of the setting in force.
type seen struct {
	// worst is the highest latency/target among the LCs: what objectives
	// are judged by.
	worst float64
	// shown is the same with each tail objective relative to a baseline
	// read from the window's median: the median over the median's
	// baseline, times the tail's baseline over its target. Workload
	// changes are judged by it (LCSample.Median); fromMedian says one was.
	shown      float64
	fromMedian bool
}

func (w seen) String() string {
	if w.fromMedian {
		return fmt.Sprintf("LC at %.2fx its objective, read from its median,", w.shown)
	}
	return fmt.Sprintf("LC at %.2fx its objective", w.shown)
}

// worsts and showns are the windows' seen.worst and seen.shown.
func worsts(ws []seen) []float64 { return pick(ws, func(w seen) float64 { return w.worst }) }
func showns(ws []seen) []float64 { return pick(ws, func(w seen) float64 { return w.shown }) }

func pick(ws []seen, f func(seen) float64) []float64 {
	xs := make([]float64, len(ws))
	for i, w := range ws {
		xs[i] = f(w)
	}
	return xs
}

// baselineKey names the baseline of one process at one objective's
// quantile (its median and its tail have a baseline each).
func baselineKey(key, quantile string) string { return key + " " + quantile }

// bestFeasible is the rung other than skip, known to meet every objective
// with headroom (a fraction of the target), that gave BE the most.
func (c *Controller) bestFeasible(skip int, headroom float64) (int, bool) {
	best, ok := -1, false
	for i, r := range c.rungs {
		if i == skip || i < c.lo || i > c.hi || !c.fresh(i) || r.worst > 1-headroom || c.tick < r.badTill {
			continue
		}
		if !ok || c.better(i, best, 0) {
			best, ok = i, true
		}
	}
	return best, ok
}

// better reports whether rung i is known to give BE more than rung j, by
// more than margin. Where BE share is not measured, the longer timeslice
// is taken to give BE more (fewer switches: every LC switch-in costs BE
// ~170-200 us of GPU time on an H100); a measured share beats an unknown
// one.
func (c *Controller) better(i, j int, margin float64) bool {
	si, sj := c.rungs[i].share, c.rungs[j].share
	switch {
	case !math.IsNaN(si) && !math.IsNaN(sj):
		return si > sj+margin
	case math.IsNaN(si) && math.IsNaN(sj):
		return i > j
	}
	return !math.IsNaN(si)
}

// fresh reports whether what was learnt of rung i can still be trusted.
func (c *Controller) fresh(i int) bool {
	r := c.rungs[i]
	return r.seen > 0 && c.tick-r.last <= c.opts.Stale
}

// surpriseRun is how many windows in a row must stray from what the rung
// has shown for a workload change; one that strays twice as far is one
// on its own. Until then the setting is kept, and the straying windows
// are judged with the next one that does not stray: a burst that passed
// may still make the setting miss its objective, but it does not make
// the controller learn the LC again. An eager PyTorch LC on the H100 ran
// two 1 s windows in a row at 1.34x and 1.37x of what 1 ms had shown (its
// own CPU side), and then went on as before: taken for a change, it cost
// that repetition 8 windows of BE at 1 us. A real change persists; a
// graph LC that turned eager strayed by 3.7x.
const surpriseRun = 3

// surprising reports whether a window strays from what r has shown.
func (c *Controller) surprising(r *rung, worst, share, scale float64) bool {
	// What a rung showed long ago (under another LC, or before a pause)
	// is not what it is expected to show now.
	if r.seen < 2 || !c.fresh(c.cur) {
		return false
	}
	if !math.IsNaN(share) && !math.IsNaN(r.share) && math.Abs(share-r.share) > scale*c.opts.Surprise {
		return true
	}
	// Beyond the surprise margin and beyond what the LC's own scatter
	// under this setting explains: this stay's, once it has enough
	// windows; before that (back at a rung after leaving it) the scatter
	// learnt over earlier stays, with a wider margin. A rung returned to
	// because the one tried after it missed is where a workload change
	// that came with the move shows: on the H100 a CUDA-graph LC that
	// went eager at the moment the search tried 200 us missed by 3.7x
	// there, and by 4.2x back at the 50 us it had met its objective at.
	// A few windows that happen to agree do not make a noisy LC steady:
	// the stay's deviation counts only above the learnt one.
	sd, z := math.Sqrt(c.shownScatter), 4.0
	if len(c.steady) >= 4 {
		_, stay := meanSD(c.steady)
		sd, z = math.Max(sd, stay), 3
	}
	// Against the stay's windows that did not stray (r.shown, their
	// mean): a burst that passed is judged with the stay, and would make
	// the windows after it look strange.
	ref := r.shown
	if math.IsNaN(ref) {
		ref = r.worst
	}
	limit := math.Max(scale*c.opts.Surprise*math.Max(ref, 1)*2, scale*z*sd)
	return math.Abs(worst-ref) > limit
}

// contradicted reports whether an LC over its objective under the
// current rung has a baseline learnt under this same rung, mostly before
// this stay: the rung met the objective then (the baseline is the median
// of its windows there), and misses it now.
func (c *Controller) contradicted(lc []LCResult) bool {
	for _, res := range lc {
		if !(res.Ratio > 1) {
			continue
		}
		if b := c.baselines[res.base]; b != nil && b.ready && b.rung == c.cur && b.mostlyBefore(c.tick-c.since) {
			return true
		}
	}
	return false
}

// farMiss reports whether window w alone misses an objective by far: by
// more than farMissOne and twice the margin a miss needs from one window,
// in its tail and in its median alike, while the setting has fewer
// windows than a miss needs. The first window under a setting counts when
// the search came to it from one that met every objective: what it mixes
// of the earlier setting only lowers it. On the H100 a CUDA-graph LC
// turned eager as the search tried 200 us, which it met before, and ran
// 4.5-5.3x its objective there; two windows more under that setting (and
// back at the one it met) before the change was seen put the eager knee
// 10.5 s after the change. A synthetic LC with hints ran 10.6x its p99
// objective for two windows of a setting it waited out.
func (c *Controller) farMiss(w seen) bool {
	if c.calibrating || len(c.stayed) >= c.opts.Violations || (c.since < 2 && !c.upFromMet) {
		return false
	}
	far := max(farMissOne, 1+2*violationZ*math.Sqrt(c.scatter))
	return w.worst > far && w.shown > far
}

// farMissOne is the least latency/target one window must show to miss on
// its own: the LCs the search waits out BE's timeslice for missed by 2x
// and more on the H100 (two synthetic LCs by 2x at 500 us, a graph LC
// turned eager by 3.7-5.3x); an eager LC's dip, 1.1-1.2x, and a CUDA-graph
// LC's 1.4x at 500 us need their windows' mean.
const farMissOne = 2.0

// violationZ is how many standard errors above its objective the mean of
// a stay's windows must be for the setting to miss it (one-sided 99%: the
// test is made every window, and a false miss sends BE back for 8 windows
// or more).
const violationZ = 2.33

// violated reports whether the current setting misses an objective: the
// mean of its stay's windows confidently above 1.
func (c *Controller) violated() bool {
	k := len(c.stayed)
	if k < c.opts.Violations {
		return false
	}
	m, sd := meanSD(worsts(c.stayed))
	// A stay's own deviation, pooled with what earlier stays showed (as
	// scatterWeight windows): two windows that happen to agree do not
	// make a noisy LC look steady.
	v := (float64(k-1)*sd*sd + scatterWeight*c.scatter) / (float64(k-1) + scatterWeight)
	return m > 1+violationZ*math.Sqrt(v/float64(k))
}

const (
	// priorScatter is the deviation of one window's latency/target
	// assumed before any was learnt; scatterWeight how many windows that
	// prior (later: the learnt scatter) counts as; scatterEWMA how fast
	// the learnt scatter follows stays.
	priorScatter  = 0.05
	scatterWeight = 3
	scatterEWMA   = 0.1
)

// meanSD is the mean and sample standard deviation of xs (NaN mean when
// empty, 0 deviation for fewer than two).
func meanSD(xs []float64) (mean, sd float64) {
	if len(xs) == 0 {
		return math.NaN(), 0
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, 0
	}
	for _, x := range xs {
		sd += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(sd / float64(len(xs)-1))
}

// relearn starts learning a changed workload: it drops what was learnt of
// every rung, and their back-offs (they describe a workload that is
// gone), and calibrates. The current rung starts again from the window
// that revealed the change.
//
// With fromHere (the change strayed from what the current rung had
// shown), when the safe rung had missed by more than skipMildMiss before
// the last window that did not stray, the LC waited out BE's timeslice
// there, which a change in its own latency does not undo: the search
// resumes at the current rung after calibrating (resume), and the rungs
// from the safe one up that missed so keep their misses, backed off anew
// from the calibration's end. (A miss after that window may be the new
// workload's.)
func (c *Controller) relearn(fromHere bool) {
	farMiss := func(r rung) bool { return r.fails > 0 && r.missBy > skipMildMiss && r.missAt < c.calm }
	safe := c.safe()
	old := slices.Clone(c.rungs)
	c.forgetRungs() // what the search explored to is forgotten with the rungs
	if fromHere && c.cur < safe && farMiss(old[safe]) {
		c.resume = c.cur
		for i := safe; i < len(old); i++ {
			if o := old[i]; farMiss(o) {
				r := &c.rungs[i]
				r.fails, r.missBy, r.missAt = o.fails, o.missBy, o.missAt
				r.badTill = c.tick + baselineMinWindows + c.opts.Forget<<min(o.fails-1, 4)
			}
		}
	}
	c.beginCalibration()
	// So do the LCs' baselines: an LC that went from graph to eager is
	// judged against what it does now.
	clear(c.baselines)
}

// beginCalibration marks a calibration running, keeping the scatter it
// began with (forgetCalibration).
func (c *Controller) beginCalibration() {
	if !c.calibrating {
		c.calScatter = [2]float64{c.scatter, c.shownScatter}
	}
	c.calibrating = true
}

// forgetCalibration forgets what the windows judged since the calibration
// running began showed, when an LC changed while it was learnt
// (baseline.step): they were judged against its two levels mixed (a graph
// LC turned eager: 5x), and so was the scatter learnt from them. What the
// calibration began with stays: the scatter learnt before it, and what a
// relearning kept (where it resumes, the far misses backed off: relearn),
// since no miss is judged while calibrating.
func (c *Controller) forgetCalibration() {
	resume, old := c.resume, slices.Clone(c.rungs)
	c.forgetRungs()
	c.resume = resume
	for i, o := range old {
		r := &c.rungs[i]
		r.fails, r.missBy, r.missAt, r.badTill = o.fails, o.missBy, o.missAt, o.badTill
	}
	c.scatter, c.shownScatter = c.calScatter[0], c.calScatter[1]
}

// freshRung is a rung that has shown nothing.
func freshRung(ts time.Duration) rung {
	return rung{ts: ts, worst: math.NaN(), shown: math.NaN(), share: math.NaN()}
}

// forgetRungs forgets what every setting showed, and where the search
// was, when the LCs it was judged by are no longer those there are: a new
// LC (a server restarted under a new pid), or an objective whose bound a
// reload changed. The LCs' baselines stay; a new one is learnt as any.
func (c *Controller) forgetRungs() {
	for i, old := range c.rungs {
		c.rungs[i] = freshRung(old.ts)
	}
	c.resume, c.upFromMet, c.dips, c.surprised = -1, false, 0, 0
	c.stayed, c.parked, c.steady = c.stayed[:0], c.parked[:0], c.steady[:0]
}

// pauseSlack is how many paused windows beyond PauseWindows a calibration
// may take (windows with too few requests, a new BE process to stop).
const pauseSlack = 3

// pauseOK reports whether baselines are learnt with BE stopped.
func (c *Controller) pauseOK() bool { return c.opts.PauseWindows > 0 && !c.noPause }

// pauseWindows is Options.PauseWindows, within what a baseline keeps of
// one setting.
func (c *Controller) pauseWindows() int { return min(c.opts.PauseWindows, baselinePerRung) }

// pauseNeed is how many windows alone a baseline needs (0: it is learnt
// beside BE).
func (c *Controller) pauseNeed() int {
	if c.pauseOK() {
		return c.pauseWindows()
	}
	return 0
}

// pause stops BE through the next window, at the setting in force, to
// learn LC baselines alone.
func (c *Controller) pause(d Decision, why string) Decision {
	if !c.wasPaused {
		// The first window of a pause mixes: not learnt from.
		c.since, c.stayed, c.parked, c.steady = 0, c.stayed[:0], c.parked[:0], c.steady[:0]
	}
	c.pausing = true
	c.beginCalibration()
	c.pausedFor++
	d.PauseBE, d.Cause = true, CauseCalibrate
	return c.stay(d, why)
}

func (c *Controller) move(d Decision, to int, why string) Decision {
	d.Changed = to != c.cur
	c.upFromMet = to > c.cur && (d.Cause == CauseExplore || d.Cause == CauseKnownBetter)
	c.dips, c.from = 0, c.cur
	c.cur, c.since, c.stayed, c.parked, c.steady = to, 0, c.stayed[:0], c.parked[:0], c.steady[:0]
	d.BETimeslice, d.Reason, d.Fallback = c.rungs[to].ts, d.Reason+why, c.fallback
	return d
}

// pass moves to rung to past a mild or undecided miss at the current
// rung, counting it with the passes in a row (dips).
func (c *Controller) pass(d Decision, to int, why string) Decision {
	dips := c.dips + 1
	d = c.move(d, to, why)
	c.dips = dips
	return d
}

func (c *Controller) stay(d Decision, why string) Decision {
	d.BETimeslice, d.Reason = c.rungs[c.cur].ts, d.Reason+why
	return d
}

// knownWorse reports whether rung i was measured recently to give BE less
// share than the current rung, by more than knownBetterMargin: exploring
// there would be undone by the next known_better move. A CUDA-graph LC's
// search on the H100 went 1 us -> 50 us (explore) -> 1 us (known_better)
// every 1.5 s (f8c35d2, 2026-11-23), both rungs within its objective with
// BE at ~93%; now it does not explore until what 50 us showed goes stale.
func (c *Controller) knownWorse(i int) bool {
	si, sc := c.rungs[i].share, c.rungs[c.cur].share
	return c.tick < c.rungs[i].leftTill || c.fresh(i) && !math.IsNaN(si) && !math.IsNaN(sc) && sc > si+knownBetterMargin
}

// dominates reports whether rung i, known to meet every objective with
// headroom, is known to give BE at least rung j's share with the LC
// faster: j buys BE nothing for what it costs the LC. Shares that differ
// by less than knownBetterMargin are no reason to move for BE's sake
// (better), but they do say which of two rungs gives more; under the 50 us
// spinner ceiling on the H100 (6b35629, must2s) the search held 50 us,
// where the synthetic LC ran 1.07x standalone against 1.03x under 1 us,
// with BE at 88.3% against 88.9%.
//
// The LC must be faster under i by more than what the two means' scatter
// explains (two standard errors, and at least dominanceMin): on the H100 an
// eager LC whose windows scatter by 8% went 50 us -> 1 us -> 50 us, each
// time "faster" by a fraction of a point (4471a53, must1).
func (c *Controller) dominates(i, j int) bool {
	ri, rj := c.rungs[i], c.rungs[j]
	if i == j || !c.fresh(i) || !c.fresh(j) || c.tick < ri.badTill || ri.windows == 0 || rj.windows == 0 ||
		math.IsNaN(ri.share) || math.IsNaN(rj.share) || ri.share < rj.share || ri.worst > 1-c.opts.Headroom {
		return false
	}
	noise := 2 * math.Sqrt(c.scatter*(1/float64(ri.windows)+1/float64(rj.windows)))
	return rj.worst-ri.worst > max(dominanceMin, noise)
}

// dominanceMin is the least difference in LC latency/target that makes one
// setting dominate another whatever the scatter learnt: two points, half
// of what the synthetic LC's p50 lost at 50 us on the H100 (1.07x against
// 1.03x standalone).
const dominanceMin = 0.02

// dominating is the rung allowed now that dominates the current one and
// gives BE the most, if any.
func (c *Controller) dominating() (int, bool) {
	best, ok := -1, false
	for i := c.lo; i <= c.hi; i++ {
		if c.dominates(i, c.cur) && (!ok || c.better(i, best, 0)) {
			best, ok = i, true
		}
	}
	return best, ok
}

// knownBetterMargin is how much more BE share another setting must be
// known to give before the controller moves there, or be known to give
// less before exploring there is not done (knownWorse): one 1 s window's
// share of a PyTorch BE is +-1 of ~27 steps (4 points), one of 500 ms
// scatters by +-3 points on the H100; a rung's share is blended over its
// windows (blendShare).
const knownBetterMargin = 0.02

// blendShare folds a window's BE share into a setting's: slowly, since
// one window of a BE that completes a few dozen steps a second is coarse.
func blendShare(old, x float64) float64 {
	switch {
	case math.IsNaN(x):
		return old
	case math.IsNaN(old):
		return x
	}
	return shareEWMA*x + (1-shareEWMA)*old
}

// baseline estimates an LC's standalone-like latency at its objective's
// quantile: the median of its recent windows under the shortest BE
// timeslice it was recently seen under with baselineMinWindows windows (or,
// before any has that many, under the shortest it was seen under at all).
// The shortest BE timeslice is the least interference the ladder offers:
// measured on an H100, an LC's latency there was 1.01x its latency alone
// for both the eager PyTorch LC and the synthetic LC with hints in one run
// each; in three repetitions of a later run the eager LC's was 0.92x, 1.43x
// and 1.26x of its standalone run, whose own p50 moved 3.7-5.0 ms
// (docs/SLO.md, must-show 1).
//
// Not the lowest window, as BBR's min-RTT filter takes: one window's
// quantile of an eager PyTorch LC ranged 5.1-8.2 ms under one setting on
// an H100 (1 s windows of 50 requests: noise of the LC's own CPU-side
// work, as large as the BE timeslice's effect). The lowest of such
// windows sets a target that no setting meets, and the search then pins
// BE at its shortest timeslice. Nor the lowest median among settings,
// which is biased low the same way, if less. A median under one fixed
// setting is as robust as its windows are many, and it resists creep: the
// longer timeslices that slow an LC never become its baseline.
type baseline struct {
	last int // tick of the last window
	// objective is the one the LC's samples last carried (its bound can
	// change with a reload; the quantile names the baseline).
	objective string
	median    bool // a tail objective's median (medianKey)
	vals      []baselineVal
	// ready: the estimate rests on baselineMinWindows windows.
	ready bool
	// rung is the setting the estimate's windows were seen under.
	rung int
	// tail: a tail quantile's windows, which scatter by multiples; the
	// step is read from its median's (step).
	tail bool
}

// mostlyBefore reports whether most of the windows the estimate rests on
// were seen before tick.
func (b *baseline) mostlyBefore(tick int) bool {
	n, old := 0, 0
	for _, x := range b.vals {
		if x.rung == b.rung {
			n++
			if x.tick < tick {
				old++
			}
		}
	}
	return 2*old > n
}

type baselineVal struct {
	tick, rung int
	v          time.Duration
}

const (
	baselineMinWindows = 8  // windows a setting needs for its median to count
	baselinePerRung    = 15 // most recent windows kept per setting
	// pausedKeep: windows with BE stopped are kept this many times
	// longer than others (5 x 120 windows = 10 minutes at 1 s): each
	// pause costs BE its whole share for PauseWindows + 1 windows.
	pausedKeep = 5
)

// add records v, seen under rung at tick (if learn), drops what is older
// than keep ticks or beyond baselinePerRung per rung, and returns the
// estimate. stepped, when not 0, is the tick from which the LC is learnt
// at a new level after it changed while it was learnt (step); the windows
// before it were dropped.
//
// With pauseNeed > 0 the estimate is the median of the windows seen with
// BE stopped (pausedRung), ready once there are pauseNeed of them.
func (b *baseline) add(tick, rung int, v time.Duration, learn bool, keep, pauseNeed int) (est time.Duration, stepped int) {
	b.last = tick
	if learn || len(b.vals) == 0 {
		b.vals = append(b.vals, baselineVal{tick, rung, v})
	}
	kept, per := make([]baselineVal, 0, len(b.vals)), map[int]int{}
	for i := len(b.vals) - 1; i >= 0; i-- { // newest first
		x := b.vals[i]
		k := keep
		if x.rung == pausedRung {
			k *= pausedKeep
		}
		// The windows a learnt estimate rests on do not age out (but
		// with BE stopped, which are learnt again when they do): else a
		// search that stays at a longer setting for long makes that its
		// baseline, and the next longer one is judged against it, up the
		// ladder. A changed LC is learnt again (relearn).
		rests := b.ready && x.rung == b.rung && x.rung != pausedRung
		if (x.tick <= tick-k && !rests) || per[x.rung] >= baselinePerRung {
			continue
		}
		per[x.rung]++
		kept = append(kept, x)
	}
	slices.Reverse(kept)
	b.vals = kept
	if at := stepAt(rung, pauseNeed); learn && !b.ready && !b.tail && at > 0 && per[rung] >= at {
		if from, ok := b.step(rung); ok {
			return b.dropBefore(rung, from, pauseNeed), from
		}
	}
	return b.estimate(pauseNeed), 0
}

// dropBefore drops the windows seen under rung before tick from (the LC
// changed then: step), and returns the estimate.
func (b *baseline) dropBefore(rung, from, pauseNeed int) time.Duration {
	b.vals = slices.DeleteFunc(b.vals, func(x baselineVal) bool { return x.rung == rung && x.tick < from })
	return b.estimate(pauseNeed)
}

// estimate sets ready and rung from the windows kept and returns the
// median of those it rests on.
func (b *baseline) estimate(pauseNeed int) time.Duration {
	per := map[int]int{}
	for _, x := range b.vals {
		per[x.rung]++
	}
	shortest, found := 0, false
	for r, n := range per {
		if r != pausedRung && n >= baselineMinWindows && (!found || r < shortest) {
			shortest, found = r, true
		}
	}
	b.ready = found && pauseNeed <= 0
	switch {
	case pauseNeed > 0 && per[pausedRung] > 0:
		shortest, b.ready = pausedRung, per[pausedRung] >= pauseNeed
	case !found:
		for r := range per {
			if r != pausedRung && (!found || r < shortest) {
				shortest, found = r, true
			}
		}
		if !found {
			shortest = pausedRung
		}
	}
	b.rung = shortest
	var vs []time.Duration
	for _, x := range b.vals {
		if x.rung == shortest {
			vs = append(vs, x.v)
		}
	}
	return median(vs)
}

// stepAt is how many windows seen under rung a baseline checks for a
// step when it is about to rest on them (0: not what it rests on): with BE
// stopped pauseNeed, if at least 4 (fewer split into halves of one
// window); beside BE baselineMinWindows.
func stepAt(rung, pauseNeed int) int {
	switch {
	case pauseNeed <= 0:
		return baselineMinWindows
	case rung == pausedRung && pauseNeed >= 4:
		return pauseNeed
	}
	return 0
}

// stepRatio is how far apart the medians of the older and the newer half
// of the windows an estimate is about to rest on must be for the LC to
// have changed while it was learnt. On the H100 a CUDA-graph LC turned
// eager 1.7 s into the 4 s it was being learnt again (resnet50: ~1.1 ms
// a request, then ~6 ms), and its baseline, half of each, made the
// eager LC 1.4-1.9x its objective under every setting; the eager LC's
// own windows scatter by +-20%. An LC warming up, 1.5-2x slower for its
// first windows, may split so too (three such windows of eight do): its
// warm-up is then dropped, as it should be, and learning it takes as
// many windows more.
const stepRatio = 1.5

// step reports whether the windows seen under rung (each a window's
// latency, oldest first) changed level while they were learnt: the
// medians of their older and newer halves stepRatio apart or more, and
// every window up to one on the older level's side of the two levels'
// geometric mean, every one from it on the newer's (windows that scatter
// about one level do not split so). from is the tick of the first window
// of the new level.
func (b *baseline) step(rung int) (from int, ok bool) {
	var xs []baselineVal
	for _, x := range b.vals {
		if x.rung == rung {
			xs = append(xs, x)
		}
	}
	n := len(xs)
	vals := func(ys []baselineVal) []time.Duration {
		out := make([]time.Duration, len(ys))
		for i, y := range ys {
			out[i] = y.v
		}
		return out
	}
	older, newer := median(vals(xs[:n/2])), median(vals(xs[n/2:]))
	if older <= 0 || newer <= 0 || max(older, newer) < time.Duration(stepRatio*float64(min(older, newer))) {
		return 0, false
	}
	mid := math.Sqrt(float64(older) * float64(newer))
	onNewer := func(x baselineVal) bool { return (float64(x.v) > mid) == (newer > older) }
	k := slices.IndexFunc(xs, onNewer)
	if k <= 0 || slices.ContainsFunc(xs[k:], func(x baselineVal) bool { return !onNewer(x) }) {
		return 0, false
	}
	return xs[k].tick, true
}

// median of vs (the mean of the middle two for an even count); vs is
// reordered.
func median(vs []time.Duration) time.Duration {
	slices.Sort(vs)
	n := len(vs)
	if n%2 == 1 {
		return vs[n/2]
	}
	return (vs[n/2-1] + vs[n/2]) / 2
}
