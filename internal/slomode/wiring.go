package slomode

import (
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

// What SLO mode needs of the daemon: reconcile.Reconciler, pause.Holder, gate.Gate, its Metrics satisfy these, none imported here (internal/daemon/slomode.go checks).

// Reconciler is the policy in force, the classed processes (by pid) and their GPUs, and the BE timeslices chosen, applied.
type Reconciler interface {
	Policy() *policy.Policy
	LearnGPUs() // reads again which GPUs each process is on
	InClass(n class.Name) []policy.ProcRef
	Outside(n class.Name) []policy.ProcRef
	SetBETimeslices(def tsg.Opt[time.Duration], per map[string]tsg.Opt[time.Duration]) // the BE per names (by ProcRef.Key) theirs, def every other; unset: the policy's
}

// Pauser stops BE processes while an LC is learnt alone (SIGSTOP through pidfds; a watchdog resumes them past max).
type Pauser interface {
	Stop(procs []policy.ProcRef, max time.Duration) (int, error) // how many it stopped now
	ResumeExcept(keep []policy.ProcRef) (int, error)             // how many it resumed
	Resume() error
	Holding() bool               // it holds processes stopped, before the earliest deadline
	Holds(r policy.ProcRef) bool // it holds r stopped
	Still(r policy.ProcRef) bool // r makes no progress: held, stopped by someone else, or exited
}

// Steerer is the request gate.
type Steerer interface {
	Steer(holds map[int]bool)                          // whether to hold BE for each LC, by pid (nil: as the policy says)
	Delimits(pid int) bool                             // it sees the LC's requests end (else a hold runs to its limit: BE stopped, no request held)
	SelfGated(pid int) bool                            // the LC's engine gates itself, taking the arm's gate at its next push
	HeldSince(be policy.ProcRef, t time.Duration) bool // be held without a break since t
	Traps(pid int) bool                                // under a hold the LC's launches trap through its requests (launch probes kept), or its engine gates itself
}

// Metrics publishes the status after each window (searches' Last: this window's), and how many BE are held stopped as that changes.
type Metrics interface {
	SetSLO(st api.SLO)
	SetBEStopped(n int)
}
