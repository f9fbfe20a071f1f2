package policy

import (
	"cmp"
	"fmt"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/gpreempt/gpreempt/class"
)

// Process is what rules match against, read from /proc by the caller.
type Process struct {
	PID  int
	UID  uint32
	User string // "" when the uid has no name
	Comm string
	Exe  string
	// Cmdline is the arguments joined by single spaces.
	Cmdline string
	Cgroup  string // the cgroup v2 path ("/system.slice/x.service")
	Env     map[string]string
	GPUs    []GPU
}

// GPU is a GPU a process uses.
type GPU struct {
	Index int
	UUID  string
}

// ProcRef names a classed process: who it is, what it was matched as
// and the decision it got. The daemon's reconciler lists them; SLO mode,
// the request gate and the pausing of BE processes act on them.
type ProcRef struct {
	PID      int
	Start    uint64
	Comm     string
	Exe      string // the executable's path as the process sees it ("": unread)
	Decision Decision
	// GPUs are the indices of the GPUs NVML lists it on (nil: not known).
	GPUs []int
	// Owner is the tenant it is of, whose budgets it draws on: "uid N"
	// ("": not known).
	Owner string
}

// Key names p by its pid and start time, so that a reused pid is a new
// process.
func (p ProcRef) Key() string { return strconv.Itoa(p.PID) + "/" + strconv.FormatUint(p.Start, 10) }

func globAny(globs []string, s string) bool {
	for _, g := range globs {
		if ok, _ := path.Match(g, s); ok {
			return true
		}
	}
	return false
}

// cmdlineAny matches globs on a command line, where * crosses / (paths
// are arguments there, not the structure): / is made an ordinary
// character on both sides.
func cmdlineAny(globs []string, s string) bool {
	s = strings.ReplaceAll(s, "/", "\x00")
	for _, g := range globs {
		if ok, _ := path.Match(strings.ReplaceAll(g, "/", "\x00"), s); ok {
			return true
		}
	}
	return false
}

// Matches reports whether p satisfies every field of m.
func (m Match) Matches(p Process) bool { return m.matches(p, true) }

