package reconcile

// The adapters from the eBPF tracer and internal/registry (which knows
// each group's owner) and from tsg discovery to the interfaces the daemon
// consumes.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// TraceEvents turns the eBPF tracer's RM events into daemon events
// through a registry (which knows each group's owner).
type TraceEvents struct {
	tr     eventStream
	reg    *registry.Registry
	log    *slog.Logger
	closer func() error

	// Known's bookkeeping: a process's groups are all known from events
	// when it started (clock ticks after boot, /proc/PID/stat) after
	// fastAfter: tracing was on and no event was lost since. fastAfter 0
	// disables Known.
	knownMu   sync.Mutex
	fastAfter uint64
	lost      func() uint64
	lostSeen  uint64
	ticks     func() uint64
}

// Close detaches the programs (when TraceEvents opened them).
func (t *TraceEvents) Close() error {
	if t.closer == nil {
		return nil
	}
	return t.closer()
}

// eventStream is what TraceEvents reads: *trace.Tracer, or a channel in
// tests.
type eventStream interface {
	Events() <-chan trace.Event
	Err() error
}

// OpenTraceEvents loads and attaches the RM programs, blind to this
// process's own ioctls (its discovery probes would flood the ring buffer;
// its own SETs are not drift anyway). Errors are the
// tracer's (trace.ErrNotRoot, trace.ErrBPFUnavailable, trace.ErrNoTracefs):
// the caller falls back to scanning.
func OpenTraceEvents(ctx context.Context, log *slog.Logger) (*TraceEvents, *trace.Tracer, error) {
	tr, err := trace.Open(ctx, trace.Options{RM: true, IgnorePID: os.Getpid(), MountTracefs: true, Poll: 5 * time.Millisecond, Buffer: 1 << 14, Logger: log})
	if err != nil {
		return nil, nil, err
	}
	te := NewTraceEvents(tr, log)
	te.closer = tr.Close
	te.lost, te.ticks = tr.Lost, procfs.BootTicks
	te.fastAfter = procfs.BootTicks() + 1
	return te, tr, nil
}

// Known returns pid's groups as the registry knows them from events, and
// the control-file descriptor they were allocated on, when the registry
// holds all of them: the process started after tracing began and after
// the last lost event, each group was seen allocated, and all on one fd.
// The daemon's fast path (tsg AttachSource.Open) uses them instead of a
// scan; ok false sends it to discovery.
func (t *TraceEvents) Known(pid int) (fd int, groups []tsg.Group, ok bool) {
	t.knownMu.Lock()
	if t.lost != nil && t.ticks != nil {
		if n := t.lost(); n != t.lostSeen {
			t.lostSeen, t.fastAfter = n, t.ticks()+1
		}
	}
	after := t.fastAfter
	t.knownMu.Unlock()
	if after == 0 {
		return 0, nil, false
	}
	p, found := t.reg.Process(pid)
	if !found || p.ID.Start == 0 || p.ID.Start <= after || len(p.Groups) == 0 {
		return 0, nil, false
	}
	fd = p.Groups[0].FD
	for _, g := range p.Groups {
		if g.Created == 0 || g.FD != fd || g.FD < 0 || g.PID != pid {
			return 0, nil, false
		}
		groups = append(groups, g.Group)
	}
	return fd, groups, true
}

// NewTraceEvents reads events from tr.
func NewTraceEvents(tr eventStream, log *slog.Logger) *TraceEvents {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TraceEvents{tr: tr, reg: registry.New(registry.Options{Logger: log}), log: log}
}

func (t *TraceEvents) Mode() string { return "bpf" }

// Run delivers events until the tracer stops.
func (t *TraceEvents) Run(ctx context.Context, fn func(Event)) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-t.tr.Events():
			if !ok {
				return t.tr.Err()
			}
			for _, e := range Translate(t.reg, ev) {
				fn(e)
			}
		}
	}
}

// Live lists the groups the registry holds, by owner.
func (t *TraceEvents) Live() map[int][]tsg.GroupID {
	out := map[int][]tsg.GroupID{}
	for _, g := range t.reg.Groups() {
		if g.PID != 0 {
			out[g.PID] = append(out[g.PID], g.ID())
		}
	}
	return out
}

