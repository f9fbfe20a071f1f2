package bench

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/stats"
)

func TestScenarioTag(t *testing.T) {
	scs, err := ParseScenarios("llm-standalone,slo:llm-defaults,slo:llm-defaults#abs,daemon:llm-be-200us#gate")
	if err != nil {
		t.Fatal(err)
	}
	abs, gate := scs[2], scs[3]
	if !abs.SLO || abs.Runtime != RuntimeLLM || abs.Name != "slo:llm-defaults#abs" || abs.Dir() != "slo_llm-defaults_abs" {
		t.Errorf("abs: %+v (dir %s)", abs, abs.Dir())
	}
	if !gate.Daemon || gate.BETimeslice == 0 {
		t.Errorf("gate: %+v", gate)
	}
	if st, _ := baselineNames(abs); st != "llm-standalone" {
		t.Errorf("baseline %s", st)
	}
	for _, bad := range []string{"slo:llm-defaults#", "llm-be-1us#A", "llm-be-1us#a b"} {
		if _, err := ParseScenarios(bad); err == nil || !strings.Contains(err.Error(), "tag") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestParsePolicies(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(f, []byte("version: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	scs, _ := ParseScenarios("llm-standalone,slo:llm-defaults#abs")
	m, err := parsePolicies([]string{"slo:llm-defaults#abs=" + f, "default=" + f}, scs)
	if err != nil || m["slo:llm-defaults#abs"] != f || m["default"] != f {
		t.Fatalf("%v %v", m, err)
	}
	for _, c := range []struct{ entry, want string }{
		{"slo:llm-defaults", "want SCENARIO=FILE"},
		{"llm-be-1us=" + f, "no scenario llm-be-1us"},
		{"default=" + filepath.Join(dir, "none"), "no such file"},
	} {
		if _, err := parsePolicies([]string{c.entry}, scs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.entry, err, c.want)
		}
	}
}

func TestExpandAlone(t *testing.T) {
	sc, _ := parseScenario("slo:llm-defaults#abs")
	runs := []*ScenarioResult{
		{Name: "llm-standalone", LCLatencyUs: &stats.Summary{P50: 500000}},
		{Name: "llm-be-1us", LCLatencyUs: &stats.Summary{P50: 900000}},
		{Name: "llm-standalone", LCLatencyUs: &stats.Summary{P50: 600000}}, // the last one counts
		{Name: "llm-standalone", Error: "failed"},
	}
	got, err := expandAlone(`objective: "p50<=@ALONE_P50*1.15@", ref @ALONE_P50@`, sc, runs)
	if err != nil || got != `objective: "p50<=690000us", ref 600000us` {
		t.Errorf("%q %v", got, err)
	}
	if _, err := expandAlone("p50<=@ALONE_P50*1.15@", sc, runs[1:2]); err == nil || !strings.Contains(err.Error(), "list llm-standalone first") {
		t.Errorf("no standalone: %v", err)
	}
	if got, err := expandAlone("p50<=1.10x", sc, nil); err != nil || got != "p50<=1.10x" {
		t.Errorf("no placeholder: %q %v", got, err)
	}
}

// TestApplyPolicy: each scenario's policy is written over the daemon's
// file and reloaded, once while it stays the same.
func TestApplyPolicy(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return f
	}
	plain, slo := write("plain.yaml", "plain\n"), write("slo.yaml", "slo p50<=@ALONE_P50*2@\n")
	scs, _ := ParseScenarios("llm-standalone,llm-be-1us,slo:llm-defaults")
	reloads := 0
	r := &runner{log: slog.New(slog.DiscardHandler), reload: func(context.Context) error { reloads++; return nil },
		o: runOptions{Out: dir, DaemonConfig: filepath.Join(dir, "daemon.yaml"), DaemonPolicies: map[string]string{"default": plain, "slo:llm-defaults": slo}}}
	runs := []*ScenarioResult{{Name: "llm-standalone", LCLatencyUs: &stats.Summary{P50: 1000}}}
	for i, want := range []struct {
		file, text string
		reloads    int
	}{{plain, "plain\n", 1}, {plain, "plain\n", 1}, {slo, "slo p50<=2000us\n", 2}} {
		f, err := r.applyPolicy(context.Background(), scs[i], runs)
		if err != nil || f != want.file {
			t.Fatalf("%s: %s %v", scs[i].Name, f, err)
		}
		b, _ := os.ReadFile(r.o.DaemonConfig)
		if string(b) != want.text || reloads != want.reloads {
			t.Errorf("%s: daemon file %q after %d reloads, want %q after %d", scs[i].Name, b, reloads, want.text, want.reloads)
		}
	}
}

func TestLLMArgvShapeAndMetrics(t *testing.T) {
	o := testOptions(t, "llm-be-1us", "")
	o.LLMFamily, o.LLMPeriod, o.LLMBatch, o.LLMMetricsPort, o.LLMNewTokens, o.LLMPrompt = "llama-330m", time.Second, 2, 8100, 32, 128
	r := &runner{o: o, scripts: "/s"}
	argv, _ := r.lcArgv(o.Scenarios[0], "/out/lc.json")
	line := strings.Join(argv, " ")
	for _, want := range []string{"--family llama-330m", "--batch 2", "--metrics-port 8100", "--new-tokens 32", "--prompt 128", "--period 1s"} {
		if !strings.Contains(line, want) {
			t.Errorf("%s: no %q", line, want)
		}
	}
	if argv, _ := r.lcArgv(o.Scenarios[0], "/out/lc2.json"); !strings.Contains(strings.Join(argv, " "), "--metrics-port 8101") {
		t.Errorf("the second LC: %v", argv)
	}
	r.o.LLMMetricsPort, r.o.LLMBatch = 0, 1
	if argv, _ := r.lcArgv(o.Scenarios[0], "/out/lc.json"); slices.Contains(argv, "--metrics-port") || slices.Contains(argv, "--batch") {
		t.Errorf("no port, batch 1: %v", argv)
	}
}
