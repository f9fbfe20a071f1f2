package request

import (
	"math"
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
	// blind: the consumer does not see launches now (Blind).
	blind bool

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
	// synchronize return (end, 0: none yet).
	open      bool
	start     uint64
	first     string // the function that opened it
	launches  int
	end       uint64
	endTID    uint32
	syncEnter uint64
	sync      string
	result    uint32
	// steps: per thread, its last synchronize return in this busy period
	// and the period's launches then.
	steps map[uint32]stepMark

	mode Kind
	gaps gapHist
	gap  time.Duration // the learnt gap; 0: not learnt
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
func (d *Delimiter) Blind(on bool) { d.blind = on }

// Gap is the quiet gap in force: the learnt one, else the ceiling.
func (d *Delimiter) Gap() time.Duration {
	if d.gap == 0 {
		return d.cfg.Ceiling
	}
	return min(max(d.gap, d.cfg.Floor), d.cfg.Ceiling)
}

// Learnt reports whether the gap is learnt (else Gap is the ceiling).
func (d *Delimiter) Learnt() bool { return d.gap != 0 }

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

// close ends the busy period and returns it as a request, unless it was
// measured per step or served nothing.
func (d *Delimiter) close() (Request, bool) {
	r := Request{PID: d.pid, TID: d.endTID, Comm: d.comm, Kind: KindRequest, Start: d.start, First: d.first, Launches: d.launches,
		SyncEnter: d.syncEnter, End: d.end, Sync: d.sync, Result: d.result}
	wasStep := d.mode == KindStep
	d.open, d.launches, d.end, d.endTID, d.syncEnter, d.sync, d.result = false, 0, 0, 0, 0, "", 0
	clear(d.steps)
	d.mode = KindRequest // quiet again: the next busy period is a request until it outlasts StepAfter
	if wasStep || r.End == 0 {
		return Request{}, false // measured per step, or served nothing
	}
	return r, true
}

// stepCheck turns the process never quiet once its busy period outlasts
// StepAfter.
func (d *Delimiter) stepCheck(now uint64) {
	if d.open && d.mode == KindRequest && now > d.start && time.Duration(now-d.start) >= d.cfg.StepAfter {
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
			d.open, d.launches, d.end = false, 0, 0
			clear(d.syncing)
			clear(d.steps)
			d.last, d.lastTID, d.seen, d.lastCPU, d.lastBlocked = 0, 0, false, 0, 0
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
	if d.quietBy(t) && d.open && !d.sawBusy && !busy {
		out, emitted = d.close()
	}
	d.expire(t)
	if len(d.syncing) == 0 && d.seen && t > d.last && !d.sawBusy && (!d.blind || e.Role != trace.RoleSync && e.Kind == trace.CallEnter) {
		d.learn(time.Duration(t-d.last), busy, byTime)
	}
	d.sawBusy = false
	opens := e.Kind == trace.CallEnter // a launch, queued work, or a synchronize of work whose launches were not seen
	if !d.open && opens {
		d.open, d.start, d.first = true, t, e.Symbol
	}
	switch {
	case e.Role == trace.RoleLaunch && e.Kind == trace.CallEnter:
		d.launches++
	case e.Role == trace.RoleSync && e.Kind == trace.CallEnter:
		d.syncing[e.TID] = t
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
	blocked := d.lastBlocked != 0 && e.Blocked != 0
	if blocked && e.Blocked == d.lastBlocked {
		return true, false
	}
	if d.lastCPU == 0 || e.OnCPU < d.lastCPU {
		return false, false
	}
	cpu, gap := e.OnCPU-d.lastCPU, time.Duration(e.At-d.last)
	work = 2*cpu > gap
	if blocked {
		// A brief wait in work (the GIL, a lock) is no quiet; the CPU time may carry a tick of the
		// work before the gap, so a gap it slept in is work only if it ran most of it.
		work = 4*cpu > 3*gap
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
		SyncEnter: d.syncEnter, End: t, Sync: e.Symbol, Result: uint32(e.Ret)}, true
}

// learn records one gap between busy moments (inside: one of CPU work,
// known to be inside a request; byTime: judged so by CPU time) and works the quiet gap out again: at each
// gap until one is learnt, then after every relearnEvery gaps, and at once
// after a gap at least the one in force (one between requests, or CPU work
// the gap in force would have cut).
func (d *Delimiter) learn(g time.Duration, inside, byTime bool) {
	d.gaps.add(g, inside, byTime)
	d.sinceLearn++
	if d.gap == 0 || d.sinceLearn >= relearnEvery || g >= d.Gap() {
		d.sinceLearn = 0
		d.gap = d.gaps.threshold()
	}
}

const relearnEvery = 32

// GapBucket is one bucket of the gaps a Delimiter learns its quiet gap
// from (Gaps): its lower edge, the gaps in it (halved as they age), those of
// CPU work among them, and their time.
type GapBucket struct {
	LowUs  float64 `json:"low_us"`
	Count  float64 `json:"count"`
	Inside float64 `json:"cpu_work"`
	TimeMs float64 `json:"time_ms"`
}

// Gaps is the histogram the quiet gap is learnt from, its empty buckets
// left out: what `trace requests -o json` shows of why a gap is or is not
// learnt.
func (d *Delimiter) Gaps() []GapBucket {
	var out []GapBucket
	for b := range d.gaps.n {
		if d.gaps.n[b] > 0 {
			out = append(out, GapBucket{LowUs: bucketLow(b) / 1e3, Count: d.gaps.n[b], Inside: d.gaps.inside[b], TimeMs: d.gaps.w[b] / 1e6})
		}
	}
	return out
}

// gapHist is a log-bucketed histogram of recent gaps between busy moments,
// weighted by their time: gaps inside a request are many and short, gaps
// between requests few and long, and by time both weigh. It decays by
// halving whenever recordedDecay of gap time (or decayCount gaps) was
// added since the last halving.
type gapHist struct {
	w, n   [gapBuckets]float64 // time (ns) and count per bucket
	inside [gapBuckets]float64 // count per bucket of gaps of CPU work
	byTime [gapBuckets]float64 // of those, judged by CPU time (open to a tick's lag)
	sinceT float64
	sinceN int
}

const (
	// Buckets of a factor √2 from 1 us: the last starts at 2^23.5 us (~12 s).
	gapBuckets = 48
	gapBase    = float64(time.Microsecond)
	decayTime  = float64(10 * time.Second)
	decayCount = 1 << 20
	heavyShare = 0.01 // a bucket holding less of the gap time is noise
	minSplit   = 16.0 // the least ratio between the clusters' edges
	// The least ratio from the longest gap of CPU work to the shortest
	// asleep gap above it: √minSplit, the margin of the side judged by length.
	minSplitCPU = 4.0
	minQuiet    = 0.2 // the least share of the gap time in the cluster above the split
	minBetween  = 3   // gaps above the split: requests seen to end
	minWithin   = 8   // gaps below it
	// Gaps of CPU work above a split, fewer than this share of those slept through there, are
	// strays (a hiccup), not a decode's sampling between tokens (some of it read as asleep).
	strayShare = 0.1
)

func gapBucket(g time.Duration) int {
	if float64(g) < gapBase {
		return 0
	}
	b := int(2 * math.Log2(float64(g)/gapBase))
	return min(max(b, 0), gapBuckets-1)
}

// bucketLow is the lower edge of bucket b (0 for the first).
func bucketLow(b int) float64 {
	if b == 0 {
		return 0
	}
	return gapBase * math.Pow(2, float64(b)/2)
}

func (h *gapHist) add(g time.Duration, inside, byTime bool) {
	b := gapBucket(g)
	h.w[b] += float64(g)
	h.n[b]++
	if inside {
		h.inside[b]++
	}
	if byTime {
		h.byTime[b]++
	}
	h.sinceT += float64(g)
	h.sinceN++
	if h.sinceT >= decayTime || h.sinceN >= decayCount {
		for i := range h.w {
			h.w[i] /= 2
			h.n[i] /= 2
			h.inside[i] /= 2
			h.byTime[i] /= 2
		}
		h.sinceT, h.sinceN = 0, 0
	}
}

// threshold splits the gaps in two clusters and returns a gap between them
// (0: no split yet). A bucket counts if it holds at least heavyShare of
// the gaps or of the gap time (the many short gaps inside requests, the
// few long ones between them); a stray gap is noise. Counted buckets whose
// edges are at least minSplit apart are in different clusters (a clear
// split). A split between two clusters needs at least minWithin gaps below
// it and minBetween above, and the cluster just above it must hold at
// least minQuiet of the gap time: the time between requests is most of the
// time an LC is not busy, while a decode's sampling between tokens, though
// it may be a cluster of its own, is a few percent of it. The lowest such
// split wins: a rare long pause (traffic that stops for seconds) above the
// gaps that end every request does not hide them. The threshold is the
// geometric mean of its edges: the top of the cluster below and the bottom
// of the one above. A gap of CPU work (one not yet halved away) is inside
// a request, whatever its length: the threshold lies above the longest
// below the split, and a split with gaps of CPU work above it (a decode's
// sampling between tokens) is no split. A stray one too rare to count (a
// thread preempted, or Python's collector, in one request of many) raises
// the threshold if below the split. Above it, strays (a hiccup of tens of
// milliseconds on a CPU) do not forbid the split, and their own requests
// are cut there; else they would hold the gap at the ceiling until halved
// away (~20 s), running an LC's requests together. Strays are fewer than
// strayShare of the gaps slept through above the split, and none judged by
// CPU time shares its bucket with more gaps read as asleep: those are CPU
// work a coarse tick misread (a busy decode's sampling, a fraction of it
// flagged), not strays. Gaps of CPU work are kept inside by their CPU time, not their
// length, so the first counted bucket above the longest of them below it
// (asleep gaps only) is a cluster of its own once it starts at least
// minSplitCPU (4x, √minSplit) above it: only the asleep side needs a
// margin by length, and strays frequent enough to count, which would merge
// the launch gaps' cluster into the gaps between requests, do not hide the
// split. Above that boundary, and where no gap of CPU work is known (the
// CPU time unknown), clusters are as minSplit makes them. Tick-quantized
// CPU time (where blocks are unknown) misflags a gap shorter than two ticks now and then: a CPU-work
// bucket with none of its gaps flagged is judged by length (a gap's chance
// of showing a tick grows with its length, so one 4x above flagged ones
// rarely shows none), and an asleep gap flagged raises the longest, which
// only makes the split harder, until halved away. The price: a request's
// own asleep pause 4-16x above its CPU work (waiting on another thread)
// may be split from it, as one 16x above is. Without such a split the
// gap stays the ceiling, the safe default: a request with a
// pause of its own (CPU work between two GPU phases) is not cut there.
func (h *gapHist) threshold() time.Duration {
	var totalW, totalN float64
	for b := range h.w {
		totalW, totalN = totalW+h.w[b], totalN+h.n[b]
	}
	if totalW <= 0 {
		return 0
	}
	// Clusters: runs of counted buckets, [first, last].
	type cluster struct{ first, last int }
	var cs []cluster
	cpuTop := -1 // the longest gap of CPU work below b
	for b := range h.w {
		if b > 0 && h.inside[b-1] >= 1 {
			cpuTop = b - 1
		}
		if h.w[b] < heavyShare*totalW && h.n[b] < heavyShare*totalN {
			continue
		}
		n := len(cs)
		// Apart by length alone, or b is the first asleep bucket clear of the CPU work.
		apart := n == 0 || bucketLow(b) >= minSplit*bucketLow(cs[n-1].last+1) ||
			cs[n-1].last <= cpuTop && bucketLow(b) >= minSplitCPU*bucketLow(cpuTop+1)
		if !apart {
			cs[n-1].last = b
			continue
		}
		cs = append(cs, cluster{b, b})
	}
	var below float64
	j := 0
	for i := 0; i+1 < len(cs); i++ {
		for ; j <= cs[i].last; j++ {
			below += h.n[j]
		}
		// The CPU work above the split and the gaps slept through there, and the longest CPU work below it.
		var cpuAbove, asleepAbove float64
		under := -1
		for b := range h.inside {
			switch {
			case b < cs[i+1].first:
				if h.inside[b] >= 1 {
					under = b
				}
			case h.byTime[b] >= 1 && h.n[b]-h.inside[b] > h.inside[b]:
				// CPU work by CPU time among more gaps of its length read as asleep: CPU work a
				// tick misread (a decode's sampling), no stray.
				cpuAbove = math.Inf(1)
			default:
				cpuAbove, asleepAbove = cpuAbove+h.inside[b], asleepAbove+h.n[b]-h.inside[b]
			}
		}
		if cpuAbove >= 1 && cpuAbove >= strayShare*asleepAbove {
			continue // CPU work above, not strays among the gaps slept through: pauses inside requests
		}
		var upW float64
		for b := cs[i+1].first; b <= cs[i+1].last; b++ {
			upW += h.w[b]
		}
		if below >= minWithin && totalN-below >= minBetween && upW >= minQuiet*totalW {
			return time.Duration(math.Sqrt(bucketLow(max(cs[i].last, under)+1) * bucketLow(cs[i+1].first)))
		}
	}
	return 0
}
