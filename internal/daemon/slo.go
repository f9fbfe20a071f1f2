package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/daemon/client"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
)

// LatencySample is one LC process's request latency over one window.
type LatencySample struct {
	// At is when the daemon received it (the reconciler's clock).
	At       time.Duration
	Window   time.Duration
	Requests int
	// Quantiles by name ("p50", "p99", ...).
	Quantiles map[string]time.Duration
	// Seq numbers a process's samples, so one is used once.
	Seq uint64
}

// LatencySource gives an LC process's latest latency window. The pushed
// windows of POST /v1/stats are one; request tracing (TracedLatency:
// uprobes on libcuda) is another, for apps that do not push.
type LatencySource interface {
	Latest(pid int) (LatencySample, bool)
}

// WindowedSource is a LatencySource whose windows the SLO loop closes,
// once per its own window (TracedLatency), naming the LC processes it is
// wanted for: those that pushed no recent window.
type WindowedSource interface {
	LatencySource
	Roll(now time.Duration, lcs []ProcRef)
}

// ShareSource measures BE progress relative to BE alone, in [0, 1]
// (BEProgress: kernel launches counted by uprobes on the BE processes'
// libcuda). Roll closes the window ending at now over the BE processes
// bes, each with what the window was to it (BEWindow), and gives the
// share of those beside an LC. Without a source, BE share is unknown
// (NaN) and the controller keeps the longest BE timeslice that meets
// every LC objective (docs/SLO.md). Close ends the measuring when SLO
// mode is turned off.
type ShareSource interface {
	Roll(now time.Duration, bes []BEWindow) map[string]BERate
	Status() []client.SLOBE
	Close()
}

// pushed holds the windows apps pushed over the socket.
type pushed struct {
	mu  sync.Mutex
	now func() time.Duration
	by  map[int]LatencySample
}

func (p *pushed) push(pid int, w LatencyWindow) {
	s := LatencySample{Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
		Quantiles: map[string]time.Duration{}}
	for q, us := range w.LatencyUs {
		s.Quantiles[q] = time.Duration(us * float64(time.Microsecond))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.At = p.now()
	s.Seq = p.by[pid].Seq + 1
	p.by[pid] = s
}

func (p *pushed) Latest(pid int) (LatencySample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.by[pid]
	return s, ok
}

func (p *pushed) forget(pid int) {
	p.mu.Lock()
	delete(p.by, pid)
	p.mu.Unlock()
}

// quantileName is the pushed quantile that stands for q: the named one at
// or above it (p99 for 0.95), so an objective is never checked against a
// lower quantile than it names.
func quantileName(q float64) string {
	for _, c := range []struct {
		q    float64
		name string
	}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}, {0.999, "p999"}} {
		if q <= c.q+1e-9 {
			return c.name
		}
	}
	return "max"
}

// SLOLoop is the daemon's SLO mode: once a window, per GPU with an LC
// process (a search), it builds an observation of those LCs' latency
// against their objectives, asks that GPU's controller for the BE
// timeslice, and gives each BE process beside an LC the shortest its
// GPUs' searches chose, through the reconciler (one all-or-nothing apply
// per process; each controller's dwell bounds the rate). Step is called
// from one goroutine; Status, Reply and Push are safe from others.
type SLOLoop struct {
	rec     *Reconciler
	metrics *Metrics
	log     *slog.Logger
	push    *pushed
	// Latency is where LC windows come from (default: the pushed ones).
	Latency LatencySource
	// Traced, when set, gives the windows of LC processes that push none
	// (request tracing: TracedLatency); the loop closes its windows.
	Traced WindowedSource
	// Share measures BE progress; nil: unknown.
	Share ShareSource
	// Pause stops BE processes while an LC is learnt alone (policy
	// slo.calibrate: pause); nil: they cannot be, and the controllers
	// learn LCs beside BE.
	Pause *Pauser

	// on: the mode runs under conf.
	on bool
	// searches is the mode per set of GPUs an LC process has run on, by
	// the set (client.GPUList; allGPUs: the node, while a process is on no GPU
	// NVML lists). A search whose set has no LC now is idle: its BE keep
	// the policy's timeslice. A change of the SLO settings starts every
	// search again.
	searches map[string]*search
	// unlisted: when each process NVML listed on no GPU was first seen so
	// (by procKey), for its grace window.
	unlisted map[string]int
	// beSearch is the live search each BE process is in this window, by
	// procKey (join).
	beSearch map[string]*search
	// alone: the BE processes (by procKey) that shared no GPU with a
	// process outside class BE (but MPS servers) when the window now
	// ending began (BE share's rate alone).
	alone map[string]bool

	conf    sloConf
	windows int           // windows the loop observed (SLODecision.Window)
	last    time.Duration // time of the last Step
	used    map[sampleSource]uint64
	// tracing: the LC processes request tracing is or may be asked to
	// measure, by procKey (toTrace).
	tracing map[string]*traceWant

	mu     sync.Mutex
	status SLOStatus
	// told is what each LC process's hint engine is told (Reply), by pid.
	told map[int]bool
}

