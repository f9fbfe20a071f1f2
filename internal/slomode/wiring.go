package slomode

import (
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
)

// What SLO mode needs of the daemon that wires it, as small interfaces:
// the daemon's Reconciler, Pauser, RequestGate and Metrics satisfy them,
// and this package imports none of the daemon.

// Reconciler is what SLO mode needs of the daemon's reconciler: the
// policy in force, the classed processes and the GPUs they are on, and
// the BE timeslices it chose, applied.
type Reconciler interface {
	// Policy is the policy in force.
	Policy() *policy.Policy
	// LearnGPUs reads again which GPUs each process is on (join).
	LearnGPUs()
	// InClass lists the processes classed n, by pid.
	InClass(n class.Name) []policy.ProcRef
	// Outside lists the processes not classed n, by pid.
	Outside(n class.Name) []policy.ProcRef
	// SetBETimeslices gives the BE processes per names their timeslice
	// (by ProcRef.Key; 0: the policy's), def every other BE process (0:
	// the policy's). SetBETimeslices(0, nil) gives them all the policy's.
	SetBETimeslices(def time.Duration, per map[string]time.Duration)
}

// Pauser stops BE processes while an LC is learnt alone (the daemon's
// Pauser: SIGSTOP through pidfds, with a watchdog process that resumes
// them past max if nothing else does).
type Pauser interface {
	// Stop stops procs, past max at the latest, and says how many it
	// stopped now.
	Stop(procs []policy.ProcRef, max time.Duration) (int, error)
	// ResumeExcept resumes every process it holds but keep, and says how
	// many.
	ResumeExcept(keep []policy.ProcRef) (int, error)
	// Resume resumes every process it holds.
	Resume() error
	// Holding says whether it holds processes stopped, before the
	// earliest deadline (past it they may have been resumed).
	Holding() bool
	// Holds says whether it holds r stopped.
	Holds(r policy.ProcRef) bool
	// Still says whether r makes no progress now: held stopped, or
	// stopped by someone else, or exited.
	Still(r policy.ProcRef) bool
}

// Steerer is what SLO mode needs of the request gate (the daemon's
// RequestGate): whether to hold BE for each LC, by pid (nil: as the
// policy says); and whether it sees an LC's requests end (a hold that
// runs to its limit each time is BE stopped, not a request held).
type Steerer interface {
	Steer(holds map[int]bool)
	Delimits(pid int) bool
	// SelfGated: the LC's engine gates its own requests, and takes the
	// arm's gate from the reply to its next push.
	SelfGated(pid int) bool
}

// Metrics is where SLO mode publishes its windows (the daemon's Metrics).
type Metrics interface {
	// SetSLO publishes a window's decisions, by the gpu label of their
	// search; on false: the mode is off.
	SetSLO(on bool, byGPU map[string]slo.Decision)
	// SetBEStopped sets how many BE processes SLO mode holds stopped.
	SetBEStopped(n int)
}
