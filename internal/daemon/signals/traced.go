package signals

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/bits"
	"slices"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/attach"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// TracedLatency measures LC request latency from uprobes on libcuda, for
// apps that do not push their own. A request is what request.Delimiter
// delimits, the definition the request gate and `gpreemptctl trace
// requests` share: a busy period of the process, from the first launch
// after a quiet gap (learnt per process) to the return of the last
// synchronize before the next one. That is the GPU part of a request as
// the app's threads wait for it, not arrival to result: CPU-side
// preparation before the first launch is not in it. A process never quiet
// (a continuous-batching decode loop) is measured per step instead
// (synchronize return to synchronize return), and its windows say so
// (signal.TracedStep): their steps are tpot_ samples, and they
// carry no request latency. The SLO loop closes a window once per its own
// window (Roll) and reads each process's last closed window (Latest).
// Safe for concurrent use: Apply runs on the tracer's reader, the rest on
// the loop.
type TracedLatency struct {
	mu     sync.Mutex
	delims map[int]*request.Delimiter
	cur    map[int]*tracedWindow // this window's requests and steps by pid
	last   map[int]lastWindow    // the last closed window's
	start  time.Duration         // when this window began (the loop's clock; -1: not yet)
	gaps   map[int]time.Duration // each process's quiet gap as this window began
	// unit is each process's typical CPU gap: the CPU speed its per-CPU samples are taken at.
	unit  map[int]cpuUnit
	rolls uint64 // windows closed
	seq   uint64
	// Ceiling is the quiet gap until a process's own is learnt, and the
	// most it may be (default: the policy's default gate idle).
	Ceiling time.Duration
	// AsMeasured gives no per-CPU samples: every LC judged by its latency as measured
	// (gpreemptd --trace-per-cpu=false), where BE's CPU work shares the LC's cores and its cost
	// there should count.
	AsMeasured bool

	// Per process (OpenTracedLatency without a library): the processes
	// traced, by ProcRef.Key, through the libcuda each has mapped (Library;
	// default trace.FindLibrary with its pid). With the loop only.
	tracer  processTracer
	Library func(pid int) (string, error)
	procs   map[string]*tracedProc
	log     *slog.Logger
	// since: per process, the attached pids and when each was attached
	// (the loop's clock, the events' own): a request that began before
	// is not counted, nor is any call of a pid not attached (strays:
	// still on their way when it was detached). Under mu.
	since  map[int]time.Duration
	strays uint64
	// begun: per process, when its attach returned (the events' clock,
	// clock()): its probes all in, so that a busy period under way as they
	// went in is a piece, no request. Under mu.
	begun map[int]time.Duration
	clock func() time.Duration // the events' clock
	// probed is when the probes on a library (not per process) were all
	// in: a busy period under way then, in a process running before, is a piece.
	probed time.Duration
	// guard bounds what one process's library costs a window.
	guard attach.Guard
}

// tracedWindow is one process's requests and steps in the open window:
// at most signal.MaxSamples values of each, and how many there were.
type tracedWindow struct {
	requests, steps   []time.Duration
	nRequests, nSteps int
	// perCPU: requests each at the process's unit CPU speed (over its CPU gap); noCPU: the process was not judged so
	// at one of them (no unit yet, or too few of its requests launch-bound).
	perCPU []time.Duration
	noCPU  bool
	// together is the start of the earliest busy period of requests run
	// back to back in it (0: none): each of them ended somewhere since;
	// nTogether how many requests such busy periods held.
	together  time.Duration
	nTogether int
}

// cpuUnit is how a process's requests are taken per CPU.
type cpuUnit struct {
	// v: the geometric mean of the CPU gaps of unitRequests launch-bound requests after the first
	// unitSkip (0 until then), fixed from there so that every per-CPU sample after is at one speed
	// near the process's own; logSum and n build it.
	logSum float64
	n      int
	v      time.Duration
	// last: the last launch-bound request's gap, in window rolls since (a request that is not is
	// taken at it while it is recent).
	last     time.Duration
	lastRoll uint64
	// recent: its last 32 requests, a bit each, set where launch-bound; on: judged per CPU (entered
	// at boundOn of them, left under boundOff, so that a share on the edge does not flip it).
	recent uint32
	on     bool
	seen   uint64 // the roll of its last request: a pid quiet for unitKept rolls is forgotten
}

