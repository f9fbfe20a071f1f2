package registry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Source discovers a process's channel groups: tsg.AttachSource,
// tsg.EscapeSource or tsg.AutoSource. The Process it returns may hold
// duplicates of the target's files until Closed.
type Source interface {
	Discover(ctx context.Context, pid int) (*tsg.Process, error)
}

// allSource is a Source that also lists every process's groups at once.
type allSource interface {
	DiscoverAll(ctx context.Context) (*tsg.Listing, error)
}

// Lister lists the pids that hold a GPU control file (tsg.Host does).
type Lister interface {
	Processes() (pids []int, denied int, err error)
}

// ErrNoSource: the registry was built without a Source (or, for Scan,
// without a way to list processes), so it cannot discover.
var ErrNoSource = errors.New("registry has no discovery source")

// opLock serialises operations on one pid; n counts its holders and
// waiters, so the entry goes when the last one leaves.
type opLock struct {
	ch chan struct{}
	n  int
}

// lockPID takes pid's operation lock, or fails when ctx ends first.
func (r *Registry) lockPID(ctx context.Context, pid int) (unlock func(), err error) {
	r.opsMu.Lock()
	l := r.ops[pid]
	if l == nil {
		l = &opLock{ch: make(chan struct{}, 1)}
		r.ops[pid] = l
	}
	l.n++
	r.opsMu.Unlock()
	leave := func() {
		r.opsMu.Lock()
		if l.n--; l.n == 0 {
			delete(r.ops, pid)
		}
		r.opsMu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// Do runs fn on the channel groups of process id, discovered afresh:
// it checks that id still holds its pid, discovers (attaching to the
// process's control files where the source needs to), checks the identity
// again — a duplicate made after the pid changed hands would be of another
// process — merges what it found into the registry, runs fn, records the
// settings fn left in the groups, and closes every duplicate before it
// returns. fn must not keep the Process: its groups reach RM only until
// then. A nil fn only refreshes the registry. Operations on one pid run
// one at a time; on different pids they run in parallel.
//
// Errors: ioctl.ErrNoSuchProcess when id is gone (exited, or its pid now
// held by a process with another start time), in which case the registry
// forgets it; tsg.ErrNoGPUContext when it holds no channel group;
// tsg.ErrInvalidArgument for an id without a start time; the source's
// errors; fn's error as it is; a failure to release a duplicate joined to
// any of these.
func (r *Registry) Do(ctx context.Context, id ProcessID, fn func(*tsg.Process) error) (err error) {
	if r.source == nil {
		return fmt.Errorf("%v: %w", id, ErrNoSource)
	}
	if id.PID <= 0 || id.Start == 0 {
		return fmt.Errorf("%w: process %v: need a pid and its start time", tsg.ErrInvalidArgument, id)
	}
	unlock, err := r.lockPID(ctx, id.PID)
	if err != nil {
		return fmt.Errorf("%v: %w", id, err)
	}
	defer unlock()
	return r.do(ctx, id, fn)
}

func (r *Registry) do(ctx context.Context, id ProcessID, fn func(*tsg.Process) error) (err error) {
	// Checked again after discovery, whose name is the one kept: the
	// process may have exec'd meanwhile.
	if _, err := r.check(id); err != nil {
		return err
	}
	var comm string
	began := r.now()
	p, err := r.source.Discover(ctx, id.PID)
	switch {
	case errors.Is(err, ioctl.ErrNoSuchProcess):
		r.forget(id)
		return fmt.Errorf("%v is gone: %w", id, err)
	case errors.Is(err, tsg.ErrNoGPUContext):
		// Whose files were those? Only if id's, its groups, if it had
		// any, are gone; it may make new ones, which events or the next
		// discovery will show.
		noGroups := err
		if comm, err = r.check(id); err != nil {
			return err
		}
		r.merge(id, comm, nil, began)
		return noGroups
	case err != nil:
		return fmt.Errorf("%v: discover: %w", id, err)
	}
	defer func() {
		if cerr := p.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("%v: release its files: %w", id, cerr))
		}
	}()
	if comm, err = r.check(id); err != nil {
		return err
	}
	r.merge(id, comm, p.Groups, began)
	if fn == nil {
		return nil
	}
	err = fn(p)
	r.settle(p.Groups)
	return err
}

// check reads the process holding id.PID now: id's name if id is still
// there, else an ioctl.ErrNoSuchProcess error, and id forgotten.
func (r *Registry) check(id ProcessID) (string, error) {
	info, err := r.procs.Stat(id.PID)
	switch {
	case errors.Is(err, ioctl.ErrNoSuchProcess):
		r.forget(id)
		return "", fmt.Errorf("%v is gone: %w", id, err)
	case err != nil:
		return "", fmt.Errorf("%v: %w", id, err)
	case info.Start != id.Start:
		r.forget(id)
		return "", fmt.Errorf("%v is gone: pid %d is now held by a process started at %d: %w", id, id.PID, info.Start, ioctl.ErrNoSuchProcess)
	}
	return info.Comm, nil
}

// forget removes id if the registry still has it as that identity.
func (r *Registry) forget(id ProcessID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.processes[id.PID]; p != nil && p.id == id {
		r.publish(r.exit(id.PID))
	}
}

