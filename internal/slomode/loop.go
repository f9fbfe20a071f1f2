// Package slomode is gpreemptd's SLO mode over time. Once a window it
// reads each LC process's latency (pushed windows, request tracing) and
// the BE processes' share; joins GPUs into sets by the processes listed
// on them and keeps a search (an internal/slo controller) for each set
// with an LC; stops a search's BE processes while its LC is learnt alone;
// has the daemon apply the BE timeslice and request gate each search
// chose; and publishes its status and metrics. Of the daemon that wires
// it, it needs only the small interfaces of wiring.go.
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
	"github.com/gpreempt/gpreempt/internal/slo"
)

// Loop is the daemon's SLO mode: once a window, per GPU with an LC
// process (a search), it builds an observation of those LCs' latency
// against their objectives, asks that GPU's controller for the BE
// timeslice, and gives each BE process beside an LC the shortest its
// GPUs' searches chose, through the reconciler (one all-or-nothing apply
// per process; each controller's dwell bounds the rate). Step is called
// from one goroutine; Status, Reply and Push are safe from others.
type Loop struct {
	rec     Reconciler
	metrics Metrics
	log     *slog.Logger
	push    *pushed
	// Latency is where LC windows come from (default: the pushed ones).
	Latency LatencySource
	// Traced, when set, gives the windows of LC processes that push none
	// (request tracing: the daemon's TracedLatency); the loop closes its
	// windows.
	Traced WindowedSource
	// Scraped, when set, gives the windows of LC processes whose server's
	// own Prometheus histograms it scrapes (internal/scrape): used where
	// the app pushes none, and then not traced; the loop closes its
	// windows.
	Scraped WindowedSource
	// Share measures BE progress; nil: unknown.
	Share ShareSource
	// Pause stops BE processes while an LC is learnt alone (policy
	// slo.calibrate: pause); nil: they cannot be, and the controllers
	// learn LCs beside BE.
	Pause Pauser
	// Gate, when set, is the request gate, which holds BE through the
	// requests of the LCs whose search chose an arm with the gate.
	Gate Steerer

	// on: the mode runs under conf.
	on bool
	// searches is the mode per set of GPUs an LC process has run on, by
	// the set (api.GPUList; allGPUs: the node, while a process is on no GPU
	// NVML lists). A search whose set has no LC now is idle: its BE keep
	// the policy's timeslice. A change of the SLO settings starts every
	// search again.
	searches map[string]*search
	// unlisted: when each process NVML listed on no GPU was first seen so
	// (by ProcRef.Key), for its grace window.
	unlisted map[string]int
	// beSearch is the live search each BE process is in this window, by
	// ProcRef.Key (join).
	beSearch map[string]*search
	// alone: the BE processes (by ProcRef.Key) that shared no GPU with a
	// process outside class BE (but MPS servers) when the window now
	// ending began (BE share's rate alone).
	alone map[string]bool

	conf    sloConf
	windows int // windows the loop observed (api.SLODecision.Window)
	used    map[sampleSource]uint64
	// tracing: the LC processes request tracing is or may be asked to
	// measure, by ProcRef.Key (toTrace).
	tracing map[string]*traceWant
	// held is the hold steer last gave each LC process, by pid: what an
	// engine that gates itself was answered with at its last push.
	held map[int]bool

	mu     sync.Mutex
	status api.SLO
	// stepAt: when Step last ran (the reconciler's clock), window the
	// policy's then; 0: not yet (Reply's next_window_ms).
	stepAt, window time.Duration
	// told is what each LC process's hint engine is told (Reply), by pid.
	told map[int]bool
}

// alignSlack: a window that began up to window/alignSlack before the
// last decision still shows the setting after it (a reporter pushes a
// little ahead of the daemon's read; so little of the one before is no
// more than a window's noise).
const alignSlack = 20

// allGPUs keys the search for the node: of every process while one NVML
// lists on no GPU (past its first window: an MPS client, a node without
// NVML); api.GPUList names no GPUs so.
const allGPUs = "all"

