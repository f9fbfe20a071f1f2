package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
	"golang.org/x/time/rate"
)

// Inspector reads what the policy matches on from the OS.
type Inspector interface {
	// Process reads pid's identity and attributes. Start is the
	// process's start time (it tells a reused pid from the first).
	// ErrGone (or ioctl.ErrNoSuchProcess) if pid does not exist.
	Process(pid int) (p policy.Process, start uint64, err error)
	// Alive says whether pid exists, without reading its attributes: the
	// periodic checks for exited processes run it on every pid held.
	Alive(pid int) bool
	// Listed says whether the driver lists pid as a GPU's compute
	// process (NVML: RM's record of the process that allocated each
	// client); known is false where that cannot be read.
	Listed(pid int) (listed, known bool)
	// GPUs are the GPUs pid is on, as Process reads them (nil: not
	// known yet).
	GPUs(pid int) []policy.GPU
}

// descriptorWarmer is an Inspector that can bring its cache of pid's
// descriptors up to date before the lock is taken: the discovery that
// follows under the lock, sharing the cache, then finds it fresh and
// re-checks only the descriptors known (tsg.FDCache).
type descriptorWarmer interface {
	WarmDescriptors(pid int)
}

// Options tune the reconciler.
type Options struct {
	// Debounce: a context is classed this long after its last setup
	// event (libcuda's own SET_TIMESLICE comes right after channel
	// setup; classing before it would be overwritten). Default 20 ms.
	Debounce time.Duration
	// MaxWait bounds the wait from a context's first event. Default 500 ms.
	MaxWait time.Duration
	// DriftBurst and DriftRefill are the per-group token bucket for
	// re-applying drift: each SET is a 150-330 us GSP RPC, and a process
	// that fights the daemon must not turn it into a storm. Defaults 4
	// and 1 s per token.
	DriftBurst  int
	DriftRefill time.Duration
	// OpTimeout bounds one attach-apply-read-back operation. Default 5 s.
	OpTimeout time.Duration
	// SelfPID is this daemon's pid: its own controls are not drift.
	SelfPID int
	// Classifier, when set, is consulted before the policy's rules
	// (gpreemptd --kubernetes: a pod's class from its annotation).
	Classifier Classifier
	// OnClassed, when set, is told of each classing that changed groups
	// (gpreemptd --kubernetes records it as an Event on the pod). It runs
	// under the reconciler's lock and must not block.
	OnClassed func(pid int, d policy.Decision, groups []GroupState)
	// PodRecheck, when set (gpreemptd --kubernetes), says whether the
	// process pid, in a pod, may still hold the class want it asked for
	// (handled false: it is in no pod, and the policy's limits decide).
	// It is asked at every reload and pod change, under the reconciler's
	// lock, and must not block.
	PodRecheck func(pid int, want class.Name) (handled bool, err error)
}

// Classifier decides a process's class before the policy's rules do; ok
// false leaves the decision to the rules.
type Classifier interface {
	Classify(pid int) (spec class.Spec, rule string, ok bool)
}

func (o Options) withDefaults() Options {
	if o.Debounce <= 0 {
		o.Debounce = 20 * time.Millisecond
	}
	if o.MaxWait <= 0 {
		o.MaxWait = 500 * time.Millisecond
	}
	if o.MaxWait < o.Debounce {
		o.MaxWait = o.Debounce
	}
	if o.DriftBurst <= 0 {
		o.DriftBurst = 4
	}
	if o.DriftRefill <= 0 {
		o.DriftRefill = time.Second
	}
	if o.OpTimeout <= 0 {
		o.OpTimeout = 5 * time.Second
	}
	return o
}

// Reconciler holds every process's desired and applied state. Its methods
// are safe for concurrent use; the controls themselves run under its lock
// (one process at a time: they are GSP RPCs that serialise in firmware
// anyway).
type Reconciler struct {
	mu      sync.Mutex
	opts    Options
	ctl     Controller
	inspect Inspector
	log     *slog.Logger
	metrics *Metrics
	pol     *policy.Policy
	// beSlice is the SLO mode's BE timeslice (of one unit of weight) for
	// the BE processes beSliceOf does not name; 0: the policy's.
	beSlice time.Duration
	// beSliceOf is the SLO mode's BE timeslice per process (by procKey):
	// the one chosen for the GPUs it shares with an LC, or 0 (the policy's)
	// for one that shares none (SetBETimeslices).
	beSliceOf map[string]time.Duration
	procs     map[int]*proc
	// wake is signalled when a deadline may have moved earlier.
	wake chan struct{}
	// Now is the monotonic clock (tests set it).
	Now func() time.Duration
}

type proc struct {
	pid      int
	start    uint64
	info     policy.Process
	decision policy.Decision
	// override is a class the process asked for over the socket.
	override *class.Spec
	groups   map[GroupID]*group
	// pending: classing is due at deadline.
	pending      bool
	firstPending time.Duration
	lastSetup    time.Duration
	deadline     time.Duration
	// measure: the pending classing follows a context's setup (observe
	// its latency), not a reload or request.
	measure bool
	// driftAt is when the next rate-limited drift re-apply is due (0:
	// none).
	driftAt time.Duration
	// failures counts classings that failed in a row (retried with
	// backoff, up to maxRetries, then left until the next event).
	failures int
	// gpuWaits counts the classings put off because a per-GPU rule needs
	// the process's GPU and NVML did not list it yet.
	gpuWaits int
	// lookedAt is when a request last looked for the groups of a
	// process that had none known (0: never).
	lookedAt time.Duration
}

