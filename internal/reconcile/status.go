package reconcile

import (
	"fmt"
	"time"
)

// StatusKind is where a process's classing stands.
type StatusKind uint8

const (
	// Done: nothing is due (classed, or nothing to class yet).
	Done StatusKind = iota
	// Pending: a classing is due at Status.Due.
	Pending
	// Failed: the last classing failed and no retry is due; the next event
	// or reload tries again.
	Failed
)

func (k StatusKind) String() string {
	switch k {
	case Done:
		return "done"
	case Pending:
		return "pending"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("StatusKind(%d)", uint8(k))
}

// Status is one process's classing state, one per desired object as
// cilium's statedb reconciler keeps it, in place of loose flags: what is
// due and when, the attempts that failed in a row and the last error. The
// reconciler's lock guards it; Reconciler.Status reads a copy.
type Status struct {
	Kind StatusKind
	// Due is when the pending classing runs, Since when it first became
	// due (MaxWait counts from it); the events' clock.
	Due, Since time.Duration
	// Setup is the last context setup the classing follows; Measure: it
	// follows one (the time to classed is observed), not a reload or a
	// request.
	Setup   time.Duration
	Measure bool
	// Attempts counts the classings that failed in a row (retried with
	// backoff up to maxRetries); GPUWaits those put off because a per-GPU
	// rule needs the process's GPU and NVML did not list it yet.
	Attempts, GPUWaits int
	// Err is the last failure (nil once a classing succeeds).
	Err error
}

// pend makes a classing due at now, unless one is pending already.
func (s *Status) pend(now time.Duration) {
	if s.Kind != Pending {
		s.Kind, s.Since, s.Setup, s.Due = Pending, now, now, now
	}
}

// setup pushes the pending classing to debounce after a context setup at
// now, within maxWait of when it first became due.
func (s *Status) setup(now time.Duration, measure bool, debounce, maxWait time.Duration) {
	if s.Kind != Pending {
		s.Kind, s.Since = Pending, now
	}
	s.Measure = s.Measure || measure
	s.Setup = now
	s.Due = min(now+debounce, s.Since+maxWait)
}

// retry makes the classing due again at due, as it was (whether it is
// measured; its setup is untouched), after a wait or a failure.
func (s *Status) retry(due time.Duration, measure bool) {
	s.Kind, s.Due, s.Measure = Pending, due, measure
}

// Status is pid's classing state (false: the daemon holds no such process).
func (r *Reconciler) Status(pid int) (Status, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p := r.procs[pid]; p != nil {
		return p.status, true
	}
	return Status{}, false
}
