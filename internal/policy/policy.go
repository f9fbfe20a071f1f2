// Package policy is gpreemptd's policy file: the classes (overrides of
// class.Defaults), the class a process gets when no rule matches, ordered
// rules matching a process by cgroup, user, command, executable,
// environment and GPU (first match wins), the most a process may ask for
// over the daemon's socket, and who may reload the daemon.
//
// The file is YAML. Unknown fields are refused and every error names the
// line and the field (docs/DAEMON.md has the schema). Parse does no I/O
// beyond reading the bytes it is given; matching is pure too: the caller
// reads /proc and hands in a Process.
package policy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
)

// ErrInvalid marks a policy that does not parse or does not check.
var ErrInvalid = errors.New("invalid policy")

// MaxSize bounds a policy file: a policy is a page of rules, not a data set.
const MaxSize = 1 << 20

// None is the class name that means "leave this process's groups alone".
const None = "none"

// Policy is a checked policy.
type Policy struct {
	// Classes is class.Defaults with the file's overrides.
	Classes class.Table
	// Default is what a process matching no rule gets; Exempt when it is
	// "none".
	Default Decision
	Rules   []Rule
	// Requests bounds what processes may ask for over the socket.
	Requests Requests
	// Admin says who may reload the daemon.
	Admin Admin
	// SLO is the SLO mode: latency objectives of LC processes, the BE
	// class's minimum share, and how the daemon searches the BE
	// timeslice (docs/SLO.md).
	SLO SLO
	// Gate is the daemon's request gate for LC processes (gate.go).
	Gate Gate
	// Source is where the policy was read from ("" for bytes).
	Source string
}

// Decision is what a process gets: a class and weight, or nothing
// (Exempt).
type Decision struct {
	Spec   class.Spec
	Exempt bool
	// Rule names the rule that decided ("default" when none matched,
	// "request" for a socket request).
	Rule string
	// FromEnv is true when the class came from the process's environment
	// (capped at the process's request limit).
	FromEnv bool
	// Capped is true when the rule matched on what the process sets
	// itself and its class was above the process's request limit: the
	// process got that limit instead (be:1 where it may ask for nothing).
	Capped bool
}

func (d Decision) String() string {
	if d.Exempt {
		return None
	}
	return d.Spec.String()
}

// Rule is one ordered rule.
type Rule struct {
	Name  string
	Line  int
	Match Match
	// Decision applies when Match matches (and ClassFromEnv is empty or
	// the variable holds no valid class).
	Decision Decision
	// ClassFromEnv names an environment variable whose value (a class
	// spec, "be:3") is the class, capped at the process's request limit.
	ClassFromEnv string
	// EnvOnly: the rule has class_from_env and no class, so it matches
	// only when the variable holds a class.
	EnvOnly bool
	// TrustSelfSet: the rule gives its class as written even though it
	// matches on what the process sets itself (Match.SelfSet); without
	// it that class is capped at the process's request limit.
	TrustSelfSet bool
	// Objective is the latency objectives of the LC processes this rule
	// classes ("p50<=1.05x, p99<=1.15x": all must be met; nil: the lc
	// class's, if any).
	Objective objective.Objectives
	// Latency is where SLO mode reads the latency of the LC processes this
	// rule classes: their server's own Prometheus histograms (nil: pushed
	// or traced).
	Latency *endpoint.Spec
}

// SLO is the policy's SLO mode.
type SLO struct {
	// Enabled: gpreemptd chooses the BE class's timeslice from measured
	// LC latency (else the class's timeslice is used as written).
	Enabled bool
	// Window is how long one observation lasts. Default 1 s.
	Window time.Duration
	// Ladder is the BE timeslices (of one unit of weight) chosen among,
	// ascending; nil: slo.DefaultLadder.
	Ladder []time.Duration
	// Safe is the BE timeslice used until LC latency is known and when it
	// goes missing; 0: the be class's timeslice.
	Safe time.Duration
	// SharedFloor is the shortest BE timeslice (of one unit of weight)
	// chosen while two or more processes of the be class share a GPU, one
	// of them beside an LC: they switch among themselves at that timeslice, and below it they spend the GPU
	// restoring each other's contexts and their weights stop splitting
	// their progress. 0: Safe.
	SharedFloor time.Duration
	// PrepreemptBelow: hint engines of LC processes are told to
	// pre-preempt only while the chosen BE timeslice is below it (a
	// spinner launched one switch ahead cannot shorten a wait for a long
	// BE timeslice, and launch-bound LC that needs a long BE timeslice
	// holds the GPU for nothing). 0: never told to stop. Default 500 us.
	PrepreemptBelow time.Duration
	// SpinnerCeiling is the longest BE timeslice chosen while an LC
	// process's hint engine launches spinners (its pushed engine state
	// says prepreempt): with a spinner taking the GPU one switch ahead of
	// each request, a longer BE timeslice does not spare BE switches, and
	// on the H100 it gave BE less (a synthetic LC with hints beside a
	// fixed-work BE: 89.0% at 1 us and at 50 us, 88.0% at 200 us in each
	// of three repetitions). 0: none. Default 50 us.
	SpinnerCeiling time.Duration
	// PauseWindows, when positive (slo.calibrate: pause, the default), is
	// how many windows an LC's standalone latency is learnt from with BE
	// processes stopped (SIGSTOP; one window more to let their queued
	// work drain); 0 (slo.calibrate: shortest): learnt beside BE under
	// the ladder's shortest timeslice. slo.pause_windows, default 5.
	PauseWindows int
	// LCObjective is classes.lc.objective: the objective of LC processes
	// whose rule names none.
	LCObjective objective.Objectives
	// MinBEShare is classes.be.min_share: BE progress relative to BE
	// alone below which the daemon reports BE short (LC objectives come
	// first). 0: none.
	MinBEShare float64
}

