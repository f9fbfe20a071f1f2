package bench

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
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
	m, own, err := parsePolicies([]string{"slo:llm-defaults#abs=" + f, "default=" + f}, scs)
	if err != nil || m["slo:llm-defaults#abs"] != f || m["default"] != f || own != nil {
		t.Fatalf("%v %v %v", m, own, err)
	}
	for _, c := range []struct{ entry, want string }{
		{"slo:llm-defaults", "want SCENARIO=FILE"},
		{"llm-be-1us=" + f, "no scenario llm-be-1us"},
		{"default=" + filepath.Join(dir, "none"), "no such file"},
	} {
		if _, _, err := parsePolicies([]string{c.entry}, scs); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.entry, err, c.want)
		}
	}
	// @OWN_P50@: the scenarios under that policy, named or by default; only an llm-* LC measures it.
	ownFile := writeFile(t, dir, "own.yaml", `objective: "p50<=@OWN_P50*1.15@"`)
	for _, c := range []struct {
		scenarios string
		entries   []string
		own       []string
		err       string
	}{
		{"llm-standalone,slo:llm-defaults#abs", []string{"slo:llm-defaults#abs=" + ownFile, "default=" + f}, []string{"slo:llm-defaults#abs"}, ""},
		{"llm-be-only,slo:llm-defaults", []string{"default=" + ownFile}, []string{"slo:llm-defaults"}, ""}, // be-only has no LC
		{"llm-be-only,slo:llm-defaults", []string{"llm-be-only=" + ownFile}, nil, ""},
		{"standalone,slo:defaults", []string{"default=" + ownFile}, nil, "standalone's policy wants @OWN_P50@"},
		{"pytorch-standalone", []string{"default=" + ownFile}, nil, "only an llm-* scenario"},
	} {
		scs, err := ParseScenarios(c.scenarios)
		if err != nil {
			t.Fatal(err)
		}
		_, own, err := parsePolicies(c.entries, scs)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s %v: %v, want %q", c.scenarios, c.entries, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(slices.Sorted(maps.Keys(own)), c.own) {
			t.Errorf("%s %v: own %v (%v), want %v", c.scenarios, c.entries, own, err, c.own)
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
	for _, c := range []struct {
		text string
		runs []*ScenarioResult
		own  float64
		want string
		err  string
	}{
		{`objective: "p50<=@ALONE_P50*1.15@", ref @ALONE_P50@`, runs, 0, `objective: "p50<=690000us", ref 600000us`, ""},
		{"p50<=@ALONE_P50*1.15@", runs[1:2], 0, "", "list llm-standalone first"},
		{"p50<=1.10x", nil, 0, "p50<=1.10x", ""},
		// This LC's own requests alone, not the standalone process's.
		{`p50<=@OWN_P50*1.15@, ref @OWN_P50@`, runs, 200000, "p50<=230000us, ref 200000us", ""},
		// Until they are in: an hour, met by every arm.
		{"p50<=@OWN_P50*1.15@", nil, 0, "p50<=3600000000us", ""},
		{"p50<=@OWN_P50*2@ or @ALONE_P50@", runs, 100000, "p50<=200000us or 600000us", ""},
	} {
		got, err := expandAlone(c.text, sc, c.runs, c.own)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v, want %q", c.text, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q (own %v): %q %v, want %q", c.text, c.own, got, err, c.want)
		}
	}
}

