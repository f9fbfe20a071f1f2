package policy

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/slo"
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

func TestSLOExampleParses(t *testing.T) {
	p, err := ParseFile("../../deploy/gpreemptd-slo.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !p.SLO.Enabled || p.SLO.MinBEShare != 0.88 || len(p.SLO.Ladder) != 7 || len(p.Rules) != 4 {
		t.Fatalf("parsed %+v", p.SLO)
	}
	if o, ok := p.Objective(p.Decide(Process{Comm: "lc-server", User: "inference"})); !ok || o.String() != "p50<=1.05x@standalone" {
		t.Errorf("inference objective %v %v", o, ok)
	}
	// The name is the process's own: another user's lc-server gets what
	// that user may ask for.
	if d := p.Decide(Process{Comm: "lc-server", UID: 4242}); d.String() != "burstable" || !d.Capped {
		t.Errorf("another user's lc-server: %v (capped %v), want burstable", d, d.Capped)
	}
	if o, ok := p.Objective(p.Decide(Process{Comm: "other", Env: map[string]string{}})); ok {
		t.Errorf("a burstable process has objective %v", o)
	}
	if o := p.SLO.LCObjective; len(o) != 1 || o.String() != "p99<=40ms" {
		t.Errorf("lc class objectives %v", o)
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
		{"no change rate", "requests:\n  changes_per_second: 0\n", "line 2: requests.changes_per_second: \"0\": want class changes a second per uid"},
		{"change rate not a number", "requests: {changes_per_second: fast}\n", "line 1: requests.changes_per_second"},
		{"burst fraction", "requests:\n  burst: 2.5\n", "line 2: requests.burst: \"2.5\": want a whole number"},
		{"burst zero", "requests: {burst: 0}\n", "line 1: requests.burst"},
		{"limit on comm", "requests:\n  limits:\n    - match: {uid: 1000, comm: \"triton*\"}\n      max: lc\n", "line 3: requests.limits[0].match.comm: a request limit cannot match on what the asking process sets itself"},
		{"limit on env", "requests:\n  limits:\n    - match:\n        env: {TRUSTED: \"1\"}\n      max: lc\n", "line 4: requests.limits[0].match.env: a request limit cannot match"},
		{"limit on exe", "requests:\n  limits:\n    - {match: {exe: /opt/x}, max: lc}\n", "line 3: requests.limits[0].match.exe"},
		{"limit on cmdline", "requests:\n  limits:\n    - {match: {cmdline: \"*serve*\"}, max: lc}\n", "line 3: requests.limits[0].match.cmdline"},
		{"syntax", "rules: [\n", "line"},
		{"two docs", "default: be\n---\ndefault: lc\n", "second YAML document"},
		{"empty", "", "empty"},
		{"scalar root", "be\n", "want a mapping"},
		{"objective on be class", "classes:\n  be: {objective: p99<=2x}\n", "line 2: classes.be.objective: unknown field"},
		{"bad class objective", "classes:\n  lc:\n    objective: p99<2x\n", "line 3: classes.lc.objective: invalid SLO setting"},
		{"min_share on lc", "classes:\n  lc: {min_share: 0.5}\n", "line 2: classes.lc.min_share: unknown field"},
		{"min_share too big", "classes:\n  be:\n    min_share: 1.5\n", "line 3: classes.be.min_share: \"1.5\": want a fraction"},
		{"min_share not number", "classes:\n  be: {min_share: most}\n", "line 2: classes.be.min_share"},
		{"objective on be rule", "rules:\n  - class: be\n    objective: p50<=2ms\n", "line 3: rules[0].objective: only lc processes"},
		{"bad rule objective", "rules:\n  - class: lc\n    objective: p99<=fast\n", "line 3: rules[0].objective: invalid SLO setting"},
		{"two bounds on one quantile", "rules:\n  - class: lc\n    objective: \"p99<=2x, p99<=3ms\"\n", "line 3: rules[0].objective: invalid SLO setting: objectives \"p99<=2x, p99<=3ms\": two bounds on p99"},
		{"slo unknown", "slo:\n  enable: true\n", "line 2: slo.enable: unknown field"},
		{"slo enabled junk", "slo: {enabled: maybe}\n", "line 1: slo.enabled: \"maybe\""},
		{"slo without objective", "slo:\n  enabled: true\n", "line 2: slo.enabled: no LC process has an objective"},
		{"slo window short", "slo:\n  window: 10ms\n", "line 2: slo.window: \"10ms\""},
		{"slo ladder not list", "slo:\n  ladder: 1ms\n", "line 2: slo.ladder: want a list"},
		{"slo ladder order", "slo:\n  ladder: [1us, 1ms, 200us]\n", "line 2: slo.ladder[2]: 200µs does not exceed 1ms"},
		{"slo ladder unit", "slo:\n  ladder:\n    - 1us\n    - 200\n", "line 4: slo.ladder[1]: "},
		{"slo ladder fraction", "slo:\n  ladder: [1500ns]\n", "line 2: slo.ladder[0]: invalid argument: timeslice 1.5µs is not a whole number"},
		{"slo safe", "slo: {safe: 10s}\n", "line 1: slo.safe"},
		{"slo prepreempt_below", "slo: {prepreempt_below: soon}\n", "line 1: slo.prepreempt_below"},
		{"slo spinner_ceiling", "slo:\n  spinner_ceiling: [50us]\n", "line 2: slo.spinner_ceiling"},
		{"slo shared_floor", "slo:\n  shared_floor: 0us\n", "line 2: slo.shared_floor"},
		{"slo calibrate", "slo:\n  calibrate: alone\n", "line 2: slo.calibrate: \"alone\": want shortest"},
		{"slo pause_windows with shortest", "slo:\n  calibrate: shortest\n  pause_windows: 3\n", "line 3: slo.pause_windows: set with slo.calibrate: shortest"},
		{"slo pause_windows zero", "slo: {calibrate: pause, pause_windows: 0}\n", "line 1: slo.pause_windows: \"0\": want a whole number"},
		{"slo pause_windows long", "slo: {calibrate: pause, pause_windows: 16}\n", "line 1: slo.pause_windows: \"16\""},
		{"slice_overhead too long", "classes:\n  be: {slice_overhead: 2ms}\n", "line 2: classes.be.slice_overhead: "},
		{"slice_overhead no unit", "classes:\n  be:\n    slice_overhead: 20\n", "line 3: classes.be.slice_overhead: "},
		{"env value not scalar", "rules:\n  - match: {env: {A: [1]}}\n    class: be\n", "line 2: rules[0].match.env.A"},
		{"latency on be rule", "rules:\n  - class: be\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: vllm}\n", "line 3: rules[0].latency: only lc processes"},
		{"latency without metrics", "rules:\n  - class: lc\n    latency: {preset: vllm}\n", "line 3: rules[0].latency: metrics"},
		{"latency to another host", "rules:\n  - class: lc\n    latency:\n      metrics: \"http://10.0.0.5:8000/metrics\"\n      preset: vllm\n", "line 4: rules[0].latency.metrics: invalid latency endpoint: \"http://10.0.0.5:8000/metrics\": the host must be on loopback"},
		{"latency to a host name", "rules:\n  - class: lc\n    latency: {metrics: \"http://localhost:8000/metrics\", preset: vllm}\n", "line 3: rules[0].latency.metrics: invalid latency endpoint"},
		{"latency over https", "rules:\n  - class: lc\n    latency: {metrics: \"https://127.0.0.1:8000/metrics\", preset: vllm}\n", "want an http:// URL"},
		{"latency unknown preset", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: ollama}\n", "line 3: rules[0].latency.preset: invalid latency endpoint: unknown preset \"ollama\" (want one of vllm, sglang, tgi, triton)"},
		{"latency preset and names", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: vllm, ttft: a}\n", "rules[0].latency.preset: a preset or the histograms' names"},
		{"latency neither", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\"}\n", "rules[0].latency: a preset (vllm, sglang, tgi, triton) or"},
		{"latency bad name", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", request: \"a-b\"}\n", "rules[0].latency.request: invalid latency endpoint: \"a-b\" is not a metric name"},
		{"latency model on tgi", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: tgi, model: x}\n", "rules[0].latency.model: preset tgi names no model label"},
		{"latency unknown field", "rules:\n  - class: lc\n    latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: vllm, host: x}\n", "rules[0].latency.host: unknown field"},
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
		{"env weight under an lc limit", Process{UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "be:1000"}}, "be:1000", "env"},
		{"env weight capped under burstable's timeslice", Process{UID: 1001, Env: map[string]string{"GPREEMPT_CLASS": "be:1000"}}, "be:10", "env"},
		{"env class capped, weight kept", Process{UID: 1001, Env: map[string]string{"GPREEMPT_CLASS": "burstable:3"}}, "be:3", "env"},
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