// Translate folds ev into reg and returns the daemon events it means.
func Translate(reg *registry.Registry, ev trace.Event) []Event {
	var out []Event
	if x, ok := ev.(*trace.TaskExit); ok {
		reg.Apply(ev)
		return []Event{{Kind: ProcessExited, PID: int(x.PID), At: time.Duration(x.At)}}
	}
	for _, u := range reg.Apply(ev) {
		if u.Call == nil || !u.Call.OK() {
			continue
		}
		at, by := time.Duration(u.Call.Exit), int(u.Call.PID)
		switch u.Kind {
		case registry.UpdateTSGAlloc:
			out = append(out, Event{Kind: GroupCreated, PID: u.After.PID, Group: u.After.ID(), By: by, At: at})
		case registry.UpdateChannelAlloc, registry.UpdateEngine:
			out = append(out, Event{Kind: GroupSetup, PID: u.After.PID, Group: u.After.ID(), By: by, At: at})
		case registry.UpdateControl:
			if u.After.PID == 0 {
				continue // owner unknown: made before tracing; the scan adopts it
			}
			e := Event{PID: u.After.PID, Group: u.After.ID(), By: by, At: at}
			switch u.Call.Control.Cmd {
			case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:
				e.Kind = GroupSet
				if us, ok := u.Call.Control.TimesliceUs(); ok {
					e.Timeslice = tsg.Micros(us)
				}
			case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL:
				e.Kind = GroupSet
			case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
				e.Kind = GroupSetup
			default:
				continue
			}
			out = append(out, e)
		case registry.UpdateTSGFree:
			out = append(out, Event{Kind: GroupFreed, PID: u.Before.PID, Group: u.Before.ID(), By: by, At: at})
		}
	}
	return out
}

// TSGController is the Controller over a tsg.Source: every call
// discovers (or opens the groups Known names), acts, reads back and
// closes the duplicates.
type TSGController struct {
	Source tsg.Source
	// Known, when set, names pid's groups and their control file without
	// a scan (TraceEvents.Known); a Source that can open known groups
	// (tsg.AttachSource.Open) then skips discovery. Any failure of that
	// path falls back to Discover, once.
	Known func(pid int) (fd int, groups []tsg.Group, ok bool)
	// Log receives the fast path's fallbacks (default: discarded).
	Log *slog.Logger
	mu  sync.Mutex // one attach at a time
}

// groupOpener is a Source that builds a Process from known groups.
type groupOpener interface {
	Open(ctx context.Context, pid, fd int, groups []tsg.Group) (*tsg.Process, error)
}

func (c *TSGController) discover(ctx context.Context, pid int) (*tsg.Process, error) {
	if o, isOpener := c.Source.(groupOpener); isOpener && c.Known != nil {
		if fd, gs, ok := c.Known(pid); ok {
			p, err := o.Open(ctx, pid, fd, gs)
			if err == nil {
				return p, nil
			}
			if c.Log != nil {
				c.Log.Debug("fast open failed; discovering", "pid", pid, "fd", fd, "groups", len(gs), "err", err)
			}
		}
	}
	p, err := c.Source.Discover(ctx, pid)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func states(p *tsg.Process) []GroupState {
	out := make([]GroupState, 0, len(p.Groups))
	for _, g := range p.Groups {
		out = append(out, GroupState{ID: g.ID(), Engine: g.Engine, Timeslice: g.Timeslice, Interleave: g.Interleave})
	}
	return out
}

// Groups reads pid's groups.
func (c *TSGController) Groups(ctx context.Context, pid int) ([]GroupState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.discover(ctx, pid)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return states(p), nil
}

// Apply changes the groups pick chooses (groups with the same settings
// in one all-or-nothing tsg Apply, in the order of their first group),
// then reads every group back.
func (c *TSGController) Apply(ctx context.Context, pid int, pick func(GroupState) (tsg.Settings, bool)) ([]GroupState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.discover(ctx, pid)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	batches := map[tsg.Settings][]tsg.Group{}
	var order []tsg.Settings
	before := states(p)
	for i, g := range p.Groups {
		s, ok := pick(before[i])
		if !ok {
			continue
		}
		if batches[s] == nil {
			order = append(order, s)
		}
		batches[s] = append(batches[s], g)
	}
	var errs []error
	for _, s := range order {
		if err := p.Apply(ctx, batches[s], s); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := p.Refresh(ctx); err != nil {
		return nil, fmt.Errorf("pid %d: read back: %w", pid, err)
	}
	return states(p), nil
}

// Lister lists the pids that have a GPU control file open (tsg.Host).
type Lister interface {
	Processes() (pids []int, denied int, err error)
}