const (
	unitSkip, unitRequests = 8, 32 // the first requests warm up (libraries load, the allocator grows)
	// launchBound: a request's latency is its CPU's work, and taken per its CPU gap, where its launches'
	// CPU work (launches times the gap) is this share of it or more.
	launchBound = 0.5
	// Of an LC's last 32 requests, those launch-bound to be judged per CPU (90%), and under which it no
	// longer is (75%): a GPU-bound LC's windows are not taken at a speed its latency does not follow.
	boundOn, boundOff = 29, 24
	fillerRolls       = 2  // windows a request without a gap of its own may be taken at the last one's speed
	unitKept          = 60 // windows a quiet pid keeps its unit: a pid reused later learns its own
)

// isLaunchBound reports whether r's latency is its CPU's work: its launches' CPU work (launches times its CPU gap) at
// least launchBound of it.
func isLaunchBound(r request.Request) bool {
	return r.CPUGap > 0 && float64(r.Launches)*float64(r.CPUGap) >= launchBound*float64(r.Latency())
}

// lastWindow is a process's last closed window, and how many of its requests ran back to back.
type lastWindow struct {
	signal.Latency
	together int
}

// processTracer attaches request tracing to one process
// (trace.Tracer with Options.PerProcess).
type processTracer interface {
	AttachProcess(pid int, library string) error
	DetachProcess(pid int)
}

// tracedProc is one process per-process tracing was asked for: when it
// was attached (or tried), and why not.
type tracedProc struct {
	pid int
	at  time.Duration
	err string
}

// NewTracedLatency returns a source with no window yet.
func NewTracedLatency() *TracedLatency {
	return &TracedLatency{delims: map[int]*request.Delimiter{}, cur: map[int]*tracedWindow{},
		last: map[int]lastWindow{}, start: -1, gaps: map[int]time.Duration{}, unit: map[int]cpuUnit{}, Ceiling: policy.DefaultGateIdle,
		clock: func() time.Duration { return time.Duration(trace.Now()) }}
}

// Apply folds one tracer event in.
func (t *TracedLatency) Apply(ev trace.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x, ok := ev.(*trace.TaskExit); ok {
		delete(t.delims, int(x.PID))
		delete(t.cur, int(x.PID))
		delete(t.last, int(x.PID))
		delete(t.unit, int(x.PID))
		return
	}
	c, ok := ev.(*trace.Call)
	if !ok {
		return
	}
	pid := int(c.PID)
	if t.since != nil {
		if _, ok := t.since[pid]; !ok {
			t.strays++
			return
		}
	}
	d := t.delims[pid]
	if d == nil {
		// A busy period under way as the probes went in is no request; per process, one
		// while the attach is under way is a piece (begin tells when it returned).
		since, pending := t.probed, false
		if t.since != nil {
			b, ok := t.begun[pid]
			since, pending = b, !ok
		}
		d = request.NewDelimiter(c.PID, request.DelimiterConfig{Ceiling: t.Ceiling, Since: uint64(max(since, 0)), Pending: pending})
		t.delims[pid] = d
	}
	if r, ok := d.Apply(ev); ok {
		t.takeLocked(r)
	}
}

// takeLocked counts a request or step that ended in the open window.
func (t *TracedLatency) takeLocked(r request.Request) {
	if r.Result != 0 || r.Launches == 0 || r.Latency() <= 0 {
		return // a failed synchronization, or one with nothing launched, served nothing
	}
	pid := int(r.PID)
	// Per process (a call of a pid not attached went above): a request
	// open when its process was detached would end at the first return
	// after the next attach, spanning the time between.
	if at, ok := t.since[pid]; ok && time.Duration(r.Start) < at {
		return
	}
	w := t.cur[pid]
	if w == nil {
		w = &tracedWindow{}
		t.cur[pid] = w
	}
	if r.Kind == request.KindStep {
		if w.nSteps++; len(w.steps) < signal.MaxSamples {
			w.steps = append(w.steps, r.Latency())
		}
		return
	}
	if r.Count() > 1 {
		w.nTogether += r.Count()
		if w.together == 0 || time.Duration(r.Start) < w.together {
			w.together = time.Duration(r.Start)
		}
	}
	var u cpuUnit
	if !t.AsMeasured { // judged as measured: no CPU speed to learn
		u = t.learnUnit(pid, r)
	}
	w.noCPU = w.noCPU || t.AsMeasured || u.v == 0 || !u.on || t.rolls-u.lastRoll > fillerRolls
	for range r.Count() { // requests that ran back to back, each at their mean
		if w.nRequests++; len(w.requests) < signal.MaxSamples {
			w.requests = append(w.requests, r.Each())
			if !w.noCPU {
				w.perCPU = append(w.perCPU, time.Duration(float64(r.Each())*float64(u.v)/float64(u.last)))
			}
		}
	}
}