// allGPUs keys the search for the node: of every process while one NVML
// lists on no GPU (past its first window: an MPS client, a node without
// NVML); client.GPUList names no GPUs so.
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
	lcs, bes []ProcRef
	status   client.SLOSearch
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

// NewSLOLoop returns the SLO mode of the daemon whose reconciler is rec.
func NewSLOLoop(rec *Reconciler, m *Metrics, log *slog.Logger) *SLOLoop {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &pushed{now: func() time.Duration { return rec.Now() }, by: map[int]LatencySample{}}
	return &SLOLoop{rec: rec, metrics: m, log: log, push: p, Latency: p, used: map[sampleSource]uint64{}, tracing: map[string]*traceWant{}}
}

// Push takes a stats push's latency window.
func (l *SLOLoop) Push(pid int, s HintStats) {
	if s.Window != nil {
		l.push.push(pid, *s.Window)
	}
	if s.Engine != nil {
		l.mu.Lock()
		if l.status.Engines == nil {
			l.status.Engines = map[string]EngineState{}
		}
		l.status.Engines[strconv.Itoa(pid)] = *s.Engine
		l.mu.Unlock()
	}
}

// ceiling is the longest BE timeslice the controller may choose now (0:
// none):
//   - slo.spinner_ceiling while an LC process's hint engine launches
//     spinners (its pushed engine state says prepreempt): past it a
//     longer BE timeslice gave BE less, not more (policy.SLO);
//   - under slo.prepreempt_below while an LC process with a tail
//     objective (above p50) runs a hint engine at all. From that setting
//     on the daemon tells engines to stop pre-preempting, and such an LC
//     waits out BE's timeslice on every request: a tail objective pays
//     for the try itself (on the H100 one try of 500 us set a synthetic
//     LC's p99 at 10.6x).
func (l *SLOLoop) ceiling(pol *policy.Policy, lcs []ProcRef) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var c time.Duration
	lower := func(t time.Duration) {
		if t > 0 && (c == 0 || t < c) {
			c = t
		}
	}
	for _, p := range lcs {
		os, ok := pol.Objective(p.Decision)
		e, hints := l.status.Engines[strconv.Itoa(p.PID)]
		if !ok || !hints {
			continue
		}
		if e.Prepreempt {
			lower(pol.SLO.SpinnerCeiling)
		}
		if pol.SLO.PrepreemptBelow > 0 && slices.ContainsFunc(os, slo.Objective.Tail) {
			lower(pol.SLO.PrepreemptBelow - 1)
		}
	}
	return c
}

// Pushers lists the pids with pushed state (windows or engine state).
func (l *SLOLoop) Pushers() []int {
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
func (l *SLOLoop) Forget(pid int) {
	l.push.forget(pid)
	l.mu.Lock()
	delete(l.status.Engines, strconv.Itoa(pid))
	l.mu.Unlock()
}

// Reply is the answer to process pid's stats push: an LC process's engine
// stops pre-preempting where a search it is in chose a BE timeslice of
// slo.prepreempt_below or longer; another process's engine where any
// search did.
func (l *SLOLoop) Reply(pid int) StatsReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	pre, ok := l.told[pid]
	if !ok {
		pre = l.status.Prepreempt
	}
	return StatsReply{Prepreempt: pre || !l.status.Enabled, SLO: l.status.Enabled}
}

