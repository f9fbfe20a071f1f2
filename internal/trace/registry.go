package trace

import (
	"cmp"
	"slices"
	"sync"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// maxChanges bounds each group's change history: a policy daemon that sets
// a timeslice per request must not grow the registry without end.
const maxChanges = 32

// Schedule is whether a group is on the runlist (GPFIFO_SCHEDULE).
type Schedule uint8

const (
	ScheduleUnknown Schedule = iota
	ScheduleEnabled
	ScheduleDisabled
)

func (s Schedule) String() string {
	switch s {
	case ScheduleEnabled:
		return "enabled"
	case ScheduleDisabled:
		return "disabled"
	}
	return "?"
}

// MarshalText makes the state read as a word in JSON.
func (s Schedule) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Caller is who made an RM call: the process and thread, which need not
// own the object (gpreemptctl controls another process's groups through a
// duplicate of its file).
type Caller struct {
	PID  uint32 `json:"pid"`
	TID  uint32 `json:"tid"`
	Comm string `json:"comm"`
}

// Change is one successful control that changed a group's scheduling.
type Change struct {
	At     uint64 `json:"at_ns"`
	By     Caller `json:"by"`
	Cmd    uint32 `json:"cmd"`
	Name   string `json:"name"`
	Value  string `json:"value"`
	TookNs uint64 `json:"took_ns"`
}

// TSG is a channel group as the registry knows it from the events.
type TSG struct {
	// PID, Comm and FD are the owner's: the process that allocated the
	// group on that file (or its client). PID 0: not known, the group was
	// created before tracing began.
	PID    uint32       `json:"pid"`
	Comm   string       `json:"comm"`
	FD     int32        `json:"fd"`
	Client ioctl.Handle `json:"client"`
	Device ioctl.Handle `json:"device"`
	Handle ioctl.Handle `json:"handle"`
	// Created is the allocation's time; 0 when the group was first met in
	// a control.
	Created  uint64     `json:"created_ns"`
	Channels int        `json:"channels"`
	Engine   tsg.Engine `json:"engine"`
	// TimesliceUs is the last value set or read (0: not seen).
	TimesliceUs uint64    `json:"timeslice_us"`
	Interleave  tsg.Level `json:"interleave"`
	Schedule    Schedule  `json:"schedule"`
	Preemptions int       `json:"preemptions"`
	// Changes lists the last changes, oldest first.
	Changes []Change `json:"changes,omitempty"`
}

// UpdateKind says what an event did to the registry.
type UpdateKind string

const (
	UpdateTSGAlloc     UpdateKind = "tsg-alloc"
	UpdateChannelAlloc UpdateKind = "channel-alloc"
	UpdateEngine       UpdateKind = "engine"
	UpdateControl      UpdateKind = "control"
	UpdateChannelFree  UpdateKind = "channel-free"
	UpdateTSGFree      UpdateKind = "tsg-free"
	// UpdateTSGExit: the owner exited; RM freed the group with its file.
	UpdateTSGExit UpdateKind = "tsg-exit"
)

// Update is one change to the registry, for streaming: the event that made
// it, the group before and after, and for channel and engine objects the
// object itself.
type Update struct {
	Kind UpdateKind
	// Call is the RM call (nil for UpdateTSGExit).
	Call          *RMCall
	Before, After TSG
	Object        ioctl.Handle
	Class         uint32
}

type objectKey struct{ client, handle ioctl.Handle }

type owner struct {
	pid  uint32
	comm string
	fd   int32
}

// Registry is the live set of channel groups, built from RM events alone:
// allocation of a KEPLER_CHANNEL_GROUP_A creates a group under its device,
// channels and their engine objects fill it in, controls update its
// scheduling state (recording who changed what), frees and process exits
// remove it. Safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	clients  map[ioctl.Handle]owner
	groups   map[objectKey]*TSG
	channels map[objectKey]ioctl.Handle // channel -> its group's handle
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{
		clients:  map[ioctl.Handle]owner{},
		groups:   map[objectKey]*TSG{},
		channels: map[objectKey]ioctl.Handle{},
	}
}

// Apply folds one event into the registry and returns what changed.
// Events that do not concern channel groups return nothing.
func (r *Registry) Apply(ev Event) []Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := ev.(type) {
	case *RMCall:
		switch {
		case e.Alloc != nil:
			return r.alloc(e)
		case e.Free != nil:
			return r.free(e)
		case e.Control != nil:
			return r.control(e)
		}
	case *TaskExit:
		return r.exit(e)
	}
	return nil
}

