package bench

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// dryRun runs a script of scripts/ with DRY_RUN=1 in dir ("": here), this test binary as its
// bench, and env: its output and exit status (the test skipped without bash).
func dryRun(t *testing.T, dir, script string, env ...string) (string, int) {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	path, err := filepath.Abs(filepath.Join("../../scripts", script))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", path)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), append([]string{"DRY_RUN=1", benchAppEnv + "=1"}, env...)...)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return string(out), exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// TestGPURunSLODryRun checks scripts/gpu-run-slo.sh's plan without a GPU:
// every part's policy parses with SLO mode on, and its bench command's
// scenarios parse.
func TestGPURunSLODryRun(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	for _, part := range []string{"must1", "must2g", "must2s", "must3", "must3r", "must4", "model-graph", "model-eager", "model-llm", "model-synth", "model-llm+", "must3+"} {
		cmd := exec.Command("bash", "../../scripts/gpu-run-slo.sh")
		cmd.Env = append(os.Environ(), "DRY_RUN=1", "PARTS="+part)
		if part == "must3+" { // must3 with the gate offered and an absolute objective
			cmd.Env = append(os.Environ(), "DRY_RUN=1", "PARTS=must3", "GATE=auto", "OBJECTIVE_MUST3=p50<=9ms")
		}
		// model-llm+: model-llm with its scenarios replaced and the workers pinned.
		if base, ok := strings.CutSuffix(part, "+"); ok && base != "must3" {
			cmd.Env = append(os.Environ(), "DRY_RUN=1", "PARTS="+base, "MODEL_REPEAT=3",
				"SCENARIOS_MODEL_LLM=llm-standalone,slo:llm-defaults,llm-be-only", "PIN_ARGS=--lc-cpus 2-3 --be-cpus 4-5")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v: %s", part, err, out)
		}
		text := string(out)
		_, rest, ok := strings.Cut(text, "--- policy")
		if !ok {
			t.Fatalf("%s: no policy in %s", part, text)
		}
		_, rest, _ = strings.Cut(rest, "\n")
		pol, cmdline, ok := strings.Cut(rest, "--- bench command")
		if !ok {
			t.Fatalf("%s: no bench command in %s", part, text)
		}
		p, err := policy.Parse([]byte(pol))
		if err != nil {
			t.Fatalf("%s: policy: %v\n%s", part, err, pol)
		}
		if !p.SLO.Enabled {
			t.Errorf("%s: SLO mode off", part)
		}
		fields := strings.Fields(cmdline)
		i := slices.Index(fields, "--scenarios")
		if i < 0 || i+1 >= len(fields) {
			t.Fatalf("%s: no --scenarios in %s", part, cmdline)
		}
		scs, err := ParseScenarios(fields[i+1])
		if err != nil {
			t.Fatalf("%s: %v", part, err)
		}
		slo := 0
		for _, sc := range scs {
			if sc.SLO {
				slo++
			}
		}
		repeat := "--repeat 3"
		if strings.HasPrefix(part, "model-") && part != "model-llm+" {
			repeat = "--repeat 2" // MODEL_REPEAT's default
		}
		if slo < 1 || !strings.Contains(cmdline, repeat) || !strings.Contains(cmdline, "--daemon-socket") {
			t.Errorf("%s: %s", part, cmdline)
		}
		if (strings.HasPrefix(part, "model-") || part == "must3+") != (p.Gate.Mode == policy.GateAuto) {
			t.Errorf("%s: gate mode %q", part, p.Gate.Mode)
		}
		if want := map[string]string{"must3": "p50<=1.05x", "must3r": "p50<=1.05x", "must3+": "p50<=9ms"}[part]; want != "" && p.SLO.LCObjective.String() != want {
			t.Errorf("%s: LC objective %q, want %q", part, p.SLO.LCObjective.String(), want)
		}
		if part == "model-llm+" && (len(scs) != 3 || !strings.Contains(cmdline, "--lc-cpus 2-3 --be-cpus 4-5")) {
			t.Errorf("%s: overrides not taken: %s", part, cmdline)
		}
	}
}

// TestGPURunSelfDryRun checks scripts/gpu-run-self.sh's plan without a
// GPU: every part's bench command is one the bench takes (its scenarios,
// flags and --daemon-policy files), its plan fits the part's own limit
// (--time-limit), its policies parse (the scraped abs placeholder filled), REP rotates the settings, and DEVICE=1's
// policies class only that device's workers.
func TestGPURunSelfDryRun(t *testing.T) {
	parts := []string{"gpt2-fixed", "gpt2-slo", "llama-fixed", "llama-slo", "eager", "graph", "pushed", "scraped", "scraped-llama", "steady"}
	bench := benchDir(t)
	for _, rep := range []string{"1", "2"} {
		for _, part := range parts {
			w := t.TempDir()
			dev := map[string]string{"1": "0", "2": "1"}[rep]
			out, rc := dryRun(t, "", "gpu-run-self.sh", "PARTS="+part, "REP="+rep, "W="+w, "DEVICE="+dev, "C="+bench)
			if rc != 0 {
				t.Fatalf("%s: exit %d: %s", part, rc, out)
			}
			_, line, ok := strings.Cut(out, "--- bench: ")
			if !ok {
				t.Fatalf("%s: no bench command in %s", part, out)
			}
			line, _, _ = strings.Cut(line, "\n")
			args := strings.Fields(line)[1:] // after the binary: run ...
			var o runOptions
			app := &cli.App{Commands: []*cli.Command{{Name: "run", Flags: runFlags, Action: func(c *cli.Context) (err error) {
				o, err = runOptionsFrom(c)
				return err
			}}}}
			if err := app.Run(append([]string{"gpreempt-bench"}, args...)); err != nil {
				t.Fatalf("%s: the bench refuses %s: %v", part, line, err)
			}
			if o.TimeLimit == 0 || !strings.Contains(out, "--time-limit "+o.TimeLimit.String()+")") {
				t.Errorf("%s: no plan against the part's own limit %v in:\n%s", part, o.TimeLimit, out)
			}
			if part == "scraped-llama" && (o.LLMFamily != "llama-330m" || o.LLMMetricsPort == 0 || o.SLOLeadIn != 120*time.Second) {
				t.Errorf("%s: family %q, metrics port %d, lead-in %v; want the Llama decode serving its histograms, 120 s", part, o.LLMFamily, o.LLMMetricsPort, o.SLOLeadIn)
			}
			if o.BEDuty == 0 || len(o.DaemonPolicies) == 0 || !slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return o.dutyOf(s) > 0 }) {
				t.Errorf("%s: no duty or no policies: %+v", part, o)
			}
			files := maps.Clone(o.DaemonPolicies)
			if o.OwnAlonePolicy != "" {
				files["own-alone"] = o.OwnAlonePolicy
			}
			for name, file := range files {
				b, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				sc, _ := parseScenario(name)
				standalone, _ := baselineNames(sc)
				text, err := expandAlone(string(b), sc, []*ScenarioResult{{Name: standalone, LCLatencyUs: &stats.Summary{P50: 900_000}}}, 900_000)
				if err != nil {
					t.Fatal(err)
				}
				if want := `GPREEMPT_BENCH_DEVICE: "` + dev + `"`; strings.Count(text, want) != strings.Count(text, "match:") {
					t.Errorf("%s: %s's rules do not all match %s:\n%s", part, name, want, text)
				}
				p, err := policy.Parse([]byte(text))
				if err != nil {
					t.Fatalf("%s: %s's policy: %v\n%s", part, name, err, text)
				}
				// The Llama decode scraped from its fine histogram: vLLM's request buckets are too coarse.
				if part == "scraped-llama" && !strings.Contains(text, "request: app_request_latency_seconds") {
					t.Errorf("%s: %s's latency is not the fine request histogram:\n%s", part, name, text)
				}
				if name == "own-alone" { // SLO mode on, BE's rate alone learnt, one arm held
					if !p.SLO.Enabled || len(p.SLO.Ladder) != 1 {
						t.Errorf("%s: the policy while the LC runs alone: SLO mode %v, ladder %v", part, p.SLO.Enabled, p.SLO.Ladder)
					}
				} else if sc.SLO != p.SLO.Enabled {
					t.Errorf("%s: %s: SLO mode %v", part, name, p.SLO.Enabled)
				}
			}
			// An LLM LC's absolute objective comes from its own requests alone, any other's from the standalone run first.
			abs := slices.IndexFunc(o.Scenarios, func(s Scenario) bool { return strings.HasSuffix(s.Name, "#abs") })
			switch {
			case abs < 0:
			case o.Scenarios[abs].Runtime.LLM() && (!o.ownAlone[o.Scenarios[abs].Name] || o.OwnAlonePolicy == ""):
				t.Errorf("%s: %s's objective is not from its own LC alone", part, o.Scenarios[abs].Name)
			case !o.Scenarios[abs].Runtime.LLM() && !strings.HasSuffix(o.Scenarios[0].Name, "standalone"):
				t.Errorf("%s: the abs objective needs the standalone run first: %v", part, o.Scenarios[0].Name)
			}
		}
	}
}