func TestSLO(t *testing.T) {
	p, err := Parse([]byte(`
classes:
  lc: {objective: "p99<=1.15x"}
  be: {timeslice: 200us, min_share: 0.88, slice_overhead: 15us}
  burstable: {slice_overhead: 0}
rules:
  - name: fast
    match: {comm: fast}
    class: lc
    objective: p50<=2ms
  - name: other-lc
    match: {comm: other}
    class: lc
  - name: env
    match: {env: {GPREEMPT_CLASS: "*"}}
    class_from_env: GPREEMPT_CLASS
    objective: "p99<=3x, p50<=1.1x"
  - name: trainer
    match: {comm: train}
    class: be:3
slo:
  enabled: true
  window: 500ms
  ladder: [1us, 200us, 1ms]
  safe: 200us
  shared_floor: 50us
  prepreempt_below: off
  spinner_ceiling: 100us
  calibrate: pause
requests: {default_max: lc}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := SLO{Enabled: true, Window: 500 * time.Millisecond, Ladder: []time.Duration{time.Microsecond, 200 * time.Microsecond, time.Millisecond},
		Safe: 200 * time.Microsecond, SharedFloor: 50 * time.Microsecond, MinBEShare: 0.88}
	got := p.SLO
	if got.Enabled != want.Enabled || got.Window != want.Window || !slices.Equal(got.Ladder, want.Ladder) || got.Safe != want.Safe || got.SharedFloor != want.SharedFloor ||
		got.PrepreemptBelow != 0 || got.MinBEShare != want.MinBEShare || got.LCObjective == nil || got.LCObjective.String() != "p99<=1.15x" ||
		got.PauseWindows != DefaultPauseWindows || got.SpinnerCeiling != 100*time.Microsecond {
		t.Fatalf("SLO = %+v, want %+v with lc objective p99<=1.15x", got, want)
	}
	// The trainer's be:3 at 200 us with a 15 us overhead: 15 + 3 x 185.
	if got := p.Classes[class.BE].SliceOverhead; got != 15*time.Microsecond {
		t.Errorf("be slice overhead %v", got)
	}
	if got := p.Classes[class.Burstable].SliceOverhead; got != 0 {
		t.Errorf("burstable slice overhead %v, want 0", got)
	}
	if st, err := p.Classes.Settings(class.BE, 3); err != nil || st.Timeslice != tsg.Some(570*time.Microsecond) {
		t.Errorf("be:3 settings %v %v, want 570us", st, err)
	}
	for _, tc := range []struct {
		name string
		p    Process
		want string // "" for none
	}{
		{"rule objective", Process{Comm: "fast"}, "p50<=2ms"},
		{"class objective", Process{Comm: "other"}, "p99<=1.15x"},
		{"env lc takes the rule's", Process{Env: map[string]string{"GPREEMPT_CLASS": "lc"}}, "p50<=1.1x, p99<=3x"},
		{"env be has none", Process{Env: map[string]string{"GPREEMPT_CLASS": "be"}}, ""},
		{"be", Process{Comm: "train"}, ""},
		{"unmatched", Process{Comm: "x"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, ok := p.Objective(p.Decide(tc.p))
			if got := map[bool]string{true: o.String()}[ok]; got != tc.want {
				t.Errorf("objective %q, want %q", got, tc.want)
			}
		})
	}
	d, err := Parse([]byte("default: be\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d.SLO.Enabled || d.SLO.Window != DefaultSLOWindow || d.SLO.PrepreemptBelow != DefaultPrepreemptBelow || d.SLO.SpinnerCeiling != DefaultSpinnerCeiling || d.SLO.SharedFloor != 0 ||
		d.Classes[class.BE].SliceOverhead != class.DefaultSliceOverhead {
		t.Errorf("defaults %+v", d.SLO)
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
	f.Add([]byte("rules:\n  - {match: {uid: 0, comm: x}, class: none, trust_self_set: true}\n  - {match: {exe: /a}, class: lc, trust_self_set: false}\n"))
	f.Add([]byte("classes: {be: {timeslice: 1us}}\ndefault: be:1000\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("classes: {lc: {objective: p99<=1.15x}, be: {min_share: 0.88}}\nslo: {enabled: true, window: 1s, ladder: [1us, 1ms], safe: 200us, shared_floor: 50us, prepreempt_below: 500us, spinner_ceiling: off, calibrate: pause, pause_windows: 3}\n"))
	f.Add([]byte("classes: {be: {slice_overhead: 20us}, burstable: {slice_overhead: 0}}\n"))
	f.Add([]byte("rules:\n  - {class: lc, objective: p50<=2ms}\nslo: {enabled: on}\n"))
	f.Add([]byte("gate: {mode: auto, idle: 5ms, max_hold: 500ms, share: 0.25}\n"))
	f.Add([]byte("rules:\n  - {class: lc, objective: p50<=2ms, latency: {metrics: \"http://127.0.0.1:8000/metrics\", preset: vllm, model: m}}\n  - {class: lc, latency: {metrics: \"http://[::1]:9/m?x=1\", request: a, ttft: b_ms, tpot: c}}\n"))
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
		for _, w := range p.Warnings() { // each names the line of the rule it is about
			if !strings.HasPrefix(w, "line ") {
				t.Fatalf("warning %q names no line", w)
			}
		}
		d := p.Decide(Process{Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
		if os, ok := p.Objective(d); ok {
			if len(os) == 0 {
				t.Fatal("an LC with an empty objective list")
			}
			for _, o := range os {
				if err := o.Check(); err != nil {
					t.Fatalf("accepted objective %v that does not check: %v", o, err)
				}
			}
		}
		for _, r := range p.Rules {
			if l := r.Latency; l != nil {
				// Only a loopback endpoint, with a metric to read, on an lc rule.
				if !l.Addr.Addr().IsLoopback() || l.Metrics.Check() != nil || !r.Decision.Exempt && r.Decision.Spec.Name != class.LC && r.ClassFromEnv == "" {
					t.Fatalf("accepted latency %+v on rule %+v", l, r)
				}
			}
		}
		s := p.SLO
		if s.Enabled && s.LCObjective == nil && !slices.ContainsFunc(p.Rules, func(r Rule) bool { return r.Objective != nil }) {
			t.Fatal("SLO enabled without any objective")
		}
		if !(s.MinBEShare >= 0 && s.MinBEShare <= 1) || s.Window < 100*time.Millisecond {
			t.Fatalf("accepted SLO %+v", s)
		}
		if _, err := slo.New(slo.Options{Ladder: s.Ladder, Safe: s.Safe}); err != nil {
			t.Fatalf("accepted a ladder the controller refuses: %v", err)
		}
	})
}

func TestNeedsGPU(t *testing.T) {
	pol, err := Parse([]byte(`
default: none
rules:
  - name: trainer
    match: {comm: "train*"}
    class: be
  - name: gpu1-infer
    match: {comm: "infer*", gpu: 1}
    class: lc
  - name: rest
    match: {comm: "*"}
    class: burstable
`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		comm string
		want bool
	}{
		{"trainer", false}, // decided before any GPU rule
		{"infer-a", true},  // the GPU rule would match it but for its GPU
		{"batch", false},   // the GPU rule cannot match: decided by "rest"
	} {
		if got := pol.NeedsGPU(Process{Comm: tt.comm}); got != tt.want {
			t.Errorf("NeedsGPU(%s) = %v, want %v", tt.comm, got, tt.want)
		}
	}
}

func TestSLOCalibrate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int
	}{
		{"slo: {}\n", DefaultPauseWindows},
		{"slo: {pause_windows: 3}\n", 3},
		{"slo: {calibrate: shortest}\n", 0},
		{"slo: {calibrate: pause}\n", DefaultPauseWindows},
		{"slo: {calibrate: Pause, pause_windows: 3}\n", 3},
	} {
		p, err := Parse([]byte(tc.in))
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if p.SLO.PauseWindows != tc.want {
			t.Errorf("%q: pause windows %d, want %d", tc.in, p.SLO.PauseWindows, tc.want)
		}
	}
}

// TestUnnamedRuleDecides: a rule without a name is named rule-N, and its
// decisions carry that name (the daemon counts a process classed by a
// rule only with one), as does its objective.
func TestUnnamedRuleDecides(t *testing.T) {
	p, err := Parse([]byte(`
rules:
  - {name: trainer, match: {comm: "train*"}, class: be}
  - {match: {comm: "lc*"}, class: lc, objective: "p99<=2ms", trust_self_set: true}
slo: {enabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := p.Decide(Process{Comm: "lc-server"})
	if d.String() != "lc" || d.Rule != "rule-2" {
		t.Fatalf("Decide = %v by %q, want lc by rule-2", d, d.Rule)
	}
	if o, ok := p.Objective(d); !ok || o.String() != "p99<=2ms" {
		t.Errorf("Objective = %v %v, want the rule's p99<=2ms", o, ok)
	}
}

// TestNeedsGPUAgreesWithDecide: deploy/gpreemptd.yaml's from-env rule
// (class from the environment, no class of its own) does not decide a
// process whose variable holds no class, so its class may still depend on
// its GPU, and NeedsGPU says so.
func TestNeedsGPUAgreesWithDecide(t *testing.T) {
	pol, err := ParseFile("../../deploy/gpreemptd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p := Process{UID: 2000, User: "batch", Comm: "python3", Env: map[string]string{"GPREEMPT_CLASS": "low"}}
	onGPU1 := p
	onGPU1.GPUs = []GPU{{Index: 1}}
	if a, b := pol.Decide(p), pol.Decide(onGPU1); a == b {
		t.Fatalf("premise: the decision does not depend on the GPU (%v)", a)
	}
	if !pol.NeedsGPU(p) {
		t.Error("NeedsGPU = false, but the process's GPU changes its class")
	}
	p.Env["GPREEMPT_CLASS"] = "be" // the from-env rule decides
	if pol.NeedsGPU(p) {
		t.Error("NeedsGPU = true for a process its environment classes")
	}
}

// TestSLOChecksWeightsAtTheLongestTimeslice: in SLO mode a BE weight must
// fit the longest BE timeslice the mode may choose, not only the policy's.
func TestSLOChecksWeightsAtTheLongestTimeslice(t *testing.T) {
	const text = `
classes:
  lc: {objective: "p50<=1.05x"}
rules:
  - {name: bulk, match: {comm: "bulk*"}, class: be:600}
slo: {enabled: %s, ladder: [200us, 10ms]}
`
	if _, err := Parse([]byte(fmt.Sprintf(text, "false"))); err != nil {
		t.Fatalf("without SLO mode: %v", err)
	}
	_, err := Parse([]byte(fmt.Sprintf(text, "true")))
	if err == nil || !strings.Contains(err.Error(), `rules "bulk"`) || !strings.Contains(err.Error(), "longest BE timeslice SLO mode may choose, 10ms") {
		t.Errorf("be:600 with a 10ms rung: %v; want an error naming the rule and the 10ms rung", err)
	}
}

// TestObjectiveOnAnEnvRule: a rule that takes the class from the
// environment may carry an objective whatever its fallback class; the
// objective holds for the processes it classes lc.
func TestObjectiveOnAnEnvRule(t *testing.T) {
	pol, err := Parse([]byte(`
rules:
  - {name: env, match: {comm: "svc*"}, class_from_env: GPREEMPT_CLASS, class: be, objective: "p99<=1.2x"}
requests: {default_max: lc}
slo: {enabled: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	lc := pol.Decide(Process{Comm: "svc", Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
	if o, ok := pol.Objective(lc); lc.String() != "lc" || !ok || o.String() != "p99<=1.2x" {
		t.Errorf("lc from the environment: %v, objective %v %v", lc, o, ok)
	}
	if _, ok := pol.Objective(pol.Decide(Process{Comm: "svc"})); ok {
		t.Error("the be fallback has an objective")
	}
}

// TestMaxRequestWeight: a weight's timeslice stays under one unit of the
// class above the limit (slice overhead 20 us: be w is 20 + 180w us).
func TestMaxRequestWeight(t *testing.T) {
	p, err := Parse([]byte("classes:\n  burstable: {timeslice: 1ms}\n  be: {timeslice: 1ms}\n"))
	if err != nil {
		t.Fatal(err)
	}
	def, err := Parse([]byte("default: none\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		pol      *Policy
		n, limit class.Name
		want     int
	}{
		{def, class.BE, class.BE, 10},                 // 1820 us < 2 ms
		{def, class.BE, class.Burstable, 1000},        // 180 ms < 5 s
		{def, class.Burstable, class.Burstable, 1000}, // 1.98 s < 5 s
		{def, class.BE, class.LC, class.MaxWeight},    // no class above lc
		{def, class.LC, class.LC, class.MaxWeight},    // lc's own weights fail tsg's bound, not this one
		{p, class.BE, class.BE, 1},                    // be 1 ms is not under burstable 1 ms: weight 1 still
	} {
		if got := tc.pol.MaxRequestWeight(tc.n, tc.limit); got != tc.want {
			t.Errorf("MaxRequestWeight(%s, limit %s) = %d, want %d", tc.n, tc.limit, got, tc.want)
		}
	}
}

func TestChangeRate(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		per        float64
		burst      int
	}{
		{"defaults", "requests: {default_max: be}\n", DefaultChangesPerSecond, DefaultChangeBurst},
		{"both", "requests:\n  changes_per_second: 0.5\n  burst: 3\n", 0.5, 3},
		{"rate only", "requests: {changes_per_second: 20}\n", 20, DefaultChangeBurst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if per, burst := p.Requests.ChangeRate(); per != tc.per || burst != tc.burst {
				t.Errorf("ChangeRate = %v/s, burst %d; want %v/s, burst %d", per, burst, tc.per, tc.burst)
			}
		})
	}
}

// TestShippedPolicyNameGivesNoLC: with deploy/gpreemptd.yaml, a process
// that names itself like an inference server gets no more than its uid
// and cgroup may ask for: naming a process is anyone's to do.
func TestShippedPolicyNameGivesNoLC(t *testing.T) {
	p, err := ParseFile("../../deploy/gpreemptd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		proc   Process
		want   string
		capped bool
	}{
		{"any uid naming itself vllm-x", Process{UID: 4242, Comm: "vllm-x"}, "burstable", true},
		{"any uid naming itself tritonserver", Process{UID: 4242, Comm: "tritonserver", Cgroup: "/user.slice/user-4242.slice/session-1.scope"}, "burstable", true},
		{"a uid that may ask for lc", Process{UID: 1000, Comm: "vllm-x"}, "lc", false},
		{"an inference service", Process{UID: 4242, Comm: "tritonserver", Cgroup: "/system.slice/inference-a.service"}, "lc", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := p.Decide(tt.proc)
			if d.String() != tt.want || d.Rule != "inference" || d.Capped != tt.capped {
				t.Errorf("Decide(%+v) = %v by %q (capped %v), want %s by inference (capped %v)", tt.proc, d, d.Rule, d.Capped, tt.want, tt.capped)
			}
		})
	}
}

// TestSelfSetRuleCappedAtRequestLimit: a rule matching what the process
// sets itself (comm, exe, cmdline, env) gives at most what the process may
// ask for over the socket, class and weight (be:1 where it may ask for
// nothing); trust_self_set: true gives the class as written.
func TestSelfSetRuleCappedAtRequestLimit(t *testing.T) {
	const limits = "requests:\n  default_max: none\n  limits:\n    - {match: {uid: 1000}, max: lc}\n    - {match: {uid: 2000}, max: burstable}\n    - {match: {uid: 3000}, max: be}\n"
	tests := []struct {
		name string
		rule string
		proc Process
		want string
	}{
		{"comm, uid may ask lc", "{match: {comm: x}, class: lc}", Process{UID: 1000, Comm: "x"}, "lc"},
		{"comm, uid may ask burstable", "{match: {comm: x}, class: lc}", Process{UID: 2000, Comm: "x"}, "burstable"},
		{"comm, uid may ask nothing", "{match: {comm: x}, class: lc}", Process{UID: 9, Comm: "x"}, "be"},
		{"exe", "{match: {exe: /opt/x}, class: lc}", Process{UID: 2000, Exe: "/opt/x"}, "burstable"},
		{"cmdline", "{match: {cmdline: \"*serve*\"}, class: burstable}", Process{UID: 3000, Cmdline: "python serve.py"}, "be"},
		{"env", "{match: {env: {ROLE: lc}}, class: lc}", Process{UID: 3000, Env: map[string]string{"ROLE": "lc"}}, "be"},
		{"weight capped under a be limit", "{match: {comm: x}, class: be:50}", Process{UID: 3000, Comm: "x"}, "be:10"},
		{"weight kept under an lc limit", "{match: {comm: x}, class: be:50}", Process{UID: 1000, Comm: "x"}, "be:50"},
		{"below the limit: as written", "{match: {comm: x}, class: be}", Process{UID: 1000, Comm: "x"}, "be"},
		{"uid and comm: still the process's name", "{match: {uid: 2000, comm: x}, class: lc}", Process{UID: 2000, Comm: "x"}, "burstable"},
		{"trusted", "{match: {uid: 2000, comm: x}, class: lc, trust_self_set: true}", Process{UID: 2000, Comm: "x"}, "lc"},
		{"not self-set: uid", "{match: {uid: 9}, class: lc}", Process{UID: 9}, "lc"},
		{"not self-set: cgroup", "{match: {cgroup: /system.slice/a.service}, class: lc}", Process{UID: 9, Cgroup: "/system.slice/a.service"}, "lc"},
		{"class_from_env fallback", "{match: {env: {C: \"*\"}}, class_from_env: C, class: lc}", Process{UID: 2000, Env: map[string]string{"C": "bad"}}, "burstable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte("default: none\nrules:\n  - " + tt.rule + "\n" + limits))
			if err != nil {
				t.Fatal(err)
			}
			if d := p.Decide(tt.proc); d.String() != tt.want {
				t.Errorf("Decide = %v, want %s", d, tt.want)
			}
		})
	}
}

// TestTrustSelfSetChecked: --check-config names the line of a
// trust_self_set that means nothing, and of a self-set rule that would let
// any process leave itself alone.
func TestTrustSelfSetChecked(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"not a bool", "rules:\n  - match: {comm: x}\n    class: lc\n    trust_self_set: maybe\n", "line 4: rules[0].trust_self_set: \"maybe\": want true or false"},
		{"nothing self-set to trust", "rules:\n  - match: {uid: 3}\n    class: lc\n    trust_self_set: true\n", "line 4: rules[0].trust_self_set: the rule matches nothing the process sets itself"},
		{"none on a name", "rules:\n  - match: {comm: x}\n    class: none\n", "line 3: rules[0].class: none on a match of what the process sets itself (comm)"},
		{"none on an environment", "rules:\n  - match: {cgroup: /a, env: {A: b}}\n    class: none\n", "line 3: rules[0].class: none on a match of what the process sets itself (env)"},
		{"none trusted", "rules:\n  - match: {uid: 0, comm: x}\n    class: none\n    trust_self_set: true\n", ""},
		{"trust false", "rules:\n  - match: {comm: x}\n    class: lc\n    trust_self_set: false\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("got %v, want %q", err, tt.want)
			}
		})
	}
}

func TestLatency(t *testing.T) {
	p, err := Parse([]byte(`
rules:
  - name: chat
    match: {comm: vllm}
    class: lc
    objective: "tpot_p50<=30ms"
    latency: {metrics: "http://0.0.0.0:8000/metrics", preset: VLLM, model: llama}
  - name: own
    match: {comm: own}
    class: lc
    latency: {metrics: "http://127.0.0.1:9000/stats", request: app_request_seconds, ttft: app_ttft_ms}
  - name: plain
    match: {comm: plain}
    class: lc
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		comm   string
		want   string
		preset string
		ttft   []string
	}{
		{"vllm", "http://127.0.0.1:8000/metrics preset vllm model llama", "vllm", []string{"vllm:time_to_first_token_seconds"}},
		{"own", "http://127.0.0.1:9000/stats", "", []string{"app_ttft_ms"}},
		{"plain", "", "", nil},
	}
	for _, tc := range cases {
		d := p.Decide(Process{Comm: tc.comm, UID: 0})
		d.Spec.Name = class.LC // the rules match what the process sets itself: capped at its request limit
		l, ok := p.Latency(d)
		if tc.want == "" {
			if ok {
				t.Errorf("%s: latency %v", tc.comm, l)
			}
			continue
		}
		if !ok || l.String() != tc.want || l.Preset != tc.preset || !slices.Equal(l.Metrics.TTFT.Names, tc.ttft) {
			t.Errorf("%s: %v %v, want %q", tc.comm, l, ok, tc.want)
		}
	}
	if l, ok := p.Latency(Decision{Spec: class.Spec{Name: class.BE, Weight: 1}, Rule: "chat"}); ok {
		t.Errorf("a be process has latency %v", l)
	}
}