// search is the SLO mode on one set of GPUs: those that GPU processes
// join (a process on two GPUs joins them), with an LC on one of them.
type search struct {
	key  string
	gpus []int // nil: every GPU
	ctl  *slo.Controller
	// started: it started, or came back from waiting, in this window (an
	// LC came to its GPUs), whose LC latency is not its to judge: its BE
	// ran under another setting. Its first window starts at the next.
	started bool
	// pausing: its last decision stopped its BE (the window now ending
	// was to run without them).
	pausing bool
	// lcs are the LC processes on its GPUs this window; bes the BE
	// processes there (none while lcs is empty).
	lcs, bes []policy.ProcRef
	// prepreempt: its pre-preemption arms go up to this BE timeslice (0:
	// none: no LC of it has a hint engine, or none is allowed).
	prepreempt time.Duration
	// lagged: what an LC's engine is told to do (pre-preemption; the
	// gate, to one that gates itself: gateLag) changed at the last
	// decision; it takes that at its next push, which ends the window now
	// running, so that window ran the word before, aligned or not.
	lagged, gateLag bool
	status          api.SLOSearch
}

// live says whether the search has an LC on its GPUs this window.
func (s *search) live() bool { return len(s.lcs) > 0 }

// sloConf is what the searches were started for; a reload that changes
// it starts them again.
type sloConf struct {
	ladder      string
	safe, floor time.Duration // floor: the shortest with two or more BE on a GPU
	pause       int           // slo.pause_windows (0: calibrate beside BE)
}

// New returns the SLO mode over the reconciler rec, publishing to m. now
// is rec's clock, the one Step is given: a pushed window is stamped with
// it when it comes.
func New(rec Reconciler, now func() time.Duration, m Metrics, log *slog.Logger) *Loop {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &pushed{now: now, by: map[int]LatencySample{}}
	return &Loop{rec: rec, metrics: m, log: log, push: p, Latency: p, used: map[sampleSource]uint64{}, tracing: map[string]*traceWant{}}
}

// Push takes a stats push's latency window and engine state.
func (l *Loop) Push(pid int, s api.Stats) {
	if s.Window != nil {
		l.push.push(pid, *s.Window)
	}
	if s.Engine != nil {
		l.mu.Lock()
		if l.status.Engines == nil {
			l.status.Engines = map[string]api.Engine{}
		}
		l.status.Engines[strconv.Itoa(pid)] = *s.Engine
		l.mu.Unlock()
	}
}

// PrepreemptUpTo is the longest BE timeslice at which the search over
// lcs may have hint engines pre-preempt (its pre-preemption arms); 0
// where none of lcs has an engine (it has pushed no engine state). Not
// past slo.spinner_ceiling (with a spinner taking the GPU one switch
// ahead of each request, a longer BE timeslice spares BE no switch and
// gave it less), nor at or past slo.prepreempt_below (a spinner launched
// one switch ahead cannot shorten a wait for a long BE timeslice).
func (l *Loop) PrepreemptUpTo(pol *policy.Policy, lcs []policy.ProcRef) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !slices.ContainsFunc(lcs, func(p policy.ProcRef) bool { _, ok := l.status.Engines[strconv.Itoa(p.PID)]; return ok }) {
		return 0
	}
	ladder := pol.SLO.Ladder
	if len(ladder) == 0 {
		ladder = slo.DefaultLadder
	}
	up := slices.Max(ladder)
	if c := pol.SLO.SpinnerCeiling; c > 0 {
		up = min(up, c)
	}
	if b := pol.SLO.PrepreemptBelow; b > 0 {
		up = min(up, b-1)
	}
	return up
}

// SearchTimeslice is the BE timeslice the search on the set of GPUs gpus
// (api.GPUList) holds now, live or idle; false where there is none.
// Called from Step's goroutine.
func (l *Loop) SearchTimeslice(gpus string) (time.Duration, bool) {
	s := l.searches[gpus]
	if s == nil {
		return 0, false
	}
	return s.ctl.Arm().BETimeslice, true
}

