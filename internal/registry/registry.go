// Package registry is the live map of the machine's GPU processes: pid ->
// process identity (pid and start time) -> RM clients -> channel groups
// (TSGs), with each group's settings and who changed them.
//
// Two feeds keep it: the RM ioctl events of internal/trace (Apply, Follow),
// which see groups from their allocation and every control anyone makes on
// them, and discovery through a tsg source (Do, Scan), which finds groups
// made before tracing began or when tracing is not possible.
//
// The registry stores identities and settings, never open files. An
// operation on a process's groups (Do) discovers them afresh, attaching to
// the process's control file where the source needs to, runs, and releases
// every duplicate before returning: a duplicate held past that would keep
// the process's open file, and with it its RM clients and GPU memory,
// alive after the process exits.
package registry

import (
	"cmp"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Options configure a Registry. The zero value is usable for a registry
// fed by events only.
type Options struct {
	// Source discovers a process's groups for Do and Scan. Without one,
	// both fail with ErrNoSource.
	Source Source
	// Lister lists the processes that hold a GPU control file, for Scan
	// (tsg.Host provides one). Without it Scan uses the Source's own
	// DiscoverAll, if it has one.
	Lister Lister
	// Procs reads process identities (default ProcFS{}).
	Procs Procs
	// Self is the pid whose controls count as OriginSelf (default this
	// process): the registry's user acting through Do.
	Self int
	// Now is the events' clock, CLOCK_MONOTONIC nanoseconds (default
	// trace.Now). Discovery compares it with allocation times.
	Now func() uint64
	// Logger receives what discovery skipped (default: discarded).
	Logger *slog.Logger
}

// Registry is the live set of GPU processes and their channel groups. Safe
// for concurrent use.
type Registry struct {
	source Source
	lister Lister
	procs  Procs
	self   uint32
	now    func() uint64
	log    *slog.Logger

	mu        sync.Mutex
	processes map[int]*process
	clients   map[ioctl.Handle]owner
	groups    map[tsg.GroupID]*Group
	channels  map[objectKey]tsg.GroupID // channel -> its group
	subs      map[*Subscription]struct{}

	opsMu sync.Mutex
	ops   map[int]*opLock
}

// objectKey names an RM object other than a group (a channel): its
// handle is unique within its client.
type objectKey struct{ client, handle ioctl.Handle }

// owner is who allocated a client: the process and its file.
type owner struct {
	pid  uint32
	comm string
	fd   int32
}

type process struct {
	id   ProcessID
	comm string
	// verified is when (events' clock) a discovery that began then found
	// the process alive with groups: an exit event from before that is an
	// earlier holder's of the pid, delivered late.
	verified uint64
}

// New returns an empty registry.
func New(opts Options) *Registry {
	r := &Registry{
		source: opts.Source, lister: opts.Lister, procs: opts.Procs, self: uint32(opts.Self), now: opts.Now, log: opts.Logger,
		processes: map[int]*process{},
		clients:   map[ioctl.Handle]owner{},
		groups:    map[tsg.GroupID]*Group{},
		channels:  map[objectKey]tsg.GroupID{},
		subs:      map[*Subscription]struct{}{},
		ops:       map[int]*opLock{},
	}
	if r.procs == nil {
		r.procs = ProcFS{}
	}
	if r.self == 0 {
		r.self = uint32(os.Getpid())
	}
	if r.now == nil {
		r.now = trace.Now
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	return r
}

// Identify returns the identity of the process holding pid now (for a
// caller known by pid alone, such as a socket peer).
func (r *Registry) Identify(pid int) (ProcessID, error) {
	info, err := r.procs.Stat(pid)
	if err != nil {
		return ProcessID{}, err
	}
	return ProcessID{PID: pid, Start: info.Start}, nil
}

// Process is a GPU process as the registry knows it.
type Process struct {
	ID   ProcessID `json:"id"`
	Comm string    `json:"comm"`
	// Clients are the RM clients the process allocated (or discovery found
	// bound to its files), sorted.
	Clients []ioctl.Handle `json:"clients"`
	Groups  []Group        `json:"groups"`
}

// Processes returns every known process, by pid.
func (r *Registry) Processes() []Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Process, 0, len(r.processes))
	for pid := range r.processes {
		out = append(out, r.processLocked(pid))
	}
	slices.SortFunc(out, func(a, b Process) int { return cmp.Compare(a.ID.PID, b.ID.PID) })
	return out
}

// Process returns the process that holds pid, as the registry last saw it.
func (r *Registry) Process(pid int) (Process, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.processes[pid] == nil {
		return Process{}, false
	}
	return r.processLocked(pid), true
}

func (r *Registry) processLocked(pid int) Process {
	p := r.processes[pid]
	out := Process{ID: p.id, Comm: p.comm, Clients: []ioctl.Handle{}, Groups: []Group{}}
	for h, o := range r.clients {
		if int(o.pid) == pid {
			out.Clients = append(out.Clients, h)
		}
	}
	slices.Sort(out.Clients)
	for _, g := range r.groups {
		if g.PID == pid {
			out.Groups = append(out.Groups, g.clone())
		}
	}
	sortGroups(out.Groups)
	return out
}

// Groups returns a copy of every live group, ordered by owner, client and
// handle.
func (r *Registry) Groups() []Group {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Group, 0, len(r.groups))
	for _, g := range r.groups {
		out = append(out, g.clone())
	}
	sortGroups(out)
	return out
}

// Group returns one group by its id.
func (r *Registry) Group(id tsg.GroupID) (Group, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.groups[id]
	if !ok {
		return Group{}, false
	}
	return g.clone(), true
}

func sortGroups(gs []Group) {
	slices.SortFunc(gs, func(a, b Group) int {
		switch {
		case a.PID != b.PID:
			return cmp.Compare(a.PID, b.PID)
		}
		return a.ID().Compare(b.ID())
	})
}

// Subscription receives the registry's updates in the order they were
// made. Delivery never blocks the registry: when the buffer is full an
// update is dropped and counted, and the subscriber should resynchronise
// from Processes or Groups.
type Subscription struct {
	r       *Registry
	ch      chan Update
	dropped atomic.Uint64
	closed  bool // guarded by r.mu
}

// Subscribe returns a subscription with room for buffer updates (at least
// 1).
func (r *Registry) Subscribe(buffer int) *Subscription {
	s := &Subscription{r: r, ch: make(chan Update, max(buffer, 1))}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs[s] = struct{}{}
	return s
}

// Updates delivers the updates; it is closed by Close.
func (s *Subscription) Updates() <-chan Update { return s.ch }

// Dropped counts the updates lost to a full buffer.
func (s *Subscription) Dropped() uint64 { return s.dropped.Load() }

// Close ends the subscription and closes Updates. Idempotent.
func (s *Subscription) Close() {
	s.r.mu.Lock()
	defer s.r.mu.Unlock()
	if s.closed {
		return
	}
	s.closed = true
	delete(s.r.subs, s)
	close(s.ch)
}

// publish hands us to every subscriber; r.mu must be held, which keeps
// the order and keeps Close from closing a channel under a send.
func (r *Registry) publish(us []Update) []Update {
	for s := range r.subs {
		for _, u := range us {
			select {
			case s.ch <- u:
			default:
				s.dropped.Add(1)
			}
		}
	}
	return us
}
