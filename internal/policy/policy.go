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
	"os"
	"path"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/gpreempt/gpreempt/class"
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
	top, err := fields(root, "", "version", "classes", "default", "rules", "requests", "admin")
	if err != nil {
		return nil, err
	}
	p := &Policy{Classes: class.Defaults(), Default: Decision{Exempt: true, Rule: "default"}}
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
			c, err := parseClass(cn, p.Classes[name], "classes."+string(name))
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
	if !p.Default.Exempt {
		if _, err := p.Classes.Settings(p.Default.Spec.Name, p.Default.Spec.Weight); err != nil {
			return nil, fmt.Errorf("line %d: default: %w", top["default"].Line, err)
		}
	}
	for _, r := range p.Rules {
		if !r.Decision.Exempt {
			if _, err := p.Classes.Settings(r.Decision.Spec.Name, r.Decision.Spec.Weight); err != nil {
				return nil, fmt.Errorf("line %d: rules %q: %w", r.Line, r.Name, err)
			}
		}
	}
	return p, nil
}

func parseClass(n *yaml.Node, c class.Class, field string) (class.Class, error) {
	fs, err := fields(n, field, "timeslice", "interleave")
	if err != nil {
		return c, err
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

func parseRule(n *yaml.Node, field string) (Rule, error) {
	fs, err := fields(n, field, "name", "match", "class", "class_from_env")
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
	r.Decision.Rule = r.Name
	return r, nil
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
	fs, err := fields(n, "requests", "default_max", "limits")
	if err != nil {
		return rq, err
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
