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
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/tsg"
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
	Objective slo.Objectives
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
	// PauseWindows, when positive (slo.calibrate: pause), is how many
	// windows an LC's standalone latency is learnt from with BE
	// processes stopped (SIGSTOP; one window more to let their queued
	// work drain); 0 (slo.calibrate: shortest): learnt beside BE under
	// the ladder's shortest timeslice. slo.pause_windows, default 5.
	PauseWindows int
	// LCObjective is classes.lc.objective: the objective of LC processes
	// whose rule names none.
	LCObjective slo.Objectives
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

// Objective is the latency objectives of a process given decision d: its
// rule's, else the lc class's; none for other classes.
func (pol *Policy) Objective(d Decision) (slo.Objectives, bool) {
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

// ParseFile reads and parses the policy at name.
func ParseFile(name string) (*Policy, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrInvalid, name, err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p.Source = name
	return p, nil
}

// Parse parses and checks a policy. Errors name the line and the field
// ("line 12: rules[2].match.uid: ...").
func Parse(b []byte) (*Policy, error) {
	if len(b) > MaxSize {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalid, MaxSize)
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%w: empty file", ErrInvalid)
		}
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	var more yaml.Node
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: line %d: a second YAML document; one policy a file", ErrInvalid, more.Line)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, fmt.Errorf("%w: not a YAML document", ErrInvalid)
	}
	p, err := parse(doc.Content[0])
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return p, nil
}

// fieldErr is an error at a line about a field.
func fieldErr(n *yaml.Node, field, format string, args ...any) error {
	return fmt.Errorf("line %d: %s: %s", n.Line, field, fmt.Sprintf(format, args...))
}

func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return "value"
	case yaml.AliasNode:
		return "alias"
	}
	return "document"
}

