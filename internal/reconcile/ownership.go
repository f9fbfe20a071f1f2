package reconcile

import "github.com/gpreempt/gpreempt/tsg"

// Adopt makes pid known with groups found outside the event stream (the
// first scan, or the scan mode) and classes it at once when it has
// groups nobody classed yet.
func (r *Reconciler) Adopt(pid int, groups []tsg.GroupID) {
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
		fresh = fresh || !had || p.groups[id].held == unclassed
	}
	if len(p.groups) == 0 && p.override == nil && p.decision.Rule == "" {
		delete(r.procs, pid) // a fork's worker: no group of its own
		return
	}
	if fresh && p.status.Kind != Pending {
		p.status.pend(r.Now())
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
func (r *Reconciler) heldElsewhere(p *proc, id tsg.GroupID) bool {
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
func (r *Reconciler) claim(p *proc, id tsg.GroupID) bool {
	if r.heldElsewhere(p, id) {
		return false
	}
	if g := r.takeOver(p, id); g != nil && p.groups[id] == nil {
		g.held = unclassed
		p.groups[id] = g
	}
	r.ensureGroup(p, id)
	return true
}

func (r *Reconciler) takeOver(p *proc, id tsg.GroupID) *group {
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