// TestGPURunSelfRotation checks that successive REPs of scripts/gpu-run-self.sh run a part's
// settings in turn first, be-only ahead of them all where SETTINGS names it.
func TestGPURunSelfRotation(t *testing.T) {
	seen := map[string]bool{}
	bench := benchDir(t)
	for _, rep := range []string{"80", "81", "82", "83"} {
		out, rc := dryRun(t, "", "gpu-run-self.sh", "NO_STANDALONE=1", "PARTS=llama-slo", "REP="+rep, "W="+t.TempDir(), "SETTINGS=beonly static gate 1us slo",
			"C="+bench, "TIMEOUT_LLAMA_SLO=700", "BENCH_TIMEOUT_LLAMA_SLO=660")
		if rc != 0 {
			t.Fatalf("REP=%s: exit %d: %s", rep, rc, out)
		}
		_, list, _ := strings.Cut(out, "--scenarios ")
		list, _, _ = strings.Cut(list, " ")
		if !strings.HasPrefix(list, "llm-be-only,") || strings.Count(list, ",") != 4 || seen[list] {
			t.Errorf("REP=%s: scenarios %s: want be-only first, then an order no REP before ran", rep, list)
		}
		seen[list] = true
	}
}

// TestGPURunLanesDryRun checks a call of scripts/gpu-run-lanes.sh on a machine without a GPU:
// every part of every lane is planned against its own limit, a refused one does not stop the
// parts after it, and the call exits 2 where one is refused, 0 where all fit.
func TestGPURunLanesDryRun(t *testing.T) {
	tests := []struct {
		lane0, lane1 string
		wantRC       int
		wantRefused  int
	}{
		{"llama-slo:beonly static gate 1us slo:555;gpt2-slo:abs:240", "llama-slo:static:200", 2, 2},
		{"gpt2-slo:abs:300", "llama-slo:static gate 1us beonly:480", 0, 0},
	}
	for _, tt := range tests {
		dir := t.TempDir()
		if err := os.Symlink(benchDir(t), filepath.Join(dir, ".carry")); err != nil {
			t.Fatal(err)
		}
		out, rc := dryRun(t, dir, "gpu-run-lanes.sh", "NO_STANDALONE=1", "LEAD_IN=60s", "BEONLY_DURATION=40s",
			"LANE0="+tt.lane0, "LANE1="+tt.lane1, "OUT="+t.TempDir())
		parts := strings.Count(tt.lane0, ";") + 2
		if rc != tt.wantRC || strings.Count(out, "\ntotal ") != parts || strings.Count(out, "would be cut and lost") != tt.wantRefused {
			t.Errorf("LANE0=%q LANE1=%q: rc %d, want %d; want %d plans, %d refused, in:\n%s", tt.lane0, tt.lane1, rc, tt.wantRC, parts, tt.wantRefused, out)
		}
	}
}