// key is p's procKey: its pid and start time.
func (p *proc) key() string { return procKey(ProcRef{PID: p.pid, Start: p.start}) }

// A new context is listed by NVML a little after its channel groups
// appear (seen on two H200s: ~80 ms). Under a per-GPU rule, classing waits
// for it, every gpuWait, up to maxGPUWaits times; then the process is
// decided without a GPU (per-GPU rules do not match it).
const (
	gpuWait     = 10 * time.Millisecond
	maxGPUWaits = 50
)

// maxRetries bounds the retries of a failed classing; the first is 50 ms
// later, each next one twice as late.
const maxRetries = 5

type group struct {
	state GroupState
	// original is the group as first read, before any change of ours.
	original *GroupState
	// applied is what we set (nil: not changed by us).
	applied *tsg.Settings
	classed bool
	// classedAt is when (events' clock) the apply that classed the group
	// began: an event from before it reached RM before our SET, and is
	// no news (setup delivered late, or libcuda's own SET(2048)).
	classedAt time.Duration
	drifted   bool
	// drift bounds re-applies of drift (Options.DriftBurst, DriftRefill).
	drift *rate.Limiter
	// created: the group's allocation was traced from this process, so
	// it is the owner, whoever else holds its file.
	created bool
}

// appliedIs says whether what the daemon last set on g is want.
func (g *group) appliedIs(want tsg.Settings) bool {
	return g.applied != nil && sameSettings(*g.applied, want)
}

// NewReconciler returns a reconciler with policy pol.
func NewReconciler(pol *policy.Policy, ctl Controller, inspect Inspector, m *Metrics, opts Options, log *slog.Logger) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{
		opts: opts.withDefaults(), ctl: ctl, inspect: inspect, log: log, metrics: m, pol: pol,
		procs: map[int]*proc{}, wake: make(chan struct{}, 1), Now: monotonic,
	}
}

// Wake is signalled when Tick should be called earlier than it said.
func (r *Reconciler) Wake() <-chan struct{} { return r.wake }

func (r *Reconciler) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

func (r *Reconciler) ensure(pid int) *proc {
	p := r.procs[pid]
	if p == nil {
		p = &proc{pid: pid, groups: map[GroupID]*group{}}
		r.procs[pid] = p
	}
	return p
}

func (r *Reconciler) ensureGroup(p *proc, id GroupID) *group {
	g := p.groups[id]
	if g == nil {
		g = &group{state: GroupState{ID: id, Engine: tsg.EngineUnknown, Interleave: tsg.LevelUnknown}, drift: r.driftBucket()}
		p.groups[id] = g
	}
	return g
}

// setupSeen pushes p's classing to Debounce after now, within MaxWait of
// its first pending event.
func (r *Reconciler) setupSeen(p *proc, now time.Duration, measure bool) {
	if !p.pending {
		p.pending, p.firstPending = true, now
	}
	p.measure = p.measure || measure
	p.lastSetup = now
	p.deadline = min(now+r.opts.Debounce, p.firstPending+r.opts.MaxWait)
	r.poke()
}

// Handle folds one event in. It makes no control call; Tick does.
func (r *Reconciler) Handle(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.By != 0 && ev.By == r.opts.SelfPID {
		return
	}
	if p := r.procs[ev.PID]; p != nil && ev.Kind != GroupFreed && ev.Kind != ProcessExited {
		if g := p.groups[ev.Group]; g != nil && g.classed && ev.At < g.classedAt {
			return // happened before our apply, which overrode it: stale
		}
	}
	switch ev.Kind {
	case GroupCreated:
		p := r.ensure(ev.PID)
		if g := r.takeOver(p, ev.Group); g != nil && p.groups[ev.Group] == nil {
			g.classed = false // a scan got to it first, through another's file
			p.groups[ev.Group] = g
		}
		r.ensureGroup(p, ev.Group).created = true
		r.setupSeen(p, ev.At, true)
	case GroupSetup:
		p := r.ensure(ev.PID)
		g := r.ensureGroup(p, ev.Group)
		if !g.classed || p.pending {
			r.setupSeen(p, ev.At, true)
		}
	case GroupSet:
		p := r.ensure(ev.PID)
		g := r.ensureGroup(p, ev.Group)
		if !g.classed || p.pending {
			// libcuda's own SET after channel setup, or one before we
			// classed: part of setup.
			r.setupSeen(p, ev.At, true)
			return
		}
		if g.applied == nil {
			return // exempt, or nothing of ours to hold
		}
		if ev.TimesliceUs != 0 && g.applied.Timeslice != nil && ev.TimesliceUs == uint64(*g.applied.Timeslice/time.Microsecond) {
			return // set to what we hold: no drift
		}
		g.drifted = true
		r.scheduleDrift(p, g, ev.At)
	case GroupFreed:
		if p := r.procs[ev.PID]; p != nil {
			delete(p.groups, ev.Group)
			if len(p.groups) == 0 && p.override == nil {
				delete(r.procs, ev.PID)
			}
		}
	case ProcessExited:
		r.drop(ev.PID)
	}
}