// Pushers lists the pids with pushed state (windows or engine state).
func (l *Loop) Pushers() []int {
	l.push.mu.Lock()
	out := slices.Collect(maps.Keys(l.push.by))
	l.push.mu.Unlock()
	l.mu.Lock()
	for k := range l.status.Engines {
		if pid, err := strconv.Atoi(k); err == nil {
			out = append(out, pid)
		}
	}
	l.mu.Unlock()
	return out
}

// Forget drops an exited process's pushed state.
func (l *Loop) Forget(pid int) {
	l.push.forget(pid)
	l.mu.Lock()
	delete(l.status.Engines, strconv.Itoa(pid))
	l.mu.Unlock()
}

// Reply is the answer to process pid's stats push: an LC process's engine
// stops pre-preempting where a search it is in chose a BE timeslice of
// slo.prepreempt_below or longer; another process's engine where any
// search did.
func (l *Loop) Reply(pid int) api.StatsReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := api.StatsReply{Prepreempt: l.toldLocked(pid), SLO: l.status.Enabled}
	if r.SLO && l.window > 0 && l.stepAt > 0 {
		// Past due, the read runs now: a reporter pushes ahead of the one after.
		next := max(l.stepAt+l.window-l.push.now(), time.Microsecond)
		r.NextWindowMs, r.WindowMs = float64(next)/1e6, float64(l.window)/1e6
	}
	return r
}

// toldLocked is whether process pid's engine is told to pre-preempt (l.mu
// held): as its search says, else as every search does; always with the
// mode off.
func (l *Loop) toldLocked(pid int) bool {
	pre, ok := l.told[pid]
	return pre && ok || !ok && l.status.Prepreempt || !l.status.Enabled
}

// Window is the policy's observation window (for the daemon's ticker).
func (l *Loop) Window() time.Duration { return windowOf(l.rec.Policy()) }

// windowOf is pol's observation window, its default where none is set.
func windowOf(pol *policy.Policy) time.Duration {
	return cmp.Or(max(pol.SLO.Window, 0), policy.DefaultSLOWindow)
}