// Window is the policy's observation window (for the daemon's ticker).
func (l *SLOLoop) Window() time.Duration {
	if w := l.rec.Policy().SLO.Window; w > 0 {
		return w
	}
	return policy.DefaultSLOWindow
}

// The SLO mode's status is the client's wire type: the daemon encodes
// what `gpreemptctl daemon status` and the benchmarks decode.
type (
	SLOStatus   = client.SLO
	LCStatus    = client.SLOLC
	SLODecision = client.SLODecision
)

// Status is the SLO mode's state.
func (l *SLOLoop) Status() SLOStatus {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.status
	// The caller reads the copy without the lock (GET /v1/status encodes
	// it) while pushes write the loop's: nothing of it may be shared.
	s.LC = slices.Clone(s.LC)
	s.Engines = maps.Clone(s.Engines)
	return s
}

func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// ladderOrDefault is the ladder in force, as the status shows it.
func ladderOrDefault(l []time.Duration) string {
	if len(l) == 0 {
		l = slo.DefaultLadder
	}
	return fmtLadder(l)
}

func fmtLadder(l []time.Duration) string {
	s := ""
	for i, d := range l {
		if i > 0 {
			s += ","
		}
		s += d.String()
	}
	return s
}

// Step runs one window ending at now (the reconciler's clock).
func (l *SLOLoop) Step(now time.Duration) {
	pol := l.rec.Policy()
	if !pol.SLO.Enabled {
		l.resume("SLO mode off")
		if l.Share != nil {
			l.Share.Close() // BE progress is measured in SLO mode only
		}
		if l.Traced != nil && len(l.tracing) > 0 {
			l.Traced.Roll(now, nil) // so is request latency: detach every process
		}
		clear(l.tracing)
		if l.on {
			l.on, l.searches, l.beSearch = false, nil, nil
			l.rec.SetBETimeslices(0, nil)
			l.log.Info("slo: mode off; BE back to the policy's timeslice", "be_timeslice", pol.Classes[class.BE].Timeslice)
		}
		l.mu.Lock()
		l.status, l.told = SLOStatus{Engines: l.status.Engines, Prepreempt: true}, nil
		l.mu.Unlock()
		l.metrics.setSLO(false, nil)
		l.last = now
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
		l.publish(pol, nil, nil, all, l.assign(all))
		l.last = now
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
			k := p.key()
			aloneNow[k] = !slices.ContainsFunc(others, func(o ProcRef) bool { return shareGPU(p, o) })
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
		obs := slo.Observation{BEShare: math.NaN(), MinBETimeslice: l.sharedFloor(s), MaxBETimeslice: l.ceiling(pol, s.lcs), MinBEShare: pol.SLO.MinBEShare}
		// A search that started in this window has its floor and ceiling
		// applied at once, and nothing judged: its BE ran under another
		// setting. An idle one is told there was no LC (three windows of
		// that and it falls back to slo.safe, where its next LC finds it).
		if judged := !s.started; judged {
			// The window ran without BE if every BE process of the search
			// was held stopped through it (or stopped by someone else, or
			// gone; or there was none).
			obs.BEPaused = s.pausing && (len(s.bes) == 0 || l.Pause.Holding() && !slices.ContainsFunc(s.bes, func(p ProcRef) bool { return !l.Pause.Still(p) }))
			if rates != nil {
				keys := make([]string, len(s.bes))
				for i, b := range s.bes {
					keys[i] = b.key()
				}
				obs.BEShare, _ = beShare(rates, keys)
			}
			for _, p := range s.lcs {
				obs.LC = append(obs.LC, samples[p.PID].samples...)
			}
		}
		from := s.ctl.Current()
		d := s.ctl.Observe(obs)
		decided[s] = &d
		level := slog.LevelInfo
		if !s.live() {
			level = slog.LevelDebug // applies to no BE
		}
		if d.Changed {
			l.log.Log(context.Background(), level, "slo: BE timeslice changed", "gpus", s.key, "from", from, "to", d.BETimeslice, "cause", d.Cause, "reason", d.Reason,
				"worst_lc_vs_objective", d.Worst, "be_share", d.BEShare, "fallback", d.Fallback)
		} else {
			l.log.Debug("slo: kept", "gpus", s.key, "be_timeslice", d.BETimeslice, "cause", d.Cause, "reason", d.Reason, "worst_lc_vs_objective", d.Worst)
		}
		if d.WorkloadChanged {
			l.log.Info("slo: LC response changed under the same setting; searching again", "gpus", s.key, "be_timeslice", from)
		}
	}
	l.pauseFor(decided, time.Duration(l.conf.pause+5)*window)
	for src := range l.used {
		if !slices.ContainsFunc(lcs, func(p ProcRef) bool { return p.PID == src.pid }) {
			delete(l.used, src)
		}
	}
	per := l.assign(all)
	l.publish(pol, decided, samples, all, per)
	l.last = now
}