// DefaultSLOWindow and DefaultPrepreemptBelow are the slo section's
// defaults.
const (
	DefaultSLOWindow       = time.Second
	DefaultPrepreemptBelow = 500 * time.Microsecond
	DefaultSpinnerCeiling  = 50 * time.Microsecond
	DefaultPauseWindows    = 5
)

// Rungs is the ladder SLO mode chooses among: Ladder, slo.DefaultLadder where none is set.
func (s SLO) Rungs() []time.Duration {
	if len(s.Ladder) == 0 {
		return slo.DefaultLadder
	}
	return s.Ladder
}

// Objective is the latency objectives of a process given decision d: its
// rule's, else the lc class's; none for other classes.
func (pol *Policy) Objective(d Decision) (objective.Objectives, bool) {
	if d.Exempt || d.Spec.Name != class.LC {
		return nil, false
	}
	for _, r := range pol.Rules {
		if r.Name == d.Rule && r.Objective != nil {
			return r.Objective, true
		}
	}
	if pol.SLO.LCObjective != nil {
		return pol.SLO.LCObjective, true
	}
	return nil, false
}

// Latency is the latency endpoint of a process given decision d: its
// rule's; none for a process its rule gives none or that is not lc.
func (pol *Policy) Latency(d Decision) (endpoint.Spec, bool) {
	if d.Exempt || d.Spec.Name != class.LC {
		return endpoint.Spec{}, false
	}
	for _, r := range pol.Rules {
		if r.Name == d.Rule && r.Latency != nil {
			return *r.Latency, true
		}
	}
	return endpoint.Spec{}, false
}

// Match is a conjunction: every non-empty field must match.
type Match struct {
	Cgroup []string // path.Match globs on the cgroup v2 path
	UIDs   []uint32
	Users  []string
	Comm   []string // globs
	Exe    []string // globs
	// Cmdline: globs on the arguments joined by single spaces
	// ("python3 train.py --epochs 3").
	Cmdline []string
	// Env maps a variable name to a glob its value must match.
	Env  map[string]string
	GPUs []GPURef
}

// SelfSet names the fields of m that match what the process sets itself:
// its name (comm), its executable (through exec), its arguments and its
// environment. Any process can make those hold.
func (m Match) SelfSet() []string {
	var fs []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"comm", len(m.Comm) > 0}, {"exe", len(m.Exe) > 0}, {"cmdline", len(m.Cmdline) > 0}, {"env", len(m.Env) > 0}} {
		if f.set {
			fs = append(fs, f.name)
		}
	}
	return fs
}

// GPURef is a GPU named by index or UUID.
type GPURef struct {
	Index int // -1 when named by UUID
	UUID  string
}

// Requests are the limits on socket requests.
type Requests struct {
	// DefaultMax is the highest class any local process may ask for;
	// empty: none (requests refused unless a limit allows).
	DefaultMax class.Name
	Limits     []Limit
	// ChangesPerSecond and Burst bound the class changes one uid may ask
	// for over the socket (a token bucket per uid: Burst at once, then
	// ChangesPerSecond); 0: DefaultChangesPerSecond, DefaultChangeBurst.
	// Each change is a control call per channel group, a round trip to
	// the GPU's firmware, made under the daemon's lock.
	ChangesPerSecond float64
	Burst            int
}

// Defaults of requests.changes_per_second and requests.burst: a process
// asks for its class once when it starts, and perhaps again between
// phases of its work; a server's 32 workers of one uid may start at once.
// A change is a control call or two per channel group, 220-330 us of the
// GPU's firmware each on an H100: 4 a second keep a uid to ~1% of it.
const (
	DefaultChangesPerSecond = 4
	DefaultChangeBurst      = 32
)

// ChangeRate is the bound on one uid's class changes: sustained per
// second, and at once.
func (rq Requests) ChangeRate() (perSecond float64, burst int) {
	perSecond, burst = rq.ChangesPerSecond, rq.Burst
	if perSecond == 0 {
		perSecond = DefaultChangesPerSecond
	}
	if burst == 0 {
		burst = DefaultChangeBurst
	}
	return perSecond, burst
}

// Limit is the highest class the processes it matches may ask for. The
// first matching limit applies.
type Limit struct {
	Line  int
	Match Match
	Max   class.Name
}

// Admin names who may POST /v1/reload: root always; these uids and groups
// too.
type Admin struct {
	UIDs   []uint32
	Groups []string // names or numeric gids
}

// ParseGPURef parses a GPU index ("0") or UUID ("GPU-8f2c...", "MIG-...").
func ParseGPURef(s string) (GPURef, error) {
	s = strings.TrimSpace(s)
	if i, err := strconv.Atoi(s); err == nil {
		if i < 0 || i > 255 {
			return GPURef{}, fmt.Errorf("GPU index %d out of range [0, 255]", i)
		}
		return GPURef{Index: i}, nil
	}
	if strings.HasPrefix(s, "GPU-") || strings.HasPrefix(s, "MIG-") {
		return GPURef{Index: -1, UUID: s}, nil
	}
	return GPURef{}, fmt.Errorf("GPU %q: want an index or a UUID (GPU-...)", s)
}

func (g GPURef) String() string {
	if g.Index < 0 {
		return g.UUID
	}
	return strconv.Itoa(g.Index)
}

// DefaultTimeslices says what the driver gives a new group, for restoring:
// libcuda's 2048 us on the compute group, RM's 1024 us on the others.
func DefaultTimeslice(compute bool) time.Duration {
	if compute {
		return 2048 * time.Microsecond
	}
	return 1024 * time.Microsecond
}