// Status is the SLO mode's state, in the client's wire type: the daemon
// encodes what `gpreemptctl daemon status` and the benchmarks decode.
func (l *Loop) Status() api.SLO {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.status
	// The caller reads the copy without the lock (GET /v1/status encodes
	// it) while pushes write the loop's: nothing of it may be shared.
	s.LC = slices.Clone(s.LC)
	s.Engines = maps.Clone(s.Engines)
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
		l.resume("SLO mode off")
		if l.Share != nil {
			l.Share.Close() // BE progress is measured in SLO mode only
		}
		if l.Traced != nil && len(l.tracing) > 0 {
			l.Traced.Roll(now, nil) // so is request latency: detach every process
		}
		if l.Scraped != nil {
			l.Scraped.Roll(now, nil) // and scraping: forget every endpoint
		}
		clear(l.tracing)
		if l.on {
			l.on, l.searches, l.beSearch = false, nil, nil
			l.rec.SetBETimeslices(0, nil)
			if l.Gate != nil {
				l.Gate.Steer(nil) // the gate holds as the policy says
			}
			l.held = nil
			l.log.Info("slo: mode off; BE back to the policy's timeslice", "be_timeslice", pol.Classes[class.BE].Timeslice)
		}
		l.mu.Lock()
		l.status, l.told = api.SLO{Engines: l.status.Engines, Prepreempt: true}, nil
		l.mu.Unlock()
		l.metrics.SetSLO(false, nil)
		return
	}
	conf := sloConf{ladder: fmtLadder(pol.SLO.Ladder), safe: pol.SLO.Safe, floor: pol.SLO.SharedFloor, pause: pol.SLO.PauseWindows}
	if conf.safe <= 0 {
		conf.safe = pol.Classes[class.BE].Timeslice
	}
	if conf.floor <= 0 {
		conf.floor = conf.safe
	}
	starting := !l.on || conf != l.conf
	if starting {
		l.resume("SLO settings changed")
		if _, err := slo.New(l.options(pol, conf)); err != nil { // the policy checked the ladder
			l.log.Error("slo: controller refused the policy's settings", "err", err)
			return
		}
		// Windows count from here: what was counted before (an unlisted
		// process's first window) is forgotten with them.
		l.on, l.conf, l.searches, l.windows, l.unlisted = true, conf, map[string]*search{}, 0, nil
	}
	l.rec.LearnGPUs() // which GPUs each process is on (join)
	lcs, all := l.rec.InClass(class.LC), l.rec.InClass(class.BE)
	if l.Scraped != nil {
		l.Scraped.Roll(now, lcs) // the window that ends now; before toTrace, which leaves scraped LCs untraced
	}
	if l.Traced != nil {
		l.Traced.Roll(now, l.toTrace(pol, lcs, now)) // the window that ends now
	}
	if starting {
		l.join(pol, lcs, all)
		for _, s := range l.searches {
			s.started = false // their first window starts now, as the mode's
		}
		l.log.Info("slo: mode on; BE beside an LC at the safe timeslice until LC latency is known", "be_timeslice", conf.safe, "window", pol.SLO.Window)
		// On from here: the status says so (and what is in force) before
		// the first window ends.
		per := l.assign(all)
		l.steer(pol)
		l.publish(pol, nil, nil, all, per)
		return // the first window starts now
	}
	l.windows++
	l.join(pol, lcs, all)
	pausing := l.pausing()
	// The search is per GPU, for the BE processes beside an LC: those on
	// GPUs no LC uses keep the policy's timeslice, are not stopped to
	// learn an LC alone, and are left out of every share and shared floor.
	var rates map[string]BERate
	if l.Share != nil {
		// BE alone: no GPU process the daemon knows on its GPUs was
		// outside class BE when the window began, nor is now (an LC that
		// ran in between and went would have slowed it), but MPS servers:
		// a server runs its clients' work alone, and each client is a GPU
		// process of its own.
		others := slices.DeleteFunc(l.rec.Outside(class.BE), isMPSServer)
		aloneNow := map[string]bool{}
		var ws []BEWindow
		for _, p := range all {
			k := p.Key()
			aloneNow[k] = !slices.ContainsFunc(others, func(o policy.ProcRef) bool { return shareGPU(p, o) })
			ws = append(ws, BEWindow{ProcRef: p, Alone: aloneNow[k] && l.alone[k],
				Stopped: pausing && l.Pause.Holds(p)})
		}
		l.alone = aloneNow
		rates = l.Share.Roll(now, ws)
	}
	samples := l.lcSamples(pol, lcs, now)
	window := pol.SLO.Window
	decided := map[*search]*slo.Decision{}
	for _, s := range l.sorted() {
		// The arms: the gate where the policy's gate is on or auto, the
		// daemon runs one and it sees every LC's requests end,
		// pre-preemption where an LC has a hint engine.
		floor := l.sharedFloor(s)
		if s.prepreempt = l.PrepreemptUpTo(pol, s.lcs); s.prepreempt < floor {
			s.prepreempt = 0 // no BE timeslice allowed pre-preempts
		}
		gate := l.Gate != nil && pol.Gate.Mode != policy.GateOff &&
			!slices.ContainsFunc(s.lcs, func(p policy.ProcRef) bool { return !l.Gate.Delimits(p.PID) })
		obs := slo.Observation{BEShare: math.NaN(), MinBETimeslice: floor, MinBEShare: pol.SLO.MinBEShare,
			Gate: gate, Prepreempt: s.prepreempt}
		// A search that started in this window has its floor and arms
		// applied at once, and nothing judged: its BE ran under another
		// setting. An idle one is told there was no LC (three windows of
		// that and it falls back to slo.safe, where its next LC finds it).
		if judged := !s.started; judged {
			// The window ran without BE if every BE process of the search
			// was held stopped through it (or stopped by someone else, or
			// gone; or there was none).
			obs.BEPaused = s.pausing && (len(s.bes) == 0 || l.Pause.Holding() && !slices.ContainsFunc(s.bes, func(p policy.ProcRef) bool { return !l.Pause.Still(p) }))
			if rates != nil {
				keys := make([]string, len(s.bes))
				for i, b := range s.bes {
					keys[i] = b.Key()
				}
				obs.BEShare, _ = BEShare(rates, keys)
				// BE idle of its own accord: every BE measured launched nothing (a BE in
				// one kernel longer than a window would pass for idle).
				// A BE the gate held is not idle of its own accord.
				obs.BEIdle = !s.pausing && !s.ctl.Arm().Gate && len(keys) > 0 && !slices.ContainsFunc(keys, func(k string) bool { r, ok := rates[k]; return !ok || r.Rate > 0 })
			}
			obs.Aligned = prev > 0 && len(s.lcs) > 0 && !s.lagged
			for _, p := range s.lcs {
				w := samples[p.PID]
				obs.LC = append(obs.LC, w.samples...)
				// Its window began as the last decision took effect, give
				// or take alignSlack of a window (a reporter's lead and jitter).
				obs.Aligned = obs.Aligned && len(w.samples) > 0 && w.began >= prev-window/alignSlack
			}
		}
		from := s.ctl.Arm()
		d := s.ctl.Observe(obs)
		decided[s] = &d
		level := slog.LevelInfo
		if !s.live() {
			level = slog.LevelDebug // applies to no BE
		}
		if d.Changed {
			l.log.Log(context.Background(), level, "slo: arm changed", "gpus", s.key, "from", from, "to", d.Arm, "cause", d.Cause, "reason", d.Reason,
				"worst_lc_vs_objective", d.Worst, "be_share", d.BEShare, "fallback", d.Fallback)
		} else {
			l.log.Debug("slo: kept", "gpus", s.key, "be_timeslice", d.BETimeslice, "cause", d.Cause, "reason", d.Reason, "worst_lc_vs_objective", d.Worst)
		}
		if d.Bound != "" && d.Changed {
			l.log.Info("slo: at the limit", "gpus", s.key, "bound", d.Bound)
		}
	}
	l.pauseFor(decided, time.Duration(l.conf.pause+5)*window)
	for src := range l.used {
		if !slices.ContainsFunc(lcs, func(p policy.ProcRef) bool { return p.PID == src.pid }) {
			delete(l.used, src)
		}
	}
	per := l.assign(all)
	l.steer(pol)
	l.publish(pol, decided, samples, all, per)
}