// fields returns the values of mapping n by key, refusing keys not in
// allowed and keys given twice.
func fields(n *yaml.Node, field string, allowed ...string) (map[string]*yaml.Node, error) {
	if n.Kind != yaml.MappingNode {
		return nil, fieldErr(n, field, "want a mapping, got a %s", kindName(n.Kind))
	}
	out := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		if k.Kind != yaml.ScalarNode {
			return nil, fieldErr(k, field, "want a field name, got a %s", kindName(k.Kind))
		}
		ok := false
		for _, a := range allowed {
			ok = ok || a == k.Value
		}
		if !ok {
			return nil, fieldErr(k, name, "unknown field (want one of %s)", strings.Join(allowed, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, fieldErr(k, name, "given twice")
		}
		out[k.Value] = v
	}
	return out, nil
}

func join(parent, field string) string {
	if parent == "" {
		return field
	}
	return parent + "." + field
}

func scalar(n *yaml.Node, field string) (string, error) {
	if n.Kind != yaml.ScalarNode {
		return "", fieldErr(n, field, "want a single value, got a %s", kindName(n.Kind))
	}
	return n.Value, nil
}

// strs accepts one value or a list of values.
func strs(n *yaml.Node, field string) ([]string, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		return []string{n.Value}, nil
	case yaml.SequenceNode:
		var out []string
		for i, c := range n.Content {
			v, err := scalar(c, fmt.Sprintf("%s[%d]", field, i))
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		if len(out) == 0 {
			return nil, fieldErr(n, field, "empty list")
		}
		return out, nil
	}
	return nil, fieldErr(n, field, "want a value or a list of values, got a %s", kindName(n.Kind))
}

func parse(root *yaml.Node) (*Policy, error) {
	top, err := fields(root, "", "version", "classes", "default", "rules", "requests", "admin", "slo", "gate")
	if err != nil {
		return nil, err
	}
	p := &Policy{Classes: class.Defaults(), Default: Decision{Exempt: true, Rule: "default"},
		SLO:  SLO{Window: DefaultSLOWindow, PrepreemptBelow: DefaultPrepreemptBelow, SpinnerCeiling: DefaultSpinnerCeiling},
		Gate: DefaultGate()}
	if n := top["version"]; n != nil {
		v, err := scalar(n, "version")
		if err != nil {
			return nil, err
		}
		if v != "1" {
			return nil, fieldErr(n, "version", "%q: this gpreemptd reads version 1", v)
		}
	}
	if n := top["classes"]; n != nil {
		cs, err := fields(n, "classes", "lc", "burstable", "be")
		if err != nil {
			return nil, err
		}
		for _, name := range class.Names {
			cn := cs[string(name)]
			if cn == nil {
				continue
			}
			c, err := parseClass(cn, p.Classes[name], "classes."+string(name), &p.SLO)
			if err != nil {
				return nil, err
			}
			p.Classes[name] = c
		}
	}
	if n := top["default"]; n != nil {
		d, err := decision(n, "default")
		if err != nil {
			return nil, err
		}
		d.Rule = "default"
		p.Default = d
	}
	if n := top["rules"]; n != nil {
		if n.Kind != yaml.SequenceNode {
			return nil, fieldErr(n, "rules", "want a list of rules, got a %s", kindName(n.Kind))
		}
		names := map[string]int{}
		for i, rn := range n.Content {
			r, err := parseRule(rn, fmt.Sprintf("rules[%d]", i))
			if err != nil {
				return nil, err
			}
			if r.Name == "" {
				r.Name = fmt.Sprintf("rule-%d", i+1)
				r.Decision.Rule = r.Name
			}
			if prev, dup := names[r.Name]; dup {
				return nil, fieldErr(rn, fmt.Sprintf("rules[%d].name", i), "%q already names the rule at line %d", r.Name, prev)
			}
			names[r.Name] = r.Line
			p.Rules = append(p.Rules, r)
		}
	}
	if n := top["requests"]; n != nil {
		rq, err := parseRequests(n)
		if err != nil {
			return nil, err
		}
		p.Requests = rq
	}
	if n := top["admin"]; n != nil {
		a, err := parseAdmin(n)
		if err != nil {
			return nil, err
		}
		p.Admin = a
	}
	if n := top["gate"]; n != nil {
		if p.Gate, err = parseGate(n); err != nil {
			return nil, err
		}
	}
	if n := top["slo"]; n != nil {
		if err := parseSLO(n, &p.SLO); err != nil {
			return nil, err
		}
		if p.SLO.Enabled && p.SLO.LCObjective == nil && !slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Objective != nil }) {
			return nil, fieldErr(n, "slo.enabled", "no LC process has an objective: give classes.lc.objective or a rule's objective")
		}
	}
	// In SLO mode the BE timeslice moves up to the longest the mode may
	// choose: a BE weight must fit that one too.
	classes := []class.Table{p.Classes}
	if _, ok := p.Classes[class.BE]; ok && p.SLO.Enabled {
		t := maps.Clone(p.Classes)
		be := t[class.BE]
		ladder := p.SLO.Ladder
		if len(ladder) == 0 {
			ladder = slo.DefaultLadder
		}
		be.Timeslice = max(be.Timeslice, slices.Max(ladder), p.SLO.Safe, p.SLO.SharedFloor)
		t[class.BE] = be
		classes = append(classes, t)
	}
	for _, t := range classes {
		if !p.Default.Exempt {
			if _, err := t.Settings(p.Default.Spec.Name, p.Default.Spec.Weight); err != nil {
				return nil, fmt.Errorf("line %d: default: %w%s", top["default"].Line, err, sloNote(t, p))
			}
		}
		for _, r := range p.Rules {
			if !r.Decision.Exempt {
				if _, err := t.Settings(r.Decision.Spec.Name, r.Decision.Spec.Weight); err != nil {
					return nil, fmt.Errorf("line %d: rules %q: %w%s", r.Line, r.Name, err, sloNote(t, p))
				}
			}
		}
	}
	return p, nil
}

// sloNote says, for an error under table t, that t has the longest BE
// timeslice SLO mode may choose rather than the policy's own.
func sloNote(t class.Table, p *Policy) string {
	if be := t[class.BE]; be.Timeslice != p.Classes[class.BE].Timeslice {
		return fmt.Sprintf(" (at the longest BE timeslice SLO mode may choose, %v)", be.Timeslice)
	}
	return ""
}