// Groups returns a copy of every live group, ordered by owner, client and
// handle.
func (r *Registry) Groups() []TSG {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]TSG, 0, len(r.groups))
	for _, g := range r.groups {
		out = append(out, g.clone())
	}
	slices.SortFunc(out, func(a, b TSG) int {
		switch {
		case a.PID != b.PID:
			return cmp.Compare(a.PID, b.PID)
		case a.Client != b.Client:
			return cmp.Compare(a.Client, b.Client)
		}
		return cmp.Compare(a.Handle, b.Handle)
	})
	return out
}

// Group returns one group by client and handle.
func (r *Registry) Group(client, handle ioctl.Handle) (TSG, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.groups[objectKey{client, handle}]
	if !ok {
		return TSG{}, false
	}
	return g.clone(), true
}

func (g *TSG) clone() TSG {
	c := *g
	c.Changes = slices.Clone(g.Changes)
	return c
}

func callerOf(e *RMCall) Caller { return Caller{PID: e.PID, TID: e.TID, Comm: e.Comm} }

func (r *Registry) alloc(e *RMCall) []Update {
	a := e.Alloc
	switch {
	case a.Class == ioctl.NV01_ROOT_CLIENT || a.Class == ioctl.NV01_ROOT || a.Class == ioctl.NV01_ROOT_NON_PRIV:
		if e.OK() {
			r.clients[a.Object] = owner{pid: e.PID, comm: e.Comm, fd: e.FD}
		}
		return nil
	case ioctl.IsChannelGroupClass(a.Class):
		if !e.OK() {
			// A refused allocation is worth seeing; nothing changes.
			return []Update{{Kind: UpdateTSGAlloc, Call: e, Before: TSG{Client: a.Client, Device: a.Parent, Handle: a.Object}}}
		}
		if old, ok := r.groups[objectKey{a.Client, a.Object}]; ok {
			// RM refuses a handle in use, so the old group was freed
			// unseen (its file closed while tracing was off).
			r.removeGroup(nil, old, UpdateTSGFree)
		}
		g := &TSG{
			PID: e.PID, Comm: e.Comm, FD: e.FD, Client: a.Client, Device: a.Parent, Handle: a.Object,
			Created: e.Exit, Engine: tsg.EngineUnknown, Interleave: tsg.LevelUnknown,
		}
		r.groups[objectKey{a.Client, a.Object}] = g
		return []Update{{Kind: UpdateTSGAlloc, Call: e, After: g.clone()}}
	}
	if !e.OK() {
		return nil
	}
	if g, ok := r.groups[objectKey{a.Client, a.Parent}]; ok {
		before := g.clone()
		switch {
		case ioctl.IsChannelClass(a.Class):
			key := objectKey{a.Client, a.Object}
			if _, dup := r.channels[key]; dup {
				return nil
			}
			g.Channels++
			r.channels[key] = g.Handle
			return []Update{{Kind: UpdateChannelAlloc, Call: e, Before: before, After: g.clone(), Object: a.Object, Class: a.Class}}
		case a.Class == ioctl.FERMI_CONTEXT_SHARE_A:
			// A subcontext exists only under the compute group.
			return r.setEngine(e, g, before, tsg.EngineCompute, a)
		}
		return nil
	}
	if h, ok := r.channels[objectKey{a.Client, a.Parent}]; ok {
		g := r.groups[objectKey{a.Client, h}]
		if g == nil {
			return nil
		}
		switch {
		case ioctl.IsComputeClass(a.Class):
			return r.setEngine(e, g, g.clone(), tsg.EngineCompute, a)
		case ioctl.IsCopyClass(a.Class) && g.Engine == tsg.EngineUnknown:
			return r.setEngine(e, g, g.clone(), tsg.EngineCopy, a)
		}
	}
	return nil
}

func (r *Registry) setEngine(e *RMCall, g *TSG, before TSG, engine tsg.Engine, a *Alloc) []Update {
	if g.Engine == engine {
		return nil
	}
	g.Engine = engine
	return []Update{{Kind: UpdateEngine, Call: e, Before: before, After: g.clone(), Object: a.Object, Class: a.Class}}
}

