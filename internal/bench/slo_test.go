package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/tsg"
)

func TestParseSLOScenarios(t *testing.T) {
	for _, tt := range []struct {
		name        string
		runtime     Runtime
		kind        Kind
		hints, gate bool
	}{
		{"slo:defaults", RuntimeKernels, KindShared, false, false},
		{"slo:prepreempt-defaults", RuntimeKernels, KindShared, true, false},
		{"slo:pytorch", RuntimePyTorch, KindShared, false, false},
		{"slo:pytorch-eager", RuntimePyTorchEager, KindShared, false, false},
		{"slo:pytorch-eager@x0.2", RuntimePyTorchEager, KindShared, false, false},
		{"slo:multi-tenant", RuntimeKernels, KindMultiTenant, false, false},
		// The LC gates its own requests; SLO mode steers its engine's gate.
		{"slo:pytorch-eager-gate-defaults", RuntimePyTorchEager, KindShared, false, true},
		{"slo:llm-gate-defaults", RuntimeLLM, KindShared, false, true},
	} {
		sc, err := parseScenario(tt.name)
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if !sc.SLO || !sc.Daemon || sc.Runtime != tt.runtime || sc.Kind != tt.kind || sc.Hints != tt.hints || sc.Gate != tt.gate || sc.BETimeslice != 0 || !sc.NeedsCtl() {
			t.Errorf("%s: %+v", tt.name, sc)
		}
	}
	for _, bad := range []string{"slo:be-1us", "slo:standalone", "slo:be-only", "slo:be-ratio:1ms:2ms", "slo:pytorch-be-1ms"} {
		if _, err := parseScenario(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err %v, want ErrInvalidArgument", bad, err)
		}
	}
	sc, _ := parseScenario("slo:pytorch-eager")
	if st, bo := baselineNames(sc); st != "pytorch-eager-standalone" || bo != "pytorch-eager-be-only" {
		t.Errorf("baselines %s, %s", st, bo)
	}
}

func TestSLOWorkerEnv(t *testing.T) {
	sc, _ := parseScenario("slo:multi-tenant:be:3:be:1")
	for _, tt := range []struct {
		role class.Name
		i    int
		want []string
	}{
		{class.BE, 0, []string{"GPREEMPT_CLASS=be:3", "GPREEMPT_BENCH_WORKER=be1"}},
		{class.BE, 1, []string{"GPREEMPT_CLASS=be", "GPREEMPT_BENCH_WORKER=be2"}},
		{class.LC, 1, []string{"GPREEMPT_CLASS=lc", "GPREEMPT_BENCH_WORKER=lc2"}},
	} {
		if got := sc.workerEnv(tt.role, tt.i); !slices.Equal(got, tt.want) {
			t.Errorf("%s %d: %v, want %v", tt.role, tt.i, got, tt.want)
		}
	}
	sc, _ = parseScenario("slo:pytorch-eager")
	if got := sc.workerEnv(class.LC, 0); !slices.Equal(got, []string{"GPREEMPT_CLASS=lc", "GPREEMPT_BENCH_WORKER=lc"}) {
		t.Errorf("eager LC env %v", got)
	}
	// daemon: scenarios keep their environment as it was.
	sc, _ = parseScenario("daemon:be-1us")
	if got := sc.workerEnv(class.BE, 0); !slices.Equal(got, []string{"GPREEMPT_CLASS=be"}) {
		t.Errorf("daemon: BE env %v", got)
	}
}

func TestSLOWantsAnyTimeslice(t *testing.T) {
	sc, _ := parseScenario("slo:defaults")
	be, lc := sc.daemonWants()
	gs := []tsg.Group{{Timeslice: 3000, Interleave: tsg.LevelUnknown}, {Timeslice: 1, Interleave: tsg.LevelUnknown}}
	if be.Timeslice != 0 || lc.Timeslice != 0 || !be.holds(gs) || !lc.holds(gs) {
		t.Errorf("slo: wants %v %v should accept any timeslice", be, lc)
	}
	if be.holds(nil) {
		t.Error("no groups held")
	}
	sc, _ = parseScenario("daemon:be-1us")
	if be, _ := sc.daemonWants(); be.holds(gs) {
		t.Error("daemon:be-1us accepted 3000us")
	}
}

func TestSLOLCArgvPushes(t *testing.T) {
	r := &runner{env: runEnv{self: []string{"/opt/gp/gpreempt-bench"}}, scripts: "/tmp/scripts",
		o: runOptions{Requests: 10, PyRequests: 10, Python: "python3", DaemonSocket: "/tmp/d.sock", SLOLeadIn: 25 * time.Second,
			Duration: 8 * time.Second, LLMPeriod: 800 * time.Millisecond}}
	for _, name := range []string{"slo:defaults", "slo:pytorch-eager", "slo:pytorch", "slo:llm-defaults", "slo:llm-graph-defaults"} {
		sc, err := parseScenario(name)
		if err != nil {
			t.Fatal(err)
		}
		argv, _ := r.lcArgv(sc, "lc.json")
		if !hasArgs(argv, "--push-latency", "/tmp/d.sock") || !hasArgs(argv, "--lead-in", "25s") {
			t.Errorf("%s: argv lacks --push-latency or --lead-in: %v", name, argv)
		}
		if got, base := r.lcTimeout(sc), 3*time.Duration(r.o.lcRequests(sc))*r.o.period(sc)+2*time.Minute; got != base+75*time.Second {
			t.Errorf("%s: LC timeout %v, want %v plus three lead-ins", name, got, base)
		}
	}
	sc, _ := parseScenario("daemon:be-1us")
	if argv, _ := r.lcArgv(sc, "lc.json"); slices.Contains(argv, "--push-latency") || slices.Contains(argv, "--lead-in") {
		t.Errorf("daemon: argv pushes or leads in: %v", argv)
	}
	// --slo-push=false: the lead-in stays, the push goes (the daemon
	// traces the LC's requests).
	r.o.SLONoPush = true
	for _, name := range []string{"slo:defaults", "slo:pytorch-eager"} {
		sc, _ := parseScenario(name)
		argv, _ := r.lcArgv(sc, "lc.json")
		if slices.Contains(argv, "--push-latency") || !hasArgs(argv, "--lead-in", "25s") {
			t.Errorf("%s without push: want --lead-in and no --push-latency: %v", name, argv)
		}
	}
}