// learnUnit folds r into pid's CPU unit: whether its requests are launch-bound, and its typical CPU gap.
func (t *TracedLatency) learnUnit(pid int, r request.Request) cpuUnit {
	u := t.unit[pid]
	own := isLaunchBound(r)
	for range r.Count() { // requests run back to back count each
		u.recent <<= 1
		if own {
			u.recent |= 1
		}
	}
	u.seen = t.rolls
	if own {
		u.last, u.lastRoll, u.n = r.CPUGap, t.rolls, u.n+1
		if u.v == 0 && u.n > unitSkip {
			u.logSum += math.Log(float64(r.CPUGap))
		}
		if u.v == 0 && u.n == unitSkip+unitRequests {
			u.v = time.Duration(math.Exp(u.logSum / unitRequests))
		}
	}
	switch k := bits.OnesCount32(u.recent); {
	case k >= boundOn:
		u.on = true
	case k < boundOff:
		u.on = false
	}
	t.unit[pid] = u
	return u
}

// Roll closes the window that ends at now: each process with requests or
// steps in it gets a sample of them. A request that has not ended by now
// (its quiet gap has not passed) is in the window it ends in. Traced per
// process, the processes of lcs are traced from now on and the others no
// longer.
func (t *TracedLatency) Roll(now time.Duration, lcs []policy.ProcRef) {
	if t.tracer != nil {
		t.follow(now, lcs)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, d := range t.delims {
		if r, ok := d.Tick(uint64(max(now, 0))); ok {
			t.takeLocked(r)
		}
	}
	defer func() { // the next window's LagBefore: a request that ended less than its gap ago is counted there
		clear(t.gaps)
		for pid, d := range t.delims {
			if d.Mode() == request.KindRequest {
				t.gaps[pid] = d.Gap()
			}
		}
	}()
	if t.start < 0 || now <= t.start {
		t.start = now
		clear(t.cur) // requests before the first window began are not in any
		return
	}
	for pid, w := range t.cur {
		t.seq++
		t.last[pid] = lastWindow{t.sampleLocked(pid, w, now), w.nTogether}
	}
	// The loop reads a window up to two windows old; older ones are of
	// processes that stopped or went (the uprobes report no exits).
	for pid, s := range t.last {
		if now-s.At > lastKept*(now-t.start) {
			delete(t.last, pid)
		}
	}
	t.rolls++
	maps.DeleteFunc(t.unit, func(_ int, u cpuUnit) bool { return t.rolls-u.seen > unitKept }) // no exits seen library-wide
	clear(t.cur)
	t.start = now
}

// sampleLocked is pid's window w ending at now. A process measured per
// step has its steps as tpot_ samples (Tokens) and no request latency:
// an objective on its requests cannot be judged from its trace.
func (t *TracedLatency) sampleLocked(pid int, w *tracedWindow, now time.Duration) signal.Latency {
	s := signal.Latency{At: now, Window: now - t.start, Source: signal.TracedRequest, Seq: t.seq,
		Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}}
	d := t.delims[pid]
	s.LagBefore = t.gaps[pid] // where the last window's span ended, so that spans abut
	if w.together > 0 {
		s.LagBefore = max(s.LagBefore, t.start-w.together) // requests run back to back ended anywhere in their busy period
	}
	if d != nil && d.Mode() == request.KindRequest {
		s.Lag = d.Gap() // a request is counted once quiet for its gap; a step as it ends
	}
	if d != nil && d.Mode() == request.KindStep || w.nRequests == 0 {
		s.Source = signal.TracedStep
	}
	if len(w.requests) > 0 && s.Source == signal.TracedRequest {
		s.Requests = w.nRequests
		s.Samples[signal.MetricRequest] = w.requests
		if !w.noCPU {
			s.PerCPU = map[string][]time.Duration{signal.MetricRequest: w.perCPU}
		}
		maps.Copy(s.Quantiles, latencyQuantiles(w.requests, ""))
	}
	if len(w.steps) > 0 {
		s.Tokens = w.nSteps
		s.Samples[signal.MetricTPOT] = w.steps
		maps.Copy(s.Quantiles, latencyQuantiles(w.steps, signal.MetricTPOT+"_"))
	}
	return s
}