func (r *Registry) free(e *RMCall) []Update {
	if !e.OK() {
		return nil
	}
	f := e.Free
	var out []Update
	if f.Object == f.Client {
		// Freeing a client frees everything in it.
		delete(r.clients, f.Client)
		for k, g := range r.groups {
			if k.client == f.Client {
				out = append(out, r.removeGroup(e, g, UpdateTSGFree))
			}
		}
		sortUpdates(out)
		return out
	}
	key := objectKey{f.Client, f.Object}
	if g, ok := r.groups[key]; ok {
		return []Update{r.removeGroup(e, g, UpdateTSGFree)}
	}
	if h, ok := r.channels[key]; ok {
		delete(r.channels, key)
		if g := r.groups[objectKey{f.Client, h}]; g != nil {
			before := g.clone()
			g.Channels--
			return []Update{{Kind: UpdateChannelFree, Call: e, Before: before, After: g.clone(), Object: f.Object}}
		}
		return nil
	}
	// Freeing a device (or any other parent of groups) frees its groups.
	for _, g := range r.groups {
		if g.Client == f.Client && g.Device == f.Object {
			out = append(out, r.removeGroup(e, g, UpdateTSGFree))
		}
	}
	sortUpdates(out)
	return out
}

func (r *Registry) removeGroup(e *RMCall, g *TSG, kind UpdateKind) Update {
	for k, h := range r.channels {
		if k.client == g.Client && h == g.Handle {
			delete(r.channels, k)
		}
	}
	delete(r.groups, objectKey{g.Client, g.Handle})
	return Update{Kind: kind, Call: e, Before: g.clone()}
}

func sortUpdates(us []Update) {
	slices.SortFunc(us, func(a, b Update) int { return cmp.Compare(a.Before.Handle, b.Before.Handle) })
}

func (r *Registry) control(e *RMCall) []Update {
	c := e.Control
	if !IsChannelGroupControl(c.Cmd) {
		return nil
	}
	key := objectKey{c.Client, c.Object}
	g, ok := r.groups[key]
	if !ok {
		if !e.OK() {
			return []Update{{Kind: UpdateControl, Call: e, Before: TSG{Client: c.Client, Handle: c.Object}}}
		}
		// A group created before tracing began: known from now on, its
		// owner from its client if that was seen.
		g = &TSG{Client: c.Client, Handle: c.Object, FD: -1, Engine: tsg.EngineUnknown, Interleave: tsg.LevelUnknown}
		if o, ok := r.clients[c.Client]; ok {
			g.PID, g.Comm, g.FD = o.pid, o.comm, o.fd
		}
		r.groups[key] = g
	}
	before := g.clone()
	if e.OK() {
		change := Change{At: e.Exit, By: callerOf(e), Cmd: c.Cmd, Name: ControlName(c.Cmd), TookNs: uint64(e.Duration())}
		switch c.Cmd {
		case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:
			if us, ok := c.TimesliceUs(); ok {
				g.TimesliceUs = us
				change.Value = tsg.Micros(us).String()
			}
			g.record(change)
		case ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE:
			if us, ok := c.TimesliceUs(); ok {
				g.TimesliceUs = us
			}
		case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL:
			if l, ok := c.InterleaveLevel(); ok {
				g.Interleave = tsg.Level(l)
				change.Value = g.Interleave.String()
			}
			g.record(change)
		case ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL:
			if l, ok := c.InterleaveLevel(); ok {
				g.Interleave = tsg.Level(l)
			}
		case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
			if on, ok := c.ScheduleEnable(); ok {
				g.Schedule = ScheduleDisabled
				change.Value = "disable"
				if on {
					g.Schedule = ScheduleEnabled
					change.Value = "enable"
				}
			}
			g.record(change)
		case ioctl.NVA06C_CTRL_CMD_PREEMPT:
			g.Preemptions++
			g.record(change)
		}
	}
	return []Update{{Kind: UpdateControl, Call: e, Before: before, After: g.clone()}}
}

func (g *TSG) record(c Change) {
	if len(g.Changes) == maxChanges {
		g.Changes = slices.Delete(g.Changes, 0, 1)
	}
	g.Changes = append(g.Changes, c)
}

func (r *Registry) exit(e *TaskExit) []Update {
	var out []Update
	for c, o := range r.clients {
		if o.pid == e.PID {
			delete(r.clients, c)
		}
	}
	for _, g := range r.groups {
		if g.PID == e.PID {
			out = append(out, r.removeGroup(nil, g, UpdateTSGExit))
		}
	}
	sortUpdates(out)
	return out
}