func (m Match) matches(p Process, gpu bool) bool {
	if len(m.Cgroup) > 0 && !globAny(m.Cgroup, p.Cgroup) {
		return false
	}
	if len(m.UIDs) > 0 || len(m.Users) > 0 {
		ok := false
		for _, u := range m.UIDs {
			ok = ok || u == p.UID
		}
		for _, u := range m.Users {
			ok = ok || (p.User != "" && u == p.User) || u == strconv.FormatUint(uint64(p.UID), 10)
		}
		if !ok {
			return false
		}
	}
	if len(m.Comm) > 0 && !globAny(m.Comm, p.Comm) {
		return false
	}
	if len(m.Exe) > 0 && !globAny(m.Exe, p.Exe) {
		return false
	}
	if len(m.Cmdline) > 0 && !cmdlineAny(m.Cmdline, p.Cmdline) {
		return false
	}
	for k, g := range m.Env {
		v, ok := p.Env[k]
		if !ok {
			return false
		}
		if ok, _ := path.Match(g, v); !ok {
			return false
		}
	}
	if gpu && len(m.GPUs) > 0 {
		ok := false
		for _, want := range m.GPUs {
			for _, have := range p.GPUs {
				ok = ok || (want.Index >= 0 && want.Index == have.Index) || (want.Index < 0 && want.UUID == have.UUID)
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// Decide returns the decision of the first rule matching p, or the
// default. A class taken from the environment is capped at p's request
// limit: the environment is the process owner's to set, so it is a
// request like any other.
func (pol *Policy) Decide(p Process) Decision {
	for _, r := range pol.Rules {
		if !r.Match.Matches(p) {
			continue
		}
		if d, ok := pol.ruleDecision(r, p); ok {
			return d
		}
	}
	return pol.Default
}

// NeedsGPU reports whether p's decision may depend on the GPU it uses:
// a rule on GPUs comes, and would match p but for its GPU, before the
// first rule that matches p without one. A process whose GPU is not known
// yet cannot be decided then.
func (pol *Policy) NeedsGPU(p Process) bool {
	for _, r := range pol.Rules {
		if len(r.Match.GPUs) == 0 {
			if r.Match.Matches(p) {
				if _, ok := pol.ruleDecision(r, p); ok {
					return false
				}
			}
			continue
		}
		if r.Match.matches(p, false) {
			return true
		}
	}
	return false
}

// ruleDecision is what rule r, whose match holds, decides for p; false
// when it decides nothing (class_from_env without class, and no class in
// the variable). Decide and NeedsGPU both go through it.
func (pol *Policy) ruleDecision(r Rule, p Process) (Decision, bool) {
	if r.ClassFromEnv != "" {
		if v, ok := p.Env[r.ClassFromEnv]; ok {
			if sp, err := class.ParseSpec(v); err == nil {
				if _, err := pol.Classes.Settings(sp.Name, sp.Weight); err == nil {
					if max := pol.MaxRequest(p); max != "" {
						if !sp.Name.AtMost(max) {
							sp.Name = max
						}
						sp.Weight = min(sp.Weight, pol.MaxRequestWeight(sp.Name, max))
						return Decision{Spec: sp, Rule: r.Name, FromEnv: true}, true
					}
				}
			}
		}
		if r.EnvOnly {
			return Decision{}, false // no class in the variable and no fallback
		}
	}
	if d := r.Decision; !d.Exempt && !r.TrustSelfSet && len(r.Match.SelfSet()) > 0 {
		// Any process can take the name, executable, arguments or
		// environment the rule matches: its class is a request like any
		// other, capped at the process's request limit.
		return pol.capAtRequest(d, p), true
	}
	return r.Decision, true
}

// capAtRequest caps d at what p may ask for over the socket, class and
// weight; where p may ask for nothing, at be:1, the least a class gives.
func (pol *Policy) capAtRequest(d Decision, p Process) Decision {
	sp, max := d.Spec, pol.MaxRequest(p)
	if max == "" {
		sp = class.Spec{Name: class.BE, Weight: 1}
	} else {
		if !sp.Name.AtMost(max) {
			sp.Name = max
		}
		sp.Weight = min(sp.Weight, pol.MaxRequestWeight(sp.Name, max))
	}
	if sp.Name == d.Spec.Name && sp.Weight >= d.Spec.Weight {
		return d
	}
	d.Spec, d.Capped = sp, true
	return d
}

// MaxRequestWeight is the highest weight of class n that a process whose
// requests are limited to limit may hold (by request or class_from_env): a
// weight whose timeslice stays under one unit of the class above max, so
// that no weight buys what a class above the limit gives (be:1000
// is 180 ms, where burstable is 2 ms). Under an lc limit, any weight; a
// weight of 1 is always allowed.
func (pol *Policy) MaxRequestWeight(n, limit class.Name) int {
	above, ok := limit.Above()
	if !ok {
		return class.MaxWeight
	}
	c, err1 := pol.Classes.Get(n)
	a, err2 := pol.Classes.Get(above)
	if err1 != nil || err2 != nil {
		return class.MaxWeight // the policy checked its table
	}
	under, err := a.TimesliceFor(1)
	if err != nil {
		return class.MaxWeight
	}
	w := sort.Search(class.MaxWeight, func(i int) bool {
		ts, err := c.TimesliceFor(i + 1)
		return err != nil || ts >= under
	}) // weights 1..w are under it
	return max(w, 1)
}

// MaxRequest is the highest class p may ask for ("" for none): the first
// matching limit, else requests.default_max.
func (pol *Policy) MaxRequest(p Process) class.Name {
	for _, l := range pol.Requests.Limits {
		if l.Match.Matches(p) {
			return l.Max
		}
	}
	return pol.Requests.DefaultMax
}

// IsAdmin reports whether a peer with uid and groups (gids, with names
// resolved by groupName) may reload.
func (pol *Policy) IsAdmin(uid uint32, gids []uint32, groupName func(gid uint32) string) bool {
	if uid == 0 {
		return true
	}
	for _, u := range pol.Admin.UIDs {
		if u == uid {
			return true
		}
	}
	for _, g := range pol.Admin.Groups {
		for _, gid := range gids {
			if g == strconv.FormatUint(uint64(gid), 10) || (groupName != nil && g == groupName(gid)) {
				return true
			}
		}
	}
	return false
}

// Warnings names what in pol is valid but does not do what it reads as: a rule that matches
// what a process sets itself and gives a class above what any process may request, so that every
// process it matches gets the request limit instead (capAtRequest).
func (pol *Policy) Warnings() []string {
	var w []string
	for _, r := range pol.Rules {
		n, limit := r.Decision.Spec.Name, pol.Requests.DefaultMax
		if r.Decision.Exempt || r.TrustSelfSet || r.EnvOnly || len(r.Match.SelfSet()) == 0 ||
			!pol.capAtRequest(r.Decision, Process{}).Capped || // as a process no limit names gets it
			slices.ContainsFunc(pol.Requests.Limits, func(l Limit) bool { return n.AtMost(l.Max) }) {
			continue
		}
		w = append(w, fmt.Sprintf("line %d: rule %q matches what a process sets itself (%s), so its class %s is capped at the request limit (requests.default_max: %s) for every process it matches; give requests a limit of %s, or the rule trust_self_set: true",
			r.Line, r.Name, strings.Join(r.Match.SelfSet(), ", "), n, cmp.Or(string(limit), "none, be:1"), n))
	}
	return w
}