// lastKept is how many windows a process's last closed window is kept
// after its last request.
const lastKept = 4

// follow attaches the processes of lcs not traced yet (again after
// attach.Retry when it failed: a process may map libcuda late) and detaches
// the others.
func (t *TracedLatency) follow(now time.Duration, lcs []policy.ProcRef) {
	dropGone(t.procs, lcs, func(tp *tracedProc) {
		t.tracer.DetachProcess(tp.pid)
		t.track(tp.pid, -1)
		if tp.err == "" {
			t.log.Info("request tracing: no longer tracing a process (it pushes its latency, left class LC or went)", "pid", tp.pid)
		}
	})
	find := t.Library
	if find == nil {
		find = attach.MappedLibCUDA
	}
	deadline := time.Now().Add(attach.Budget)
	for _, p := range lcs {
		k := p.Key()
		tp := t.procs[k]
		retry := tp != nil && tp.err != "" && now-tp.at >= attach.Retry
		if tp != nil && !retry {
			continue
		}
		tp = &tracedProc{pid: p.PID, at: now}
		var lib string
		err := t.guard.Run(p.PID, deadline, func() error {
			l, err := find(p.PID)
			if err == nil {
				t.track(p.PID, now) // before the first event can come
				if err = t.tracer.AttachProcess(p.PID, l); err != nil {
					t.track(p.PID, -1)
				} else {
					t.begin(p.PID)
				}
			}
			lib = l
			return err
		}, func() { t.tracer.DetachProcess(p.PID); t.track(p.PID, -1) })
		if err != nil {
			tp.err = err.Error()
			attachFailed(t.log, retry, "request tracing: not tracing an LC process that pushes no latency", p, err)
		} else {
			t.log.Info("request tracing: tracing an LC process that pushes no latency", "pid", p.PID, "comm", p.Comm, "libcuda", lib)
		}
		t.procs[k] = tp
	}
}

// track counts pid's requests that begin from at on; at < 0: none, and
// what was open or measured of pid is forgotten.
func (t *TracedLatency) track(pid int, at time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.delims, pid) // drops its open request, and what it learnt
	delete(t.cur, pid)
	delete(t.begun, pid)
	delete(t.unit, pid) // a pid reused, or the process traced again: its unit learnt again
	if at < 0 {
		delete(t.since, pid)
		delete(t.last, pid)
		return
	}
	t.since[pid] = at
}

// begin records that pid's probes are all in now: an attach takes tens of
// milliseconds after track, and a busy period under way through it is a piece.
func (t *TracedLatency) begin(pid int) {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.begun[pid] = now
	if d := t.delims[pid]; d != nil {
		d.Begin(uint64(now))
	}
}

// Latest is pid's last closed window.
func (t *TracedLatency) Latest(pid int) (signal.Latency, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.last[pid]
	return s.Latency, ok
}

// latencyQuantiles are the quantiles the SLO loop reads
// (signal.Quantiles), each named with prefix ("tpot_" for steps),
// nearest-rank over lat as stats.Summarize takes them.
func latencyQuantiles(lat []time.Duration, prefix string) map[string]time.Duration {
	ns := make([]float64, len(lat))
	for i, d := range lat {
		ns[i] = float64(d)
	}
	s := stats.Summarize(ns)
	return map[string]time.Duration{prefix + "p50": time.Duration(s.P50), prefix + "p90": time.Duration(s.P90),
		prefix + "p99": time.Duration(s.P99), prefix + "p999": time.Duration(s.P999), prefix + "max": time.Duration(s.Max)}
}

