// Package gate is gpreemptd's request gate, which needs no app change:
// BE processes are stopped through the pauser for each traced LC request,
// within each tenant's part of the share (gate.go the holds, follow.go the
// LCs followed, probes.go their launch probes, tracer.go the uprobes that
// see the requests; docs/GATE.md).
package gate

import (
	"context"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// Gate is the daemon's request gate, for LC processes that launch
// their work one kernel at a time and hold no gate of their own: each
// launch gap of such a request lets a BE channel group in, and every
// kernel after it pays a switch. From uprobes on the LC's libcuda it sees a
// request begin (the first launch after the LC was idle) and end (the
// LC's quiet gap after its last synchronize returned: request.Delimiter,
// the request definition `--trace-requests` and SLO mode share, with the
// gap learnt per LC and policy.Gate.Idle its ceiling), and holds the BE
// processes on the LC's GPUs stopped in between (SIGSTOP through the
// Pauser: two signals a request, sent by the daemon, never on the LC's
// path). What BE had queued drains at the request's start.
//
// BE is never left stopped: a hold ends at the request's end, at MaxHold,
// when the LC exits, when the gate's share of GPU time is spent, when the
// policy turns the gate off, and when the daemon stops; and the Pauser's
// watchdog resumes BE at MaxHold (plus a margin) if the daemon is gone.
// The driver is never asked to take a channel group off the runlist
// (GPFIFO_SCHEDULE), which left BE processes hung on this driver
// (docs/GATE.md).
type Gate struct {
	// Procs lists the classed processes; Pause stops and resumes BE.
	Procs interface {
		InClass(n class.Name) []policy.ProcRef
		Policy() *policy.Policy
	}
	Pause gatePauser
	// Now is the clock (default: CLOCK_MONOTONIC, the events' own).
	Now func() time.Duration
	Log *slog.Logger
	// Arm, when set, turns a followed LC's launch probes on (between its
	// requests) or off (while its request holds BE, unless launch_probes
	// keeps them): only the first
	// launch of a request matters, and a uprobe on every launch of an
	// eager LC would cost it several microseconds a launch. Called from a
	// goroutine of Run's own, never from its loop: detaching uprobes
	// waits for the kernel's grace periods (on Linux 6.18, about 40 ms
	// for a libcuda's launch functions as one uprobe_multi link, 0.6-0.9 s
	// as one uprobe each where the kernel has no such links: see
	// trace.Tracer), and a loop blocked there could end no hold.
	Arm func(pid int, on bool)
	// Running reports whether a thread of a process is on a CPU, runnable
	// or in an uninterruptible wait (default: its state in /proc). While a
	// hold is open the LC's launches are not traced (unless its probes are
	// kept): a thread that is running past the idle time is launching the
	// request's next step, one held up in the kernel (a lock, a fault) is
	// within it, one that sleeps waits for the next request.
	Running func(pid, tid int) bool
	// Tenant names whose share an LC's holds count against: its pod
	// under Kubernetes, else its uid (default: the uid in /proc).
	Tenant func(pid int) string

	mu     sync.Mutex
	lcs    map[int]*gateLC // LC processes the gate follows, by pid
	open   map[int]*gateHold
	tokens time.Duration // the share's budget left
	// launchProbes is the policy's gate.launch_probes as followLCs last saw it.
	launchProbes string
	refill       time.Duration // when tokens were last refilled
	stats        Stats
	metrics      *gateMetrics
	cmds         chan gateCmd // requests that began, for the loop to hold BE
	// arming: LCs whose launch probes may need turning on or off, for
	// Run's arming goroutine (armKick wakes it).
	arming  map[int]bool
	armKick chan struct{}
	// selfGated: LC processes whose engine gates its own requests (its
	// pushes say so), by pid: the daemon leaves them to it.
	selfGated map[int]bool
	// steered: LC processes whose holding SLO mode decides (Steer), by
	// pid: held only where true; the others as the policy's mode says.
	steered map[int]bool
	// buckets are each tenant's part of the share (Share over the
	// tenants of the LCs followed), refilled with tokens: one tenant's
	// LCs keep another's BE stopped no more than its part.
	buckets map[string]*time.Duration
	// heldFrom: when each BE held now (by ProcRef.Key) was last stopped from free: its holds
	// may overlap and end one by one.
	heldFrom map[string]time.Duration
}

// gateCmd is a request that began: a launch of pid seen while it held
// nothing, during its epoch'th time between holds.
type gateCmd struct {
	pid   int
	epoch uint64
}

// gatePauser is what the gate needs of a Pauser.
type gatePauser interface {
	Stop(procs []policy.ProcRef, max time.Duration) (int, error)
	ResumeExcept(keep []policy.ProcRef) (int, error)
}

// gateLC is one LC process the gate follows.
type gateLC struct {
	ref policy.ProcRef
	// delim delimits the process's requests from its calls: a request
	// ends its quiet gap after its last synchronize returned, with no
	// thread inside a synchronize (a token that takes longer than the gap
	// under contention is not the request's end; a lost return holds BE
	// at most syncBound idles) and, while its launches are not traced
	// (held, or steered off), the thread of its last call not running
	// (it is launching the request's next step).
	delim *request.Delimiter
	spans []time.Duration // recent requests' spans (GateAuto)
	// detaches and attaches: how long its launch probes took to come off and on, recent ones;
	// kept: they stay on through its requests; probeSpans: its requests' spans since kept last
	// changed (LaunchProbesAuto: judgeProbesLocked).
	detaches, attaches, probeSpans []time.Duration
	kept                           bool
	// overran counts holds in a row that ran to MaxHold: requests closer
	// together than Idle leave no idle to end one, and each hold is then
	// BE stopped for MaxHold (Delimits). begins counts the calls seen
	// outside a hold after Tick saw the LC idle (quiet) since the last
	// such hold.
	overran, begins int
	quiet           bool
	// epoch counts the process's holds that ended: a launch seen before
	// a hold's end (queued for the loop while the hold opened) is no new
	// request once it ended.
	epoch uint64
	// tenant is whose share its holds count against (Tenant).
	tenant string
}

// undelimited: lc's holds ran to MaxHold overrunLimit times in a row
// (Delimits).
func (lc *gateLC) undelimited() bool { return lc.overran >= overrunLimit }

// gateHold is one open hold: an LC request and the BE it stopped.
type gateHold struct {
	since time.Duration
	be    []policy.ProcRef
	// tenant is whose part of the share it counts against.
	tenant string
}

// gateMargin is added to MaxHold for the watchdog's deadline: the daemon
// resumes BE at MaxHold itself, the watchdog only if it cannot.
const gateMargin = 100 * time.Millisecond

// New returns a gate over procs, stopping BE through pause.
func New(procs interface {
	InClass(n class.Name) []policy.ProcRef
	Policy() *policy.Policy
}, pause gatePauser, log *slog.Logger) *Gate {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	g := &Gate{Procs: procs, Pause: pause, Log: log, Now: func() time.Duration { return time.Duration(trace.Now()) },
		lcs: map[int]*gateLC{}, open: map[int]*gateHold{}, cmds: make(chan gateCmd, 64), metrics: newGateMetrics(),
		arming: map[int]bool{}, armKick: make(chan struct{}, 1), selfGated: map[int]bool{}, Running: threadRunning,
		Tenant: UIDTenant, buckets: map[string]*time.Duration{}, heldFrom: map[string]time.Duration{}}
	g.tokens = g.capacity(procs.Policy().Gate)
	return g
}

// Pushed takes what an LC's statistics push says of its engine, and
// returns the gate mode the engine is to take: the policy's, for a process
// of class lc (the engine then gates its own requests, and the daemon
// leaves it out), "" for others.
func (g *Gate) Pushed(pid int, e *api.Engine) string {
	mode := g.Procs.Policy().Gate.Mode
	if !slices.ContainsFunc(g.Procs.InClass(class.LC), func(r policy.ProcRef) bool { return r.PID == pid }) {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	// An engine with a gate of its own (any mode: it was built with one)
	// gates its requests; a push from an engine without says nothing of it.
	if e != nil && e.Gate != "" {
		g.selfGated[pid] = mode != policy.GateOff
	}
	if hold, ok := g.steered[pid]; ok && !hold && mode != policy.GateOff {
		return policy.GateOff // SLO mode chose the arm without the gate
	}
	return mode
}

// Steer hands the holding of the LC processes in holds (by pid) to SLO
// mode: each is held only where its value is true, from its next request
// on (an open hold ends as it would); nil hands every one back to the
// policy's mode. Its engine, if it gates its own requests, is told the
// same in its next push reply (Pushed).
func (g *Gate) Steer(holds map[int]bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for pid := range g.lcs {
		was, wasSteered := g.steered[pid]
		if now, steered := holds[pid]; now != was || steered != wasSteered {
			g.armLocked(pid) // its launch probes on or off
		}
	}
	g.steered = holds
}

// Delimits reports whether the gate sees pid's requests end, so that a
// hold is a request: not after overrunLimit holds in a row ran to MaxHold
// (requests closer together than Idle, or one long stream), until a hold
// ends idle or delimitedAfter requests began after Tick saw the LC idle as
// a hold would end. SLO mode offers the gate only for LCs it delimits.
func (g *Gate) Delimits(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	lc := g.lcs[pid]
	return lc == nil || !lc.undelimited()
}

// SelfGated reports whether LC pid's engine gates its own requests (its
// pushes said so): it learns SLO mode's arm in its next push reply.
func (g *Gate) SelfGated(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.selfGated[pid]
}

// Traps reports whether LC pid, held, does not run as it would alone: its launches trap through its
// requests (launch probes kept), or its engine gates itself. Probes that come off for each request
// cost it only the launches until the detach ends, a small part of a request longer than a detach.
func (g *Gate) Traps(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.keepsProbesLocked(pid) || g.selfGated[pid]
}

const (
	overrunLimit   = 2 // one hold to MaxHold may be a long request; two in a row are the LC's pace
	delimitedAfter = 3 // requests seen to begin after an idle: the LC's pace changed
)

// Register adds the gate's metrics to reg.
func (g *Gate) Register(reg prometheus.Registerer) error { return g.metrics.register(reg) }

// Observe folds in one tracer event (from the tracer's reader).
func (g *Gate) Observe(ev trace.Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch e := ev.(type) {
	case *trace.TaskExit:
		if lc := g.lcs[int(e.PID)]; lc != nil {
			g.closeLocked(int(e.PID), "exit")
			lc.delim.Apply(e)
		}
	case *trace.Call:
		lc := g.lcs[int(e.PID)]
		if lc == nil {
			return
		}
		// A launch or synchronize after Tick saw an undelimited LC idle
		// begins a request (steered off the gate, it has no launch probes).
		if lc.quiet && e.Kind == trace.CallEnter && g.open[lc.ref.PID] == nil {
			if lc.begins++; lc.begins >= delimitedAfter {
				lc.overran = 0
				g.Log.Info("request gate: an LC's requests begin after an idle again", "pid", lc.ref.PID, "requests", lc.begins)
			}
		}
		lc.quiet = false
		// An event's own time; one without (0) is taken as it arrives.
		if e.At == 0 {
			c := *e
			c.At = uint64(g.Now())
			e = &c
		}
		// Launches are not traced while it holds or is steered off the
		// gate: gaps that end at a synchronize then teach nothing.
		lc.delim.Blind(!g.launchesWantedLocked(lc.ref.PID))
		lc.delim.Apply(e)
		switch {
		case (e.Role == trace.RoleLaunch || e.Role == trace.RoleQueue) && e.Kind == trace.CallEnter:
			if g.beginLocked(lc) && e.Role == trace.RoleLaunch {
				g.stats.LaunchesHeld++
			}
		case e.Role == trace.RoleSync && e.Kind == trace.CallEnter:
			// A synchronize means work in flight: it opens a request whose
			// first launches were not traced (its launch probes were still
			// coming back on).
			g.beginLocked(lc)
		}
	}
}

// beginLocked asks the loop to hold BE for lc's request, unless it holds
// already; it reports whether it does.
func (g *Gate) beginLocked(lc *gateLC) bool {
	if _, held := g.open[lc.ref.PID]; held {
		return true
	}
	select {
	case g.cmds <- gateCmd{pid: lc.ref.PID, epoch: lc.epoch}:
	default: // the loop is behind; the next call asks again
	}
	return false
}

// Run holds and releases BE until ctx is done, then releases every hold.
// Follow is called with the LC processes to trace, when they change
// (attach the new, detach the gone).
func (g *Gate) Run(ctx context.Context, follow func(lcs []policy.ProcRef)) {
	period := g.tickPeriod()
	tick := time.NewTicker(period)
	defer tick.Stop()
	resync := time.NewTicker(100 * time.Millisecond)
	defer resync.Stop()
	var arming sync.WaitGroup
	actx, stop := context.WithCancel(ctx)
	defer func() { stop(); arming.Wait() }()
	if g.Arm != nil {
		arming.Go(func() { g.armLoop(actx) })
	}
	if l, ok := g.Procs.(gpuLearner); ok {
		arming.Go(func() { g.learnLoop(actx, l) })
	}
	g.followLCs(follow)
	for {
		select {
		case <-ctx.Done():
			g.mu.Lock()
			for pid := range g.open {
				g.closeLocked(pid, "stop")
			}
			g.mu.Unlock()
			return
		case c := <-g.cmds:
			g.command(c)
		case <-tick.C:
			g.Tick()
		case <-resync.C:
			// A BE its owner resumed while a hold is open is stopped
			// again (the pauser checks each held process's state).
			if e, ok := g.Pause.(interface{ Enforce() int }); ok && g.holdsOpen() {
				e.Enforce()
			}
			if p := g.tickPeriod(); p != period {
				period = p
				tick.Reset(period)
			}
			g.followLCs(follow)
		}
	}
}

// tickPeriod is how often Tick runs: half the shortest quiet gap of the
// LCs followed (learnt, or the policy's idle), so a hold ends at most half
// a gap late, and at most every 500 us.
func (g *Gate) tickPeriod() time.Duration {
	gap := g.Procs.Policy().Gate.Idle
	g.mu.Lock()
	for _, lc := range g.lcs {
		gap = min(gap, lc.delim.Gap())
	}
	g.mu.Unlock()
	return max(gap/2, 500*time.Microsecond)
}

// command stops the BE processes on the GPUs of c's LC for the request
// c reports, unless that request was held already (c was queued before its
// hold ended), it holds already, the share is spent, or auto mode finds
// its requests too short. It reports whether a hold opened.
func (g *Gate) command(c gateCmd) bool {
	pid := c.pid
	pol := g.Procs.Policy().Gate
	g.mu.Lock()
	lc := g.lcs[pid]
	if lc == nil || lc.epoch != c.epoch || g.open[pid] != nil || pol.Mode == policy.GateOff {
		g.mu.Unlock()
		return false
	}
	now := g.Now()
	g.refillLocked(now, pol)
	hold, steered := g.steered[pid]
	if steered && !hold {
		g.stats.Steered++
		g.mu.Unlock()
		return false
	}
	// Where SLO mode chose the gate it measured what holding gives; auto's
	// guess from request spans does not overrule it (the share still does).
	if !steered && pol.Mode == policy.GateAuto && !longRequests(lc.spans) {
		g.stats.Skipped++
		g.mu.Unlock()
		return false
	}
	// The tenant's part, inside the share: a part smaller than MaxHold
	// (many tenants) holds once it is full, and pays it back.
	bucket := g.bucketLocked(lc.tenant, pol)
	if g.tokens < pol.MaxHold || *bucket < min(pol.MaxHold, g.tenantCapacity(pol)) {
		g.stats.Refused++
		g.metrics.refused.Inc()
		g.mu.Unlock()
		return false
	}
	g.tokens -= pol.MaxHold
	*bucket -= pol.MaxHold
	h := &gateHold{since: now, be: sharingGPU(g.Procs.InClass(class.BE), lc.ref), tenant: lc.tenant}
	g.open[pid] = h
	for _, b := range h.be {
		k := b.Key()
		if _, ok := g.heldFrom[k]; !ok {
			g.heldFrom[k] = now
		}
	}
	g.armLocked(pid)
	g.stats.Held++
	g.metrics.held.Inc()
	g.mu.Unlock()
	if len(h.be) == 0 {
		return true
	}
	n, err := g.Pause.Stop(h.be, pol.MaxHold+gateMargin)
	g.mu.Lock()
	defer g.mu.Unlock()
	last, _ := lc.delim.Last()
	g.Log.Debug("request gate: BE stopped", "lc_pid", pid, "be", n, "since_call", g.Now()-time.Duration(last), "stop", g.Now()-now)
	g.stats.BEStopped += uint64(n)
	if err != nil {
		g.stats.Failures++
		g.metrics.failures.Inc()
		g.Log.Warn("request gate: could not stop BE", "lc_pid", pid, "err", err)
		for _, b := range h.be { // not known to be held: its launching nothing is its own idling
			if from, ok := g.heldFrom[b.Key()]; ok && from == now {
				delete(g.heldFrom, b.Key())
			}
		}
	}
	if g.open[pid] != h {
		// The hold ended (the LC went idle or exited) while BE was being
		// stopped: its close resumed nothing yet.
		g.resumeLocked(pid)
	}
	return true
}

// Tick ends the holds whose request is over (idle), or that reached
// MaxHold or the share's end.
func (g *Gate) Tick() {
	pol := g.Procs.Policy().Gate
	g.mu.Lock()
	defer g.mu.Unlock()
	now := g.Now()
	// An LC the gate does not delimit is seen idle as a hold would end:
	// quiet for its gap, no thread in a synchronize, none launching (with
	// its launch probes off, a gap between synchronizes may be launches).
	for pid, lc := range g.lcs {
		lc.delim.SetCeiling(pol.Idle)
		lc.delim.Blind(!g.launchesWantedLocked(pid))
		lc.delim.Tick(uint64(now)) // its request over, as the hold's below
		if !lc.quiet && lc.undelimited() && g.open[pid] == nil && g.idleSince(lc, 0, now) {
			lc.quiet = true
		}
	}
	for pid, h := range g.open {
		lc := g.lcs[pid]
		switch {
		case lc == nil:
			g.closeLocked(pid, "off")
		case g.idleSince(lc, h.since, now):
			g.closeLocked(pid, "idle")
		case now-h.since >= pol.MaxHold:
			g.closeLocked(pid, "max_hold")
		}
	}
}

// closeLocked ends pid's hold: BE held by no other hold is resumed.
func (g *Gate) closeLocked(pid int, cause string) {
	h := g.open[pid]
	if h == nil {
		return
	}
	delete(g.open, pid)
	g.armLocked(pid)
	if lc := g.lcs[pid]; lc != nil {
		lc.epoch++
	}
	now := g.Now()
	span := now - h.since
	pol := g.Procs.Policy().Gate
	g.refillLocked(now, pol)
	back := max(0, pol.MaxHold-span)
	g.tokens = min(g.capacity(pol), g.tokens+back)
	b := g.bucketLocked(h.tenant, pol)
	*b = min(g.tenantCapacity(pol), *b+back)
	if g.stats.Closed == nil {
		g.stats.Closed = map[string]uint64{}
	}
	g.stats.Closed[cause]++
	g.Log.Debug("request gate: hold ended", "lc_pid", pid, "cause", cause, "held", span)
	g.stats.HeldSeconds += span.Seconds()
	g.metrics.closed.WithLabelValues(cause).Inc()
	g.metrics.heldSeconds.Add(span.Seconds())
	switch lc := g.lcs[pid]; {
	case lc != nil && cause == "max_hold":
		if lc.overran, lc.begins = lc.overran+1, 0; lc.overran == overrunLimit {
			g.Log.Info("request gate: an LC's holds run to max_hold: its requests come closer together than idle; SLO mode offers it no gate",
				"pid", pid, "holds", lc.overran, "idle", pol.Idle, "max_hold", pol.MaxHold)
		}
	case lc != nil && cause == "idle":
		lc.overran = 0
		// The request's own span, without the idle time that ended it.
		last, _ := lc.delim.Last()
		span := max(0, time.Duration(last)-h.since)
		pushRecent(&lc.spans, span)
		pushRecent(&lc.probeSpans, span)
		g.judgeProbesLocked(pid, lc)
	}
	if len(h.be) > 0 {
		g.resumeLocked(pid)
	}
}

// resumeLocked resumes the BE no open hold keeps stopped.
func (g *Gate) resumeLocked(pid int) {
	var keep []policy.ProcRef
	kept := map[string]bool{}
	for _, o := range g.open {
		keep = append(keep, o.be...)
		for _, b := range o.be {
			kept[b.Key()] = true
		}
	}
	maps.DeleteFunc(g.heldFrom, func(k string, _ time.Duration) bool { return !kept[k] })
	if _, err := g.Pause.ResumeExcept(keep); err != nil {
		g.stats.Failures++
		g.metrics.failures.Inc()
		g.Log.Warn("request gate: resuming BE failed; its watchdog resumes it", "lc_pid", pid, "err", err)
	}
}

// HeldSince reports whether BE process be has been held, by one hold or overlapping ones,
// without a break since t or earlier: it has had no moment to run since t, so its launching
// nothing says nothing of its own work.
func (g *Gate) HeldSince(be policy.ProcRef, t time.Duration) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	from, ok := g.heldFrom[be.Key()]
	return ok && from <= t
}

// holdsOpen reports whether a hold is open.
func (g *Gate) holdsOpen() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.open) > 0
}

// idleSince reports whether lc is idle as a hold ends: its request over
// by the Delimiter (quiet for its gap, no thread in a synchronize, none
// launching) and since at least its gap ago.
func (g *Gate) idleSince(lc *gateLC, since, now time.Duration) bool {
	return now-since >= lc.delim.Gap() && lc.delim.Quiet(uint64(now))
}

// threadRunning reads a thread's state: busy (busyState) or not.
func threadRunning(pid, tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/task/" + strconv.Itoa(tid) + "/stat")
	state, ok := procfs.StatState(b)
	return err == nil && ok && busyState(state)
}

// busyState: R (running or runnable) or D (an uninterruptible wait: held up in the kernel mid-call,
// as an LC is while a probe it hits is being detached) is within a request; S, T and the rest wait.
func busyState(state byte) bool { return state == 'R' || state == 'D' }

// syncBound is how long, in Idles, a thread inside a synchronize, or the
// running thread of the last call while launches are not traced, keeps a
// request open without a further event (request.Delimiter's bound): it
// bounds what a lost return or a busy-polling thread costs BE.
const syncBound = 40
