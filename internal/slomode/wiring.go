package slomode

import (
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

// What SLO mode needs of the daemon: reconcile.Reconciler, pause.Holder, gate.Gate and the daemon's
// Metrics satisfy these (internal/daemon/slomode.go checks), none of them imported here.

// Reconciler is the policy in force, the classed processes (by pid) and the GPUs they are on, and
// the BE timeslices chosen, applied.
type Reconciler interface {
	Policy() *policy.Policy
	LearnGPUs() // reads again which GPUs each process is on
	InClass(n class.Name) []policy.ProcRef
	Outside(n class.Name) []policy.ProcRef
	// SetBETimeslices gives the BE processes per names (by ProcRef.Key) their timeslice (of one
	// unit of weight), def every other; unset: the policy's.
	SetBETimeslices(def tsg.Opt[time.Duration], per map[string]tsg.Opt[time.Duration])
}

// Pauser stops BE processes while an LC is learnt alone (SIGSTOP through pidfds, with a watchdog
// that resumes them past max if nothing else does).
type Pauser interface {
	Stop(procs []policy.ProcRef, max time.Duration) (int, error) // how many it stopped now
	ResumeExcept(keep []policy.ProcRef) (int, error)             // how many it resumed
	Resume() error
	Holding() bool               // it holds processes stopped, before the earliest deadline
	Holds(r policy.ProcRef) bool // it holds r stopped
	Still(r policy.ProcRef) bool // r makes no progress: held, stopped by someone else, or exited
}

// Steerer is the request gate: whether to hold BE for each LC, by pid (nil: as the policy says);
// whether it sees an LC's requests end (a hold that runs to its limit each time is BE stopped, not
// a request held); whether an LC's engine gates itself, taking the arm's gate at its next push;
// whether a BE has been held without a break since a time.
type Steerer interface {
	Steer(holds map[int]bool)
	Delimits(pid int) bool
	SelfGated(pid int) bool
	HeldSince(be policy.ProcRef, t time.Duration) bool
}

// Metrics publishes the status after each window (its searches' Last: this window's decisions), and
// how many BE processes are held stopped as that changes within one.
type Metrics interface {
	SetSLO(st api.SLO)
	SetBEStopped(n int)
}
