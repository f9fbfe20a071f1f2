package daemon

import (
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
	Roll(now time.Duration, bes []BEWindow) (float64, bool)
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

// SLOLoop is the daemon's SLO mode: once a window it builds an
// observation of every LC process's latency against its objective, asks
// the controller for the BE timeslice, and applies a change to every BE
// process through the reconciler (one all-or-nothing apply per process;
// the controller's dwell bounds the rate). Step is called from one
// goroutine; Status, Reply and Push are safe from others.
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
	// slo.calibrate: pause); nil: they cannot be, and the controller
	// learns LCs beside BE.
	Pause *Pauser

	// pausing: the last decision stopped BE (the window now ending was
	// to run without it).
	pausing bool
	// alone: the BE processes (by procKey) that shared no GPU with a
	// process outside class BE (but MPS servers) when the window now
	// ending began (BE share's rate alone).
	alone map[string]bool

	ctl  *slo.Controller
	conf sloConf
	last time.Duration // time of the last Step
	used map[sampleSource]uint64
	// tracing: the LC processes request tracing is or may be asked to
	// measure, by procKey (toTrace).
	tracing map[string]*traceWant

	mu     sync.Mutex
	status SLOStatus
}

// sloConf is what a controller was built for; a reload that changes it
// starts a new search.
type sloConf struct {
	ladder      string
	safe, floor time.Duration // floor: the shortest with two or more BE
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

// Reply is the answer to a stats push.
func (l *SLOLoop) Reply() StatsReply {
	l.mu.Lock()
	defer l.mu.Unlock()
	return StatsReply{Prepreempt: l.status.Prepreempt || !l.status.Enabled, SLO: l.status.Enabled}
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
		if l.ctl != nil {
			l.ctl = nil
			l.rec.SetClassTimeslice(class.BE, 0)
			l.rec.SetUnsliced(nil)
			l.log.Info("slo: mode off; BE back to the policy's timeslice", "be_timeslice", pol.Classes[class.BE].Timeslice)
		}
		l.mu.Lock()
		l.status = SLOStatus{Engines: l.status.Engines, Prepreempt: true}
		l.mu.Unlock()
		l.metrics.setSLO(nil)
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
	if l.ctl == nil || conf != l.conf {
		l.resume("SLO settings changed")
		c, err := slo.New(slo.Options{Ladder: pol.SLO.Ladder, Safe: conf.safe, PauseWindows: conf.pause})
		if err != nil { // the policy checked the ladder
			l.log.Error("slo: controller refused the policy's settings", "err", err)
			return
		}
		l.ctl, l.conf = c, conf
		_, apart := besideLC(l.rec.InClass(class.BE), l.rec.InClass(class.LC))
		l.rec.SetUnsliced(keysOf(apart))
		l.rec.SetClassTimeslice(class.BE, c.Current())
		l.log.Info("slo: mode on; BE at the safe timeslice until LC latency is known", "be_timeslice", c.Current(), "window", pol.SLO.Window)
		// On from here: the status says so (and what is in force) before
		// the first window ends.
		l.mu.Lock()
		l.status = SLOStatus{Enabled: true, Window: pol.SLO.Window.String(), BETimeslice: c.Current().String(),
			Safe: conf.safe.String(), SharedFloor: conf.floor.String(), Ladder: ladderOrDefault(pol.SLO.Ladder), MinBEShare: pol.SLO.MinBEShare,
			Prepreempt: pol.SLO.PrepreemptBelow <= 0 || c.Current() < pol.SLO.PrepreemptBelow, Engines: l.status.Engines, Calibrate: calibrateName(conf.pause)}
		l.mu.Unlock()
		l.metrics.setSLO(&slo.Decision{BETimeslice: c.Current(), Cause: slo.CauseNoSignal, Worst: math.NaN(), BEShare: math.NaN()})
		if l.Traced != nil {
			l.Traced.Roll(now, l.toTrace(pol, l.rec.InClass(class.LC), now))
		}
		l.last = now
		return // the first window starts now
	}

	l.rec.LearnGPUs() // which BE shares a GPU with an LC (besideLC)
	lcs := l.rec.InClass(class.LC)
	obs := slo.Observation{BEShare: math.NaN(), MinBEShare: pol.SLO.MinBEShare}
	if l.Traced != nil {
		l.Traced.Roll(now, l.toTrace(pol, lcs, now)) // the window that ends now
	}
	// The search is for the BE processes beside an LC: those on GPUs no
	// LC uses keep the policy's timeslice, are not stopped to learn an LC
	// alone, and are left out of the share and the shared floor.
	all := l.rec.InClass(class.BE)
	bes, apart := besideLC(all, lcs)
	apartKeys := keysOf(apart)
	l.rec.SetUnsliced(apartKeys)
	// Two BE processes on one GPU switch between each other at the BE
	// timeslice: below the shared floor they spend the GPU on restoring
	// each other's contexts and their weights stop splitting their
	// progress (slo.Observation.MinBETimeslice).
	if slices.ContainsFunc(bes, func(b ProcRef) bool {
		return slices.ContainsFunc(all, func(o ProcRef) bool { return o.PID != b.PID && shareGPU(b, o) })
	}) {
		obs.MinBETimeslice = conf.floor
	}
	// The window ran without BE if every BE process was held stopped
	// through it (or stopped by someone else, or gone; or there was none).
	obs.BEPaused = l.pausing && (len(bes) == 0 || l.Pause.Holding() && !slices.ContainsFunc(bes, func(p ProcRef) bool { return !l.Pause.Still(p) }))
	obs.MaxBETimeslice = l.ceiling(pol, lcs)
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
			k := procKey(p)
			aloneNow[k] = !slices.ContainsFunc(others, func(o ProcRef) bool { return shareGPU(p, o) })
			ws = append(ws, BEWindow{ProcRef: p, Alone: aloneNow[k] && l.alone[k],
				Stopped: l.pausing && l.Pause.Holds(p),
				Apart:   apartKeys[k]})
		}
		l.alone = aloneNow
		if s, ok := l.Share.Roll(now, ws); ok {
			obs.BEShare = s
		}
	}
	var st []LCStatus
	window := pol.SLO.Window
	keys := map[int]string{} // each LC's key to the controller, by pid
	for _, p := range lcs {
		o, ok := pol.Objective(p.Decision)
		ls := LCStatus{PID: p.PID, Comm: p.Comm}
		if !ok {
			ls.Signal = "no objective"
			st = append(st, ls)
			continue
		}
		// What the app pushes, or what request tracing sees of it while
		// the loop has it traced (toTrace): one source at a time, and
		// each its own key to the controller, for a traced request is
		// not what the app measures (no CPU-side work before its first
		// launch) and the two do not share a baseline.
		s, ok := l.Latency.Latest(p.PID)
		src, key := sampleSource{p.PID, "pushed"}, procKey(p)
		if w := l.tracing[key]; l.Traced != nil && w != nil && w.traced {
			s, ok = l.Traced.Latest(p.PID)
			src.kind, key = "traced", key+"/traced"
		}
		keys[p.PID] = key
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
				obs.LC = append(obs.LC, slo.LCSample{Key: key, Objective: o, Latency: lat, Requests: s.Requests, Median: s.Quantiles["p50"]})
			}
			st = append(st, ls)
		}
	}
	for src := range l.used {
		if !slices.ContainsFunc(lcs, func(p ProcRef) bool { return p.PID == src.pid }) {
			delete(l.used, src)
		}
	}

	from := l.ctl.Current()
	d := l.ctl.Observe(obs)
	if d.PauseBE && l.Pause != nil {
		// Their watchdog resumes them past the longest a calibration
		// stops them for (PauseWindows + 4 windows), if nothing else does.
		n, err := l.Pause.Stop(bes, time.Duration(conf.pause+5)*window)
		switch {
		case err != nil:
			l.log.Error("slo: could not stop BE processes to learn an LC alone; calibrating beside them", "err", err)
			l.resume("stopping failed")
		case n > 0:
			l.log.Info("slo: BE processes stopped to learn an LC alone", "processes", n, "reason", d.Reason)
		}
		l.pausing = err == nil
	} else {
		l.resume(d.Reason)
	}
	for i := range st {
		for _, r := range d.LC {
			if r.Key == keys[st[i].PID] && r.Objective == st[i].Objective {
				st[i].TargetUs, st[i].Ratio = float64(r.Target)/1e3, finite(r.Ratio)
				if sig := st[i].Signal; r.Requests < 20 && (sig == "pushed" || sig == "traced") {
					st[i].Signal = fmt.Sprintf("%s (%d requests: too few to count)", sig, r.Requests)
				}
			}
		}
	}
	if d.Changed {
		l.rec.SetClassTimeslice(class.BE, d.BETimeslice)
		l.log.Info("slo: BE timeslice changed", "from", from, "to", d.BETimeslice, "cause", d.Cause, "reason", d.Reason,
			"worst_lc_vs_objective", d.Worst, "be_share", d.BEShare, "fallback", d.Fallback)
	} else {
		l.log.Debug("slo: kept", "be_timeslice", d.BETimeslice, "cause", d.Cause, "reason", d.Reason, "worst_lc_vs_objective", d.Worst)
	}
	if d.WorkloadChanged {
		l.log.Info("slo: LC response changed under the same setting; searching again", "be_timeslice", from)
	}
	prepre := pol.SLO.PrepreemptBelow <= 0 || d.BETimeslice < pol.SLO.PrepreemptBelow
	l.mu.Lock()
	prevPre := l.status.Prepreempt || l.status.Last == nil
	n := 1
	if l.status.Last != nil {
		n = l.status.Last.Window + 1
	}
	sd := &SLODecision{Window: n, BETimeslice: d.BETimeslice.String(), Changed: d.Changed, Cause: d.Cause, Reason: d.Reason,
		Fallback: d.Fallback, BEBelowMinimum: d.BEBelowMinimum}
	l.status.Enabled, l.status.Window = true, window.String()
	l.status.BETimeslice, l.status.Safe, l.status.SharedFloor, l.status.Ladder = d.BETimeslice.String(), conf.safe.String(), conf.floor.String(), ladderOrDefault(pol.SLO.Ladder)
	l.status.BEShare, l.status.MinBEShare, l.status.WorstLC = finite(d.BEShare), pol.SLO.MinBEShare, finite(d.Worst)
	l.status.LC, l.status.Last, l.status.Prepreempt = st, sd, prepre
	l.status.Calibrate, l.status.BEStopped = calibrateName(conf.pause), nil
	if l.Share != nil {
		l.status.BE = l.Share.Status()
	}
	if l.pausing {
		for _, p := range all {
			if l.Pause.Holds(p) {
				l.status.BEStopped = append(l.status.BEStopped, p.PID)
			}
		}
	}
	l.metrics.setBEStopped(len(l.status.BEStopped))
	if d.Changed {
		l.status.LastChange = sd
		l.status.Changes++
	}
	l.mu.Unlock()
	if prepre != prevPre {
		l.log.Info("slo: hint engines told", "prepreempt", prepre, "be_timeslice", d.BETimeslice, "prepreempt_below", pol.SLO.PrepreemptBelow)
	}
	l.metrics.setSLO(&d)
	l.last = now
}

// resume resumes the BE processes the SLO mode stopped, if any.
func (l *SLOLoop) resume(why string) {
	was := l.pausing
	l.pausing = false
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

// besideLC splits the BE processes bes into those that may share a GPU
// with one of lcs (shareGPU: on a GPU not known, a BE process is taken to
// share one with every LC, and an LC with every BE), whose timeslice the
// SLO mode chooses, and those apart, which keep the policy's.
func besideLC(bes, lcs []ProcRef) (beside, apart []ProcRef) {
	for _, b := range bes {
		if slices.ContainsFunc(lcs, func(l ProcRef) bool { return shareGPU(b, l) }) {
			beside = append(beside, b)
		} else {
			apart = append(apart, b)
		}
	}
	return beside, apart
}

// keysOf is the set of ps's procKeys.
func keysOf(ps []ProcRef) map[string]bool {
	m := make(map[string]bool, len(ps))
	for _, p := range ps {
		m[procKey(p)] = true
	}
	return m
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