// merge folds what discovery found of id into the registry. Discovery
// sees every group of the process, so a known group it did not find was
// freed unseen — unless the events show it allocated after the discovery
// began (began, in the events' clock), which the scan may have missed.
func (r *Registry) merge(id ProcessID, comm string, found []tsg.Group, began uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Update
	p := r.processes[id.PID]
	if p != nil && p.id != id {
		// Another process held the pid before; its exit was not seen.
		out = r.exit(id.PID)
		p = nil
	}
	if p == nil && len(found) == 0 {
		// Nothing known, nothing found.
		r.publish(out)
		return
	}
	if p == nil {
		p = &process{id: id, comm: comm}
		r.processes[id.PID] = p
	}
	if len(found) > 0 {
		// Not without groups: a zombie has closed its files, and its
		// exit event must still count.
		p.verified = max(p.verified, began)
	}
	seen := map[tsg.GroupID]bool{}
	for _, d := range found {
		key := d.ID()
		seen[key] = true
		if _, ok := r.clients[d.Client]; !ok {
			r.clients[d.Client] = owner{pid: uint32(id.PID), comm: p.comm, fd: int32(d.FD)}
		}
		g := r.groups[key]
		if g == nil {
			g = &Group{Group: d, Comm: p.comm}
			r.groups[key] = g
			out = append(out, Update{Kind: UpdateTSGFound, Process: id, After: g.clone()})
			continue
		}
		// The events know the owner's file and the settings' history;
		// discovery knows the hardware id and has just read the settings.
		g.PID, g.Comm, g.Device, g.TSGID, g.Channels = id.PID, p.comm, d.Device, d.TSGID, d.Channels
		if g.FD < 0 {
			g.FD = d.FD
		}
		if d.Engine != tsg.EngineUnknown {
			g.Engine = d.Engine
		}
		settle(g, d)
	}
	var gone []Update
	for key, g := range r.groups {
		if g.PID == id.PID && !seen[key] && g.Created < began {
			gone = append(gone, r.removeGroup(nil, g, UpdateTSGFree))
		}
	}
	sortUpdates(gone)
	r.publish(append(out, gone...))
}

// settle records the settings an operation left in its groups.
func (r *Registry) settle(gs []tsg.Group) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, d := range gs {
		if g := r.groups[d.ID()]; g != nil {
			settle(g, d)
		}
	}
}

// settle takes d's settings where d knows them: RM on the H100 does not
// report interleave levels, and what the events saw set stays.
func settle(g *Group, d tsg.Group) {
	if d.Timeslice != 0 {
		g.Timeslice = d.Timeslice
	}
	if d.Interleave != tsg.LevelUnknown {
		g.Interleave = d.Interleave
	}
}

// Scan discovers every GPU process on the machine, one operation per
// process (so no duplicate outlives its own process's discovery), and
// forgets the known processes that are gone: the registry's feed when
// tracing is not possible, and a resynchronisation after dropped events.
// Processes that exit or hold no group meanwhile are skipped; other
// failures are joined into the error after every process was tried.
func (r *Registry) Scan(ctx context.Context) error {
	if r.source == nil {
		return ErrNoSource
	}
	if r.lister == nil {
		all, ok := r.source.(allSource)
		if !ok {
			return fmt.Errorf("scan: %w: no Lister, and %T has no DiscoverAll", ErrNoSource, r.source)
		}
		return r.scanAll(ctx, all)
	}
	began := r.now()
	pids, _, err := r.lister.Processes()
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	var errs []error
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			return err
		}
		info, err := r.procs.Stat(pid)
		if err != nil {
			continue // gone since the listing
		}
		if err := r.Do(ctx, ProcessID{PID: pid, Start: info.Start}, nil); err != nil && !skippable(err) {
			errs = append(errs, err)
		}
	}
	r.forgetUnlisted(pids, began)
	return errors.Join(errs...)
}

// scanAll is Scan through a source that discovers every process at once.
// The identities are read after the discovery: a pid that changed hands
// during it would get the old process's groups until the next operation
// on it, which discovers afresh.
func (r *Registry) scanAll(ctx context.Context, src allSource) error {
	began := r.now()
	l, err := src.DiscoverAll(ctx)
	if err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	defer l.Close()
	ps := l.Processes
	pids := make([]int, 0, len(ps))
	for _, p := range ps {
		info, err := r.procs.Stat(p.PID)
		if err != nil {
			continue
		}
		pids = append(pids, p.PID)
		r.merge(ProcessID{PID: p.PID, Start: info.Start}, info.Comm, p.Groups, began)
	}
	r.forgetUnlisted(pids, began)
	return nil
}

// skippable: errors of processes that ended or hold no group, which a
// machine-wide scan meets as a matter of course.
func skippable(err error) bool {
	return errors.Is(err, ioctl.ErrNoSuchProcess) || errors.Is(err, tsg.ErrNoGPUContext)
}

// forgetUnlisted checks the known processes a scan that began at began
// did not list: those gone are forgotten; those alive without a control
// file have no groups, but for any the events showed made since.
func (r *Registry) forgetUnlisted(listed []int, began uint64) {
	r.mu.Lock()
	var ids []ProcessID
	for pid, p := range r.processes {
		if !slices.Contains(listed, pid) {
			ids = append(ids, p.id)
		}
	}
	r.mu.Unlock()
	for _, id := range ids {
		if comm, err := r.check(id); err == nil {
			r.merge(id, comm, nil, began)
		}
	}
}
