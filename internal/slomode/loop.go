// Package slomode is gpreemptd's SLO mode over time: once a window, a search (an internal/slo controller) per set of GPUs
// with an LC decides on the LCs' latency and BE's share, and the daemon applies it through the interfaces of wiring.go.
package slomode

import (
	"cmp"
	"context"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/tsg"
)

// Loop is the daemon's SLO mode. Step and SearchTimeslice run on one goroutine; the rest are safe.
type Loop struct {
	rec     Reconciler
	now     func() time.Duration // rec's clock
	metrics Metrics
	log     *slog.Logger
	Latency signal.LatencySource  // LC windows (default: the pushed ones, Loop.Latest)
	Traced  signal.WindowedSource // request tracing, for LCs that push none; the loop closes its windows
	Scraped signal.WindowedSource // the servers' own histograms, for LCs that push none (then untraced)
	Share   signal.ShareSource    // BE progress; nil: unknown
	Pause   Pauser                // stops BE while an LC is learnt alone; nil: LCs are learnt beside BE
	Gate    Steerer               // the request gate, which holds BE for a search whose arm has it

	conf     sloConf
	searches map[string]*search // by their GPUs (api.GPUList); a change of conf starts them again; nil: the mode is off
	unlisted map[string]int     // when each process on no GPU NVML lists was first seen so, by ProcRef.Key
	beSearch map[string]*search // the live search each BE process is in, by ProcRef.Key
	alone    map[string]bool    // BE processes beside no process outside BE (but MPS servers) as the window began
	windows  int                // windows observed (api.SLODecision.Window)
	used     map[sampleSource]uint64
	tracing  map[string]*traceWant // the LC processes request tracing may measure, by ProcRef.Key
	held     map[int]bool          // whether the gate holds BE for each LC, by pid: a self-gating engine's last answer

	mu             sync.Mutex
	status         api.SLO
	stepAt, window time.Duration          // when Step last ran (0: not yet) and the window then: Reply's next_window_ms
	told           map[int]bool           // whether each LC's hint engine is told to pre-preempt, by pid
	pushed         map[int]signal.Latency // each process's last pushed window, by pid
	engines        map[int]api.Engine     // each pushing process's engine state, by pid
}

// alignSlack: a window that began up to window/alignSlack before the last decision shows the arm after it (a reporter pushes ahead).
const alignSlack = 20

// search is the SLO mode on one set of GPUs, those that processes join.
type search struct {
	key        string
	gpus       []int // nil: every GPU
	ctl        *slo.Controller
	decided    *slo.Decision    // in this window (none as the mode comes on)
	started    bool             // in this window (an LC came): its BE ran under another arm, so nothing is judged
	pausing    bool             // its last decision stopped its BE
	lcs, bes   []policy.ProcRef // the LC and BE processes on its GPUs this window (no BE without an LC)
	prepreempt time.Duration    // its pre-preemption arms go up to this BE timeslice (0: none)
	lagged     bool             // an LC's engine takes a changed word (pre-preemption, the gate) at its next push: the window now running ran the one before
	status     api.SLOSearch
}

func (s *search) live() bool { return len(s.lcs) > 0 }

// sloConf is what the searches were started for.
type sloConf struct {
	ladder      string
	safe, floor time.Duration // floor: the shortest with two or more BE on a GPU
	pause       int           // slo.pause_windows (0: calibrate beside BE)
}

// New returns the SLO mode over rec, publishing to m; now, rec's clock, stamps each pushed window.
func New(rec Reconciler, now func() time.Duration, m Metrics, log *slog.Logger) *Loop {
	l := &Loop{rec: rec, now: now, metrics: m, log: cmp.Or(log, slog.New(slog.DiscardHandler)), used: map[sampleSource]uint64{},
		tracing: map[string]*traceWant{}, pushed: map[int]signal.Latency{}, engines: map[int]api.Engine{}}
	l.Latency = l
	return l
}

// PrepreemptUpTo is the longest BE timeslice lcs' hint engines may pre-preempt at (slo.spinner_ceiling, slo.prepreempt_below); 0: no engine state.
func (l *Loop) PrepreemptUpTo(pol *policy.Policy, lcs []policy.ProcRef) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.ContainsFunc(lcs, func(p policy.ProcRef) bool { _, ok := l.engines[p.PID]; return ok }) {
		return 0
	}
	up := slices.Max(pol.SLO.Rungs()) // either bound 0: none
	return min(up, cmp.Or(pol.SLO.SpinnerCeiling, up), cmp.Or(pol.SLO.PrepreemptBelow, up+1)-1)
}

// SearchTimeslice is the BE timeslice the search on gpus (api.GPUList) holds, live or idle.
func (l *Loop) SearchTimeslice(gpus string) (time.Duration, bool) {
	if s := l.searches[gpus]; s != nil {
		return s.ctl.Arm().BETimeslice, true
	}
	return 0, false
}