// steer tells the request gate, for each LC of a search, whether its
// search's arm holds BE through its requests; a search whose LC gates its
// own requests and was answered otherwise at its last push lags.
func (l *Loop) steer(pol *policy.Policy) {
	if l.Gate == nil {
		return
	}
	holds, on := map[int]bool{}, pol.Gate.Mode != policy.GateOff
	for _, s := range l.searches {
		s.gateLag = false
		for _, p := range s.lcs {
			h := s.ctl.Arm().Gate
			was, steered := l.held[p.PID] // unsteered, it was told the policy's mode
			s.gateLag = s.gateLag || on && h != (was || !steered) && l.Gate.SelfGated(p.PID)
			holds[p.PID] = h
		}
	}
	l.held = holds
	l.Gate.Steer(holds)
}

// options are a search's controller options: references learnt with BE
// stopped (slo.calibrate: pause, the default) where the daemon can stop
// it, else beside BE under the shortest timeslice.
func (l *Loop) options(pol *policy.Policy, conf sloConf) slo.Options {
	return slo.Options{Ladder: pol.SLO.Ladder, Static: pol.Classes[class.BE].Timeslice, Safe: conf.safe, Window: windowOf(pol),
		PauseMax: cmp.Or(conf.pause, policy.DefaultPauseWindows) + 1, NoPause: conf.pause <= 0 || l.Pause == nil}
}