// options are a search's controller options.
func (l *SLOLoop) options(pol *policy.Policy, conf sloConf) slo.Options {
	return slo.Options{Ladder: pol.SLO.Ladder, Safe: conf.safe, CalibrateWindows: conf.pause, NoPause: conf.pause <= 0 || l.Pause == nil}
}

// join puts each process of lcs and all in the search of the set of GPUs
// it is on (GPUs are in one set when a process is listed on both),
// starting one at the safe setting for a set with an LC that has none,
// and gives each search its LC and BE processes. While a process is on no
// GPU NVML lists, past the first window it was seen so (NVML lists a
// context ~80 ms after its channel groups appear, after it was classed;
// at once where NVML lists no process at all),
// there is one search for the node (allGPUs), of every process: it may
// share a GPU with any, and no BE is then set by two searches, each
// judging it by a setting not in force. A process in its first window
// unlisted is in no search (a BE gets the shortest timeslice of all:
// assign). A search that had no LC and has again starts its window anew,
// as a new one.
func (l *SLOLoop) join(pol *policy.Policy, lcs, all []ProcRef) {
	procs := slices.Concat(lcs, all)
	// Where NVML lists no process at all (no NVML), there is nothing to
	// wait for.
	listing := slices.ContainsFunc(procs, func(p ProcRef) bool { return len(p.GPUs) > 0 })
	seen := map[string]int{}
	node := false
	for _, p := range procs {
		if len(p.GPUs) > 0 {
			continue
		}
		k := p.key()
		first, ok := l.unlisted[k]
		if !ok && listing {
			first = l.windows
		} else if !ok {
			first = -1
		}
		seen[k] = first
		node = node || first < l.windows
	}
	l.unlisted = seen
	// The sets: GPUs joined by the processes listed on them.
	root := map[int]int{}
	var find func(int) int
	find = func(g int) int {
		if r, ok := root[g]; ok && r != g {
			r = find(r)
			root[g] = r
			return r
		}
		root[g] = g
		return g
	}
	for _, p := range procs {
		for _, g := range p.GPUs {
			if a, b := find(p.GPUs[0]), find(g); a != b {
				root[max(a, b)] = min(a, b)
			}
		}
	}
	sets := map[int][]int{} // by their smallest GPU, the root
	for g := range root {
		sets[find(g)] = append(sets[find(g)], g)
	}
	for _, gs := range sets {
		slices.Sort(gs)
	}
	// setOf names the search of p: by the GPUs of its set, nil for the
	// node's; false for a process in its first window unlisted, in none.
	setOf := func(p ProcRef) ([]int, bool) {
		switch {
		case node && (len(p.GPUs) > 0 || seen[p.key()] < l.windows):
			return nil, true
		case len(p.GPUs) == 0:
			return nil, false
		}
		return sets[find(p.GPUs[0])], true
	}
	for _, s := range l.searches {
		s.started = !s.live() // it had no LC last window
		s.lcs, s.bes = nil, nil
	}
	l.beSearch = map[string]*search{}
	for _, p := range lcs {
		gs, ok := setOf(p)
		if !ok {
			continue
		}
		k := client.GPUList(gs)
		s := l.searches[k]
		if s == nil {
			c, err := slo.New(l.options(pol, l.conf))
			if err != nil { // New took these options when the mode came on
				l.log.Error("slo: controller refused the policy's settings", "err", err)
				continue
			}
			s = &search{key: k, gpus: gs, ctl: c, started: true}
			l.searches[k] = s
			if l.windows > 0 || len(l.searches) > 1 {
				l.log.Info("slo: an LC on GPUs without a search: their BE at the safe timeslice until LC latency is known", "gpus", k, "be_timeslice", c.Current())
			}
		}
		s.lcs = append(s.lcs, p)
	}
	for _, b := range all {
		gs, ok := setOf(b)
		if s := l.searches[client.GPUList(gs)]; ok && s != nil && s.live() {
			s.bes = append(s.bes, b)
			l.beSearch[b.key()] = s
		}
	}
	for _, s := range l.searches {
		if !s.live() {
			s.started = false
		}
	}
}

