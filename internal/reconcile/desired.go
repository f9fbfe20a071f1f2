package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

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
		if g.held != classed || g.applied != tsg.Some(want) {
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
		if g.applied.Set {
			n++
		}
	}
	return n, nil
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
		if len(p.groups) > 0 {
			p.status.pend(now)
		}
	}
	r.poke()
}

// tableAt is the policy's class table with BE's timeslice at ts (unset:
// the policy's table itself): the table in force, as the socket API
// shows it.
func (r *Reconciler) tableAt(ts tsg.Opt[time.Duration]) class.Table {
	if !ts.Set {
		return r.pol.Classes
	}
	t := maps.Clone(r.pol.Classes)
	c := t[class.BE]
	c.Timeslice = ts.V
	t[class.BE] = c
	return t
}

// settingsAt is what a group of class sp gets with BE's timeslice at ts
// (unset: the policy's). A weight the policy allows at its own timeslice
// (an environment's or a request's) may pass tsg.MaxTimeslice at one the
// SLO mode chose: the group then gets the longest timeslice there is,
// rather than keep one from before.
func (r *Reconciler) settingsAt(sp class.Spec, ts tsg.Opt[time.Duration]) (tsg.Settings, error) {
	c, err := r.pol.Classes.Get(sp.Name)
	if err != nil {
		return tsg.Settings{}, err
	}
	if sp.Name != class.BE || !ts.Set {
		return c.Settings(sp.Weight)
	}
	s, err := c.SettingsAt(ts.V, sp.Weight)
	if err == nil {
		return s, nil
	}
	if _, perr := c.Settings(sp.Weight); perr != nil {
		return s, err
	}
	return tsg.Settings{Timeslice: tsg.Some(tsg.MaxTimeslice), Interleave: tsg.Some(c.Interleave)}, nil
}

// settingsFor is what p's groups get in class sp: for BE, at the
// timeslice the SLO mode chose for p (SetBETimeslices).
func (r *Reconciler) settingsFor(p *proc, sp class.Spec) (tsg.Settings, error) {
	var ts tsg.Opt[time.Duration]
	if sp.Name == class.BE {
		ts = r.beSliceFor(p)
	}
	return r.settingsAt(sp, ts)
}

// beSliceFor is the BE timeslice the SLO mode chose for p (unset: the
// policy's).
func (r *Reconciler) beSliceFor(p *proc) tsg.Opt[time.Duration] {
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
// mode chose: per[ProcRef.Key] for the processes per names (unset: the
// policy's), def for the others (unset: the policy's), a BE process that
// starts before the mode names it included. A set value is a timeslice
// tsg accepts (the SLO ladder's). The BE processes whose timeslice changes
// are re-classed: one all-or-nothing apply per process at the next Tick,
// with the usual read-back and retries. Weights keep their ratio of work
// (class.Class.TimesliceFor: be:3 gets the slice overhead plus 3 x the
// rest). SetBETimeslices(tsg.Opt[time.Duration]{}, nil) gives every BE
// process the policy's timeslice again.
func (r *Reconciler) SetBETimeslices(def tsg.Opt[time.Duration], per map[string]tsg.Opt[time.Duration]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	before := map[int]tsg.Opt[time.Duration]{}
	for pid, p := range r.procs {
		before[pid] = r.beSliceFor(p)
	}
	r.beSlice, r.beSliceOf = def, maps.Clone(per)
	now := r.Now()
	for pid, p := range r.procs {
		if len(p.groups) > 0 && !p.decision.Exempt && p.decision.Spec.Name == class.BE && r.beSliceFor(p) != before[pid] {
			p.status.pend(now)
		}
	}
	r.poke()
}