// parseClass reads a class's settings, and its SLO fields (objective for
// lc, min_share for be) into s.
func parseClass(n *yaml.Node, c class.Class, field string, s *SLO) (class.Class, error) {
	allowed := []string{"timeslice", "interleave", "slice_overhead"}
	switch c.Name {
	case class.LC:
		allowed = append(allowed, "objective")
	case class.BE:
		allowed = append(allowed, "min_share")
	}
	fs, err := fields(n, field, allowed...)
	if err != nil {
		return c, err
	}
	if v := fs["objective"]; v != nil {
		o, err := objective(v, field+".objective")
		if err != nil {
			return c, err
		}
		s.LCObjective = o
	}
	if v := fs["min_share"]; v != nil {
		str, err := scalar(v, field+".min_share")
		if err != nil {
			return c, err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || !(f >= 0 && f <= 1) {
			return c, fieldErr(v, field+".min_share", "%q: want a fraction of BE alone's progress in [0, 1], such as 0.88", str)
		}
		s.MinBEShare = f
	}
	if v := fs["timeslice"]; v != nil {
		s, err := scalar(v, field+".timeslice")
		if err != nil {
			return c, err
		}
		if c.Timeslice, err = tsg.ParseTimeslice(s); err != nil {
			return c, fieldErr(v, field+".timeslice", "%v", err)
		}
	}
	if v := fs["interleave"]; v != nil {
		s, err := scalar(v, field+".interleave")
		if err != nil {
			return c, err
		}
		if c.Interleave, err = tsg.ParseLevel(s); err != nil {
			return c, fieldErr(v, field+".interleave", "%v", err)
		}
	}
	if v := fs["slice_overhead"]; v != nil {
		s, err := scalar(v, field+".slice_overhead")
		if err != nil {
			return c, err
		}
		if c.SliceOverhead, err = class.ParseSliceOverhead(s); err != nil {
			return c, fieldErr(v, field+".slice_overhead", "%v", err)
		}
	}
	if err := c.Check(); err != nil {
		return c, fieldErr(n, field, "%v", err)
	}
	return c, nil
}

// decision parses "be", "be:3" or "none".
func decision(n *yaml.Node, field string) (Decision, error) {
	s, err := scalar(n, field)
	if err != nil {
		return Decision{}, err
	}
	if strings.EqualFold(strings.TrimSpace(s), None) {
		return Decision{Exempt: true}, nil
	}
	sp, err := class.ParseSpec(s)
	if err != nil {
		return Decision{}, fieldErr(n, field, "%v (or none)", err)
	}
	return Decision{Spec: sp}, nil
}

func objective(n *yaml.Node, field string) (slo.Objectives, error) {
	s, err := scalar(n, field)
	if err != nil {
		return nil, err
	}
	o, err := slo.ParseObjectives(s)
	if err != nil {
		return nil, fieldErr(n, field, "%v", err)
	}
	return o, nil
}

func parseRule(n *yaml.Node, field string) (Rule, error) {
	fs, err := fields(n, field, "name", "match", "class", "class_from_env", "objective", "trust_self_set")
	if err != nil {
		return Rule{}, err
	}
	r := Rule{Line: n.Line}
	if v := fs["name"]; v != nil {
		if r.Name, err = scalar(v, field+".name"); err != nil {
			return r, err
		}
	}
	if v := fs["match"]; v != nil {
		if r.Match, err = parseMatch(v, field+".match"); err != nil {
			return r, err
		}
	}
	cn, envn := fs["class"], fs["class_from_env"]
	if cn == nil && envn == nil {
		return r, fieldErr(n, field, "a rule needs class or class_from_env")
	}
	if cn != nil {
		if r.Decision, err = decision(cn, field+".class"); err != nil {
			return r, err
		}
	}
	if envn != nil {
		if r.ClassFromEnv, err = scalar(envn, field+".class_from_env"); err != nil {
			return r, err
		}
		if !validEnvName(r.ClassFromEnv) {
			return r, fieldErr(envn, field+".class_from_env", "%q is not a variable name", r.ClassFromEnv)
		}
		if r.EnvOnly = cn == nil; r.EnvOnly {
			r.Decision = Decision{Exempt: true}
		}
	}
	selfSet := r.Match.SelfSet()
	if v := fs["trust_self_set"]; v != nil {
		var trust bool
		if v.Kind != yaml.ScalarNode || v.Decode(&trust) != nil {
			return r, fieldErr(v, field+".trust_self_set", "%q: want true or false", v.Value)
		}
		if trust && len(selfSet) == 0 {
			return r, fieldErr(v, field+".trust_self_set", "the rule matches nothing the process sets itself (%s): nothing to trust", strings.Join(selfSetFields, ", "))
		}
		r.TrustSelfSet = trust
	}
	if cn != nil && r.Decision.Exempt && len(selfSet) > 0 && !r.TrustSelfSet {
		// A class is capped at the process's request limit; "leave it
		// alone" cannot be: any process could escape its class by
		// taking the rule's name.
		return r, fieldErr(cn, field+".class", "none on a match of what the process sets itself (%s): any process could leave itself at the driver's defaults; match on uid, user, cgroup or gpu too and set trust_self_set: true to mean it", strings.Join(selfSet, ", "))
	}
	if v := fs["objective"]; v != nil {
		o, err := objective(v, field+".objective")
		if err != nil {
			return r, err
		}
		// A rule that takes the class from the environment may class lc
		// whatever its fallback class.
		if cn != nil && r.ClassFromEnv == "" && (r.Decision.Exempt || r.Decision.Spec.Name != class.LC) {
			return r, fieldErr(v, field+".objective", "only lc processes have a latency objective; this rule's class is %v", r.Decision)
		}
		r.Objective = o
	}
	r.Decision.Rule = r.Name
	return r, nil
}

// parseSLO reads the slo section into s.
func parseSLO(n *yaml.Node, s *SLO) error {
	fs, err := fields(n, "slo", "enabled", "window", "ladder", "safe", "shared_floor", "prepreempt_below", "spinner_ceiling", "calibrate", "pause_windows")
	if err != nil {
		return err
	}
	pause := false
	if v := fs["calibrate"]; v != nil {
		str, err := keyword(v, "slo.calibrate")
		if err != nil {
			return err
		}
		switch str {
		case "shortest":
		case "pause":
			pause = true
		default:
			return fieldErr(v, "slo.calibrate", "%q: want shortest (beside BE under the shortest timeslice) or pause (BE stopped)", v.Value)
		}
	}
	if v := fs["pause_windows"]; v != nil {
		str, err := scalar(v, "slo.pause_windows")
		if err != nil {
			return err
		}
		k, err := strconv.Atoi(strings.TrimSpace(str))
		if err != nil || k < 1 || k > 15 {
			return fieldErr(v, "slo.pause_windows", "%q: want a whole number of windows from 1 to 15", str)
		}
		if !pause {
			return fieldErr(v, "slo.pause_windows", "set without slo.calibrate: pause")
		}
		s.PauseWindows = k
	} else if pause {
		s.PauseWindows = DefaultPauseWindows
	}
	if v := fs["enabled"]; v != nil {
		str, err := keyword(v, "slo.enabled")
		if err != nil {
			return err
		}
		switch str {
		case "true", "yes", "on":
			s.Enabled = true
		case "false", "no", "off":
			s.Enabled = false
		default:
			return fieldErr(v, "slo.enabled", "%q: want true or false", v.Value)
		}
	}
	if v := fs["window"]; v != nil {
		str, err := scalar(v, "slo.window")
		if err != nil {
			return err
		}
		d, err := time.ParseDuration(strings.TrimSpace(str))
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return fieldErr(v, "slo.window", "%q: want a duration from 100ms to 1m, such as 1s", str)
		}
		s.Window = d
	}
	if v := fs["ladder"]; v != nil {
		if v.Kind != yaml.SequenceNode || len(v.Content) == 0 {
			return fieldErr(v, "slo.ladder", "want a list of BE timeslices, such as [1us, 200us, 1ms]")
		}
		for i, e := range v.Content {
			f := fmt.Sprintf("slo.ladder[%d]", i)
			d, err := timeslice(e, f)
			if err != nil {
				return err
			}
			if i > 0 && d <= s.Ladder[i-1] {
				return fieldErr(e, f, "%v does not exceed %v: the ladder must be strictly ascending", d, s.Ladder[i-1])
			}
			s.Ladder = append(s.Ladder, d)
		}
	}
	if v := fs["safe"]; v != nil {
		if s.Safe, err = timeslice(v, "slo.safe"); err != nil {
			return err
		}
	}
	if v := fs["shared_floor"]; v != nil {
		if s.SharedFloor, err = timeslice(v, "slo.shared_floor"); err != nil {
			return err
		}
	}
	if v := fs["prepreempt_below"]; v != nil {
		if s.PrepreemptBelow, err = timesliceOrOff(v, "slo.prepreempt_below"); err != nil {
			return err
		}
	}
	if v := fs["spinner_ceiling"]; v != nil {
		if s.SpinnerCeiling, err = timesliceOrOff(v, "slo.spinner_ceiling"); err != nil {
			return err
		}
	}
	return nil
}