// sorted lists the searches by their GPUs (allGPUs first).
func (l *SLOLoop) sorted() []*search {
	out := slices.Collect(maps.Values(l.searches))
	slices.SortFunc(out, func(a, b *search) int { return slices.Compare(a.gpus, b.gpus) })
	return out
}

// pausing says whether a search's last decision stopped BE.
func (l *SLOLoop) pausing() bool {
	for s := range maps.Values(l.searches) {
		if s.pausing {
			return true
		}
	}
	return false
}

// assign gives each BE process of all the BE timeslice chosen by the
// live search it is in (the policy's where it is in none), and one that
// starts before the next window, or is in its first window on no GPU NVML
// lists, the shortest of every live search: until NVML lists it, it may
// share a GPU with any LC. It returns the timeslice each one is given, by
// procKey (0: the policy's).
func (l *SLOLoop) assign(all []ProcRef) map[string]time.Duration {
	var def time.Duration
	for _, s := range l.searches {
		if c := s.ctl.Current(); s.live() && (def == 0 || c < def) {
			def = c
		}
	}
	per := make(map[string]time.Duration, len(all))
	for _, b := range all {
		switch s := l.beSearch[b.key()]; {
		case s != nil:
			per[b.key()] = s.ctl.Current()
		case len(b.GPUs) > 0:
			per[b.key()] = 0 // in no live search: the policy's
		case def > 0:
			per[b.key()] = def // unlisted, in its first window
		}
	}
	l.rec.SetBETimeslices(def, per)
	return per
}

// sharedFloor is the shortest BE timeslice search s may choose: two BE
// processes on one GPU switch between each other at the BE timeslice,
// and below the shared floor they spend the GPU on restoring each other's
// contexts and their weights stop splitting their progress
// (slo.Observation.MinBETimeslice).
func (l *SLOLoop) sharedFloor(s *search) time.Duration {
	if slices.ContainsFunc(s.bes, func(b ProcRef) bool {
		return slices.ContainsFunc(s.bes, func(o ProcRef) bool { return o.key() != b.key() && shareGPU(b, o) })
	}) {
		return l.conf.floor
	}
	return 0
}

// pauseFor keeps stopped the BE processes of each live search whose
// decision was to learn an LC alone, each search its own (with a watchdog
// of its own, resuming them past the longest a calibration stops them
// for, max, if nothing else does), and resumes the others the mode holds.
// A search whose BE could not be stopped calibrates beside them.
func (l *SLOLoop) pauseFor(decided map[*search]*slo.Decision, max time.Duration) {
	wants := func(s *search) bool { d := decided[s]; return l.Pause != nil && d != nil && d.PauseBE && s.live() }
	why := ""
	var keep []ProcRef
	for _, s := range l.sorted() {
		if wants(s) {
			keep = append(keep, s.bes...)
		} else if d := decided[s]; s.pausing && d != nil && why == "" {
			why = d.Reason
		}
	}
	if len(keep) == 0 {
		l.resume(why)
		return
	}
	if n, err := l.Pause.ResumeExcept(keep); err != nil {
		l.log.Error("slo: resuming BE processes", "err", err)
	} else if n > 0 {
		l.log.Info("slo: BE processes resumed", "processes", n, "reason", why)
	}
	for _, s := range l.sorted() {
		if s.pausing = wants(s); !s.pausing {
			continue
		}
		n, err := l.Pause.Stop(s.bes, max)
		switch {
		case err != nil:
			l.log.Error("slo: could not stop BE processes to learn an LC alone; calibrating beside them", "gpus", s.key, "err", err)
			s.pausing = false
			keep = slices.DeleteFunc(keep, func(b ProcRef) bool {
				return slices.ContainsFunc(s.bes, func(o ProcRef) bool { return o.key() == b.key() })
			})
			if _, err := l.Pause.ResumeExcept(keep); err != nil {
				l.log.Error("slo: resuming BE processes", "err", err)
			}
		case n > 0:
			l.log.Info("slo: BE processes stopped to learn an LC alone", "gpus", s.key, "processes", n)
		}
	}
}