func (r *Reconciler) drop(pid int) {
	delete(r.procs, pid)
	if r.metrics != nil {
		r.metrics.forget(pid)
	}
}

// scheduleDrift sets when g's drift is re-applied: now if g has a token,
// else when one refills.
func (r *Reconciler) scheduleDrift(p *proc, g *group, now time.Duration) {
	at := r.driftDue(g, now)
	if at > now {
		r.metrics.drift.WithLabelValues("deferred").Inc()
	}
	if p.driftAt == 0 || at < p.driftAt {
		p.driftAt = at
	}
	r.poke()
}

func (r *Reconciler) driftBucket() *rate.Limiter {
	return rate.NewLimiter(rate.Every(r.opts.DriftRefill), r.opts.DriftBurst)
}

// driftDue is when g may next re-apply drift: now, or when its bucket
// holds a whole token again.
func (r *Reconciler) driftDue(g *group, now time.Duration) time.Duration {
	tokens := g.drift.TokensAt(clockTime(now))
	if tokens >= 1 {
		return now
	}
	return now + time.Duration(math.Ceil((1-tokens)*float64(r.opts.DriftRefill)))
}

// clockTime is a time of the events' clock as the token buckets take it.
func clockTime(d time.Duration) time.Time { return time.Unix(0, int64(d)) }

// Tick does the classing and re-applying that is due at now, and returns
// when it should be called next (0: nothing scheduled).
func (r *Reconciler) Tick(ctx context.Context, now time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		if p.pending && now >= p.deadline {
			r.classify(ctx, p, now, false)
		}
		if p = r.procs[pid]; p != nil && p.driftAt != 0 && now >= p.driftAt {
			r.reapplyDrift(ctx, p, now)
		}
	}
	var next time.Duration
	for _, p := range r.procs {
		for _, t := range []time.Duration{p.deadline * b2d(p.pending), p.driftAt} {
			if t != 0 && (next == 0 || t < next) {
				next = t
			}
		}
	}
	return next
}

func b2d(b bool) time.Duration {
	if b {
		return 1
	}
	return 0
}

// decide is p's decision under the policy: its request if it made one,
// else the first matching rule. A request for what p gets anyway (a hint
// engine asks for lc when it starts) keeps the rule that gives it, and
// with it the rule's objective.
func (r *Reconciler) decide(p *proc) policy.Decision {
	d := r.decideUnrequested(p)
	if p.override != nil && (d.Exempt || d.Spec != *p.override) {
		return policy.Decision{Spec: *p.override, Rule: "request"}
	}
	return d
}

// decideUnrequested is p's decision by the classifier or the rules.
func (r *Reconciler) decideUnrequested(p *proc) policy.Decision {
	if r.opts.Classifier != nil {
		if spec, rule, ok := r.opts.Classifier.Classify(p.pid); ok {
			return policy.Decision{Spec: spec, Rule: rule}
		}
	}
	return r.pol.Decide(p.info)
}

// refresh re-reads p's attributes; false if it is gone (or its pid was
// reused, in which case the old state is dropped and a new one made).
func (r *Reconciler) refresh(p *proc) bool {
	info, start, err := r.inspect.Process(p.pid)
	return r.refreshWith(p, info, start, err)
}

// refreshWith is refresh with /proc already read (by Request, outside the
// lock).
func (r *Reconciler) refreshWith(p *proc, info policy.Process, start uint64, err error) bool {
	if err != nil {
		r.log.Debug("process gone before classing", "pid", p.pid, "err", err)
		r.drop(p.pid)
		return false
	}
	if p.start != 0 && start != p.start {
		r.log.Debug("pid reused", "pid", p.pid)
		p.override = nil
		for _, g := range p.groups {
			*g = group{state: g.state, drift: r.driftBucket()}
		}
	}
	p.start, p.info = start, info
	return true
}

