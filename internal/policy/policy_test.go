package policy

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/tsg"
)

func TestExampleParses(t *testing.T) {
	p, err := ParseFile("../../deploy/gpreemptd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 4 || p.Default.Spec.Name != class.Burstable || p.Requests.DefaultMax != class.Burstable {
		t.Fatalf("parsed %+v", p)
	}
	if p.Classes[class.BE].Timeslice != 200*time.Microsecond || p.Classes[class.LC].Interleave != tsg.LevelHigh {
		t.Errorf("classes %+v", p.Classes)
	}
}

func TestParseErrorsNameLineAndField(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"unknown top", "version: 1\nrulez: []\n", "line 2: rulez: unknown field"},
		{"unknown in rule", "rules:\n  - name: a\n    class: be\n    klass: lc\n", "line 4: rules[0].klass: unknown field"},
		{"unknown in match", "rules:\n  - match:\n      pid: 3\n    class: be\n", "line 3: rules[0].match.pid: unknown field"},
		{"bad class", "rules:\n  - class: turbo\n", "line 2: rules[0].class:"},
		{"bad weight", "rules:\n  - class: be:0\n", "line 2: rules[0].class:"},
		{"weight too big for class", "classes:\n  lc: {timeslice: 5s}\nrules:\n  - class: lc:2\n", "line 4: rules"},
		{"bad timeslice", "classes:\n  be:\n    timeslice: 200\n", "line 3: classes.be.timeslice: "},
		{"bad level", "classes:\n  be: {interleave: top}\n", "line 2: classes.be.interleave"},
		{"unknown class", "classes:\n  rt: {timeslice: 1ms}\n", "line 2: classes.rt: unknown field"},
		{"bad glob", "rules:\n  - match: {comm: \"[\"}\n    class: be\n", "line 2: rules[0].match.comm: bad pattern"},
		{"bad uid", "rules:\n  - match: {uid: alice}\n    class: be\n", "line 2: rules[0].match.uid"},
		{"bad gpu", "rules:\n  - match: {gpu: first}\n    class: be\n", "line 2: rules[0].match.gpu"},
		{"no class", "rules:\n  - name: x\n", "line 2: rules[0]: a rule needs class"},
		{"dup rule", "rules:\n  - {name: a, class: be}\n  - {name: a, class: lc}\n", "rules[1].name: \"a\" already names the rule at line 2"},
		{"dup key", "default: be\ndefault: lc\n", "line 2: default: given twice"},
		{"bad version", "version: 2\n", "line 1: version"},
		{"rules not list", "rules: {a: 1}\n", "line 1: rules: want a list"},
		{"limit without max", "requests:\n  limits:\n    - match: {uid: 1}\n", "line 3: requests.limits[0]: a limit needs max"},
		{"bad max", "requests: {default_max: turbo}\n", "line 1: requests.default_max"},
		{"syntax", "rules: [\n", "line"},
		{"two docs", "default: be\n---\ndefault: lc\n", "second YAML document"},
		{"empty", "", "empty"},
		{"scalar root", "be\n", "want a mapping"},
		{"env value not scalar", "rules:\n  - match: {env: {A: [1]}}\n    class: be\n", "line 2: rules[0].match.env.A"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("parsed; want an error containing %q", tc.want)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q; want ErrInvalid containing %q", err, tc.want)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	p, err := Parse([]byte(`
default: none
rules:
  - name: env
    match: {env: {GPREEMPT_CLASS: "*"}}
    class_from_env: GPREEMPT_CLASS
  - name: trainer
    match: {comm: "train*", cgroup: "/system.slice/*"}
    class: be:3
  - name: gpu1
    match: {gpu: [1, GPU-abc]}
    class: burstable
  - name: bob
    match: {user: bob}
    class: lc
  - name: bench-be
    match: {cmdline: "*gpreempt-bench be *"}
    class: be:2
requests:
  default_max: be
  limits:
    - {match: {uid: 1000}, max: lc}
    - {match: {cgroup: "/nope/*"}, max: none}
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		p    Process
		want string
		rule string
	}{
		{"nothing", Process{Comm: "x"}, "none", "default"},
		{"env lc allowed", Process{UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "lc"}}, "lc", "env"},
		{"env lc capped", Process{UID: 1001, Env: map[string]string{"GPREEMPT_CLASS": "lc"}}, "be", "env"},
		{"env weight", Process{UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "be:4"}}, "be:4", "env"},
		{"env junk falls through", Process{Comm: "train1", Cgroup: "/system.slice/t", Env: map[string]string{"GPREEMPT_CLASS": "junk"}}, "be:3", "trainer"},
		{"env with no rights", Process{Cgroup: "/nope/a", Env: map[string]string{"GPREEMPT_CLASS": "be"}}, "none", "default"},
		{"comm and cgroup", Process{Comm: "train1", Cgroup: "/system.slice/t"}, "be:3", "trainer"},
		{"comm only", Process{Comm: "train1", Cgroup: "/user.slice/t"}, "none", "default"},
		{"gpu index", Process{GPUs: []GPU{{0, "GPU-x"}, {1, "GPU-y"}}}, "burstable", "gpu1"},
		{"gpu uuid", Process{GPUs: []GPU{{3, "GPU-abc"}}}, "burstable", "gpu1"},
		{"gpu other", Process{GPUs: []GPU{{0, "GPU-x"}}}, "none", "default"},
		{"user", Process{User: "bob", UID: 7}, "lc", "bob"},
		{"cmdline", Process{Cmdline: "/x/gpreempt-bench be --kernel-iters 3"}, "be:2", "bench-be"},
		{"cmdline lc", Process{Cmdline: "/x/gpreempt-bench lc --period 3ms"}, "none", "default"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.p)
			if d.String() != tc.want || d.Rule != tc.rule {
				t.Errorf("Decide = %v by %q, want %v by %q", d, d.Rule, tc.want, tc.rule)
			}
		})
	}
	if got := p.MaxRequest(Process{UID: 1000}); got != class.LC {
		t.Errorf("MaxRequest(uid 1000) = %q", got)
	}
	if got := p.MaxRequest(Process{Cgroup: "/nope/x"}); got != "" {
		t.Errorf("MaxRequest(/nope) = %q", got)
	}
}

func TestIsAdmin(t *testing.T) {
	p, err := Parse([]byte("admin: {uid: 5, group: [wheel, 77]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	name := func(g uint32) string { return map[uint32]string{10: "wheel"}[g] }
	for _, tc := range []struct {
		uid  uint32
		gids []uint32
		want bool
	}{{0, nil, true}, {5, nil, true}, {6, []uint32{6}, false}, {6, []uint32{10}, true}, {6, []uint32{77}, true}} {
		if got := p.IsAdmin(tc.uid, tc.gids, name); got != tc.want {
			t.Errorf("IsAdmin(%d, %v) = %v", tc.uid, tc.gids, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	b, err := os.ReadFile("../../deploy/gpreemptd.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte("rules:\n  - {match: {env: {A: b}}, class_from_env: A}\n"))
	f.Add([]byte("classes: {be: {timeslice: 1us}}\ndefault: be:1000\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v is not ErrInvalid", err)
			}
			return
		}
		if err := p.Classes.Check(); err != nil {
			t.Fatalf("accepted a policy whose classes do not check: %v", err)
		}
		for _, r := range p.Rules {
			if !r.Decision.Exempt {
				if _, err := p.Classes.Settings(r.Decision.Spec.Name, r.Decision.Spec.Weight); err != nil {
					t.Fatalf("accepted rule %q without settings: %v", r.Name, err)
				}
			}
		}
		p.Decide(Process{Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
	})
}
