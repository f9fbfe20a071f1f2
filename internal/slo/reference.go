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

// reference is what a relative objective is measured against: a process's latency with BE stopped,
// or beside BE under the shortest arm (how); learnt in window at, from vals; the process last
// counted in window last.
type reference struct {
	how        string
	vals       []float64     // ns
	medians    []float64     // the LC's median in the windows of vals (ns; none for a tail pushed alone)
	far        int           // the last windows of medians far from those before (a change within the pause)
	value, was time.Duration // 0 while not learnt; was: the value before it was learnt again (0: none)
	body       time.Duration // the LC's median (else value) when value was learnt: a move is read from it
	at, last   int
}

// String names the reference as the status shows it.
func (r *reference) String(c *Controller) string {
	what := "standalone (BE paused)"
	if r.how == objective.Shortest {
		what = fmt.Sprintf("beside BE under %v", c.shortest().BETimeslice)
	}
	if r.value == 0 {
		return fmt.Sprintf("%s: learning (%d of %d windows)", what, len(r.vals), c.opts.CalibrateWindows)
	}
	return fmt.Sprintf("%s %v, learnt in window %d", what, r.value.Round(time.Microsecond), r.at)
}

// calibration is the one running: the arm it left (and goes back to), windows in a row BE was asked
// to stop, was not kept stopped, pauses that ran long, windows run, learnt with BE stopped, pauses
// cut before any was (and whether one was taken).
type calibration struct {
	from                                   Arm
	paused, missed, rounds, n, learnt, cut int
	began                                  bool
}

// pauseMax is the most windows one pause runs: its own, BE's drain, slack.
func (c *Controller) pauseMax() int { return c.opts.CalibrateWindows + settle + calSlack }

// shortest is the arm references are learnt under beside BE: the shortest rung allowed, no gate,
// pre-preemption where allowed: the least interference the arms offer without stopping BE.
func (c *Controller) shortest() Arm {
	return c.set.clamp(Arm{BETimeslice: c.set.ladder[c.set.lo], Prepreempt: true})
}

// refFor is the reference of sample s, made if new.
func (c *Controller) refFor(s LCSample) *reference {
	k := s.Key + " " + s.Objective.Name() + "@" + s.Objective.Reference
	if c.refs[k] == nil {
		shortest := s.Objective.Reference == objective.Shortest || c.opts.NoPause
		c.refs[k] = &reference{how: map[bool]string{false: objective.Standalone, true: objective.Shortest}[shortest]}
	}
	c.refs[k].last = c.tick
	return c.refs[k]
}

// learnRef adds s's latency to its reference if it is being learnt and this window teaches it: run
// with BE stopped (after the window that drains BE's queued work), or at the shortest arm (after
// the window that mixes the arm before it).
func (c *Controller) learnRef(r *reference, s LCSample, paused bool) {
	if r.value > 0 {
		return
	}
	switch {
	case r.how == objective.Standalone && c.opts.NoPause:
		r.how, r.vals, r.medians, r.far = objective.Shortest, nil, nil, 0
	case r.how == objective.Standalone && paused && c.cal.paused > settle:
		// Two windows in a row whose median the change detector alone would count half a change
		// from those before (at the prior scatter) are the LC changing within the pause: it is
		// learnt from them on (one is outvoted). Read from the median, as changes are: a tail
		// scatters by multiples.
		r.vals = append(r.vals, float64(s.Latency))
		m, base := float64(cmp.Or(s.Median, s.Latency)), r.medians[:len(r.medians)-r.far]
		if r.far = 0; (s.Median > 0 || s.Objective.Quantile == 0.5) && len(base) > 0 && math.Abs(math.Log(m/stats.Median(base))) > c.opts.Threshold/changeWindows*scatterPrior {
			r.far = len(r.medians) - len(base) + 1
		}
		if r.medians = append(r.medians, m); r.far == 2 {
			r.vals, r.medians, r.far = r.vals[len(r.vals)-r.far:], r.medians[len(r.medians)-r.far:], 0
		}
		c.cal.learnt++
	case r.how == objective.Shortest && !paused && c.phase == phaseCalibrating && c.cur == c.shortest() && c.since > settle:
		r.vals = append(r.vals, float64(s.Latency))
	}
	// Bounded at calRounds pauses: an LC that counts now and then is learnt from what it gave.
	if len(r.vals) > 0 && (len(r.vals) >= c.opts.CalibrateWindows || c.cal.n >= calRounds*c.pauseMax()) {
		body := time.Duration(stats.Median(r.medians))
		r.value, r.at, r.vals, r.medians, r.far = time.Duration(stats.Median(r.vals)), c.tick, nil, nil, 0
		// Learnt again and moved (its body, read as changes are, past Z prior scatters): every arm
		// was judged against the reference that was. Else that one is kept, and the arms' ratios.
		switch {
		case r.was > 0 && math.Abs(math.Log(float64(body)/float64(r.body))) > c.opts.Z*scatterPrior:
			c.forget()
		case r.was > 0:
			r.value, body = r.was, r.body
		}
		r.was, r.body = 0, body
	}
}