// classify decides p's class and applies it to every group that does not
// hold it yet.
func (r *Reconciler) classify(ctx context.Context, p *proc, now time.Duration, force bool) error {
	measure, lastSetup := p.measure, p.lastSetup
	p.pending, p.measure = false, false
	if !r.refresh(p) {
		return fmt.Errorf("pid %d: %w", p.pid, ErrGone)
	}
	if len(p.info.GPUs) == 0 && p.override == nil && r.pol.NeedsGPU(p.info) && p.gpuWaits < maxGPUWaits {
		p.gpuWaits++
		p.pending, p.measure, p.lastSetup = true, measure, lastSetup
		p.deadline = now + gpuWait
		r.poke()
		return nil
	}
	d := r.decide(p)
	p.decision = d
	var want tsg.Settings
	if !d.Exempt {
		s, err := r.settingsFor(p, d.Spec)
		if err != nil { // the policy checked this; a request was checked too
			r.log.Error("no settings for class", "pid", p.pid, "class", d.Spec, "err", err)
			return err
		}
		want = s
	}
	if d.Exempt {
		held := false
		for _, g := range p.groups {
			held = held || g.applied != nil
		}
		if !held {
			// Nothing of ours to undo: no need to attach at all.
			for _, g := range p.groups {
				g.classed = true
			}
			r.log.Debug("left alone", "pid", p.pid, "comm", p.info.Comm, "rule", d.Rule)
			return nil
		}
	}
	pick := func(gs GroupState) (tsg.Settings, bool) {
		g := p.groups[gs.ID] // claimed by apply
		if g.original == nil {
			o := gs
			g.original = &o
		}
		if d.Exempt {
			if g.applied == nil {
				return tsg.Settings{}, false
			}
			return restoreSettings(*g.original), true
		}
		if !force && g.appliedIs(want) && gs.TimesliceUs == uint64(*want.Timeslice/time.Microsecond) {
			return tsg.Settings{}, false // holds it already
		}
		return want, true
	}
	began := r.Now()
	changed := map[GroupID]bool{}
	states, err := r.apply(ctx, p, "classify", func(gs GroupState) (tsg.Settings, bool) {
		s, ok := pick(gs)
		changed[gs.ID] = ok
		return s, ok
	})
	if err != nil {
		if r.procs[p.pid] == p && !isGone(err) && p.failures < maxRetries {
			// Caught mid-setup, or RM busy: try again, a bounded number
			// of times.
			p.failures++
			p.pending, p.measure, p.lastSetup = true, measure, lastSetup
			p.firstPending = now
			p.deadline = now + (50*time.Millisecond)<<(p.failures-1)
			r.poke()
		}
		return err
	}
	p.failures = 0
	n := 0
	for _, gs := range states {
		g := p.groups[gs.ID]
		g.classed = true
		g.classedAt = max(g.classedAt, began)
		g.drifted = false
		if d.Exempt {
			g.applied = nil
			continue
		}
		s := want
		g.applied = &s
		if changed[gs.ID] {
			n++
		}
	}
	if d.Exempt {
		r.log.Debug("left alone", "pid", p.pid, "comm", p.info.Comm, "rule", d.Rule)
		return nil
	}
	// Time to classed: from the last setup event to the end of the
	// apply, on the events' clock (CLOCK_MONOTONIC).
	took := max(r.Now(), now) - lastSetup
	if n == 0 {
		// Every group held its class already (a late setup event):
		// nothing was classed now.
		r.log.Debug("class held", "pid", p.pid, "class", d.Spec.String(), "groups", len(states))
		return nil
	}
	if measure {
		r.metrics.classed.Observe(took.Seconds())
	}
	r.log.Info("classed", "pid", p.pid, "comm", p.info.Comm, "class", d.Spec.String(), "rule", d.Rule, "groups", n,
		"after_setup", took.Round(time.Microsecond), "new_context", measure, "capped_at_request_limit", d.Capped)
	if r.opts.OnClassed != nil && n > 0 {
		r.opts.OnClassed(p.pid, d, states)
	}
	return nil
}

// apply runs one attach-apply-read-back operation on p and syncs p's
// groups with what was read back. pick sees only the groups p claims,
// each in p.groups. Errors are logged and counted here; a
// target that went away is one debug line and its state is dropped.
func (r *Reconciler) apply(ctx context.Context, p *proc, op string, pick func(GroupState) (tsg.Settings, bool)) ([]GroupState, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.OpTimeout)
	defer cancel()
	var changed []GroupID
	var wantTS = map[GroupID]uint64{}
	t0 := time.Now()
	states, err := r.ctl.Apply(ctx, p.pid, func(gs GroupState) (tsg.Settings, bool) {
		if !r.claim(p, gs.ID) {
			return tsg.Settings{}, false // its owner's to set
		}
		s, ok := pick(gs)
		if ok {
			changed = append(changed, gs.ID)
			if s.Timeslice != nil {
				wantTS[gs.ID] = uint64(*s.Timeslice / time.Microsecond)
			}
		}
		return s, ok
	})
	r.metrics.control.WithLabelValues(op).Observe(time.Since(t0).Seconds())
	if err != nil {
		if isGone(err) {
			r.metrics.failures.WithLabelValues("gone").Inc()
			r.log.Debug("target went away mid-apply", "pid", p.pid, "op", op, "err", err)
			r.drop(p.pid)
			return nil, err
		}
		r.metrics.failures.WithLabelValues("control").Inc()
		r.log.Warn("apply failed", "pid", p.pid, "comm", p.info.Comm, "op", op, "err", err)
		return nil, err
	}
	// Sync: the read-back is the truth about which groups exist.
	seen := map[GroupID]bool{}
	var owned []GroupState
	for _, gs := range states {
		if !r.claim(p, gs.ID) {
			continue
		}
		seen[gs.ID] = true
		g := r.ensureGroup(p, gs.ID)
		gs.GPU = gpuLabel(p.info.GPUs)
		g.state = gs
		owned = append(owned, gs)
	}
	for id := range p.groups {
		if !seen[id] {
			delete(p.groups, id)
		}
	}
	var bad []string
	for _, id := range changed {
		g := p.groups[id]
		if g == nil {
			continue
		}
		if want, ok := wantTS[id]; ok && g.state.TimesliceUs != want {
			bad = append(bad, fmt.Sprintf("%v reads %dus, want %dus", id, g.state.TimesliceUs, want))
		}
	}
	if len(bad) > 0 {
		r.metrics.failures.WithLabelValues("readback").Inc()
		err := fmt.Errorf("pid %d: read back: %s", p.pid, strings.Join(bad, "; "))
		r.log.Warn("apply did not hold", "pid", p.pid, "err", err)
		return nil, err
	}
	if len(changed) > 0 {
		name := "restore"
		if d := p.decision; op != "restore" && !d.Exempt && d.Rule != "" {
			name = string(d.Spec.Name)
		}
		r.metrics.applies.WithLabelValues(name).Add(float64(len(changed)))
	}
	return owned, nil
}