// lcWindow is one LC process's window: its status rows (one per
// objective) and its samples to the controllers.
type lcWindow struct {
	rows    []LCStatus
	samples []slo.LCSample
	key     string // its key to the controllers
}

// lcSamples reads each LC process's latest window, by pid.
func (l *SLOLoop) lcSamples(pol *policy.Policy, lcs []ProcRef, now time.Duration) map[int]lcWindow {
	window := pol.SLO.Window
	out := map[int]lcWindow{}
	for _, p := range lcs {
		o, ok := pol.Objective(p.Decision)
		ls := LCStatus{PID: p.PID, Comm: p.Comm}
		if !ok {
			ls.Signal = "no objective"
			out[p.PID] = lcWindow{rows: []LCStatus{ls}}
			continue
		}
		// What the app pushes, or what request tracing sees of it while
		// the loop has it traced (toTrace): one source at a time, and
		// each its own key to the controller, for a traced request is
		// not what the app measures (no CPU-side work before its first
		// launch) and the two do not share a baseline.
		s, ok := l.Latency.Latest(p.PID)
		src, key := sampleSource{p.PID, "pushed"}, p.key()
		if w := l.tracing[key]; l.Traced != nil && w != nil && w.traced {
			s, ok = l.Traced.Latest(p.PID)
			src.kind, key = "traced", key+"/traced"
		}
		w := lcWindow{key: key}
		// A traced window is one of the loop's: the one the tracer closed
		// when the mode came on spans the time it was off.
		fresh := ok && s.Seq != l.used[src] && now-s.At <= 2*window && (src.kind != "traced" || s.Window <= 2*window)
		if fresh {
			l.used[src] = s.Seq
		}
		// One row, and one sample, per objective: a process may bound
		// its median and its tail.
		for _, o := range o {
			ls := ls
			ls.Objective = o.String()
			switch {
			case !ok:
				ls.Signal = "none pushed"
				if l.Traced != nil {
					ls.Signal = "none pushed or traced"
				}
			case !fresh:
				ls.Signal = "stale"
			default:
				lat, ok := s.Quantiles[quantileName(o.Quantile)]
				if !ok {
					ls.Signal = src.kind + " without " + quantileName(o.Quantile)
					break
				}
				ls.Signal, ls.Requests, ls.LatencyUs = src.kind, s.Requests, float64(lat)/1e3
				// The median goes with a tail objective: workload changes
				// are read from it (slo.LCSample.Median).
				w.samples = append(w.samples, slo.LCSample{Key: key, Objective: o, Latency: lat, Requests: s.Requests, Median: s.Quantiles["p50"]})
			}
			w.rows = append(w.rows, ls)
		}
		out[p.PID] = w
	}
	return out
}

