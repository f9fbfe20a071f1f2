package bench

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/prepreempt"
)

func TestParsePrepreemptScenarios(t *testing.T) {
	tests := []struct {
		name    string
		runtime Runtime
		kind    Kind
		ts      time.Duration
		wantErr bool
	}{
		{"prepreempt-be-1us", RuntimeKernels, KindShared, time.Microsecond, false},
		{"prepreempt-standalone", RuntimeKernels, KindStandalone, 0, false},
		{"prepreempt-defaults", RuntimeKernels, KindShared, 0, false},
		{"pytorch-prepreempt-be-1us", RuntimePyTorch, KindShared, time.Microsecond, false},
		{"prepreempt-be-only", "", "", 0, true},
		{"prepreempt-be-ratio:1ms:1ms", "", "", 0, true},
	}
	for _, tt := range tests {
		sc, err := parseScenario(tt.name)
		if tt.wantErr {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: error %v, want ErrInvalidArgument", tt.name, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !sc.Hints || sc.Runtime != tt.runtime || sc.Kind != tt.kind || sc.BETimeslice != tt.ts {
			t.Errorf("%s: %+v", tt.name, sc)
		}
	}
}

func TestLCArgvHints(t *testing.T) {
	r := &runner{env: runEnv{self: []string{"/opt/gp/gpreempt-bench"}}, scripts: "/tmp/scripts",
		o: runOptions{Requests: 10, PyRequests: 10, Python: "python3", HintLauncher: "poller", HintPrepQuantile: 0.1}}
	sc, err := parseScenario("prepreempt-be-1us")
	if err != nil {
		t.Fatal(err)
	}
	argv, _ := r.lcArgv(sc, "lc.json")
	if !hasArgs(argv, "--hints", "--hint-launcher", "poller", "--hint-prep-quantile", "0.1") {
		t.Errorf("kernel LC worker argv lacks the hint options: %v", argv)
	}
	sc, _ = parseScenario("pytorch-prepreempt-be-1us")
	t.Setenv("GPREEMPT_LIB", "")
	argv, env := r.lcArgv(sc, "lc.json")
	if !hasArgs(argv, "--hints", "--hint-launcher", "poller") {
		t.Errorf("python LC worker argv lacks the hint options: %v", argv)
	}
	want := map[string]bool{"PYTHONPATH=/tmp/scripts": false, "GPREEMPT_LIB=/opt/gp/libgpreempt.so": false}
	for _, kv := range env {
		if _, ok := want[kv]; ok {
			want[kv] = true
		}
	}
	for kv, seen := range want {
		if !seen {
			t.Errorf("env lacks %s: %v", kv, env)
		}
	}
}

// hasArgs reports whether argv holds want as a contiguous run.
func hasArgs(argv []string, want ...string) bool {
	for i := range argv {
		if i+len(want) <= len(argv) && slices.Equal(argv[i:i+len(want)], want) {
			return true
		}
	}
	return false
}

func TestRunOptionsValidateHints(t *testing.T) {
	for _, tt := range []struct {
		launcher prepreempt.Launcher
		q        float64
		ok       bool
	}{
		{"goroutine", 0, true},
		{"poller", 0.25, true},
		{"threads", 0, false},
		{"", 0, false},
		{"goroutine", 1, false},
		{"goroutine", -0.1, false},
	} {
		o := testOptions(t, "standalone", "")
		o.HintLauncher, o.HintPrepQuantile = tt.launcher, tt.q
		err := o.validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
			t.Errorf("launcher %q quantile %v: validate() = %v, want ok=%v", tt.launcher, tt.q, err, tt.ok)
		}
	}
}