// timeslice reads a timeslice field.
func timeslice(v *yaml.Node, field string) (time.Duration, error) {
	str, err := scalar(v, field)
	if err != nil {
		return 0, err
	}
	d, err := tsg.ParseTimeslice(str)
	if err != nil {
		return 0, fieldErr(v, field, "%v", err)
	}
	return d, nil
}

// timesliceOrOff reads a timeslice, or "off" (or "never") for 0.
func timesliceOrOff(v *yaml.Node, field string) (time.Duration, error) {
	str, err := keyword(v, field)
	if err != nil {
		return 0, err
	}
	if str == "off" || str == "never" {
		return 0, nil
	}
	return timeslice(v, field)
}

// keyword reads a scalar field as a lower-case word.
func keyword(v *yaml.Node, field string) (string, error) {
	str, err := scalar(v, field)
	return strings.ToLower(strings.TrimSpace(str)), err
}

func validEnvName(s string) bool {
	if s == "" || strings.ContainsAny(s, "=\x00") {
		return false
	}
	return true
}

func checkGlobs(n *yaml.Node, field string, gs []string) error {
	for _, g := range gs {
		if _, err := path.Match(g, ""); err != nil {
			return fieldErr(n, field, "bad pattern %q: %v", g, err)
		}
	}
	return nil
}

