package reconcile

import (
	"log/slog"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
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
	// the BE processes beSliceOf does not name; unset: the policy's.
	beSlice tsg.Opt[time.Duration]
	// beSliceOf is the SLO mode's BE timeslice per process (by ProcRef.Key):
	// the one chosen for the GPUs it shares with an LC, or unset (the
	// policy's) for one that shares none (SetBETimeslices).
	beSliceOf map[string]tsg.Opt[time.Duration]
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
	groups   map[tsg.GroupID]*group
	// status: where its classing stands (due, failed, done).
	status Status
	// driftAt is when the next rate-limited drift re-apply is due (0:
	// none).
	driftAt time.Duration
	// lookedAt is when a request last looked for the groups of a
	// process that had none known (0: never).
	lookedAt time.Duration
}

// key is p's ProcRef.Key: its pid and start time.
func (p *proc) key() string { return policy.ProcRef{PID: p.pid, Start: p.start}.Key() }

type group struct {
	state GroupState
	// original is the group as first read, before any change of ours.
	original *GroupState
	// applied is what we set (unset: not changed by us).
	applied tsg.Opt[tsg.Settings]
	// held is where the group stands against what the process's class wants.
	held groupHeld
	// classedAt is when (events' clock) the apply that classed the group
	// began: an event from before it reached RM before our SET, and is
	// no news (setup delivered late, or libcuda's own SET(2048)).
	classedAt time.Duration
	// drift bounds re-applies of drift (Options.DriftBurst, DriftRefill).
	drift *rate.Limiter
	// created: the group's allocation was traced from this process, so
	// it is the owner, whoever else holds its file.
	created bool
}

// groupHeld is where one group stands: not classed yet (or taken over),
// classed (holding what its process's class wants, or left alone), or
// drifted (someone else set it since; a re-apply is due).
type groupHeld uint8

const (
	unclassed groupHeld = iota
	classed
	drifted
)

// New returns a reconciler with policy pol.
func New(pol *policy.Policy, ctl Controller, inspect Inspector, m *Metrics, opts Options, log *slog.Logger) *Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{
		opts: opts.withDefaults(), ctl: ctl, inspect: inspect, log: log, metrics: m, pol: pol,
		procs: map[int]*proc{}, wake: make(chan struct{}, 1), Now: eventsClock,
	}
}

// Options are the reconciler's options, defaults filled in.
func (r *Reconciler) Options() Options { return r.opts }

func (r *Reconciler) ensure(pid int) *proc {
	p := r.procs[pid]
	if p == nil {
		p = &proc{pid: pid, groups: map[tsg.GroupID]*group{}}
		r.procs[pid] = p
	}
	return p
}

func (r *Reconciler) ensureGroup(p *proc, id tsg.GroupID) *group {
	g := p.groups[id]
	if g == nil {
		g = &group{state: GroupState{ID: id, Engine: tsg.EngineUnknown, Interleave: tsg.LevelUnknown}, drift: r.driftBucket()}
		p.groups[id] = g
	}
	return g
}

func (r *Reconciler) drop(pid int) {
	delete(r.procs, pid)
	if r.metrics != nil && r.metrics.Forget != nil {
		r.metrics.Forget(pid)
	}
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

// Forget drops pid (the scan mode's exit).
func (r *Reconciler) Forget(pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.drop(pid)
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
