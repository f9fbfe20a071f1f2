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
	for _, part := range []string{"must1", "must2g", "must2s", "must3", "must4"} {
		cmd := exec.Command("bash", "../../scripts/gpu-run-slo.sh")
		cmd.Env = append(os.Environ(), "DRY_RUN=1", "PARTS="+part)
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
		if slo < 1 || !strings.Contains(cmdline, "--repeat 3") || !strings.Contains(cmdline, "--daemon-socket") {
			t.Errorf("%s: %s", part, cmdline)
		}
	}
}