// publish sets the status, what hint engines are told, and the metrics,
// after a window whose decisions are decided, over the LC windows
// samples (none when the mode came on), which gave each BE process of all
// the timeslice per names.
func (l *SLOLoop) publish(pol *policy.Policy, decided map[*search]*slo.Decision, samples map[int]lcWindow, all []ProcRef, per map[string]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prevPre := l.status.Prepreempt
	st := SLOStatus{Enabled: true, Window: pol.SLO.Window.String(), Safe: l.conf.safe.String(), SharedFloor: l.conf.floor.String(),
		Ladder: ladderOrDefault(pol.SLO.Ladder), MinBEShare: pol.SLO.MinBEShare, Calibrate: calibrateName(l.conf.pause),
		Engines: l.status.Engines, Prepreempt: true}
	told := map[int]bool{}
	metrics := map[string]slo.Decision{}
	var worst float64 = math.NaN()
	var lcRows []LCStatus
	for _, s := range l.sorted() {
		d := decided[s]
		ss := &s.status
		ss.GPUs, ss.BETimeslice, ss.LCs = s.gpus, s.ctl.Current().String(), len(s.lcs)
		pre := pol.SLO.PrepreemptBelow <= 0 || s.ctl.Current() < pol.SLO.PrepreemptBelow
		ss.Prepreempt = pre
		// What an idle search decides applies to no BE: neither shown nor
		// counted.
		if d != nil && s.live() {
			sd := &SLODecision{Window: l.windows, BETimeslice: d.BETimeslice.String(), Changed: d.Changed, Cause: d.Cause, Reason: d.Reason,
				Fallback: d.Fallback, BEBelowMinimum: d.BEBelowMinimum}
			ss.Last, ss.BEShare, ss.WorstLC = sd, finite(d.BEShare), finite(d.Worst)
			if d.Changed {
				ss.LastChange = sd
				ss.Changes++
			}
		}
		st.Changes += ss.Changes
		if !s.live() {
			continue
		}
		st.Searches = append(st.Searches, *ss)
		st.Prepreempt = st.Prepreempt && pre
		for _, p := range s.lcs {
			told[p.PID] = pre // an LC process is in one search
		}
		if d != nil {
			metrics[s.key] = *d
			if !math.IsNaN(d.Worst) && (math.IsNaN(worst) || d.Worst > worst) {
				worst = d.Worst
			}
		} else {
			metrics[s.key] = slo.Decision{BETimeslice: s.ctl.Current(), Cause: slo.CauseNoSignal, Worst: math.NaN(), BEShare: math.NaN()}
		}
		lcRows = append(lcRows, searchRows(s, d, samples)...)
	}
	st.WorstLC, st.LC = finite(worst), lcRows
	if len(st.Searches) == 1 {
		ss := st.Searches[0]
		st.BETimeslice, st.BEShare, st.Last, st.LastChange = ss.BETimeslice, ss.BEShare, ss.Last, ss.LastChange
	}
	if l.Share != nil && l.windows > 0 {
		st.BE = l.Share.Status()
		for i := range st.BE {
			b := &st.BE[i]
			if j := slices.IndexFunc(all, func(p ProcRef) bool { return p.PID == b.PID }); j >= 0 {
				ts, named := per[all[j].key()]
				b.Apart = named && ts == 0
				if ts > 0 {
					b.Timeslice = ts.String()
				}
			}
		}
	}
	if l.pausing() {
		for _, p := range all { // by pid
			if l.beSearch[p.key()] != nil && l.Pause.Holds(p) {
				st.BEStopped = append(st.BEStopped, p.PID)
			}
		}
	}
	l.metrics.setBEStopped(len(st.BEStopped))
	l.metrics.setSLO(true, metrics)
	if l.windows > 0 && st.Prepreempt != prevPre {
		l.log.Info("slo: hint engines told", "prepreempt", st.Prepreempt, "prepreempt_below", pol.SLO.PrepreemptBelow)
	}
	l.status, l.told = st, told
}

// searchRows are the status rows of search s's LC processes in their
// windows samples, against its decision d (nil: none this window).
func searchRows(s *search, d *slo.Decision, samples map[int]lcWindow) []LCStatus {
	var out []LCStatus
	var res []slo.LCResult
	if d != nil {
		res = d.LC
	}
	for _, p := range s.lcs {
		w := samples[p.PID]
		for _, row := range w.rows {
			row.GPUs = s.gpus
			for _, r := range res {
				if r.Key == w.key && r.Objective == row.Objective {
					row.TargetUs, row.Ratio = float64(r.Target)/1e3, finite(r.Ratio)
					if sig := row.Signal; r.Requests < 20 && (sig == "pushed" || sig == "traced") {
						row.Signal = fmt.Sprintf("%s (%d requests: too few to count)", sig, r.Requests)
					}
				}
			}
			out = append(out, row)
		}
	}
	return out
}

// resume resumes the BE processes the SLO mode stopped, if any.
func (l *SLOLoop) resume(why string) {
	was := l.pausing()
	for _, s := range l.searches {
		s.pausing = false
	}
	if l.Pause == nil || !was && !l.Pause.Holding() {
		return
	}
	l.mu.Lock()
	l.status.BEStopped = nil
	l.mu.Unlock()
	l.metrics.setBEStopped(0)
	if err := l.Pause.Resume(); err != nil {
		l.log.Error("slo: resuming BE processes", "err", err)
		return
	}
	l.log.Info("slo: BE processes resumed", "reason", why)
}