// Reply is the answer to pid's stats push: whether its engine pre-preempts, when the next read is.
func (l *Loop) Reply(pid int) api.StatsReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := api.StatsReply{Prepreempt: l.toldLocked(pid), SLO: l.status.Enabled}
	if r.SLO && l.window > 0 && l.stepAt > 0 {
		next := max(l.stepAt+l.window-l.now(), time.Microsecond) // past due, the read runs now: a reporter pushes ahead of the one after
		r.NextWindowMs, r.WindowMs = float64(next)/1e6, float64(l.window)/1e6
	}
	return r
}

// toldLocked is whether pid's engine is told to pre-preempt (l.mu held): as its search says, else as all do; always with the mode off.
func (l *Loop) toldLocked(pid int) bool {
	pre, ok := l.told[pid]
	return pre && ok || !ok && l.status.Prepreempt || !l.status.Enabled
}

// Window is the policy's observation window (for the daemon's ticker).
func (l *Loop) Window() time.Duration { return windowOf(l.rec.Policy()) }

func windowOf(pol *policy.Policy) time.Duration {
	return cmp.Or(max(pol.SLO.Window, 0), policy.DefaultSLOWindow)
}

// Status is the SLO mode's state, sharing nothing that pushes write while the caller encodes it.
func (l *Loop) Status() api.SLO {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.status
	s.LC, s.Engines = slices.Clone(s.LC), map[string]api.Engine{}
	for pid, e := range l.engines {
		s.Engines[strconv.Itoa(pid)] = e
	}
	return s
}

// Step runs one window ending at now (the reconciler's clock).
func (l *Loop) Step(now time.Duration) {
	pol := l.rec.Policy()
	l.mu.Lock()
	prev := l.stepAt
	l.stepAt, l.window = now, windowOf(pol)
	l.mu.Unlock()
	if !pol.SLO.Enabled {
		l.off(pol, now)
		return
	}
	safe := cmp.Or(max(pol.SLO.Safe, 0), pol.Classes[class.BE].Timeslice)
	conf := sloConf{ladder: fmtLadder(pol.SLO.Ladder), safe: safe, floor: cmp.Or(max(pol.SLO.SharedFloor, 0), safe), pause: pol.SLO.PauseWindows}
	starting := l.searches == nil || conf != l.conf
	if starting {
		l.resume("SLO settings changed")
		if _, err := slo.New(l.options(pol, conf)); err != nil { // the policy checked the ladder
			l.log.Error("slo: controller refused the policy's settings", "err", err)
			return
		}
		l.conf, l.searches, l.windows, l.unlisted = conf, map[string]*search{}, -1, nil // windows count from here, an unlisted process's too
	}
	l.windows++
	l.rec.LearnGPUs()
	lcs, all := l.rec.InClass(class.LC), l.rec.InClass(class.BE)
	if l.Scraped != nil {
		l.Scraped.Roll(now, lcs) // before toTrace, which leaves scraped LCs untraced
	}
	if l.Traced != nil {
		l.Traced.Roll(now, l.toTrace(pol, lcs, now))
	}
	l.join(pol, lcs, all)
	var samples map[int]lcWindow
	if starting { // the first window starts now, and the status says what is in force
		l.log.Info("slo: mode on; BE beside an LC at the safe timeslice until LC latency is known", "be_timeslice", conf.safe, "window", pol.SLO.Window)
	} else {
		samples = l.lcSamples(pol, lcs, now)
		l.decide(pol, all, samples, now, prev)
		l.pauseFor(time.Duration(l.conf.pause+5) * pol.SLO.Window)
		maps.DeleteFunc(l.used, func(src sampleSource, _ uint64) bool {
			return !slices.ContainsFunc(lcs, func(p policy.ProcRef) bool { return p.PID == src.pid })
		})
	}
	l.publish(pol, samples, all, l.assign(all))
	if l.Gate != nil { // whether each LC's search's arm holds BE through its requests
		l.Gate.Steer(l.held)
	}
}

// off ends the mode: BE resumed, at the policy's timeslice, and nothing measured.
func (l *Loop) off(pol *policy.Policy, now time.Duration) {
	l.resume("SLO mode off")
	if l.Share != nil {
		l.Share.Close()
	}
	if l.Traced != nil && len(l.tracing) > 0 {
		l.Traced.Roll(now, nil)
	}
	if l.Scraped != nil {
		l.Scraped.Roll(now, nil)
	}
	clear(l.tracing)
	if l.searches != nil {
		l.searches, l.beSearch, l.held = nil, nil, nil
		l.rec.SetBETimeslices(tsg.Opt[time.Duration]{}, nil) // the policy's
		if l.Gate != nil {
			l.Gate.Steer(nil) // the gate holds as the policy says
		}
		l.log.Info("slo: mode off; BE back to the policy's timeslice", "be_timeslice", pol.Classes[class.BE].Timeslice)
	}
	l.mu.Lock()
	l.status, l.told = api.SLO{Prepreempt: true}, nil
	l.metrics.SetSLO(l.status)
	l.mu.Unlock()
}