func gpuLabel(gs []policy.GPU) string {
	var s []string
	for _, g := range gs {
		s = append(s, strconv.Itoa(g.Index))
	}
	return strings.Join(s, ",")
}

func sameSettings(a, b tsg.Settings) bool {
	eqT := (a.Timeslice == nil) == (b.Timeslice == nil) && (a.Timeslice == nil || *a.Timeslice == *b.Timeslice)
	eqL := (a.Interleave == nil) == (b.Interleave == nil) && (a.Interleave == nil || *a.Interleave == *b.Interleave)
	return eqT && eqL
}

// restoreSettings puts a group back as it was before us, or at the
// driver's defaults where that was not read.
func restoreSettings(orig GroupState) tsg.Settings {
	ts := time.Duration(orig.TimesliceUs) * time.Microsecond
	if ts == 0 {
		ts = policy.DefaultTimeslice(orig.Engine == tsg.EngineCompute)
	}
	// libcuda gives the compute group 2048 us after setup; a group read
	// before that reads RM's 1024 us and is restored to what libcuda
	// would have left.
	if orig.Engine == tsg.EngineCompute && orig.TimesliceUs == 1024 {
		ts = policy.DefaultTimeslice(true)
	}
	l := orig.Interleave
	if l > tsg.LevelHigh {
		// Not reported (GSP-RM): RM gives every new group MEDIUM.
		l = tsg.LevelMedium
	}
	return tsg.Settings{Timeslice: &ts, Interleave: &l}
}

func (r *Reconciler) reapplyDrift(ctx context.Context, p *proc, now time.Duration) {
	p.driftAt = 0
	var due []*group
	for _, g := range p.groups {
		if !g.drifted || g.applied == nil {
			continue
		}
		if at := r.driftDue(g, now); at > now {
			if p.driftAt == 0 || at < p.driftAt {
				p.driftAt = at
			}
			continue
		}
		due = append(due, g)
	}
	if len(due) == 0 {
		return
	}
	pick := func(gs GroupState) (tsg.Settings, bool) {
		g := p.groups[gs.ID]
		if g == nil || !g.drifted || g.applied == nil || r.driftDue(g, now) > now {
			return tsg.Settings{}, false
		}
		return *g.applied, true
	}
	if _, err := r.apply(ctx, p, "drift", pick); err != nil {
		return
	}
	for _, g := range due {
		g.drift.AllowN(clockTime(now), 1)
		g.drifted = false
		r.metrics.drift.WithLabelValues("reapplied").Inc()
	}
	r.log.Info("drift re-applied", "pid", p.pid, "comm", p.info.Comm, "groups", len(due))
}

// lookEvery bounds how often a request from a process without known
// groups looks for them.
const lookEvery = time.Second

// holds says whether p asked for spec before and every group of it holds
// spec's settings as applied, and how many groups that is.
func (r *Reconciler) holds(p *proc, spec class.Spec) (int, bool) {
	if p.override == nil || *p.override != spec || len(p.groups) == 0 {
		return 0, false
	}
	want, err := r.settingsFor(p, spec)
	if err != nil {
		return 0, false
	}
	for _, g := range p.groups {
		if !g.classed || !g.appliedIs(want) || g.drifted {
			return 0, false
		}
	}
	return len(p.groups), true
}

// requestForbidden says why p may no longer hold spec, which it asked
// for, under the running policy (or its pod's decision); "" when it may.
// The checks are the socket's: the pod's limit for a process in a pod,
// else the policy's request limit for its uid and cgroup, class and weight.
func (r *Reconciler) requestForbidden(p *proc, spec class.Spec) string {
	if r.opts.PodRecheck != nil {
		if handled, err := r.opts.PodRecheck(p.pid, spec.Name); handled {
			if err != nil {
				return err.Error()
			}
			return ""
		}
	}
	max := r.pol.MaxRequest(p.info)
	if max == "" || !spec.Name.AtMost(max) {
		m := string(max)
		if m == "" {
			m = "nothing"
		}
		return fmt.Sprintf("class %s is above what the policy allows uid %d in cgroup %q (%s)", spec.Name, p.info.UID, p.info.Cgroup, m)
	}
	if w := r.pol.MaxRequestWeight(spec.Name, max); spec.Weight > w {
		return fmt.Sprintf("class %s: weight %d is above what the policy allows uid %d in cgroup %q (%s: weight %d at most)", spec, spec.Weight, p.info.UID, p.info.Cgroup, spec.Name, w)
	}
	return ""
}

// ErrForbidden marks a request the policy does not allow.
var ErrForbidden = errors.New("forbidden")

