package reconcile

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

// classify decides p's class and applies it to every group that does not
// hold it yet.
func (r *Reconciler) classify(ctx context.Context, p *proc, now time.Duration, force bool) error {
	st := &p.status
	measure := st.Measure
	st.Kind, st.Measure = Done, false
	if !r.refresh(p) {
		st.Kind, st.Err = Failed, fmt.Errorf("pid %d: %w", p.pid, ErrGone)
		return st.Err
	}
	if len(p.info.GPUs) == 0 && p.override == nil && r.pol.NeedsGPU(p.info) && st.GPUWaits < maxGPUWaits {
		st.GPUWaits++
		st.retry(now+gpuWait, measure)
		r.poke()
		return nil
	}
	d := r.decide(p)
	p.decision = d
	var want tsg.Settings
	if !d.Exempt {
		s, err := r.settingsFor(p, d.Spec)
		if err != nil { // the policy checked this; a request was checked too
			r.log.Error("no settings for class", "pid", p.pid, "class", d.Spec, "err", err)
			st.Kind, st.Err = Failed, err
			return err
		}
		want = s
	}
	if d.Exempt {
		held := false
		for _, g := range p.groups {
			held = held || g.applied.Set
		}
		if !held {
			// Nothing of ours to undo: no need to attach at all.
			for _, g := range p.groups {
				g.held = classed
			}
			r.log.Debug("left alone", "pid", p.pid, "comm", p.info.Comm, "rule", d.Rule)
			return nil
		}
	}
	pick := func(gs GroupState) (tsg.Settings, bool) {
		g := p.groups[gs.ID] // claimed by apply
		if g.original == nil {
			o := gs
			g.original = &o
		}
		if d.Exempt {
			if !g.applied.Set {
				return tsg.Settings{}, false
			}
			return restoreSettings(*g.original), true
		}
		if !force && g.applied == tsg.Some(want) && gs.Timeslice.Duration() == want.Timeslice.V {
			return tsg.Settings{}, false // holds it already
		}
		return want, true
	}
	began := r.Now()
	changed := map[tsg.GroupID]bool{}
	states, err := r.apply(ctx, p, "classify", func(gs GroupState) (tsg.Settings, bool) {
		s, ok := pick(gs)
		changed[gs.ID] = ok
		return s, ok
	})
	if err != nil {
		st.Kind, st.Err = Failed, err
		if r.procs[p.pid] == p && !IsGone(err) && st.Attempts < maxRetries {
			// Caught mid-setup, or RM busy: try again, a bounded number
			// of times.
			st.Attempts++
			st.Since = now
			st.retry(now+(50*time.Millisecond)<<(st.Attempts-1), measure)
			r.poke()
		}
		return err
	}
	st.Attempts, st.Err = 0, nil
	n := 0
	for _, gs := range states {
		g := p.groups[gs.ID]
		g.held = classed
		g.classedAt = max(g.classedAt, began)
		if d.Exempt {
			g.applied = tsg.Opt[tsg.Settings]{}
			continue
		}
		g.applied = tsg.Some(want)
		if changed[gs.ID] {
			n++
		}
	}
	if d.Exempt {
		r.log.Debug("left alone", "pid", p.pid, "comm", p.info.Comm, "rule", d.Rule)
		return nil
	}
	// Time to classed: from the last setup event to the end of the
	// apply, on the events' clock (CLOCK_MONOTONIC).
	took := max(r.Now(), now) - st.Setup
	if n == 0 {
		// Every group held its class already (a late setup event):
		// nothing was classed now.
		r.log.Debug("class held", "pid", p.pid, "class", d.Spec.String(), "groups", len(states))
		return nil
	}
	if measure {
		r.metrics.classed.Observe(took.Seconds())
	}
	r.log.Info("classed", "pid", p.pid, "comm", p.info.Comm, "class", d.Spec.String(), "rule", d.Rule, "groups", n,
		"after_setup", took.Round(time.Microsecond), "new_context", measure, "capped_at_request_limit", d.Capped)
	if r.opts.OnClassed != nil && n > 0 {
		r.opts.OnClassed(p.pid, d, states)
	}
	return nil
}