// writeFile writes text into dir/name and returns its path.
func writeFile(t *testing.T, dir, name, text string) string {
	t.Helper()
	f := filepath.Join(dir, name)
	if err := os.WriteFile(f, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestApplyPolicy: each scenario's policy is written over the daemon's
// file and reloaded, once while it stays the same.
func TestApplyPolicy(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
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
		f, err := r.applyPolicy(context.Background(), scs[i], runs, 0, "")
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

// TestOwnAloneObjective runs an llm-* scenario whose policy wants @OWN_P50@ through the bench
// with fake workers and a fake gpreemptd: before the workers start the daemon runs the
// --own-alone-policy (or the scenario's own with the placeholder an hour); once the LC's ALONE
// line is in, it is reloaded under the scenario's own at 1.15 times their p50, and the LC is
// released to its lead-in and measurement.
func TestOwnAloneObjective(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeFile(t, dir, name, text) }
	own := write("own.yaml", "objective: \"p50<=@OWN_P50*1.15@\"\n")
	alone := write("alone.yaml", "ladder: [200us], objective: \"p50<=@OWN_P50*1.15@\"\n")
	// The fake's five requests alone: 200-204 ms, p50 202 ms; 1.15 times that is 232.3 ms.
	final := "objective: \"p50<=232300us\"\n"
	for _, c := range []struct {
		alonePolicy, first, mode, err string
	}{
		{"", "objective: \"p50<=3600000000us\"\n", "", ""},
		{alone, "ladder: [200us], objective: \"p50<=3600000000us\"\n", "", ""},
		// An LC that dies there is reported with its exit and its stderr, whichever way the bench
		// learns it (its ALONE line raced with its exit, the second go's write, the wait).
		{alone, "", "lc-die-at-alone", "simulated crash after its ALONE line"},
	} {
		ctl, _ := fakeCtl(t, 0)
		o := testOptions(t, "llm-be-1us", ctl)
		env, _ := testEnv(t, c.mode)
		o.Python = env.self[0] // the fake plays lc_decode.py and be_gemm.py
		o.LLMPeriod, o.BEDuty, o.OwnAlone, o.OwnAlonePolicy = 4*time.Millisecond, 2200*time.Millisecond, 5, c.alonePolicy
		o.LLMFamily, o.LLMLoop, o.LLMNewTokens, o.LLMPrompt, o.LLMBatch, o.GEMMSize = "gpt2", "generate", 16, 64, 1, 64
		o.DaemonConfig = filepath.Join(t.TempDir(), "daemon.yaml")
		t.Setenv("FAKE_DAEMON_CONFIG", o.DaemonConfig)
		var err error
		if o.DaemonPolicies, o.ownAlone, err = parsePolicies([]string{"llm-be-1us=" + own}, o.Scenarios); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var reloaded []string // the daemon's policy file at each reload
		o.DaemonSocket = unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost || r.URL.Path != "/v1/reload" {
				http.Error(w, "not here", http.StatusNotFound)
				return
			}
			b, _ := os.ReadFile(o.DaemonConfig)
			mu.Lock()
			reloaded = append(reloaded, string(b))
			mu.Unlock()
			w.Write([]byte("{}"))
		}))
		if err := o.validate(); err != nil {
			t.Fatal(err)
		}
		if err := runAll(context.Background(), o, env); c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "exit status 1") {
				t.Errorf("%s: %v, want %q and its exit status", c.mode, err, c.err)
			}
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		res, err := LoadResults(filepath.Join(o.Out, "results.json"))
		if err != nil {
			t.Fatal(err)
		}
		sr := res.Scenarios[0]
		if want := []string{c.first, final}; !slices.Equal(reloaded, want) || sr.Error != "" || sr.DaemonPolicy != own ||
			sr.OwnAloneUs == nil || sr.OwnAloneUs.N != 5 || sr.OwnAloneUs.P50 != 202_000 || sr.LCLatencyUs == nil ||
			sr.OwnAloneCPUMeterUs == nil || sr.OwnAloneCPUMeterUs.P50 != 2_200 {
			t.Errorf("alone policy %q: reloads %q (want %q), policy %s, own alone %+v, error %q", c.alonePolicy, reloaded, want, sr.DaemonPolicy, sr.OwnAloneUs, sr.Error)
		}
		out, _ := os.ReadFile(filepath.Join(o.Out, o.Scenarios[0].Dir(), "lc.stdout"))
		// The text in force each time, kept in the run's folder.
		for name, want := range map[string]string{"policy-alone.yaml": c.first, "policy.yaml": final} {
			if b, err := os.ReadFile(filepath.Join(o.Out, o.Scenarios[0].Dir(), name)); err != nil || string(b) != want {
				t.Errorf("%s: %q %v, want %q", name, b, err, want)
			}
		}
		// The reload comes before the second go: the LC's lead-in runs under the objective.
		if !strings.Contains(string(out), "ALONE 200000000:2000000,201000000:2100000,202000000:2200000,203000000:2300000,204000000:2400000\nCONFIG AT GO "+strconv.Quote(final)) {
			t.Errorf("the LC's stdout: %q", out)
		}
	}
}

func TestParseAlone(t *testing.T) {
	for _, c := range []struct {
		line       string
		lat, meter []float64
		err        string
	}{
		{"200000000:2500000,201500000:1800000", []float64{200000, 201500}, []float64{2500, 1800}, ""},
		{" 7:3 \n", []float64{0.007}, []float64{0.003}, ""},
		{"", nil, nil, `"" is no latency`},
		{"1:1,,2:1", nil, nil, `"" is no latency`},
		{"1:1,-2:1", nil, nil, `"-2:1" is no latency`},
		{"1:1,0:1", nil, nil, `"0:1" is no latency`},
		{"1:0", nil, nil, `"1:0" is no latency`},
		{"1", nil, nil, `"1" is no latency`}, // no CPU loop
		{"1:2:3", nil, nil, `"1:2:3" is no latency`},
		{"1.5:1", nil, nil, `"1.5:1" is no latency`},
		{"99999999999999999999:1", nil, nil, "is no latency"},
	} {
		lat, meter, err := parseAlone(c.line)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: %v %v %v, want %q", c.line, lat, meter, err, c.err)
			}
			continue
		}
		if err != nil || !slices.Equal(lat, c.lat) || !slices.Equal(meter, c.meter) {
			t.Errorf("%q: %v %v %v, want %v %v", c.line, lat, meter, err, c.lat, c.meter)
		}
	}
}