// Request puts pid in spec at its own request (the caller checked that it
// is pid asking and that the class is within its limit), classing it now
// if it has groups. start, when not 0, is the start time the caller
// checked: a process that has pid now and started otherwise is not the
// one that asked (ErrGone). admit, when not nil, is asked before anything
// changes, unless the process holds spec already: its error refuses the
// request. It returns the groups changed.
func (r *Reconciler) Request(ctx context.Context, pid int, start uint64, spec class.Spec, admit func() error) (int, error) {
	// /proc is read before the lock: what the asker's process costs to
	// read (its descriptors, where NVML does not answer) must not hold up
	// every other process's classing.
	info, now, err := r.inspect.Process(pid)
	if w, ok := r.inspect.(descriptorWarmer); ok {
		w.WarmDescriptors(pid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.settingsAt(spec, r.beSlice); err != nil {
		return 0, err
	}
	p := r.ensure(pid)
	if !r.refreshWith(p, info, now, err) {
		return 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
	}
	if start != 0 && p.start != start {
		return 0, fmt.Errorf("pid %d: %w (the process that asked has exited; the pid is another's)", pid, ErrGone)
	}
	if n, ok := r.holds(p, spec); ok {
		// Asked again for what it holds: no control call (each apply
		// holds this lock while it talks to the driver), and nothing
		// taken from the asker's change limit.
		return n, nil
	}
	if admit != nil {
		if err := admit(); err != nil {
			return 0, err
		}
	}
	prev, prevDecision := p.override, p.decision
	p.override = &spec
	if now := r.Now(); len(p.groups) == 0 && (p.lookedAt == 0 || now-p.lookedAt >= lookEvery) {
		// Its groups may exist from before tracing; look (at most once
		// a second: a process that asks in a loop before its context
		// exists must not make each ask a scan of its descriptors).
		p.lookedAt = now
		if states, err := r.ctl.Groups(ctx, pid); err == nil {
			for _, gs := range states {
				if r.claim(p, gs.ID) {
					p.groups[gs.ID].state = gs
				}
			}
		}
	}
	if len(p.groups) == 0 {
		return 0, nil // classed when its context appears
	}
	if err := r.classify(ctx, p, r.Now(), false); err != nil {
		// All or nothing: the groups hold what they held (Apply put
		// back any it had changed), and so does p's class.
		if r.procs[pid] == p {
			p.override, p.decision = prev, prevDecision
		}
		return 0, err
	}
	n := 0
	for _, g := range p.groups {
		if g.applied != nil {
			n++
		}
	}
	return n, nil
}

// Adopt makes pid known with groups found outside the event stream (the
// first scan, or the scan mode) and classes it at once when it has
// groups nobody classed yet.
func (r *Reconciler) Adopt(pid int, groups []GroupID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.ensure(pid)
	if p.start == 0 && !r.refresh(p) {
		return // gone
	}
	fresh := false
	for _, id := range groups {
		had := p.groups[id] != nil
		if !r.claim(p, id) {
			continue
		}
		fresh = fresh || !had || !p.groups[id].classed
	}
	if len(p.groups) == 0 && p.override == nil && p.decision.Rule == "" {
		delete(r.procs, pid) // a fork's worker: no group of its own
		return
	}
	if fresh && !p.pending {
		now := r.Now()
		p.pending, p.firstPending, p.lastSetup, p.deadline = true, now, now, now
		r.poke()
	}
}

// A process forked after its parent made a CUDA context (a data loader's
// worker) holds the parent's /dev/nvidiactl open file, and so does one
// handed a duplicate (pidfd_getfd, SCM_RIGHTS), so reading its groups
// through its descriptors finds the parent's. A group belongs to the
// process whose allocation of it was traced; failing that (made before
// tracing, or in the scan mode), to the one of its holders the driver
// lists as a compute process where just one is, else to the one that
// started first. heldElsewhere says another known process owns id so;
// takeOver takes id from the others (and forgets one that holds no other
// group).
func (r *Reconciler) heldElsewhere(p *proc, id GroupID) bool {
	if g := p.groups[id]; g != nil && g.created {
		return false
	}
	for _, q := range r.procs {
		if g := q.groups[id]; q != p && g != nil && (g.created || r.ownsBefore(q, p)) {
			return true
		}
	}
	return false
}

// ownsBefore says q's claim to a group that both q and p hold, and whose
// allocation neither was traced making, comes before p's. RM records the
// process that allocated a client, and NVML lists that process alone
// among those holding the client's file, unless another made a context of
// its own; then the one that started first owns it.
func (r *Reconciler) ownsBefore(q, p *proc) bool {
	lq, kq := r.inspect.Listed(q.pid)
	lp, kp := r.inspect.Listed(p.pid)
	if kq && kp && lq != lp {
		return lq
	}
	return p.start == 0 || q.start == 0 || q.start <= p.start
}

// claim gives p group id unless a process with the prior claim holds it
// (false; heldElsewhere); one whose claim comes after gives it up, with
// what was first read of it (for restore).
func (r *Reconciler) claim(p *proc, id GroupID) bool {
	if r.heldElsewhere(p, id) {
		return false
	}
	if g := r.takeOver(p, id); g != nil && p.groups[id] == nil {
		g.classed = false
		p.groups[id] = g
	}
	r.ensureGroup(p, id)
	return true
}

func (r *Reconciler) takeOver(p *proc, id GroupID) *group {
	var taken *group
	for _, q := range r.procs {
		if g := q.groups[id]; q != p && g != nil {
			r.log.Debug("group held by another process (a fork of its owner, or handed its file)", "group", id, "owner", p.pid, "other", q.pid)
			delete(q.groups, id)
			taken = g
			if len(q.groups) == 0 {
				r.drop(q.pid) // no GPU process of its own
			}
		}
	}
	return taken
}

// Known lists the pids the reconciler holds state for.
func (r *Reconciler) Known() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.procs))
}