func TestAddBETimeline(t *testing.T) {
	sr := &ScenarioResult{SLO: []SLOSample{{MonoNs: 1e9}}, WindowEndMonoNs: 3.5e9}
	// Completions at 1.5 s, 2.2 s, 2.9 s and 3.4 s; a second BE at 1.1 s.
	addBETimeline(sr, &BEResult{CompletionsMonoNs: []int64{1.5e9, 2.2e9, 2.9e9, 3.4e9, 3.6e9}})
	addBETimeline(sr, &BEResult{CompletionsMonoNs: []int64{1.1e9}})
	// Bins [1,2) [2,3) [3,3.5]: the last is half a second long.
	if want := []float64{2, 2, 2}; !slices.Equal(sr.BETimeline, want) || sr.BETimelineStartMonoNs != 1e9 {
		t.Errorf("timeline %v from %d, want %v from 1e9", sr.BETimeline, sr.BETimelineStartMonoNs, want)
	}
}

func TestRunLeadIn(t *testing.T) {
	o := lcOptions{Period: time.Millisecond, LeadIn: 5 * time.Millisecond}
	var n int
	req := func(time.Duration) (LCSample, error) { n++; return LCSample{}, nil }
	got, err := runLeadIn(context.Background(), o, rand.New(rand.NewPCG(1, 2)), req)
	// One request per period from the start of the lead-in: arrivals at
	// 0, 1, ..., 4 ms.
	if err != nil || got != 5 || n != 5 {
		t.Errorf("lead-in ran %d (counted %d), %v; want 5", n, got, err)
	}
	o.LeadIn = 0
	if got, err := runLeadIn(context.Background(), o, nil, req); got != 0 || err != nil || n != 5 {
		t.Errorf("no lead-in ran %d, %v", got, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	o.LeadIn = time.Hour
	if _, err := runLeadIn(ctx, o, rand.New(rand.NewPCG(1, 2)), req); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled lead-in: %v", err)
	}
	failing := func(time.Duration) (LCSample, error) { return LCSample{}, io.EOF }
	if _, err := runLeadIn(context.Background(), lcOptions{Period: time.Millisecond, LeadIn: time.Second}, rand.New(rand.NewPCG(1, 2)), failing); !errors.Is(err, io.EOF) {
		t.Errorf("failing lead-in: %v", err)
	}
}

func TestRecordLatency(t *testing.T) {
	var got []time.Duration
	req := recordLatency(func(time.Duration) (LCSample, error) { return LCSample{LatencyNs: 1500}, nil },
		func(d time.Duration) { got = append(got, d) })
	if _, err := req(0); err != nil || !slices.Equal(got, []time.Duration{1500}) {
		t.Errorf("recorded %v, %v", got, err)
	}
	failing := recordLatency(func(time.Duration) (LCSample, error) { return LCSample{}, io.EOF },
		func(d time.Duration) { got = append(got, d) })
	if _, err := failing(0); err == nil || len(got) != 1 {
		t.Errorf("a failed request was recorded: %v", got)
	}
}

// unixServer serves h on a unix socket in a temporary directory.
func unixServer(t *testing.T, h http.Handler) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "slo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// statsDaemon is a fake gpreemptd taking POST /v1/stats on a unix socket:
// each body goes to bodies (up to n), each answer is reply.
func statsDaemon(t *testing.T, n int, reply string) (sock string, bodies chan []byte) {
	t.Helper()
	bodies = make(chan []byte, n)
	sock = unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/stats" {
			http.Error(w, "bad request", http.StatusNotFound)
			return
		}
		b, _ := io.ReadAll(r.Body)
		bodies <- b
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(reply))
	}))
	return sock, bodies
}

// python3 is the interpreter's path; the test is skipped without one.
func python3(t *testing.T) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	return py
}