func parseMatch(n *yaml.Node, field string) (Match, error) {
	var m Match
	fs, err := fields(n, field, "cgroup", "uid", "user", "comm", "exe", "cmdline", "env", "gpu")
	if err != nil {
		return m, err
	}
	for _, f := range []struct {
		name string
		dst  *[]string
	}{{"cgroup", &m.Cgroup}, {"user", &m.Users}, {"comm", &m.Comm}, {"exe", &m.Exe}, {"cmdline", &m.Cmdline}} {
		v := fs[f.name]
		if v == nil {
			continue
		}
		if *f.dst, err = strs(v, join(field, f.name)); err != nil {
			return m, err
		}
		if f.name != "user" {
			if err := checkGlobs(v, join(field, f.name), *f.dst); err != nil {
				return m, err
			}
		}
	}
	if v := fs["uid"]; v != nil {
		if m.UIDs, err = uids(v, join(field, "uid")); err != nil {
			return m, err
		}
	}
	if v := fs["env"]; v != nil {
		es, err := fields(v, join(field, "env"), anyKey(v)...)
		if err != nil {
			return m, err
		}
		m.Env = map[string]string{}
		for k, en := range es {
			f := join(join(field, "env"), k)
			if !validEnvName(k) {
				return m, fieldErr(en, f, "%q is not a variable name", k)
			}
			s, err := scalar(en, f)
			if err != nil {
				return m, err
			}
			if err := checkGlobs(en, f, []string{s}); err != nil {
				return m, err
			}
			m.Env[k] = s
		}
	}
	if v := fs["gpu"]; v != nil {
		gs, err := strs(v, join(field, "gpu"))
		if err != nil {
			return m, err
		}
		for _, g := range gs {
			ref, err := ParseGPURef(g)
			if err != nil {
				return m, fieldErr(v, join(field, "gpu"), "%v", err)
			}
			m.GPUs = append(m.GPUs, ref)
		}
	}
	return m, nil
}

// anyKey allows every key of mapping n (for env, whose keys are names).
func anyKey(n *yaml.Node) []string {
	var ks []string
	for i := 0; i+1 < len(n.Content); i += 2 {
		ks = append(ks, n.Content[i].Value)
	}
	return ks
}