// Forget drops pid (the scan mode's exit).
func (r *Reconciler) Forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drop(pid)
}

// CheckDrift compares pid's groups as read now with what was applied and
// schedules a re-apply for those that differ (the scan mode's drift).
func (r *Reconciler) CheckDrift(states []GroupState, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[pid]
	if p == nil {
		return
	}
	now := r.Now()
	for _, gs := range states {
		g := p.groups[gs.ID]
		if g == nil || !g.classed || g.applied == nil || g.applied.Timeslice == nil {
			continue
		}
		if gs.TimesliceUs != uint64(*g.applied.Timeslice/time.Microsecond) {
			g.drifted = true
			r.scheduleDrift(p, g, now)
		}
	}
}

// SetPolicy replaces the policy and re-classes every process under it.
func (r *Reconciler) SetPolicy(pol *policy.Policy) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pol = pol
	r.reclassLocked()
}

// Reclass decides every known process again, as a policy change does
// (gpreemptd --kubernetes: a pod's annotation changed).
func (r *Reconciler) Reclass() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reclassLocked()
}

func (r *Reconciler) reclassLocked() {
	now := r.Now()
	for _, p := range r.procs {
		if p.override == nil {
			continue
		}
		if why := r.requestForbidden(p, *p.override); why != "" {
			// A grant lasts only while the policy (or the pod) allows
			// it: a reload to a stricter policy takes it back.
			r.log.Info("request revoked", "pid", p.pid, "comm", p.info.Comm, "class", p.override.String(), "why", why)
			p.override = nil
		}
	}
	for _, p := range r.procs {
		if len(p.groups) > 0 && !p.pending {
			p.pending, p.firstPending, p.lastSetup, p.deadline = true, now, now, now
		}
	}
	r.poke()
}

// tableAt is the policy's class table with BE's timeslice at ts (0: the
// policy's).
func (r *Reconciler) tableAt(ts time.Duration) class.Table {
	if ts <= 0 {
		return r.pol.Classes
	}
	t := maps.Clone(r.pol.Classes)
	c := t[class.BE]
	c.Timeslice = ts
	t[class.BE] = c
	return t
}

// settingsAt is what a group of class sp gets with BE's timeslice at ts
// (0: the policy's). A weight the policy allows at its own timeslice (an
// environment's or a request's) may pass tsg.MaxTimeslice at one the SLO
// mode chose: the group then gets the longest timeslice there is, rather
// than keep one from before.
func (r *Reconciler) settingsAt(sp class.Spec, ts time.Duration) (tsg.Settings, error) {
	own, err := r.pol.Classes.Get(sp.Name)
	if err != nil {
		return tsg.Settings{}, err
	}
	if sp.Name != class.BE || ts <= 0 {
		return own.Settings(sp.Weight)
	}
	c := own
	c.Timeslice = ts
	s, err := c.Settings(sp.Weight)
	if err == nil {
		return s, nil
	}
	if _, perr := own.Settings(sp.Weight); perr != nil {
		return s, err
	}
	longest, level := tsg.MaxTimeslice, c.Interleave
	return tsg.Settings{Timeslice: &longest, Interleave: &level}, nil
}

// settingsFor is what p's groups get in class sp: for BE, at the
// timeslice the SLO mode chose for p (SetBETimeslices).
func (r *Reconciler) settingsFor(p *proc, sp class.Spec) (tsg.Settings, error) {
	var ts time.Duration
	if sp.Name == class.BE {
		ts = r.beSliceFor(p)
	}
	return r.settingsAt(sp, ts)
}

// beSliceFor is the BE timeslice the SLO mode chose for p (0: the
// policy's).
func (r *Reconciler) beSliceFor(p *proc) time.Duration {
	if ts, ok := r.beSliceOf[p.key()]; ok {
		return ts
	}
	return r.beSlice
}

// Classes is the class table in force: the policy's, with the SLO mode's
// choice for the BE processes it does not name one by one.
func (r *Reconciler) Classes() class.Table {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.tableAt(r.beSlice)
}

// SetBETimeslices sets the BE timeslice (of one unit of weight) the SLO
// mode chose: per[procKey] for the processes per names (0: the policy's),
// def for the others (0: the policy's), a BE process that starts before
// the mode names it included. The BE processes whose timeslice changes
// are re-classed: one all-or-nothing apply per process at the next Tick,
// with the usual read-back and retries. Weights keep their ratio of work
// (class.Class.TimesliceFor: be:3 gets the slice overhead plus 3 x the
// rest). SetBETimeslices(0, nil) gives every BE process the policy's
// timeslice again.
func (r *Reconciler) SetBETimeslices(def time.Duration, per map[string]time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := map[int]time.Duration{}
	for pid, p := range r.procs {
		before[pid] = r.beSliceFor(p)
	}
	r.beSlice, r.beSliceOf = max(def, 0), maps.Clone(per)
	now := r.Now()
	for pid, p := range r.procs {
		if len(p.groups) > 0 && !p.pending && !p.decision.Exempt && p.decision.Spec.Name == class.BE && r.beSliceFor(p) != before[pid] {
			p.pending, p.firstPending, p.lastSetup, p.deadline = true, now, now, now
		}
	}
	r.poke()
}