// TestPythonPushWindow runs the gpreempt package's Reporter (standard
// library only) against a fake daemon and checks the body with the
// daemon's own parser.
func TestPythonPushWindow(t *testing.T) {
	py := python3(t)
	sock, bodies := statsDaemon(t, 2, `{"prepreempt":false,"slo":true}`)
	script := `import sys, json
sys.path.insert(0, sys.argv[1])
import gpreempt as m
body = m.window_body([3_000_000, 1_000_000, 2_000_000, 10_000_000], 1_000_000_000, 42)
print(json.dumps(m.push_window(sys.argv[2], body)))
print(json.dumps(m.window_body([], 500_000_000, 42)))
# With a hint engine: its state goes with the window, the reply comes back to it.
class Engine:
    told = gate = None
    def set_gate(self, mode):
        self.gate = mode
    def push_fields(self):
        return {"engine": {"prepreempt": True, "skipped_no_benefit": 3}, "expired_holds": 1,
                "spinner_hold_us": {"p50": 120.0, "p99": 300.0, "max": 310.0}}
    def set_prepreempt(self, on):
        self.told = on
e = Engine()
p = m.Reporter(sys.argv[2], 1.0, e)
p.record(2_000_000)
p.push()
print(json.dumps(e.told))
# An LLM server's window: TTFT and TPOT quantiles beside the latency's.
print(json.dumps(m.window_body([2_000_000], 1_000_000_000, 1, ttft_ns=[30_000_000], tpot_ns=[12_000_000, 10_000_000])))
`
	out, err := exec.Command(py, "-c", script, "../../python", sock).CombinedOutput()
	if err != nil {
		t.Fatalf("python: %v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 4 || lines[0] != `{"prepreempt": false, "slo": true}` || lines[2] != "false" {
		t.Fatalf("python output %q; want the reply, an empty window, the engine told false and an LLM window", out)
	}
	llm, _, err := server.ParseStats([]byte(lines[3]))
	if err != nil || llm.Window == nil {
		t.Fatalf("LLM window %s refused: %v", lines[3], err)
	}
	// Quantiles as the Go Reporter takes them: rank q(n-1), rounded.
	if q := llm.Window.LatencyUs; q["p50"] != 2000 || q["tpot_p50"] != 12000 || q["tpot_p999"] != 12000 || q["ttft_p50"] != 30000 || q["ttft_p90"] != 30000 || llm.Window.Tokens != 2 {
		t.Errorf("LLM window quantiles %v, %d tokens", q, llm.Window.Tokens)
	}
	s, _, err := server.ParseStats(<-bodies)
	if err != nil {
		t.Fatalf("server.ParseStats: %v", err)
	}
	w := s.Window
	if s.PID != 0 || s.Requests != 42 || w == nil || w.DurationMs != 1000 || w.Requests != 4 ||
		w.LatencyUs["p50"] != 3000 || w.LatencyUs["p99"] != 10000 || w.LatencyUs["p999"] != 10000 || w.LatencyUs["max"] != 10000 || w.LatencyUs["mean"] != 4000 ||
		s.RequestLatencyUs["p50"] != 3000 || len(s.RequestLatencyUs) != 6 {
		t.Errorf("pushed %+v window %+v", s, w)
	}
	// The same body decodes into the client's types, field for field.
	var c api.Stats
	if err := json.Unmarshal([]byte(lines[1]), &c); err != nil || c.Window == nil || c.Window.DurationMs != 500 || c.Window.Requests != 0 {
		t.Errorf("empty window %s: %+v %v", lines[1], c.Window, err)
	}
	if _, _, err := server.ParseStats([]byte(lines[1])); err != nil {
		t.Errorf("empty window refused: %v", err)
	}
	e, _, err := server.ParseStats(<-bodies)
	if err != nil || e.Engine == nil || !e.Engine.Prepreempt || e.Engine.SkippedNoBenefit != 3 || e.Window == nil || e.Window.Requests != 1 ||
		e.ExpiredHolds != 1 || e.SpinnerHoldUs["p50"] != 120 || e.SpinnerHoldUs["max"] != 310 {
		t.Errorf("push with an engine: %+v engine %+v, %v", e, e.Engine, err)
	}
}

func TestParseSLOStatus(t *testing.T) {
	s, err := parseSLOStatus([]byte(`{"slo":{"enabled":true,"be_timeslice":"1ms","be_share":0.9,"worst_lc_vs_objective":0.97,"changes":3,` +
		`"lc":[{"pid":7,"objective":"p50<=2s","samples":2,"p50_us":400000,"from_mono_ns":9000000000,"to_mono_ns":10000000000}]},"classes":{}}`))
	if err != nil || s.BETimeslice != "1ms" || *s.BEShare != 0.9 || *s.WorstLC != 0.97 || s.Changes != 3 {
		t.Errorf("%+v %v", s, err)
	}
	if want := (SLOLCSample{PID: 7, Objective: "p50<=2s", Samples: 2, P50Us: 400e3, FromMonoNs: 9e9, ToMonoNs: 10e9}); len(s.LC) != 1 || s.LC[0] != want {
		t.Errorf("LC rows %+v, want %+v: the window's span with them", s.LC, want)
	}
	// A traced LC: its traced row's requests_vary beside its SLO row; an LC with none is not traced.
	s, err = parseSLOStatus([]byte(`{"slo":{"enabled":true,"lc":[{"pid":7},{"pid":8}]},"traced":[{"pid":7,"requests_vary":true},{"pid":9}]}`))
	if err != nil || len(s.LC) != 2 || s.LC[0].RequestsVary == nil || !*s.LC[0].RequestsVary || s.LC[1].RequestsVary != nil {
		t.Errorf("traced rows: %+v %v: want pid 7 varying, pid 8 untraced", s.LC, err)
	}
	s, err = parseSLOStatus([]byte(`{"slo":{"enabled":true,"lc":[{"pid":7}]},"traced":[{"pid":7,"requests_vary":"x"}]}`))
	if err != nil || len(s.LC) != 1 || s.LC[0].RequestsVary != nil {
		t.Errorf("a traced section of another shape: %+v %v: want pid 7 untraced", s.LC, err)
	}
	for _, bad := range []string{`{"slo":{"enabled":false}}`, `{}`, `not json`} {
		if _, err := parseSLOStatus([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestSLOPollerWithFakeDaemon(t *testing.T) {
	statuses := []string{
		`{"slo":{"enabled":true,"changes":0}}`,
		`{"slo":{"enabled":true,"be_timeslice":"200us","be_share":0.8,"changes":1,"last":{"window":8,"be_timeslice":"200us","changed":false,"cause":"dwell","reason":"r"},
			"searches":[{"gpus":[0],"be_timeslice":"200us","lcs":1,"changes":1,"prepreempt":false,"arms":[{"arm":"200µs","verdict":"might meet"}]}]}}`,
		`{"slo":{"enabled":true,"be_timeslice":"1ms","arm":"1ms","be_share":0.88,"changes":2,"last":{"window":9,"be_timeslice":"1ms","changed":true,"cause":"explore","reason":"r","aligned":true},
			"searches":[{"gpus":[0],"be_timeslice":"1ms","lcs":1,"changes":2,"prepreempt":false,"arms":[{"arm":"200µs","verdict":"meets"},{"arm":"1ms","verdict":"might meet"}]}]}}`,
	}
	n := 0
	sock := unixServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/status" {
			http.Error(w, "no", http.StatusNotFound)
			return
		}
		w.Write([]byte(statuses[min(n, len(statuses)-1)]))
		n++
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var clock int64
	sleeps := 0
	p := sloPoller{
		fetch: fetchStatus(sock),
		mono:  func() int64 { clock += 250e6; return clock },
		sleep: func(ctx context.Context, _ time.Duration) error {
			if sleeps++; sleeps == len(statuses) {
				cancel()
				return ctx.Err()
			}
			return nil
		},
		interval: time.Second,
	}
	got, err := p.poll(ctx)
	if err != nil || len(got) != 3 {
		t.Fatalf("%d samples, %v", len(got), err)
	}
	if got[0].BETimeslice != "" || got[2].BETimeslice != "1ms" || got[2].Arm != "1ms" || got[2].MonoNs != 750e6 || got[2].Changes != 2 {
		t.Errorf("%+v", got)
	}
	if len(got[1].Arms) != 0 || len(got[2].Arms) != 2 || got[2].Arms[0].Verdict != "meets" { // the frontier kept in the last read alone
		t.Errorf("frontiers %+v, %+v: want the last read's alone", got[1].Arms, got[2].Arms)
	}
	for _, c := range []struct {
		start int64
		want  string
	}{
		{0, "arm measured [policy 200us 1ms] over 3 samples, 2 changes, BE share measured by gpreemptd 84.0% (mean of 2 samples), LC windows aligned in 1 of 2"},
		{600e6, "arm lead-in [policy 200us], 1 changes; measured [1ms] over 1 samples, 1 changes, BE share measured by gpreemptd 88.0% (mean of 1 samples), LC windows aligned in 1 of 1"},
		{800e6, "arm lead-in [policy 200us 1ms], 2 changes"},
	} {
		if line := sloLine(got, c.start, 0); line != c.want {
			t.Errorf("measurement from %d: line %q, want %q", c.start, line, c.want)
		}
	}
	if sloLine(nil, 0, 0) != "no status read" {
		t.Error("empty line")
	}
}

func TestSwitchScenarios(t *testing.T) {
	r := &runner{env: runEnv{self: []string{"gpreempt-bench"}}, scripts: "/s",
		o: runOptions{Requests: 1000, PyRequests: 400, Python: "python3", Period: 3500 * time.Microsecond, PyPeriod: 20 * time.Millisecond, PyGraph: true}}
	sc, err := parseScenario("slo:pytorch@switch")
	if err != nil || !sc.Switch || !sc.SLO || sc.Runtime != RuntimePyTorch {
		t.Fatalf("%+v %v", sc, err)
	}
	if st, _ := baselineNames(sc); st != "pytorch-standalone" {
		t.Errorf("baseline %s", st)
	}
	argv, _ := r.lcArgv(sc, "lc.json")
	if !hasArgs(argv, "--cuda-graph") || !hasArgs(argv, "--switch-after", "200") || !hasArgs(argv, "--requests", "400") {
		t.Errorf("graph to eager argv %v", argv)
	}
	sc, err = parseScenario("slo:prepreempt-defaults@switch")
	if err != nil || !sc.Switch {
		t.Fatalf("%+v %v", sc, err)
	}
	argv, _ = r.lcArgv(sc, "lc.json")
	if !hasArgs(argv, "--requests", "3000") || !hasArgs(argv, "--switch-after", "500", "--switch-period", "700us") {
		t.Errorf("rate 5x argv %v", argv)
	}
	for _, bad := range []string{"pytorch@switch", "slo:pytorch-eager@switch", "slo:multi-tenant@switch", "daemon:be-1us@switch"} {
		if _, err := parseScenario(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err %v", bad, err)
		}
	}
}

func TestLCSwitchArrivals(t *testing.T) {
	o := lcOptions{Period: 5 * time.Millisecond, SwitchAfter: 2, SwitchPeriod: time.Millisecond, Requests: 5}
	var got []time.Duration
	for i := range 5 {
		got = append(got, o.arrivalOffset(i))
	}
	want := []time.Duration{0, 5 * time.Millisecond, 10 * time.Millisecond, 11 * time.Millisecond, 12 * time.Millisecond}
	if !slices.Equal(got, want) || o.periodAt(1) != 5*time.Millisecond || o.periodAt(2) != time.Millisecond {
		t.Errorf("arrivals %v, want %v", got, want)
	}
	o.SwitchAfter = 0
	if o.arrivalOffset(3) != 15*time.Millisecond {
		t.Error("no switch")
	}
}

func TestPlotSLO(t *testing.T) {
	share := func(v float64) *float64 { return &v }
	var lc []LCSample
	for i := range 200 {
		lat := int64(7e6)
		if i >= 100 {
			lat = 9e6
		}
		lc = append(lc, LCSample{ArrivalMonoNs: int64(i) * 20e6, LatencyNs: lat})
	}
	var slo []SLOSample
	for i, ts := range []string{"", "200us", "200us", "500us", "1ms", "1ms", "200us", "200us"} {
		slo = append(slo, SLOSample{MonoNs: int64(i) * 500e6, BETimeslice: ts, BEShare: share(0.8 + 0.01*float64(i))})
	}
	res := &Results{Scenarios: []*ScenarioResult{
		{Name: "slo:pytorch@switch", Rep: 1, LC: &LCResult{Samples: lc}, SLO: slo},
		{Name: "slo:pytorch@switch", Rep: 2, LC: &LCResult{Samples: lc}, SLO: slo},
		{Name: "pytorch-standalone", Rep: 1, LC: &LCResult{Samples: lc}},
	}}
	s, ok := sloSeriesOf(res.Scenarios[0], 0)
	if !ok || len(s.slice) != 7 || s.slice[3].Y != 1000 || s.slice[0].X != 0.5 || len(s.share) != 0 || len(s.measured) != 8 || math.Abs(s.measured[7].Y-87) > 1e-9 || len(s.latency) == 0 {
		t.Errorf("series %+v", s)
	}
	// With a be-only rate, BE share is the BE timeline against it, in the
	// middle of each one-second bin, on the LC's time axis.
	withTimeline := *res.Scenarios[0]
	withTimeline.BETimeline, withTimeline.BETimelineStartMonoNs = []float64{20, 25}, -1e9
	s, _ = sloSeriesOf(&withTimeline, 25)
	if want := (plotter.XYs{{X: -0.5, Y: 80}, {X: 0.5, Y: 100}}); !slices.Equal(s.share, want) || len(s.measured) != 8 {
		t.Errorf("share %v, want %v (and the daemon's 8 samples: %v)", s.share, want, s.measured)
	}
	if _, ok := sloSeriesOf(res.Scenarios[2], 0); ok {
		t.Error("a run without SLO samples has a series")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "slo.png")
	if d := os.Getenv("GPREEMPT_TEST_PLOT_DIR"); d != "" {
		path = filepath.Join(d, "slo.png") // to look at it
	}
	if err := PlotSLO(path, res); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || len(b) < 1000 || string(b[1:4]) != "PNG" {
		t.Errorf("slo.png: %d bytes, %v", len(b), err)
	}
	none := filepath.Join(dir, "none.png")
	if err := PlotSLO(none, &Results{Scenarios: res.Scenarios[2:]}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Error("slo.png written without SLO runs")
	}
}

// stubTorch is just enough of torch and torchvision for lc_infer.py's
// eager path to run without a GPU: every call returns at once.
var stubTorch = map[string]string{
	"torch/__init__.py": `import contextlib
__version__ = "stub"
class _T:
    def pin_memory(self): return self
    def copy_(self, other, non_blocking=False): return self
class device:
    def __init__(self, kind, index=0): self.kind, self.index = kind, index
    def __enter__(self): return self
    def __exit__(self, *exc): return False
def randn(*shape): return _T()
def rand(*shape, device=None, dtype=None): return _T()
def matmul(x, y, out=None): return out
def empty_like(t, device=None): return _T()
def inference_mode(): return contextlib.nullcontext()
float16 = "float16"
def manual_seed(s): pass
def randint(lo, hi, shape, device=None): return _T()
def ones_like(t): return _T()
class backends:
    class cudnn:
        benchmark = False
class cuda:
    class Event:
        def __init__(self, enable_timing=False, blocking=False): pass
        def record(self): pass
        def query(self): return True
        def synchronize(self): pass
        def elapsed_time(self, other): return 0.5
    @staticmethod
    def set_device(d): pass
    @staticmethod
    def synchronize(d=None): pass
    class Stream:
        def synchronize(self): pass
    @staticmethod
    def current_stream(d=None): return cuda.Stream()
    @staticmethod
    def get_device_name(d=None): return "stub"
`,
	"torchvision/__init__.py": `__version__ = "stub"
from . import models
`,
	"torchvision/models.py": `class _Model:
    def to(self, dev): return self
    def eval(self): return self
    def __call__(self, x): return x
def resnet50(weights=None): return _Model()
`,
	// lc_decode.py's lean loop: a model whose every step returns a token
	// at once.
	"transformers/__init__.py": `__version__ = "stub"
class _Tok:
    def argmax(self, dim): return self
    def item(self): return 0
class _Logits:
    def __getitem__(self, k): return _Tok()
class _Out:
    logits = _Logits()
    past_key_values = None
class GPT2Config:
    def __init__(self, **kw): self.vocab_size = kw["vocab_size"]
class GPT2LMHeadModel:
    def __init__(self, cfg): self.config = cfg
    def to(self, device=None, dtype=None): return self
    def eval(self): return self
    def __call__(self, x, past_key_values=None, use_cache=True): return _Out()
`,
}

// writeStubTorch writes stubTorch into a directory for PYTHONPATH.
func writeStubTorch(t *testing.T) string {
	t.Helper()
	stub := t.TempDir()
	for name, src := range stubTorch {
		p := filepath.Join(stub, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return stub
}

// TestPythonDecodePushes runs lc_decode.py end to end on a stub torch and
// transformers against a fake daemon: the lead-in's requests are pushed,
// not kept, and every window carries TTFT and TPOT quantiles for an
// objective such as tpot_p50<=12ms.
func TestPythonDecodePushes(t *testing.T) {
	py := python3(t)
	sock, bodies := statsDaemon(t, 1000, `{"slo":true}`)
	out := filepath.Join(t.TempDir(), "lc.json")
	cmd := exec.Command(py, "../../bench/pytorch/lc_decode.py", "--loop", "lean", "--period", "1ms", "--requests", "3", "--warmup", "1",
		"--lead-in", "5ms", "--push-latency", sock, "--push-period", "1s", "--out", out)
	// From the checkout: the gpreempt package is found in python/.
	cmd.Env = append(os.Environ(), "PYTHONPATH="+writeStubTorch(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lc_decode.py: %v: %s", err, b)
	}
	checkLeadIn(t, out)
	// The pusher's last window goes when it stops: every request of the
	// run (5 lead-in, 3 measured) in one 1 s window.
	close(bodies)
	n, tokens := 0, 0
	for body := range bodies {
		s, _, err := server.ParseStats(body)
		if err != nil {
			t.Fatalf("push %s refused: %v", body, err)
		}
		if w := s.Window; w != nil && w.Requests > 0 {
			n, tokens = n+int(w.Requests), tokens+int(w.Tokens)
			for _, k := range []string{"p50", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99"} {
				if _, ok := w.LatencyUs[k]; !ok {
					t.Errorf("window %v lacks %s", w.LatencyUs, k)
				}
			}
		}
	}
	// 16 new tokens a request: 15 times per output token after the first.
	if n != 8 || tokens != 8*15 {
		t.Errorf("%d requests and %d tokens pushed; want 8 (5 lead-in, 3 measured) and 120", n, tokens)
	}
}

// TestPythonDecodeAlone: lc_decode.py --alone counts a request alone by the bench's own rule
// (inside one of BE's idle halves, past the guard, ended within it), prints their latencies and
// CPU loops (timed around each as around a measured request) on an ALONE line after the first
// go line and measures only after a second.
func TestPythonDecodeAlone(t *testing.T) {
	py := python3(t)
	stub := writeStubTorch(t)
	env := append(os.Environ(), "PYTHONPATH="+stub+string(os.PathListSeparator)+"../../bench/pytorch")
	// half 100, guard 10: [start, end] in ns.
	for _, c := range []struct {
		start, end int64
		want       string
	}{
		{150, 160, "True"},  // idle half [100, 200)
		{110, 199, "True"},  // at the guard, ending inside
		{105, 150, "False"}, // inside the guard
		{150, 200, "False"}, // ends as BE starts again
		{50, 60, "False"},   // BE's working half
		{350, 390, "True"},  // a later idle half
		{250, 260, "False"}, // a later working half
	} {
		cmd := exec.Command(py, "-c", fmt.Sprintf("import lc_decode; print(lc_decode.in_idle_half(%d, %d, 100, 10))", c.start, c.end))
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
			t.Errorf("in_idle_half(%d, %d): %q %v, want %s", c.start, c.end, out, err, c.want)
		}
	}

	// The pacer on a fake clock: the loop timed before a request where there is room (the mean of
	// before and after), after it alone where the LC is behind its arrival; how late it is.
	pacer := `import lc_decode as d
now, slept, loops = [1000], [], iter([10, 30, 50, 70])
d.time.monotonic_ns = lambda: now[0]
def sleep(s):
    slept.append(s); now[0] += round(s * 1e9)
def loop():  # 50 ns of wall time
    now[0] += 50; return next(loops)
d.time.sleep = sleep
p = d.Pacer(loop)
p.wall = 100
print(p.wait(2000), p.meter(), p.wait(500), p.meter(), p.wait(2220), slept)`
	cmd := exec.Command(py, "-c", pacer)
	cmd.Env = env
	// 2000: slept to 1800 (twice the loop's last wall time ahead), the loop to 1850, slept to it;
	// 500: 1550 late, no loop before; 2220, at 2100: room for twice the loop's last wall time (50),
	// not the first guess's (100): slept to 2120, the loop to 2170, slept to it.
	const wantPacer = "-150 20 1550 50 -50 [8e-07, 1.5e-07, 2e-08, 5e-08]"
	if b, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != wantPacer {
		t.Errorf("the pacer: %q %v, want %q", b, err, wantPacer)
	}

	// alone_run: each request between the pacer's wait and its loop, the loop's own time on the
	// ALONE line beside the latency of each request inside an idle half.
	run := `import lc_decode as d, types
ev, k = [], [0]
class Pace:
    def wait(self, arrival): ev.append("wait")
    def meter(self):
        ev.append("meter"); return 7000 + len(ev)
def request():
    ev.append("request"); k[0] += 1
    return (150, [152, 160]) if k[0] != 2 else (50, [52, 60])  # the second in BE's working half
def unkept(t0, tokens): return tokens[-1] - t0
a = types.SimpleNamespace(alone=2, alone_max=0, alone_duty=200, alone_guard=10, period=0)
d.alone_run(a, request, unkept, Pace())
print(" ".join(ev))`
	cmd = exec.Command(py, "-c", run)
	cmd.Env, cmd.Stdin = env, strings.NewReader("go\n")
	const wantRun = "ALONE 10:7003,10:7009\nwait request meter wait request meter wait request meter"
	if b, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(b)) != wantRun {
		t.Errorf("alone_run: %q %v, want %q", b, err, wantRun)
	}

	out := filepath.Join(t.TempDir(), "lc.json")
	cmd = exec.Command(py, "../../bench/pytorch/lc_decode.py", "--loop", "lean", "--period", "5ms", "--requests", "3", "--warmup", "1",
		"--wait-go", "--alone", "3", "--alone-max", "1000000", "--alone-duty", "200ms", "--alone-guard", "10ms", "--out", out)
	cmd.Env = env
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	var alone string
	for alone == "" && lines.Scan() {
		switch l := lines.Text(); {
		case strings.HasPrefix(l, "READY "):
			io.WriteString(stdin, "go\n")
		case strings.HasPrefix(l, "ALONE "):
			alone = strings.TrimPrefix(l, "ALONE ")
			io.WriteString(stdin, "go\n")
		}
	}
	if err := cmd.Wait(); err != nil || len(strings.Split(alone, ",")) != 3 {
		t.Fatalf("lc_decode.py: %v, ALONE %q: %s", err, alone, stderr.Bytes())
	}
	if lat, meter, err := parseAlone(alone); err != nil || len(lat) != 3 || len(meter) != 3 { // each with its CPU loop
		t.Errorf("ALONE %q: %v %v %v", alone, lat, meter, err)
	}
	var res struct{ Samples []LCSample }
	if b, err := os.ReadFile(out); err != nil || json.Unmarshal(b, &res) != nil || len(res.Samples) != 3 ||
		slices.ContainsFunc(res.Samples, func(s LCSample) bool { return s.CPUMeterNs <= 0 }) {
		t.Errorf("after the second go: measured requests %+v (%v), want 3, each with its CPU loop", res.Samples, err)
	}

	// A duty whose halves the guard fills is refused.
	bad := exec.Command(py, "../../bench/pytorch/lc_decode.py", "--wait-go", "--alone", "3", "--alone-duty", "20ms", "--alone-guard", "10ms")
	bad.Env = env
	if b, err := bad.CombinedOutput(); !strings.Contains(string(b), "over twice --alone-guard") {
		t.Errorf("a guard filling the halves: %v %s", err, b)
	}
}

// TestPythonLCLeadIn runs lc_infer.py end to end on a stub torch, from
// the scripts as gpreempt-bench writes them (the gpreempt package beside
// them): the lead-in's requests run before the measured ones, pushed,
// not kept.
func TestPythonLCLeadIn(t *testing.T) {
	py := python3(t)
	r := &runner{o: runOptions{Out: t.TempDir()}}
	scripts, err := r.pytorchScripts()
	if err != nil {
		t.Fatal(err)
	}
	sock, bodies := statsDaemon(t, 1000, `{"slo":true}`)
	out := filepath.Join(t.TempDir(), "lc.json")
	cmd := exec.Command(py, filepath.Join(scripts, "lc_infer.py"), "--period", "1ms", "--requests", "3", "--warmup", "1",
		"--lead-in", "5ms", "--push-latency", sock, "--out", out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+writeStubTorch(t))
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lc_infer.py: %v: %s", err, b)
	}
	checkLeadIn(t, out)
	if len(bodies) == 0 {
		t.Error("nothing pushed")
	}
}

// TestPythonGatedLCReports: an LC that gates its own requests (--gate)
// hands its engine to the reporter, which applies SLO mode's arm from each
// push reply (gpreemptd steers an engine's gate that way); a stub gpreempt
// package stands for libgpreempt, which needs a GPU.
func TestPythonGatedLCReports(t *testing.T) {
	py := python3(t)
	stub := writeStubTorch(t)
	got := filepath.Join(t.TempDir(), "reporter")
	pkg := `import contextlib, os
class Engine:
    def __init__(self, device=0, launcher=None, gate="off"): self.gate = gate
    def request(self, cls="default", expected_prep_us=None): return contextlib.nullcontext()
    def stats(self): return {}
    def close(self): pass
class Reporter:
    def __init__(self, path, period, engine=None):
        with open(os.environ["STUB_REPORTER_OUT"], "w") as f:
            f.write("engine gate=%s" % engine.gate if engine is not None else "no engine")
    def start(self): pass
    def record(self, latency_ns): pass
    def stop(self): pass
`
	if err := os.MkdirAll(filepath.Join(stub, "gpreempt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stub, "gpreempt", "__init__.py"), []byte(pkg), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "lc.json")
	cmd := exec.Command(py, "../../bench/pytorch/lc_infer.py", "--period", "1ms", "--requests", "3", "--warmup", "1",
		"--gate", "--push-latency", "/nonexistent.sock", "--out", out)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+stub, "STUB_REPORTER_OUT="+got)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lc_infer.py: %v: %s", err, b)
	}
	if b, err := os.ReadFile(got); err != nil || string(b) != "engine gate=on" {
		t.Errorf("the reporter got %q (%v); want the gating engine", b, err)
	}
}

// checkLeadIn reads a worker's result at path: one request every 1 ms for
// a 5 ms lead-in, not kept, then 3 measured.
func checkLeadIn(t *testing.T, path string) {
	t.Helper()
	var res struct {
		Config struct {
			LeadInNs       int64 `json:"lead_in_ns"`
			LeadInRequests int   `json:"lead_in_requests"`
		} `json:"config"`
		Samples []json.RawMessage `json:"samples"`
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Config.LeadInNs != 5e6 || res.Config.LeadInRequests != 5 || len(res.Samples) != 3 {
		t.Errorf("lead-in %d ns, %d requests, %d samples; want 5ms, 5, 3", res.Config.LeadInNs, res.Config.LeadInRequests, len(res.Samples))
	}
	// Every sample decodes as the bench reads it, the thread's CPU time
	// included.
	for _, raw := range res.Samples {
		var s LCSample
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&s); err != nil || !bytes.Contains(raw, []byte(`"cpu_ns"`)) || s.CPUNs < 0 || s.CPUNs > s.LatencyNs+1000 { // two clocks: 1 us of slack
			t.Errorf("sample %s: %+v, %v", raw, s, err)
		}
	}
}

func TestSLOWindow(t *testing.T) {
	fetch := func(body string, err error) func(context.Context) ([]byte, error) {
		return func(context.Context) ([]byte, error) { return []byte(body), err }
	}
	for _, c := range []struct {
		name, body string
		err        error
		want       time.Duration
		wantErr    string
	}{
		{"on", `{"slo":{"enabled":true,"window":"500ms"}}`, nil, 500 * time.Millisecond, ""},
		{"off", `{"slo":{"enabled":false,"window":"1s"}}`, nil, 0, "SLO mode not enabled"},
		{"no slo", `{"pid":1}`, nil, 0, "SLO mode not enabled"},
		{"bad window", `{"slo":{"enabled":true,"window":"soon"}}`, nil, 0, `SLO window "soon"`},
		{"no daemon", ``, os.ErrNotExist, 0, "need gpreemptd in SLO mode"},
		{"not JSON", `<html>`, nil, 0, "gpreemptd status"},
	} {
		got, err := sloWindow(context.Background(), fetch(c.body, c.err), 0)
		if got != c.want || (c.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s: %v, %v; want %v, error with %q", c.name, got, err, c.want, c.wantErr)
		}
	}
	r := &runner{env: runEnv{self: []string{"gpreempt-bench"}}, o: runOptions{Requests: 10, DaemonSocket: "/tmp/d.sock", SLOWindow: 500 * time.Millisecond}}
	sc, _ := parseScenario("slo:defaults")
	if argv, _ := r.lcArgv(sc, "lc.json"); !hasArgs(argv, "--push-period", "500ms") {
		t.Errorf("argv lacks the daemon's window as --push-period: %v", argv)
	}
}

func TestBEAloneLearnt(t *testing.T) {
	row := func(pid int, alone float64, signal string) api.SLOBE {
		return api.SLOBE{PID: pid, AlonePerS: alone, Signal: signal}
	}
	for _, c := range []struct {
		name           string
		pids           []int
		be             []api.SLOBE
		done, measured bool
	}{
		{"no BE rows: not measured", []int{10}, nil, false, false},
		{"learnt", []int{10}, []api.SLOBE{row(10, 9000, "counted")}, true, true},
		{"still learning", []int{10}, []api.SLOBE{row(10, 0, "learning its rate alone (2 of 3 windows without LC)")}, false, true},
		{"not counted is not waited for", []int{10, 11}, []api.SLOBE{row(10, 9000, "counted"), row(11, 0, "not counted: uprobe refused")}, true, true},
		{"one of two learnt", []int{10, 11}, []api.SLOBE{row(10, 9000, "counted"), row(11, 0, "counting from this window")}, false, true},
		{"a BE of the run not listed yet", []int{10, 11}, []api.SLOBE{row(11, 9000, "counted")}, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			done, measured := beAloneLearnt(&api.SLO{Enabled: true, BE: c.be}, c.pids)
			if done != c.done || measured != c.measured {
				t.Errorf("done %v measured %v, want %v %v", done, measured, c.done, c.measured)
			}
		})
	}
}

func TestSLOLineAfterTheLCChanged(t *testing.T) {
	ms := int64(time.Millisecond)
	ss := []SLOSample{
		{MonoNs: 0, BETimeslice: "50µs"}, {MonoNs: 500 * ms, BETimeslice: "50µs"},
		{MonoNs: 1250 * ms, BETimeslice: "1µs", Changes: 1}, {MonoNs: 5000 * ms, BETimeslice: "200µs", Changes: 2},
		{MonoNs: 9750 * ms, BETimeslice: "1ms", Changes: 3}, {MonoNs: 10000 * ms, BETimeslice: "1ms", Changes: 3},
	}
	lc := func(after any, n int) *LCResult {
		r := &LCResult{Config: map[string]any{"switch_after": after}}
		for i := range n {
			r.Samples = append(r.Samples, LCSample{ArrivalMonoNs: int64(i) * 100 * ms})
		}
		return r
	}
	for _, c := range []struct {
		name string
		lc   *LCResult
		want string
	}{
		// Request 10 arrives at 1 s: the change; 50 us was in force.
		{"in-process", lc(10, 20), "; after the LC's change: [50µs +0.0s, 1µs +0.2s, 200µs +4.0s, 1ms +8.8s]"},
		{"read back", lc(float64(10), 20), "; after the LC's change: [50µs +0.0s, 1µs +0.2s, 200µs +4.0s, 1ms +8.8s]"},
		{"no switch", lc(0, 20), ""},
		{"no config", &LCResult{}, ""},
		{"past the samples", lc(20, 20), ""},
		{"no LC", nil, ""},
	} {
		want := "arm measured [50µs 1µs 200µs 1ms] over 6 samples, 3 changes" + c.want
		if got := sloLine(ss, 0, switchAtNs(c.lc)); got != want {
			t.Errorf("%s: %q, want %q", c.name, got, want)
		}
	}
	// A move to the gate keeps the timeslice: the arm shows it.
	gated := []SLOSample{
		{MonoNs: 0, BETimeslice: "200µs", Arm: "200µs"}, {MonoNs: 1000 * ms, BETimeslice: "200µs", Arm: "200µs+gate", Changes: 1},
		{MonoNs: 2000 * ms, BETimeslice: "50µs", Arm: "50µs+prepreempt", Changes: 2},
	}
	if got, want := sloLine(gated, 0, 500*ms), "arm measured [200µs 200µs+gate 50µs+prepreempt] over 3 samples, 2 changes; after the LC's change: [200µs +0.0s, 200µs+gate +0.5s, 50µs+prepreempt +1.5s]"; got != want {
		t.Errorf("gate: %q, want %q", got, want)
	}
	// A change after the last sample: nothing seen after it.
	if got := afterChange(ss, 11000*ms); got != "" {
		t.Errorf("change after the samples: %q", got)
	}
}

// TestPythonReporterPassesTheGate: the gate mode in gpreemptd's reply (SLO
// mode's arm) goes to the app's engine, as the Go Reporter passes it.
func TestPythonReporterPassesTheGate(t *testing.T) {
	py := python3(t)
	sock, _ := statsDaemon(t, 1, `{"prepreempt":true,"slo":true,"gate":"on"}`)
	script := `import sys
sys.path.insert(0, sys.argv[1])
import gpreempt
class Engine:
    gate = None
    def push_fields(self): return {}
    def set_prepreempt(self, on): pass
    def set_gate(self, mode): self.gate = mode
e = Engine()
r = gpreempt.Reporter(sys.argv[2], 1.0, e)
r.record(1_000_000)
r.push()
print(e.gate)
`
	out, err := exec.Command(py, "-c", script, "../../python", sock).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "on" {
		t.Fatalf("python: %v: %q, want the engine told gate on", err, out)
	}
}

// TestMostChanges checks the steady-state count of arm changes: the most
// within any 30 s, read from the daemon's cumulative change count.
func TestMostChanges(t *testing.T) {
	read := func(s float64, changes int) SLOSample {
		return SLOSample{MonoNs: int64(s * 1e9), Changes: changes}
	}
	for _, c := range []struct {
		name string
		ss   []SLOSample
		want int
	}{
		{"none", []SLOSample{read(0, 3), read(40, 3), read(80, 3)}, 0},
		{"one a minute", []SLOSample{read(0, 0), read(29, 0), read(31, 1), read(60, 1), read(91, 2)}, 1},
		{"two within 30 s", []SLOSample{read(0, 0), read(10, 1), read(39, 1), read(40, 2), read(100, 2)}, 1},
		{"two within 30 s, read close", []SLOSample{read(0, 0), read(10, 1), read(20, 2), read(100, 2)}, 2},
		{"a burst", []SLOSample{read(0, 5), read(1, 9), read(50, 9)}, 4},
		{"one read", []SLOSample{read(0, 7)}, 0},
	} {
		if got := mostChanges(c.ss, steadySpan); got != c.want {
			t.Errorf("%s: %d changes, want %d", c.name, got, c.want)
		}
	}
	var ss []SLOSample
	for i := range 181 {
		ss = append(ss, read(float64(i), i/45)) // a change every 45 s
	}
	if line := sloLine(ss, 0, 0); !strings.Contains(line, "4 changes, at most 1 in any 30s of 3m0s") || strings.Contains(line, "converged") {
		t.Errorf("line %q", line)
	}
	// The daemon's search converges 100 s in: what follows is counted apart (must-show 5), each
	// change named by its cause, as the last read after it shows it.
	for i := range ss {
		ss[i].Converged = i >= 100
		ss[i].Cause = map[bool]string{true: "explore", false: "violation"}[i/45%2 == 0]
	}
	if line := sloLine(ss, 0, 0); !strings.Contains(line, "; converged 100s in: 2 changes over the 1m20s after (violation, explore), at most 1 in any 30s") {
		t.Errorf("line %q", line)
	}
	// Two changes between reads: the first's cause is not known; nor one a daemon did not say.
	two := []SLOSample{{Changes: 0}, {Changes: 2, Cause: "violation"}, {Changes: 2, Cause: "violation"}, {Changes: 3, Cause: "explore"}, {Changes: 4}}
	if got := causes(two); got != "violation (+1 before it, unread), explore, ?" {
		t.Errorf("causes %q", got)
	}
	for i := range ss {
		ss[i].Converged = true
	}
	if line := sloLine(ss, 10e9, 0); !strings.Contains(line, "; converged in the lead-in: 4 changes over the 2m50s after") {
		t.Errorf("line %q", line)
	}
}
