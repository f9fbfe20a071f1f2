package registry

import (
	"cmp"
	"context"
	"errors"
	"slices"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Follow applies events until the channel closes (nil) or ctx is done
// (its error): the wiring of a trace.Tracer's Events into the registry.
func (r *Registry) Follow(ctx context.Context, events <-chan trace.Event) error {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return nil
			}
			r.Apply(ev)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Apply folds one trace event into the registry, publishes what changed to
// the subscribers and returns it. Events that do not concern channel
// groups or their processes return nothing.
//
// An allocation of KEPLER_CHANNEL_GROUP_A creates a group under its
// device; channels and their engine objects fill it in; controls update
// its scheduling state, recording who changed what; frees (of the group,
// its device or its client) and the owner's exit remove it.
func (r *Registry) Apply(ev trace.Event) []Update {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch e := ev.(type) {
	case *trace.RMCall:
		switch {
		case e.Alloc != nil:
			return r.publish(r.alloc(e))
		case e.Free != nil:
			return r.publish(r.free(e))
		case e.Control != nil:
			return r.publish(r.control(e))
		}
	case *trace.TaskExit:
		if p := r.processes[int(e.PID)]; p != nil && e.At < p.verified {
			// Events arrive up to a poll late: this exit is of the
			// process that held the pid before the one discovery has
			// since found there.
			return nil
		}
		return r.publish(r.exit(int(e.PID)))
	}
	return nil
}

// idOf is the identity of the process holding pid, as recorded.
func (r *Registry) idOf(pid int) ProcessID {
	if p := r.processes[pid]; p != nil {
		return p.id
	}
	return ProcessID{}
}

// see records that pid made an RM object and returns what it displaced:
// the exit of an earlier process of the same pid whose exit was not seen
// (lost, or before tracing began). The identity is read now, a little
// after the event: a process already gone gets start 0.
func (r *Registry) see(pid uint32, comm string) []Update {
	if pid == 0 {
		return nil
	}
	info, err := r.procs.Stat(int(pid))
	if err != nil && !errors.Is(err, ioctl.ErrNoSuchProcess) {
		r.log.Debug("read process identity", "pid", pid, "err", err)
	}
	var out []Update
	if p := r.processes[int(pid)]; p != nil {
		if err != nil || p.id.Start == 0 || info.Start == p.id.Start {
			return nil
		}
		out = r.exit(int(pid))
	}
	if comm == "" {
		comm = info.Comm
	}
	r.processes[int(pid)] = &process{id: ProcessID{PID: int(pid), Start: info.Start}, comm: comm}
	return out
}

func callerOf(e *trace.RMCall) Caller { return Caller{PID: e.PID, TID: e.TID, Comm: e.Comm} }

func newGroup(pid uint32, comm string, fd int32, client, device, handle ioctl.Handle) *Group {
	return &Group{
		Group: tsg.Group{PID: int(pid), FD: int(fd), Client: client, Device: device, Handle: handle,
			Engine: tsg.EngineUnknown, Interleave: tsg.LevelUnknown},
		Comm: comm,
	}
}

func (r *Registry) alloc(e *trace.RMCall) []Update {
	a := e.Alloc
	switch {
	case a.Class == ioctl.NV01_ROOT_CLIENT || a.Class == ioctl.NV01_ROOT || a.Class == ioctl.NV01_ROOT_NON_PRIV:
		if !e.OK() {
			return nil
		}
		out := r.see(e.PID, e.Comm)
		r.clients[a.Object] = owner{pid: e.PID, comm: e.Comm, fd: e.FD}
		return out
	case ioctl.IsChannelGroupClass(a.Class):
		if !e.OK() {
			// A refused allocation is worth seeing; nothing changes.
			return []Update{{Kind: UpdateTSGAlloc, Call: e, Before: Group{Group: tsg.Group{Client: a.Client, Device: a.Parent, Handle: a.Object}}}}
		}
		var out []Update
		if _, known := r.processes[int(e.PID)]; !known {
			out = r.see(e.PID, e.Comm)
		}
		id := tsg.GroupID{Client: a.Client, Handle: a.Object}
		if old, ok := r.groups[id]; ok {
			// RM refuses a handle in use, so the old group was freed
			// unseen (its file closed while tracing was off).
			out = append(out, r.removeGroup(nil, old, UpdateTSGFree))
		}
		g := newGroup(e.PID, e.Comm, e.FD, a.Client, a.Parent, a.Object)
		g.Created = e.Exit
		r.groups[id] = g
		return append(out, Update{Kind: UpdateTSGAlloc, Process: r.idOf(g.PID), Call: e, After: g.clone()})
	}
	if !e.OK() {
		return nil
	}
	if g, ok := r.groups[tsg.GroupID{Client: a.Client, Handle: a.Parent}]; ok {
		before := g.clone()
		switch {
		case ioctl.IsChannelClass(a.Class):
			key := objectKey{a.Client, a.Object}
			if _, dup := r.channels[key]; dup {
				return nil
			}
			g.Channels++
			r.channels[key] = g.ID()
			return []Update{{Kind: UpdateChannelAlloc, Process: r.idOf(g.PID), Call: e, Before: before, After: g.clone(), Object: a.Object, Class: a.Class}}
		case a.Class == ioctl.FERMI_CONTEXT_SHARE_A:
			// A subcontext exists only under the compute group.
			return r.setEngine(e, g, before, tsg.EngineCompute, a)
		}
		return nil
	}
	if id, ok := r.channels[objectKey{a.Client, a.Parent}]; ok {
		g := r.groups[id]
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

func (r *Registry) setEngine(e *trace.RMCall, g *Group, before Group, engine tsg.Engine, a *trace.Alloc) []Update {
	if g.Engine == engine {
		return nil
	}
	g.Engine = engine
	return []Update{{Kind: UpdateEngine, Process: r.idOf(g.PID), Call: e, Before: before, After: g.clone(), Object: a.Object, Class: a.Class}}
}

func (r *Registry) free(e *trace.RMCall) []Update {
	if !e.OK() {
		return nil
	}
	f := e.Free
	var out []Update
	if f.Object == f.Client {
		// Freeing a client frees everything in it.
		o, known := r.clients[f.Client]
		delete(r.clients, f.Client)
		for id, g := range r.groups {
			if id.Client == f.Client {
				out = append(out, r.removeGroup(e, g, UpdateTSGFree))
			}
		}
		sortUpdates(out)
		if known {
			r.dropIfEmpty(int(o.pid))
		}
		return out
	}
	if g, ok := r.groups[tsg.GroupID{Client: f.Client, Handle: f.Object}]; ok {
		return []Update{r.removeGroup(e, g, UpdateTSGFree)}
	}
	key := objectKey{f.Client, f.Object}
	if id, ok := r.channels[key]; ok {
		delete(r.channels, key)
		if g := r.groups[id]; g != nil {
			before := g.clone()
			g.Channels--
			return []Update{{Kind: UpdateChannelFree, Process: r.idOf(g.PID), Call: e, Before: before, After: g.clone(), Object: f.Object}}
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

func (r *Registry) removeGroup(e *trace.RMCall, g *Group, kind UpdateKind) Update {
	id := g.ID()
	for k, of := range r.channels {
		if of == id {
			delete(r.channels, k)
		}
	}
	delete(r.groups, id)
	return Update{Kind: kind, Process: r.idOf(g.PID), Call: e, Before: g.clone()}
}

func sortUpdates(us []Update) {
	slices.SortFunc(us, func(a, b Update) int { return cmp.Compare(a.Before.Handle, b.Before.Handle) })
}

// origin says who made a control on g.
func (r *Registry) origin(e *trace.RMCall, g *Group) Origin {
	switch {
	case g.PID != 0 && int(e.PID) == g.PID:
		return OriginOwner
	case e.PID == r.self:
		return OriginSelf
	}
	return OriginOther
}

func (r *Registry) control(e *trace.RMCall) []Update {
	c := e.Control
	if !ioctl.IsChannelGroupControl(c.Cmd) {
		return nil
	}
	key := tsg.GroupID{Client: c.Client, Handle: c.Object}
	g, ok := r.groups[key]
	if !ok {
		if !e.OK() {
			ghost := Group{Group: tsg.Group{Client: c.Client, Handle: c.Object}}
			return []Update{{Kind: UpdateControl, Call: e, Before: ghost, Origin: r.origin(e, &ghost)}}
		}
		// A group created before tracing began: known from now on, its
		// owner from its client if that was seen.
		g = newGroup(0, "", -1, c.Client, 0, c.Object)
		if o, ok := r.clients[c.Client]; ok {
			g.PID, g.Comm, g.FD = int(o.pid), o.comm, int(o.fd)
		}
		r.groups[key] = g
	}
	before := g.clone()
	u := Update{Kind: UpdateControl, Process: r.idOf(g.PID), Call: e, Before: before, Origin: r.origin(e, g)}
	if e.OK() {
		change := Change{At: e.Exit, By: callerOf(e), Cmd: c.Cmd, Name: ioctl.ControlName(c.Cmd), TookNs: uint64(e.Duration())}
		recorded := true
		switch c.Cmd {
		case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:
			if us, ok := c.TimesliceUs(); ok {
				g.Timeslice = tsg.Micros(us)
				change.Value = g.Timeslice.String()
			}
		case ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE:
			if us, ok := c.TimesliceUs(); ok {
				g.Timeslice = tsg.Micros(us)
			}
			recorded = false
		case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL:
			if l, ok := c.InterleaveLevel(); ok {
				g.Interleave = tsg.Level(l)
				change.Value = g.Interleave.String()
			}
		case ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL:
			if l, ok := c.InterleaveLevel(); ok {
				g.Interleave = tsg.Level(l)
			}
			recorded = false
		case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
			if on, ok := c.ScheduleEnable(); ok {
				g.Schedule = ScheduleDisabled
				change.Value = "disable"
				if on {
					g.Schedule = ScheduleEnabled
					change.Value = "enable"
				}
			}
		case ioctl.NVA06C_CTRL_CMD_PREEMPT:
			g.Preemptions++
		default:
			recorded = false
		}
		if recorded {
			g.record(change)
			u.Change = &change
		}
	}
	u.After = g.clone()
	return []Update{u}
}

// dropIfEmpty forgets pid's process once it holds no client and no group:
// a process that only looked (gpreemptctl's own client, allocated to
// bound a scan and freed at once) is no GPU process to keep.
func (r *Registry) dropIfEmpty(pid int) {
	for _, o := range r.clients {
		if int(o.pid) == pid {
			return
		}
	}
	for _, g := range r.groups {
		if g.PID == pid {
			return
		}
	}
	delete(r.processes, pid)
}

// exit forgets the process holding pid: its clients, its groups (one
// UpdateTSGExit each, RM having freed them with its files) and itself.
func (r *Registry) exit(pid int) []Update {
	var out []Update
	for c, o := range r.clients {
		if int(o.pid) == pid {
			delete(r.clients, c)
		}
	}
	for _, g := range r.groups {
		if g.PID == pid {
			out = append(out, r.removeGroup(nil, g, UpdateTSGExit))
		}
	}
	sortUpdates(out)
	if p := r.processes[pid]; p != nil {
		delete(r.processes, pid)
		out = append(out, Update{Kind: UpdateProcessExit, Process: p.id})
	}
	return out
}