// Close resumes what the SLO mode stopped: the daemon calls it on its
// way out (a daemon that dies leaves that to the Pauser's watchdog).
func (l *SLOLoop) Close() { l.resume("gpreemptd stopping") }

func calibrateName(pause int) string {
	if pause > 0 {
		return "pause"
	}
	return "shortest"
}

// shareGPU says whether a and b may share a GPU: one of them is listed on
// no GPU (NVML did not list it yet, or does not list it at all) or they
// are listed on one GPU.
func shareGPU(a, b ProcRef) bool {
	return a.GPUs == nil || b.GPUs == nil || slices.ContainsFunc(a.GPUs, func(g int) bool { return slices.Contains(b.GPUs, g) })
}

// sampleSource is where an LC process's windows come from ("pushed" or
// "traced"): each numbers its own, and a window is used once.
type sampleSource struct {
	pid  int
	kind string
}

// An MPS server is the executable nvidia-cuda-mps-server; where its path
// could not be read, the command name, which the kernel cuts to 15
// characters (the control daemon shares it, but holds no channel group, so
// it is not a GPU process the daemon knows).
const (
	mpsServerExe  = "nvidia-cuda-mps-server"
	mpsServerComm = "nvidia-cuda-mps"
)

// isMPSServer says whether p is an MPS server: every channel group it
// holds runs its clients' work.
func isMPSServer(p ProcRef) bool {
	if p.Exe != "" {
		return filepath.Base(p.Exe) == mpsServerExe
	}
	return p.Comm == mpsServerComm
}

// traceWant is one LC process as request tracing sees it: when the loop
// first saw it, whether tracing is asked for it, and for how many windows
// in a row it has pushed since.
type traceWant struct {
	seen   time.Duration
	traced bool
	pushed int
}

// Request tracing waits traceAfter windows for a new LC process to push
// (an app that pushes has done so by then), and goes on tracing one that
// starts pushing until it has pushed in untraceAfter windows in a row: an
// app that pushes less often than every two windows is not attached and
// detached in turn.
const (
	traceAfter   = 2
	untraceAfter = 4
)

// toTrace lists the processes of lcs request tracing is to measure: those
// with an objective whose app pushed no window in the last two, and each
// one traced until it pushes steadily. Once a window.
func (l *SLOLoop) toTrace(pol *policy.Policy, lcs []ProcRef, now time.Duration) []ProcRef {
	window := pol.SLO.Window
	var judged, out []ProcRef
	for _, p := range lcs {
		// Not judged, or an MPS server classed lc (its clients launch
		// from their own libcuda): nothing to measure.
		if _, ok := pol.Objective(p.Decision); ok && !isMPSServer(p) {
			judged = append(judged, p)
		}
	}
	dropGone(l.tracing, judged, func(*traceWant) {})
	for _, p := range judged {
		k := procKey(p)
		w := l.tracing[k]
		if w == nil {
			w = &traceWant{seen: now}
			l.tracing[k] = w
		}
		s, ok := l.Latency.Latest(p.PID)
		fresh := ok && now-s.At <= 2*window // the loop uses no older push
		switch {
		case !w.traced:
			w.traced = !fresh && now-w.seen >= traceAfter*window
			w.pushed = 0
		case fresh:
			w.pushed++
			w.traced = w.pushed < untraceAfter
		default:
			w.pushed = 0
		}
		if w.traced {
			out = append(out, p)
		}
	}
	return out
}

// procKey names an LC process to the controller: its pid and start time,
// so that a reused pid is a new process.
func procKey(p ProcRef) string { return strconv.Itoa(p.PID) + "/" + strconv.FormatUint(p.Start, 10) }

func (p ProcRef) key() string { return procKey(p) }

// dropGone deletes from m, by procKey, the processes not in ps, and calls
// gone with each one deleted.
func dropGone[V any](m map[string]V, ps []ProcRef, gone func(V)) {
	keys := make(map[string]bool, len(ps))
	for _, p := range ps {
		keys[procKey(p)] = true
	}
	for k, v := range m {
		if !keys[k] {
			gone(v)
			delete(m, k)
		}
	}
}