// LearnGPUs reads again the GPUs of each process with groups: NVML lists
// a context ~80 ms after its channel groups appear, and classing comes
// ~25 ms after them, so a process is classed before it is listed on a GPU
// it just began to use. The SLO mode calls it once a window (NVML's lists
// are read at most every 500 ms for processes they hold).
func (r *Reconciler) LearnGPUs() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.procs {
		if len(p.groups) > 0 {
			if gs := r.inspect.GPUs(p.pid); len(gs) > 0 || len(p.info.GPUs) == 0 {
				p.info.GPUs = gs
			}
		}
	}
}

// ProcRef names a classed process.
type ProcRef struct {
	PID      int
	Start    uint64
	Comm     string
	Exe      string // the executable's path as the process sees it ("": unread)
	Decision policy.Decision
	// GPUs are the indices of the GPUs NVML lists it on (nil: not known).
	GPUs []int
}

// InClass lists the processes last classed n, by pid.
func (r *Reconciler) InClass(n class.Name) []ProcRef {
	return r.refs(func(d policy.Decision) bool { return inClass(d, n) })
}

// Outside lists the known processes not classed n (unclassed and exempt
// ones included), by pid.
func (r *Reconciler) Outside(n class.Name) []ProcRef {
	return r.refs(func(d policy.Decision) bool { return !inClass(d, n) })
}

// inClass says whether d classes a process n.
func inClass(d policy.Decision, n class.Name) bool {
	return d.Rule != "" && !d.Exempt && d.Spec.Name == n
}

// refs lists the known processes whose decision keep takes, by pid.
func (r *Reconciler) refs(keep func(policy.Decision) bool) []ProcRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []ProcRef
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		if p := r.procs[pid]; keep(p.decision) {
			ref := ProcRef{PID: pid, Start: p.start, Comm: p.info.Comm, Exe: p.info.Exe, Decision: p.decision}
			for _, g := range p.info.GPUs {
				ref.GPUs = append(ref.GPUs, g.Index)
			}
			out = append(out, ref)
		}
	}
	return out
}

// Policy returns the policy in force.
func (r *Reconciler) Policy() *policy.Policy {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pol
}

// RestoreAll puts every group this daemon changed back to what it was
// (or the driver's defaults), for shutdown.
func (r *Reconciler) RestoreAll(ctx context.Context) (restored int, errs error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []error
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		pick := func(gs GroupState) (tsg.Settings, bool) {
			g := p.groups[gs.ID]
			if g == nil || g.applied == nil {
				return tsg.Settings{}, false
			}
			o := gs
			if g.original != nil {
				o = *g.original
			}
			restored++
			return restoreSettings(o), true
		}
		if _, err := r.apply(ctx, p, "restore", pick); err != nil && !isGone(err) {
			all = append(all, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return restored, errors.Join(all...)
}

// ProcStatus is one process as the daemon holds it.
type ProcStatus struct {
	PID     int          `json:"pid"`
	Comm    string       `json:"comm"`
	UID     uint32       `json:"uid"`
	Cgroup  string       `json:"cgroup,omitempty"`
	GPUs    string       `json:"gpus,omitempty"`
	Class   string       `json:"class"`
	Rule    string       `json:"rule,omitempty"`
	Pending bool         `json:"pending,omitempty"`
	Groups  []GroupState `json:"groups"`
}

// Snapshot lists every process the daemon holds, by pid.
func (r *Reconciler) Snapshot() []ProcStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []ProcStatus{}
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		ps := ProcStatus{PID: pid, Comm: p.info.Comm, UID: p.info.UID, Cgroup: p.info.Cgroup, GPUs: gpuLabel(p.info.GPUs),
			Class: p.decision.String(), Rule: p.decision.Rule, Pending: p.pending, Groups: []GroupState{}}
		if p.decision.Rule == "" {
			ps.Class = ""
		}
		ids := slices.SortedFunc(maps.Keys(p.groups), func(a, b GroupID) int {
			if a.Client != b.Client {
				return int(int64(a.Client) - int64(b.Client))
			}
			return int(int64(a.Handle) - int64(b.Handle))
		})
		for _, id := range ids {
			ps.Groups = append(ps.Groups, p.groups[id].state)
		}
		out = append(out, ps)
	}
	return out
}

// GroupsByClass counts live groups by (class, gpu), for the metrics.
func (r *Reconciler) GroupsByClass() map[[2]string]int {
	out := map[[2]string]int{}
	for _, p := range r.Snapshot() {
		c := p.Class
		if c == "" {
			c = "pending"
		}
		if i := strings.IndexByte(c, ':'); i >= 0 {
			c = c[:i]
		}
		out[[2]string{c, p.GPUs}] += len(p.Groups)
	}
	return out
}
