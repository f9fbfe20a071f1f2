package request

import (
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// Kind says how a Request was delimited.
type Kind uint8

const (
	// KindRequest is a busy period of the process: from the first call
	// after a quiet gap to the return of the last synchronize before the
	// next one.
	KindRequest Kind = iota
	// KindStep is one step of a process that is never quiet (a
	// continuous-batching decode loop): a thread's synchronize return to
	// its next one.
	KindStep
)

func (k Kind) String() string {
	if k == KindStep {
		return "step"
	}
	return "request"
}

// MarshalText names the kind in JSON.
func (k Kind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Defaults of DelimiterConfig.
const (
	DefaultQuietCeiling = 25 * time.Millisecond
	DefaultQuietFloor   = time.Millisecond
	DefaultStepAfter    = 10 * time.Second
)

// DelimiterConfig bounds what a Delimiter learns.
type DelimiterConfig struct {
	// Ceiling is the quiet gap until one is learnt, and the most a learnt
	// one may be (the policy's gate idle; default DefaultQuietCeiling).
	Ceiling time.Duration
	// Floor is the least a learnt gap may be (default DefaultQuietFloor:
	// a decode's sampling between two tokens, sub-millisecond, is no
	// quiet, or a decode loop would be cut per token).
	Floor time.Duration
	// Since, when set, is when the trace of the process began (the events'
	// clock; or Begin, later): its first busy period is a request only if
	// its first call came a quiet gap after it, and no call it saw before
	// came within a quiet gap of it; else the trace began inside it (a
	// warmup, a backlog, a synchronize), and it is neither a request nor a
	// size of one. Unset, the process is taken to be quiet as the trace begins.
	Since uint64
	// Pending: when the trace began is not known yet (an attach under
	// way); every busy period until Begin is a piece.
	Pending bool
	// StepAfter is how long a busy period lasts without a quiet gap before
	// the process counts as never quiet and is measured per step (default
	// DefaultStepAfter).
	StepAfter time.Duration
	// Busy, when set, reports whether a thread of the process is busy in
	// ways the events do not show now: a consumer that turns the launch
	// probes off (the daemon's gate, while it holds) says so with Blind,
	// and a quiet gap then also needs the thread of the last call not
	// to be running. Asked by Tick only.
	Busy func(tid uint32) bool
}

func (c DelimiterConfig) withDefaults() DelimiterConfig {
	if c.Ceiling <= 0 {
		c.Ceiling = DefaultQuietCeiling
	}
	if c.Floor <= 0 {
		c.Floor = DefaultQuietFloor
	}
	c.Floor = min(c.Floor, c.Ceiling)
	if c.StepAfter <= 0 {
		c.StepAfter = DefaultStepAfter
	}
	return c
}

// syncBound is how long, in ceilings, a thread inside a synchronize keeps
// its process busy without a further event: a return lost (the probes
// went off during the call) costs at most this.
const syncBound = 40

// Delimiter is the one definition of an LC request (docs/TRACING.md,
// "Requests"), for one process, from its launch and synchronize calls on
// all its threads: a request is a busy period, from the first launch (or
// queued copy or event record, trace.RoleQueue, which launch nothing; or
// synchronize) after the process was quiet for its quiet gap (no thread
// launching, none inside a synchronize) to the return of the last
// synchronize before the next quiet gap. Its latency is the GPU part of
// the request as the app's threads wait for it: CPU work before the first
// launch is not in it.
//
// A gap its thread spent working is no quiet: between two calls of one
// thread (its synchronize's return or last launch, and its next call), if
// the thread never blocked (trace.Call.Blocked: its voluntary context
// switches did not grow), it was working on the request, on a CPU or
// waiting for one (an eager decode's sampling between tokens, in Python),
// and the gap is busy: it does not end the request, and it is learnt as a
// gap inside one. If it blocked, the gap is work only if it ran for most
// of it by the calls' CPU times (trace.Call.OnCPU: a brief wait for the
// GIL in work). That CPU time lags by up to a scheduler tick while a thread
// runs, and a block in the gap syncs it: a gap may be credited a tick of
// the work before it, which errs toward work, so toward requests run
// together, not cut. Where the count is unknown, if the thread ran for more
// than half of the gap by its CPU time. Where neither is known (0, or the
// next call is another thread's) a gap is judged by its length alone.
//
// The quiet gap is learnt from the process's own gaps between busy
// moments, which form two clusters: launch gaps inside a request
// (microseconds to about a millisecond) and gaps between requests
// (milliseconds and more); see gapHist.threshold. Until it is learnt the
// gap is the ceiling (the policy's gate idle).
//
// A request ends only once its quiet gap has passed: the next event, or
// Tick with the present time, closes it. A process that stays busy for
// StepAfter without a quiet gap is never quiet: from then on it is
// measured per step (KindStep: a thread's synchronize return to its next
// one, with launches between) and that busy period is no request; the
// next quiet gap ends step mode.
//
// Memory is bounded: a fixed histogram, and a few words per thread that
// is inside a synchronize or has synchronized in the current busy period.
// Not safe for concurrent use.
type Delimiter struct {
	cfg  DelimiterConfig
	pid  uint32
	comm string
	// blind: the consumer does not see launches now (Blind); blindSeen:
	// it did not at some point of the open busy period (launches may be
	// missing from it).
	blind, blindSeen bool

	// syncing holds the threads inside a synchronize, each with its entry.
	syncing map[uint32]uint64
	// last is the last busy moment (a launch, a synchronize's entry or
	// return), lastTID its thread; seen: there was one.
	last    uint64
	lastTID uint32
	seen    bool
	// lastCPU and lastBlocked are lastTID's CPU time and blocks at last (0: unknown).
	lastCPU     time.Duration
	lastBlocked uint64
	// sawBusy: Tick found the process busy by Busy since last.
	sawBusy bool

	// The busy period: open since start, launches in it, and its last
	// synchronize return (end, 0: none yet). partial: a piece (the trace
	// began inside it, or inside a synchronize, or had not yet begun);
	// judged: the first busy period since the trace began has opened.
	open      bool
	partial   bool
	judged    bool
	start     uint64
	launches  int
	end       uint64
	endTID    uint32
	syncEnter uint64
	sync      string
	result    uint32
	// steps: per thread, its last synchronize return in this busy period
	// and the period's launches then.
	steps map[uint32]stepMark
	// cutting: this busy period is being cut into its requests as they
	// run, each of cut launches (one exact program known, the period whole
	// and every launch seen); cuts how many it was cut into so far, the
	// current one open since cutAt (the period's start before the first
	// cut), opened by cutFirst.
	cutting  bool
	cut      int
	cuts     int
	cutAt    uint64
	cutFirst string
	cutTID   uint32        // the thread whose calls the period is cut by
	cutGap   time.Duration // the quiet gap in force as it opened
	// lastLaunch is the period's last launch.
	lastLaunch uint64
	// markAt (0: none): the current request's program has run and a call
	// the program's requests begin with, markFirst, came then: the next
	// request's start if no other comes before the next launch, with the
	// current one ended as mark.
	markAt    uint64
	markFirst string
	mark      Request

	mode  Kind
	sizes sizes
	gaps  gapHist
	cpu   cpuGaps       // the open request's CPU gaps (Request.CPUGap)
	gap   time.Duration // the learnt gap; 0: not learnt
	// sinceLearn counts gaps recorded since the gap was last worked out.
	sinceLearn int
}

type stepMark struct {
	at       uint64
	launches int
}

// NewDelimiter returns a Delimiter for process pid.
func NewDelimiter(pid uint32, cfg DelimiterConfig) *Delimiter {
	return &Delimiter{cfg: cfg.withDefaults(), pid: pid, syncing: map[uint32]uint64{}, steps: map[uint32]stepMark{}}
}

// SetCeiling changes the ceiling (the policy's gate idle was reloaded).
func (d *Delimiter) SetCeiling(c time.Duration) {
	cfg := d.cfg
	cfg.Ceiling, cfg.Floor = c, 0
	if d.cfg.Floor != DefaultQuietFloor {
		cfg.Floor = d.cfg.Floor
	}
	d.cfg = cfg.withDefaults()
}

// Blind says whether the consumer sees the process's launches now. While
// blind, a gap that ends at a synchronize is not learnt from (launches may
// have filled it), and a quiet gap needs Busy's word at Tick.
func (d *Delimiter) Blind(on bool) {
	d.blind = on
	if on {
		d.cutting = false // launches unseen from here: the rest of the busy period is counted at its close
		d.blindSeen = d.blindSeen || d.open
		clear(d.cpu.last) // a gap across launches unseen is no CPU work's
	}
}

// Gap is the quiet gap in force: the learnt one, else the ceiling.
func (d *Delimiter) Gap() time.Duration {
	if d.gap == 0 {
		return d.cfg.Ceiling
	}
	return min(max(d.gap, d.cfg.Floor), d.cfg.Ceiling)
}

// Learnt reports whether the gap is learnt (else Gap is the ceiling).
func (d *Delimiter) Learnt() bool { return d.gap != 0 }

// Program is the launches of one of the process's requests, once 8 told
// apart show it (0 before), whether its requests vary in size, so that a
// busy period of several is not divided now, and the launches of the last
// requests told apart (at most 8, oldest first) that it is judged from.
func (d *Delimiter) Program() (launches int, varies bool, window []int) {
	m, _, _, ok := d.sizes.program()
	if !ok {
		m = 0
	}
	return m, d.sizes.varies, d.sizes.window()
}

// Begin says the trace of the process is whole from t (the events'
// clock: its probes all in), where that was not known as it was made
// (DelimiterConfig.Pending): a busy period open now is a piece (it opened
// while pending); if none is, the next is judged as a trace's first.
func (d *Delimiter) Begin(t uint64) {
	d.cfg.Since, d.cfg.Pending = t, false
	d.judged = d.open
}

// within reports whether t comes before the trace began (Since) or within a quiet gap after.
func (d *Delimiter) within(t uint64) bool {
	return t < d.cfg.Since || time.Duration(t-d.cfg.Since) < d.Gap()
}

// Mode is how the process is measured now: KindRequest, or KindStep while
// it is never quiet.
func (d *Delimiter) Mode() Kind { return d.mode }

// Last is the last busy moment seen and its thread (zero: none).
func (d *Delimiter) Last() (uint64, uint32) { return d.last, d.lastTID }

// Syncing reports whether a thread is inside a synchronize at now
// (entered less than the sync bound before).
func (d *Delimiter) Syncing(now uint64) bool {
	d.expire(now)
	return len(d.syncing) > 0
}

// Open reports whether a busy period is open (not yet seen to end).
func (d *Delimiter) Open() bool { return d.open }

func (d *Delimiter) syncLimit() uint64 { return uint64(syncBound * d.cfg.Ceiling) }

// expire forgets the threads inside a synchronize for longer than the
// bound: their return was lost.
func (d *Delimiter) expire(now uint64) {
	for tid, at := range d.syncing {
		if now > at && now-at >= d.syncLimit() {
			delete(d.syncing, tid)
		}
	}
}

// quietBy reports whether the events say the process is quiet at now: no
// thread in a synchronize, nothing for the gap since the last busy moment.
func (d *Delimiter) quietBy(now uint64) bool {
	d.expire(now)
	return len(d.syncing) == 0 && d.seen && now >= d.last && time.Duration(now-d.last) >= d.Gap()
}

// Quiet reports whether the process is quiet at now as a request ends:
// quiet by the events and, where Busy is set, its last call's thread not
// busy (for at most the sync bound past that call). It asks Busy.
func (d *Delimiter) Quiet(now uint64) bool {
	if !d.quietBy(now) {
		return false
	}
	if d.cfg.Busy != nil && now-d.last < d.syncLimit() && d.cfg.Busy(d.lastTID) {
		d.sawBusy = true
		return false
	}
	return true
}

// Tick closes the busy period if the process has been quiet for its gap
// at now, and returns the request that ended, if any.
func (d *Delimiter) Tick(now uint64) (Request, bool) {
	if !d.open {
		return Request{}, false
	}
	d.stepCheck(now)
	if !d.Quiet(now) {
		return Request{}, false
	}
	return d.close()
}

// Flush ends the busy period as the trace ends: what was served up to the
// last synchronize return is a request (a thread still inside a
// synchronize is not).
func (d *Delimiter) Flush() (Request, bool) {
	if !d.open || len(d.syncing) > 0 {
		return Request{}, false
	}
	return d.close()
}

// markCut marks the call at t, one the program's requests begin with, as
// the next request's start: the current one ends at the last synchronize
// return before it. Where none came after its last launch (its result not
// yet waited for: the next input uploaded first, or waited for later or by
// another thread), or a synchronize is still under way (a pipeline), t is
// no clear start: the rest of the period is counted at its close.
func (d *Delimiter) markCut(t uint64, first string) {
	if d.end < d.cutAt || d.end < d.lastLaunch || len(d.syncing) > 0 {
		d.cutting = false
		return
	}
	d.markAt, d.markFirst = t, first
	d.mark = Request{PID: d.pid, TID: d.endTID, Comm: d.comm, Kind: KindRequest, Start: d.cutAt, First: d.cutFirst, Launches: d.cut,
		SyncEnter: d.syncEnter, End: d.end, Sync: d.sync, Result: d.result, Cut: d.cuts + 1}
}

// cutOne ends the current request as marked, at the next's first launch;
// a launch past the program with no mark is a step of a longer request.
func (d *Delimiter) cutOne() (Request, bool) {
	if d.markAt == 0 || !d.cutting {
		d.cutting = false
		return Request{}, false
	}
	d.cuts, d.cutAt, d.cutFirst, d.markAt = d.cuts+1, d.markAt, d.markFirst, 0
	d.mark.CPUGap = d.cpu.take()
	return d.mark, true
}

// close ends the busy period and returns it as a request (its last, where
// it was cut into requests as they ran), unless it was measured per step,
// served nothing, or is a piece (partial).
func (d *Delimiter) close() (Request, bool) {
	r := Request{PID: d.pid, TID: d.endTID, Comm: d.comm, Kind: KindRequest, Start: d.cutAt, First: d.cutFirst, Launches: d.launches - d.cuts*d.cut,
		SyncEnter: d.syncEnter, End: d.end, Sync: d.sync, Result: d.result, CPUGap: d.cpu.take()}
	if d.cuts > 0 {
		r.Cut = d.cuts + 1
	}
	wasStep, partial := d.mode == KindStep, d.partial
	d.open, d.partial, d.launches, d.end, d.endTID, d.syncEnter, d.sync, d.result = false, false, 0, 0, 0, 0, "", 0
	d.cutting, d.cuts = false, 0
	clear(d.steps)
	clear(d.cpu.last)    // quiet again: a thread's next launch opens no gap (nor keeps a thread gone)
	d.mode = KindRequest // quiet again: the next busy period is a request until it outlasts StepAfter
	if wasStep || r.End == 0 || r.End < r.Start || partial {
		return Request{}, false // measured per step, served nothing, or begun before the trace saw it
	}
	gap := d.Gap()
	if !d.Learnt() {
		gap = 0 // the ceiling, learnt from nothing, says nothing of the window: it stands
	}
	if r.Requests = d.sizes.count(r.Launches, gap); r.Requests > 1 {
		return r, true
	}
	r.Requests = 0
	size := r.Launches
	if _, lo, _, _ := d.sizes.program(); r.Cut > 0 && size < lo && !d.blindSeen {
		// The rest of a request longer than the program, cut at its worth (not launches unseen):
		// the size it was at the least, and no more cutting (the next such would be cut short too).
		size, d.sizes.varied = size+d.cut, true
	}
	d.sizes.add(size, r.First, d.Gap())
	return r, true
}

// stepCheck turns the process never quiet once its busy period outlasts
// StepAfter.
func (d *Delimiter) stepCheck(now uint64) {
	if d.quietBy(now) {
		now = d.last // quiet since: the busy period ended there
	}
	// A cut is a request's end: the period is never quiet only StepAfter past its last (cutAt).
	if d.open && d.mode == KindRequest && !d.cutting && now > d.cutAt && time.Duration(now-d.cutAt) >= d.cfg.StepAfter {
		d.mode = KindStep
	}
}

// Apply folds one event in and returns the request (or step) it ended, if
// any. Events of other processes are ignored; a TaskExit of the process
// drops what is open.
func (d *Delimiter) Apply(ev trace.Event) (Request, bool) {
	switch e := ev.(type) {
	case *trace.TaskExit:
		if e.PID == d.pid {
			d.open, d.judged, d.launches, d.end = false, false, 0, 0
			clear(d.syncing)
			clear(d.steps)
			d.last, d.lastTID, d.seen, d.lastCPU, d.lastBlocked = 0, 0, false, 0, 0
			d.cpu = cpuGaps{}
		}
		return Request{}, false
	case *trace.Call:
		if e.PID != d.pid || (e.Role != trace.RoleLaunch && e.Role != trace.RoleQueue && e.Role != trace.RoleSync) {
			return Request{}, false
		}
		return d.call(e)
	}
	return Request{}, false
}

func (d *Delimiter) call(e *trace.Call) (Request, bool) {
	t := e.At
	if d.comm == "" {
		d.comm = e.Comm
	}
	var out Request
	var emitted bool
	d.stepCheck(t)
	// The gap that this event ends, if the process was quiet before it.
	// A gap of CPU work ends nothing, and is learnt as a gap inside a
	// request: the quiet gap is learnt above it.
	busy, byTime := d.onCPU(e)
	quiet := d.quietBy(t)
	if quiet && d.open && !d.sawBusy && !busy {
		out, emitted = d.close()
	}
	d.expire(t)
	if len(d.syncing) == 0 && d.seen && t > d.last && !d.sawBusy && (!d.blind || e.Role != trace.RoleSync && e.Kind == trace.CallEnter) {
		d.learn(time.Duration(t-d.last), busy, byTime)
	}
	d.sawBusy = false
	opens := e.Kind == trace.CallEnter // a launch, queued work, or a synchronize of work whose launches were not seen
	if !d.open && opens {
		// The first busy period is whole if the process was quiet for its gap since the trace began.
		piece := !d.judged && d.cfg.Since != 0 && (d.within(t) || d.seen && !quiet)
		d.partial, d.judged = d.cfg.Pending || piece, true
		d.open, d.start, d.blindSeen = true, t, d.blind
		d.cuts, d.cutAt, d.cutFirst, d.markAt, d.cutTID, d.cutGap = 0, t, e.Symbol, 0, e.TID, d.Gap()
		m, lo, hi, ok := d.sizes.program()
		d.cut, d.cutting = m, ok && lo == hi && !d.sizes.varied && !d.sizes.firstVaries && m >= minProgram && !d.partial && !d.blind &&
			d.sizes.apartUnder(d.cutGap)
	}
	if e.TID != d.cutTID {
		d.cutting = false // another thread: requests served side by side are no program's worth in turn
	}
	if d.cutting && !emitted && opens && e.Role != trace.RoleSync && d.launches == (d.cuts+1)*d.cut {
		// The program's launches all run: the last call its requests begin with (an input's
		// copy, queued, or a launch) before the next launch begins the next request; one of its
		// kind before that, or a copy of another, is this one's own (its result's back).
		if e.Symbol == d.sizes.first {
			d.markCut(t, e.Symbol)
		}
		if e.Role == trace.RoleLaunch {
			out, emitted = d.cutOne()
		}
	}
	switch {
	case e.Role == trace.RoleLaunch && e.Kind == trace.CallEnter:
		d.launches, d.lastLaunch = d.launches+1, t
		d.cpu.launch(e)
	case e.Role == trace.RoleSync && e.Kind == trace.CallEnter:
		d.syncing[e.TID] = t
		d.cpu.synced(e.TID)
	case e.Role == trace.RoleSync && e.Kind == trace.CallReturn:
		enter := d.syncing[e.TID]
		delete(d.syncing, e.TID)
		if !d.open {
			break // a return whose call began before tracing did
		}
		d.end, d.endTID, d.syncEnter, d.sync, d.result = t, e.TID, enter, e.Symbol, uint32(e.Ret)
		if s, ok := d.step(e, t); ok {
			out, emitted = s, true
		}
	}
	d.last, d.lastTID, d.seen, d.lastCPU, d.lastBlocked = t, e.TID, true, e.OnCPU, e.Blocked
	return out, emitted
}

// onCPU reports whether the gap from the last busy moment to e was work of
// e's thread (the thread of the last busy moment): it never blocked in it;
// or it blocked and its CPU time grew by most of the gap; or, where blocks
// are unknown, its CPU time grew by more than half the gap (byTime: judged
// by CPU time, and open to a tick's lag).
func (d *Delimiter) onCPU(e *trace.Call) (work, byTime bool) {
	if !d.seen || e.TID != d.lastTID || e.At <= d.last {
		return false, false
	}
	return worked(d.lastCPU, d.lastBlocked, e, time.Duration(e.At-d.last), false)
}

// worked reports whether e's thread worked through the gap before e, from its CPU time and
// blocks then (0: unknown): it never blocked; or, where blocks are unknown, its CPU time grew by
// more than half the gap (byTime: judged by CPU time, and open to a tick's lag). Where it blocked,
// strict says no (a CPU gap: a wait is not its CPU's speed); else its CPU time must have grown by
// most of the gap (a brief wait in work, the GIL or a lock, is no quiet; the CPU time may carry a
// tick of the work before it).
func worked(cpu0 time.Duration, blocked0 uint64, e *trace.Call, gap time.Duration, strict bool) (work, byTime bool) {
	known := blocked0 != 0 && e.Blocked != 0
	if known && e.Blocked == blocked0 {
		return true, false
	}
	if cpu0 == 0 || e.OnCPU < cpu0 || known && strict {
		return false, false
	}
	cpu := e.OnCPU - cpu0
	switch {
	case known:
		work = 4*cpu > 3*gap
	case strict:
		work = 2*cpu >= gap // half or more: a CPU gap's bucket is what counts
	default:
		work = 2*cpu > gap
	}
	return work, work
}

// step records a synchronize return of thread e.TID and returns the step
// it ends, in step mode: from the thread's previous return in this busy
// period (or the period's start) to this one, if launches came between.
func (d *Delimiter) step(e *trace.Call, t uint64) (Request, bool) {
	prev, ok := d.steps[e.TID]
	if !ok {
		prev = stepMark{at: d.start}
	}
	d.steps[e.TID] = stepMark{at: t, launches: d.launches}
	if d.mode != KindStep || d.launches == prev.launches || t < prev.at {
		return Request{}, false
	}
	return Request{PID: d.pid, TID: e.TID, Comm: d.comm, Kind: KindStep, Start: prev.at, Launches: d.launches - prev.launches,
		SyncEnter: d.syncEnter, End: t, Sync: e.Symbol, Result: uint32(e.Ret), CPUGap: d.cpu.take()}, true
}

// learn records one gap between busy moments (inside: one of CPU work,
// known to be inside a request; byTime: judged so by CPU time) and works the quiet gap out again: at each
// gap until one is learnt, then after every relearnEvery gaps, and at once
// after a gap at least the one in force (one between requests, or CPU work
// the gap in force would have cut).
func (d *Delimiter) learn(g time.Duration, inside, byTime bool) {
	d.gaps.add(g, inside, byTime)
	if !inside && !d.open {
		d.sizes.ended(g) // the gap after the last busy period told apart, as long as it was
	}
	if d.open && g >= d.cutGap {
		// A gap inside it as long as the one it opened under (CPU work, or read as such): the
		// window's requests, told apart by such gaps, are no measure of it.
		d.cutting = false
	}
	d.sinceLearn++
	if d.gap == 0 || d.sinceLearn >= relearnEvery || g >= d.Gap() {
		d.sinceLearn = 0
		d.gap = d.gaps.threshold()
	}
}

const relearnEvery = 32