// apply runs one attach-apply-read-back operation on p and syncs p's
// groups with what was read back. pick sees only the groups p claims,
// each in p.groups. Errors are logged and counted here; a
// target that went away is one debug line and its state is dropped.
func (r *Reconciler) apply(ctx context.Context, p *proc, op string, pick func(GroupState) (tsg.Settings, bool)) ([]GroupState, error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.OpTimeout)
	defer cancel()
	var changed []tsg.GroupID
	var wantTS = map[tsg.GroupID]time.Duration{}
	t0 := time.Now()
	states, err := r.ctl.Apply(ctx, p.pid, func(gs GroupState) (tsg.Settings, bool) {
		if !r.claim(p, gs.ID) {
			return tsg.Settings{}, false // its owner's to set
		}
		s, ok := pick(gs)
		if ok {
			changed = append(changed, gs.ID)
			if ts, ok := s.Timeslice.Get(); ok {
				wantTS[gs.ID] = ts
			}
		}
		return s, ok
	})
	r.metrics.control.WithLabelValues(op).Observe(time.Since(t0).Seconds())
	if err != nil {
		if IsGone(err) {
			r.metrics.failures.WithLabelValues("gone").Inc()
			r.log.Debug("target went away mid-apply", "pid", p.pid, "op", op, "err", err)
			r.drop(p.pid)
			return nil, err
		}
		r.metrics.failures.WithLabelValues("control").Inc()
		r.log.Warn("apply failed", "pid", p.pid, "comm", p.info.Comm, "op", op, "err", err)
		return nil, err
	}
	// Sync: the read-back is the truth about which groups exist.
	seen := map[tsg.GroupID]bool{}
	var owned []GroupState
	for _, gs := range states {
		if !r.claim(p, gs.ID) {
			continue
		}
		seen[gs.ID] = true
		g := r.ensureGroup(p, gs.ID)
		gs.GPU = gpuLabel(p.info.GPUs)
		g.state = gs
		owned = append(owned, gs)
	}
	for id := range p.groups {
		if !seen[id] {
			delete(p.groups, id)
		}
	}
	var bad []string
	for _, id := range changed {
		g := p.groups[id]
		if g == nil {
			continue
		}
		if want, ok := wantTS[id]; ok && g.state.Timeslice.Duration() != want {
			bad = append(bad, fmt.Sprintf("%v reads %dus, want %dus", id, g.state.Timeslice, want/time.Microsecond))
		}
	}
	if len(bad) > 0 {
		r.metrics.failures.WithLabelValues("readback").Inc()
		err := fmt.Errorf("pid %d: read back: %s", p.pid, strings.Join(bad, "; "))
		r.log.Warn("apply did not hold", "pid", p.pid, "err", err)
		return nil, err
	}
	if len(changed) > 0 {
		name := "restore"
		if d := p.decision; op != "restore" && !d.Exempt && d.Rule != "" {
			name = string(d.Spec.Name)
		}
		r.metrics.applies.WithLabelValues(name).Add(float64(len(changed)))
	}
	return owned, nil
}

// restoreSettings puts a group back as it was before us, or at the
// driver's defaults where that was not read.
func restoreSettings(orig GroupState) tsg.Settings {
	ts := orig.Timeslice.Duration()
	if ts == 0 {
		ts = policy.DefaultTimeslice(orig.Engine == tsg.EngineCompute)
	}
	// libcuda gives the compute group 2048 us after setup; a group read
	// before that reads RM's 1024 us and is restored to what libcuda
	// would have left.
	if orig.Engine == tsg.EngineCompute && orig.Timeslice == 1024 {
		ts = policy.DefaultTimeslice(true)
	}
	l := orig.Interleave
	if l > tsg.LevelHigh {
		// Not reported (GSP-RM): RM gives every new group MEDIUM.
		l = tsg.LevelMedium
	}
	return tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(l)}
}

func (r *Reconciler) reapplyDrift(ctx context.Context, p *proc, now time.Duration) {
	p.driftAt = 0
	var due []*group
	for _, g := range p.groups {
		if g.held != drifted || !g.applied.Set {
			continue
		}
		if at := r.driftDue(g, now); at > now {
			if p.driftAt == 0 || at < p.driftAt {
				p.driftAt = at
			}
			continue
		}
		due = append(due, g)
	}
	if len(due) == 0 {
		return
	}
	pick := func(gs GroupState) (tsg.Settings, bool) {
		g := p.groups[gs.ID]
		if g == nil || g.held != drifted || !g.applied.Set || r.driftDue(g, now) > now {
			return tsg.Settings{}, false
		}
		return g.applied.V, true
	}
	if _, err := r.apply(ctx, p, "drift", pick); err != nil {
		return
	}
	for _, g := range due {
		g.drift.AllowN(ClockTime(now), 1)
		g.held = classed
		r.metrics.drift.WithLabelValues("reapplied").Inc()
	}
	r.log.Info("drift re-applied", "pid", p.pid, "comm", p.info.Comm, "groups", len(due))
}

// RestoreAll puts every group this daemon changed back to what it was
// (or the driver's defaults), for shutdown.
func (r *Reconciler) RestoreAll(ctx context.Context) (restored int, errs error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var all []error
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		pick := func(gs GroupState) (tsg.Settings, bool) {
			g := p.groups[gs.ID]
			if g == nil || !g.applied.Set {
				return tsg.Settings{}, false
			}
			o := gs
			if g.original != nil {
				o = *g.original
			}
			restored++
			return restoreSettings(o), true
		}
		if _, err := r.apply(ctx, p, "restore", pick); err != nil && !IsGone(err) {
			all = append(all, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return restored, errors.Join(all...)
}
