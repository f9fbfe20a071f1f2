package reconcile

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

func gpuLabel(gs []policy.GPU) string {
	var s []string
	for _, g := range gs {
		s = append(s, strconv.Itoa(g.Index))
	}
	return strings.Join(s, ",")
}

// Known lists the pids the reconciler holds state for.
func (r *Reconciler) Known() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.procs))
}

// InClass lists the processes last classed n, by pid.
func (r *Reconciler) InClass(n class.Name) []policy.ProcRef {
	return r.refs(func(d policy.Decision) bool { return inClass(d, n) })
}

// Outside lists the known processes not classed n (unclassed and exempt
// ones included), by pid.
func (r *Reconciler) Outside(n class.Name) []policy.ProcRef {
	return r.refs(func(d policy.Decision) bool { return !inClass(d, n) })
}

// inClass says whether d classes a process n.
func inClass(d policy.Decision, n class.Name) bool {
	return d.Rule != "" && !d.Exempt && d.Spec.Name == n
}

// refs lists the known processes whose decision keep takes, by pid.
func (r *Reconciler) refs(keep func(policy.Decision) bool) []policy.ProcRef {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []policy.ProcRef
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		if p := r.procs[pid]; keep(p.decision) {
			ref := policy.ProcRef{PID: pid, Start: p.start, Comm: p.info.Comm, Exe: p.info.Exe, Decision: p.decision,
				Owner: "uid " + strconv.FormatUint(uint64(p.info.UID), 10)} // named as the gate names tenants (gate.UIDTenant)
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

// ProcStatus is one process as the daemon holds it.
type ProcStatus struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	UID     uint32 `json:"uid"`
	Cgroup  string `json:"cgroup,omitempty"`
	GPUs    string `json:"gpus,omitempty"`
	Class   string `json:"class"`
	Rule    string `json:"rule,omitempty"`
	Pending bool   `json:"pending,omitempty"`
	// Status is its classing's state ("done", "pending", "failed"),
	// Attempts the failures in a row and Error the last one.
	Status   string       `json:"status"`
	Attempts int          `json:"attempts,omitempty"`
	Error    string       `json:"error,omitempty"`
	Groups   []GroupState `json:"groups"`
}

// Snapshot lists every process the daemon holds, by pid.
func (r *Reconciler) Snapshot() []ProcStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := []ProcStatus{}
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		ps := ProcStatus{PID: pid, Comm: p.info.Comm, UID: p.info.UID, Cgroup: p.info.Cgroup, GPUs: gpuLabel(p.info.GPUs),
			Class: p.decision.String(), Rule: p.decision.Rule, Pending: p.status.Kind == Pending, Groups: []GroupState{},
			Status: p.status.Kind.String(), Attempts: p.status.Attempts}
		if p.status.Err != nil {
			ps.Error = p.status.Err.Error()
		}
		if p.decision.Rule == "" {
			ps.Class = ""
		}
		ids := slices.SortedFunc(maps.Keys(p.groups), tsg.GroupID.Compare)
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