// calibrate runs one window of calibration: BE stopped through the next window, or the shortest
// arm.
func (c *Controller) calibrate(d Decision, o Observation) Decision {
	if c.phase != phaseCalibrating {
		c.phase, c.cal, c.limitSince = phaseCalibrating, calibration{from: c.cur}, 0 // its clock restarts after
	}
	c.cal.n, c.calibrated, d.Cause = c.cal.n+1, c.calibrated+1, CauseCalibrate
	if !c.opts.NoPause && slices.ContainsFunc(slices.Collect(maps.Values(c.refs)), func(r *reference) bool {
		return r.value == 0 && r.how == objective.Standalone && c.tick-r.last < c.opts.MissingAfter // one learnt alone
	}) {
		if c.wasPaused && !o.BEPaused {
			c.cal.missed++
		}
		// A window without LC latency resumes BE, and the next pause begins with a window to drain
		// it: an LC that counts every other window would have BE stopped every other window,
		// learning nothing.
		if c.cal.paused == 0 && c.cal.began && c.cal.learnt == 0 {
			c.cal.cut++
		}
		switch {
		case c.cal.missed >= calMisses:
			d.Reason = fmt.Sprintf("BE not kept stopped (%d windows): learning references beside BE from now on; ", calMisses)
		case c.cal.cut >= calRounds:
			d.Reason = fmt.Sprintf("no window of the LC alone in %d pauses: learning references beside BE from now on; ", calRounds)
		case c.cal.paused >= c.pauseMax():
			c.cal.paused = 0
			if c.cal.rounds++; c.cal.rounds < calRounds {
				return c.stay(d, "BE resumed for a window: the pause ran long")
			}
			d.Reason = fmt.Sprintf("pauses ran long %d times: learning references beside BE from now on; ", calRounds)
		default:
			c.cal.began, c.pausing, d.PauseBE, c.cal.paused, c.paused = true, true, true, c.cal.paused+1, c.paused+1
			return c.stay(d, fmt.Sprintf("learning an LC's standalone latency with BE stopped (%d windows)", c.opts.CalibrateWindows))
		}
		c.opts.NoPause = true
	}
	return c.move(d, c.shortest(), fmt.Sprintf("learning an LC's latency beside BE under the shortest BE timeslice (%d windows)", c.opts.CalibrateWindows))
}

// endCalibration goes back to the arm the calibration left.
func (c *Controller) endCalibration(d Decision) Decision {
	c.phase, c.cusum, d.Cause = phaseDeciding, [2]float64{}, CauseCalibrate
	// A back-off lapses with an LC that earned it: estimates are per process.
	maps.DeleteFunc(c.left, func(_ Arm, b backoff) bool {
		return len(b.by) == 0 || slices.ContainsFunc(b.by, func(k string) bool { _, ok := c.active[k]; return !ok })
	})
	if to := c.set.clamp(c.cal.from); to != c.cur {
		return c.move(d, to, fmt.Sprintf("references learnt: back to %v", to))
	}
	c.since = 0 // BE resumes: the next window mixes the pause and the arm
	return c.stay(d, fmt.Sprintf("references learnt: BE resumed under %v", c.cur))
}
