package reconcile

import (
	"context"
	"maps"
	"math"
	"slices"
	"time"

	"golang.org/x/time/rate"
)

// A new context is listed by NVML a little after its channel groups
// appear (seen on two H200s: ~80 ms). Under a per-GPU rule, classing waits
// for it, every gpuWait, up to maxGPUWaits times; then the process is
// decided without a GPU (per-GPU rules do not match it).
const (
	gpuWait     = 10 * time.Millisecond
	maxGPUWaits = 50
)

// maxRetries bounds the retries of a failed classing; the first is 50 ms
// later, each next one twice as late.
const maxRetries = 5

// Wake is signalled when Tick should be called earlier than it said.
func (r *Reconciler) Wake() <-chan struct{} { return r.wake }

func (r *Reconciler) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// setupSeen pushes p's classing to Debounce after now, within MaxWait of
// its first pending event.
func (r *Reconciler) setupSeen(p *proc, now time.Duration, measure bool) {
	p.status.setup(now, measure, r.opts.Debounce, r.opts.MaxWait)
	r.poke()
}

// Handle folds one event in. It makes no control call; Tick does.
func (r *Reconciler) Handle(ev Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ev.By != 0 && ev.By == r.opts.SelfPID {
		return
	}
	if p := r.procs[ev.PID]; p != nil && ev.Kind != GroupFreed && ev.Kind != ProcessExited {
		if g := p.groups[ev.Group]; g != nil && g.held != unclassed && ev.At < g.classedAt {
			return // happened before our apply, which overrode it: stale
		}
	}
	switch ev.Kind {
	case GroupCreated:
		p := r.ensure(ev.PID)
		if g := r.takeOver(p, ev.Group); g != nil && p.groups[ev.Group] == nil {
			g.held = unclassed // a scan got to it first, through another's file
			p.groups[ev.Group] = g
		}
		r.ensureGroup(p, ev.Group).created = true
		r.setupSeen(p, ev.At, true)
	case GroupSetup:
		p := r.ensure(ev.PID)
		g := r.ensureGroup(p, ev.Group)
		if g.held == unclassed || p.status.Kind == Pending {
			r.setupSeen(p, ev.At, true)
		}
	case GroupSet:
		p := r.ensure(ev.PID)
		g := r.ensureGroup(p, ev.Group)
		if g.held == unclassed || p.status.Kind == Pending {
			// libcuda's own SET after channel setup, or one before we
			// classed: part of setup.
			r.setupSeen(p, ev.At, true)
			return
		}
		if !g.applied.Set {
			return // exempt, or nothing of ours to hold
		}
		if ts, ok := g.applied.V.Timeslice.Get(); ev.Timeslice != 0 && ok && ev.Timeslice.Duration() == ts {
			return // set to what we hold: no drift
		}
		g.held = drifted
		r.scheduleDrift(p, g, ev.At)
	case GroupFreed:
		if p := r.procs[ev.PID]; p != nil {
			delete(p.groups, ev.Group)
			if len(p.groups) == 0 && p.override == nil {
				delete(r.procs, ev.PID)
			}
		}
	case ProcessExited:
		r.drop(ev.PID)
	}
}

// scheduleDrift sets when g's drift is re-applied: now if g has a token,
// else when one refills.
func (r *Reconciler) scheduleDrift(p *proc, g *group, now time.Duration) {
	at := r.driftDue(g, now)
	if at > now {
		r.metrics.drift.WithLabelValues("deferred").Inc()
	}
	if p.driftAt == 0 || at < p.driftAt {
		p.driftAt = at
	}
	r.poke()
}

func (r *Reconciler) driftBucket() *rate.Limiter {
	return rate.NewLimiter(rate.Every(r.opts.DriftRefill), r.opts.DriftBurst)
}

// driftDue is when g may next re-apply drift: now, or when its bucket
// holds a whole token again.
func (r *Reconciler) driftDue(g *group, now time.Duration) time.Duration {
	tokens := g.drift.TokensAt(ClockTime(now))
	if tokens >= 1 {
		return now
	}
	return now + time.Duration(math.Ceil((1-tokens)*float64(r.opts.DriftRefill)))
}

// Tick does the classing and re-applying that is due at now, and returns
// when it should be called next (0: nothing scheduled).
func (r *Reconciler) Tick(ctx context.Context, now time.Duration) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range slices.Sorted(maps.Keys(r.procs)) {
		p := r.procs[pid]
		if p.status.Kind == Pending && now >= p.status.Due {
			r.classify(ctx, p, now, false)
		}
		if p = r.procs[pid]; p != nil && p.driftAt != 0 && now >= p.driftAt {
			r.reapplyDrift(ctx, p, now)
		}
	}
	var next time.Duration
	for _, p := range r.procs {
		for _, t := range []time.Duration{p.status.Due * b2d(p.status.Kind == Pending), p.driftAt} {
			if t != 0 && (next == 0 || t < next) {
				next = t
			}
		}
	}
	return next
}

func b2d(b bool) time.Duration {
	if b {
		return 1
	}
	return 0
}

// CheckDrift compares pid's groups as read now with what was applied and
// schedules a re-apply for those that differ (the scan mode's drift).
func (r *Reconciler) CheckDrift(states []GroupState, pid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.procs[pid]
	if p == nil {
		return
	}
	now := r.Now()
	for _, gs := range states {
		g := p.groups[gs.ID]
		if g == nil || g.held == unclassed || !g.applied.Set || !g.applied.V.Timeslice.Set {
			continue
		}
		if gs.Timeslice.Duration() != g.applied.V.Timeslice.V {
			g.held = drifted
			r.scheduleDrift(p, g, now)
		}
	}
}
