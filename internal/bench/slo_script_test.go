package bench

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/policy"
)

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
