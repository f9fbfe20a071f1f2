package daemon

// The adapters from today's internal/trace (Tracer + Registry) and tsg
// (Source.Discover) to the interfaces the daemon consumes. Swapping to
// internal/registry touches this file only.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// TraceEvents turns the eBPF tracer's RM events into daemon events
// through a trace.Registry (which knows each group's owner).
type TraceEvents struct {
	tr     eventStream
	reg    *trace.Registry
	log    *slog.Logger
	closer func() error
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

// OpenTraceEvents loads and attaches the RM programs. Errors are the
// tracer's (trace.ErrNotRoot, trace.ErrBPFUnavailable, trace.ErrNoTracefs):
// the caller falls back to scanning.
func OpenTraceEvents(ctx context.Context, log *slog.Logger) (*TraceEvents, *trace.Tracer, error) {
	tr, err := trace.Open(ctx, trace.Options{RM: true, MountTracefs: true, Poll: 5 * time.Millisecond, Buffer: 1 << 14, Log: log})
	if err != nil {
		return nil, nil, err
	}
	te := NewTraceEvents(tr, log)
	te.closer = tr.Close
	return te, tr, nil
}

// NewTraceEvents reads events from tr.
func NewTraceEvents(tr eventStream, log *slog.Logger) *TraceEvents {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &TraceEvents{tr: tr, reg: trace.NewRegistry(), log: log}
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
func (t *TraceEvents) Live() map[int][]GroupID {
	out := map[int][]GroupID{}
	for _, g := range t.reg.Groups() {
		if g.PID != 0 {
			out[int(g.PID)] = append(out[int(g.PID)], GroupID{g.Client, g.Handle})
		}
	}
	return out
}

// Translate folds ev into reg and returns the daemon events it means.
func Translate(reg *trace.Registry, ev trace.Event) []Event {
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
		case trace.UpdateTSGAlloc:
			out = append(out, Event{Kind: GroupCreated, PID: int(u.After.PID), Group: GroupID{u.After.Client, u.After.Handle}, By: by, At: at})
		case trace.UpdateChannelAlloc, trace.UpdateEngine:
			out = append(out, Event{Kind: GroupSetup, PID: int(u.After.PID), Group: GroupID{u.After.Client, u.After.Handle}, By: by, At: at})
		case trace.UpdateControl:
			if u.After.PID == 0 {
				continue // owner unknown: made before tracing; the scan adopts it
			}
			e := Event{PID: int(u.After.PID), Group: GroupID{u.After.Client, u.After.Handle}, By: by, At: at}
			switch u.Call.Control.Cmd {
			case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:
				e.Kind = GroupSet
				if us, ok := u.Call.Control.TimesliceUs(); ok {
					e.TimesliceUs = us
				}
			case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL:
				e.Kind = GroupSet
			case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
				e.Kind = GroupSetup
			default:
				continue
			}
			out = append(out, e)
		case trace.UpdateTSGFree:
			out = append(out, Event{Kind: GroupFreed, PID: int(u.Before.PID), Group: GroupID{u.Before.Client, u.Before.Handle}, By: by, At: at})
		}
	}
	return out
}

// TSGController is the Controller over a tsg.Source: every call
// discovers, acts, reads back and closes the duplicates.
type TSGController struct {
	Source tsg.Source
	mu     sync.Mutex // one attach at a time
}

func (c *TSGController) discover(ctx context.Context, pid int) (*tsg.Process, error) {
	p, err := c.Source.Discover(ctx, pid)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func states(p *tsg.Process) []GroupState {
	out := make([]GroupState, 0, len(p.Groups))
	for _, g := range p.Groups {
		out = append(out, GroupState{ID: GroupID{g.Client, g.Handle}, Engine: g.Engine, TimesliceUs: uint64(g.Timeslice), Interleave: g.Interleave})
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
// in one all-or-nothing tsg Apply), then reads every group back.
func (c *TSGController) Apply(ctx context.Context, pid int, pick func(GroupState) (tsg.Settings, bool)) ([]GroupState, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p, err := c.discover(ctx, pid)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	type batch struct {
		s  tsg.Settings
		gs []tsg.Group
	}
	batches := map[string]*batch{}
	var keys []string
	before := states(p)
	for i, g := range p.Groups {
		s, ok := pick(before[i])
		if !ok {
			continue
		}
		k := settingsKey(s)
		if batches[k] == nil {
			batches[k] = &batch{s: s}
			keys = append(keys, k)
		}
		batches[k].gs = append(batches[k].gs, g)
	}
	sort.Strings(keys)
	var errs []error
	for _, k := range keys {
		b := batches[k]
		if err := p.Apply(ctx, b.gs, b.s); err != nil {
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

func settingsKey(s tsg.Settings) string {
	k := "-"
	if s.Timeslice != nil {
		k = s.Timeslice.String()
	}
	if s.Interleave != nil {
		k += "/" + s.Interleave.String()
	}
	return k
}

// Lister lists the pids that have a GPU control file open (tsg.Host).
type Lister interface {
	Processes() ([]int, error)
}