func uids(n *yaml.Node, field string) ([]uint32, error) {
	ss, err := strs(n, field)
	if err != nil {
		return nil, err
	}
	var out []uint32
	for _, s := range ss {
		u, err := strconv.ParseUint(strings.TrimSpace(s), 10, 32)
		if err != nil {
			return nil, fieldErr(n, field, "%q is not a numeric uid (names go under user)", s)
		}
		out = append(out, uint32(u))
	}
	return out, nil
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

func parseRequests(n *yaml.Node) (Requests, error) {
	var rq Requests
	fs, err := fields(n, "requests", "default_max", "limits", "changes_per_second", "burst")
	if err != nil {
		return rq, err
	}
	if v := fs["changes_per_second"]; v != nil {
		str, err := scalar(v, "requests.changes_per_second")
		if err != nil {
			return rq, err
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(str), 64)
		if err != nil || !(f >= 0.01 && f <= 1000) {
			return rq, fieldErr(v, "requests.changes_per_second", "%q: want class changes a second per uid, from 0.01 to 1000", str)
		}
		rq.ChangesPerSecond = f
	}
	if v := fs["burst"]; v != nil {
		str, err := scalar(v, "requests.burst")
		if err != nil {
			return rq, err
		}
		k, err := strconv.Atoi(strings.TrimSpace(str))
		if err != nil || k < 1 || k > 1000 {
			return rq, fieldErr(v, "requests.burst", "%q: want a whole number of class changes from 1 to 1000", str)
		}
		rq.Burst = k
	}
	if v := fs["default_max"]; v != nil {
		if rq.DefaultMax, err = maxClass(v, "requests.default_max"); err != nil {
			return rq, err
		}
	}
	if v := fs["limits"]; v != nil {
		if v.Kind != yaml.SequenceNode {
			return rq, fieldErr(v, "requests.limits", "want a list, got a %s", kindName(v.Kind))
		}
		for i, ln := range v.Content {
			f := fmt.Sprintf("requests.limits[%d]", i)
			lf, err := fields(ln, f, "match", "max")
			if err != nil {
				return rq, err
			}
			l := Limit{Line: ln.Line}
			if mn := lf["match"]; mn != nil {
				if err := limitMatch(mn, f+".match"); err != nil {
					return rq, err
				}
				if l.Match, err = parseMatch(mn, f+".match"); err != nil {
					return rq, err
				}
			}
			mx := lf["max"]
			if mx == nil {
				return rq, fieldErr(ln, f, "a limit needs max")
			}
			if l.Max, err = maxClass(mx, f+".max"); err != nil {
				return rq, err
			}
			rq.Limits = append(rq.Limits, l)
		}
	}
	return rq, nil
}

// selfSetFields are the match fields a process sets for itself (its name, its
// executable through exec, its arguments and environment): a limit on
// them would let any process claim its rights.
var selfSetFields = []string{"comm", "exe", "cmdline", "env"}

// limitMatch refuses a request limit that matches on selfSet fields.
func limitMatch(n *yaml.Node, field string) error {
	if n.Kind != yaml.MappingNode {
		return nil // parseMatch says what is wrong
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if k := n.Content[i]; slices.Contains(selfSetFields, k.Value) {
			return fieldErr(k, join(field, k.Value), "a request limit cannot match on what the asking process sets itself (%s); match on uid, user, cgroup or gpu", strings.Join(selfSetFields, ", "))
		}
	}
	return nil
}

// maxClass parses a class name or "none" (nothing may be asked for: "").
func maxClass(n *yaml.Node, field string) (class.Name, error) {
	s, err := scalar(n, field)
	if err != nil {
		return "", err
	}
	if strings.EqualFold(strings.TrimSpace(s), None) {
		return "", nil
	}
	c, err := class.ParseName(s)
	if err != nil {
		return "", fieldErr(n, field, "%v (or none)", err)
	}
	return c, nil
}

func parseAdmin(n *yaml.Node) (Admin, error) {
	var a Admin
	fs, err := fields(n, "admin", "uid", "group")
	if err != nil {
		return a, err
	}
	if v := fs["uid"]; v != nil {
		if a.UIDs, err = uids(v, "admin.uid"); err != nil {
			return a, err
		}
	}
	if v := fs["group"]; v != nil {
		if a.Groups, err = strs(v, "admin.group"); err != nil {
			return a, err
		}
	}
	return a, nil
}

// DefaultTimeslices says what the driver gives a new group, for restoring:
// libcuda's 2048 us on the compute group, RM's 1024 us on the others.
func DefaultTimeslice(compute bool) time.Duration {
	if compute {
		return 2048 * time.Microsecond
	}
	return 1024 * time.Microsecond
}