// TracedLC is what request tracing sees of one LC process (the daemon's
// status, "traced").
type TracedLC struct {
	PID int `json:"pid"`
	// Source is its last window's (signal.TracedRequest, or
	// signal.TracedStep for a process never quiet); Mode is how it is
	// measured now ("request" or "step").
	Source string `json:"source,omitempty"`
	Mode   string `json:"mode"`
	// QuietGapUs is the gap that ends its requests; Learnt, whether it
	// was learnt from its own gaps (else the ceiling, the policy's idle).
	QuietGapUs float64 `json:"quiet_gap_us"`
	Learnt     bool    `json:"learnt"`
	// Samples is how many requests (or steps) its last window held, P50Us
	// their median.
	Samples int     `json:"samples"`
	P50Us   float64 `json:"p50_us"`
	// Together is how many of those requests ran back to back, with no
	// quiet gap between them, each counted at its busy period's mean.
	Together int `json:"together,omitempty"`
	// RequestLaunches is one request's launches once 8 told apart show the
	// program (0 before); RequestsVary: its requests differ in size (or a
	// busy period was off every multiple), so back-to-back ones are not
	// divided now. RequestSizes: the launches of the last requests told apart,
	// oldest first, that both are judged from.
	RequestLaunches int   `json:"request_launches,omitempty"`
	RequestsVary    bool  `json:"requests_vary,omitempty"`
	RequestSizes    []int `json:"request_sizes,omitempty"`
}

// Status is each traced process as request tracing sees it, by pid.
func (t *TracedLatency) Status() []TracedLC {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]TracedLC, 0, len(t.delims))
	for pid, d := range t.delims {
		lc := TracedLC{PID: pid, Mode: d.Mode().String(), QuietGapUs: float64(d.Gap()) / 1e3, Learnt: d.Learnt()}
		lc.RequestLaunches, lc.RequestsVary, lc.RequestSizes = d.Program()
		if s, ok := t.last[pid]; ok {
			lc.Source = s.Source
			lc.Samples, lc.P50Us, lc.Together = s.Requests, float64(s.Quantiles["p50"])/1e3, s.together
			if s.Source == signal.TracedStep {
				lc.Samples, lc.P50Us = s.Tokens, float64(s.Quantiles[signal.MetricTPOT+"_p50"])/1e3
			}
		}
		out = append(out, lc)
	}
	slices.SortFunc(out, func(a, b TracedLC) int { return a.PID - b.PID })
	return out
}

// OpenTracedLatency loads uprobes on libcuda's launch and synchronize
// functions (trace.RequestProbes) and
// feeds what they report into a TracedLatency until ctx is done. lib "":
// per process, each LC process the loop names (Roll) through the libcuda
// it has mapped, so that no other process takes the breakpoints (a BE
// launching 20,000 kernels a second would pay ~4.7 us a launch on the
// H100, and fill the ring buffer); else on the file lib for every process
// that maps it (a path the daemon sees, as the chart's host mount). The
// returned func detaches. Errors are the tracer's (trace.ErrNotRoot,
// trace.ErrBPFUnavailable, trace.ErrNoLibrary, trace.ErrNoSymbols).
func OpenTracedLatency(ctx context.Context, lib string, log *slog.Logger) (*TracedLatency, func() error, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	path, perProcess := "", lib == ""
	if !perProcess {
		var err error
		if path, err = trace.FindLibrary(trace.LibCUDA, lib, 0); err != nil {
			return nil, nil, err
		}
	}
	tr, err := trace.Open(ctx, trace.Options{Probes: trace.RequestProbes(path), PerProcess: perProcess, MountTracefs: true, Buffer: 1 << 14, Logger: log})
	if err != nil {
		if perProcess {
			return nil, nil, fmt.Errorf("request tracing: %w", err)
		}
		return nil, nil, fmt.Errorf("request tracing on %s: %w", path, err)
	}
	t := NewTracedLatency()
	t.log = log
	if perProcess {
		t.tracer, t.procs, t.since, t.begun = tr, map[string]*tracedProc{}, map[int]time.Duration{}, map[int]time.Duration{}
	} else {
		t.probed = time.Duration(tr.Start())
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range tr.Events() {
			t.Apply(ev)
		}
	}()
	return t, func() error {
		tr.Stop()
		<-done
		return tr.Close()
	}, nil
}

// dropGone deletes from m, by ProcRef.Key, the processes not in ps, and calls
// gone with each one deleted.
func dropGone[V any](m map[string]V, ps []policy.ProcRef, gone func(V)) {
	keys := make(map[string]bool, len(ps))
	for _, p := range ps {
		keys[p.Key()] = true
	}
	for k, v := range m {
		if !keys[k] {
			gone(v)
			delete(m, k)
		}
	}
}