// decide has each search decide on the window ending at now (prev: the last one's end). Only BE beside an LC is
// searched for: the others keep the policy's timeslice, are not stopped, and are left out of every share and floor.
func (l *Loop) decide(pol *policy.Policy, all []policy.ProcRef, samples map[int]lcWindow, now, prev time.Duration) {
	pausing := l.pausing()
	var rates map[string]signal.BERate
	if l.Share != nil {
		// BE alone: no GPU process outside BE on its GPUs as the window began nor now, but MPS servers (which run their clients' work)
		others := slices.DeleteFunc(l.rec.Outside(class.BE), isMPSServer)
		aloneNow := map[string]bool{}
		var ws []signal.BEWindow
		for _, p := range all {
			k := p.Key()
			aloneNow[k] = !slices.ContainsFunc(others, func(o policy.ProcRef) bool { return shareGPU(p, o) })
			ws = append(ws, signal.BEWindow{ProcRef: p, Alone: aloneNow[k] && l.alone[k], Stopped: pausing && l.Pause.Holds(p)})
		}
		l.alone, rates = aloneNow, l.Share.Roll(now, ws)
	}
	for _, s := range l.sorted() {
		floor := l.sharedFloor(s)
		if s.prepreempt = l.PrepreemptUpTo(pol, s.lcs); s.prepreempt < floor {
			s.prepreempt = 0 // no BE timeslice allowed pre-preempts
		}
		gate := l.Gate != nil && pol.Gate.Mode != policy.GateOff && // where the policy allows it and it sees every LC's requests end
			!slices.ContainsFunc(s.lcs, func(p policy.ProcRef) bool { return !l.Gate.Delimits(p.PID) })
		obs := slo.Observation{BEShare: math.NaN(), MinBETimeslice: floor, MinBEShare: pol.SLO.MinBEShare, Gate: gate, Prepreempt: s.prepreempt}
		if !s.started { // one started in this window has its arms applied and nothing judged; an idle one is told there was no LC (and falls back)
			// Without BE: every BE of the search held stopped through the window (or by someone else, or gone; or none).
			obs.BEPaused = s.pausing && (len(s.bes) == 0 || l.Pause.Holding() && !slices.ContainsFunc(s.bes, func(p policy.ProcRef) bool { return !l.Pause.Still(p) }))
			obs.BEShare = signal.BEShare(rates, s.bes)   // NaN without rates
			obs.BEIdle = !s.pausing && len(s.bes) > 0 && // of its own accord: every BE has a rate, of 0, and none was held by the gate all window
				!slices.ContainsFunc(s.bes, func(b policy.ProcRef) bool { r, ok := rates[b.Key()]; return !ok || r.Rate > 0 }) &&
				!(s.ctl.Arm().Gate && l.Gate != nil && slices.ContainsFunc(s.bes, func(b policy.ProcRef) bool { return l.Gate.HeldSince(b, prev) }))
			obs.Aligned = prev > 0 && s.live() && !s.lagged
			for _, p := range s.lcs {
				w := samples[p.PID]
				obs.LC = append(obs.LC, w.samples...)
				obs.Aligned = obs.Aligned && len(w.samples) > 0 && w.began >= prev-pol.SLO.Window/alignSlack
			}
		}
		from, d := s.ctl.Arm(), s.ctl.Observe(obs) // the arm before this window's decision, then the decision
		s.decided = &d
		if !d.Changed {
			l.log.Debug("slo: kept", "gpus", s.key, "be_timeslice", d.Arm.BETimeslice, "cause", d.Cause, "reason", d.Reason, "worst_lc_vs_objective", d.Worst)
			continue
		}
		level := map[bool]slog.Level{true: slog.LevelInfo, false: slog.LevelDebug}[s.live()] // an idle search's applies to no BE
		l.log.Log(context.Background(), level, "slo: arm changed", "gpus", s.key, "from", from, "to", d.Arm, "cause", d.Cause, "reason", d.Reason,
			"worst_lc_vs_objective", d.Worst, "be_share", d.BEShare, "fallback", d.Phase == slo.Fallback.String())
		if d.Bound != "" {
			l.log.Info("slo: at the limit", "gpus", s.key, "bound", d.Bound)
		}
	}
}

// options are a search's controller options: references learnt with BE stopped (slo.calibrate: pause) where the daemon can, else beside BE.
func (l *Loop) options(pol *policy.Policy, conf sloConf) slo.Options {
	return slo.Options{Ladder: pol.SLO.Ladder, Static: pol.Classes[class.BE].Timeslice, Safe: conf.safe, Window: windowOf(pol),
		PauseMax: cmp.Or(conf.pause, policy.DefaultPauseWindows) + 1, NoPause: conf.pause <= 0 || l.Pause == nil}
}
