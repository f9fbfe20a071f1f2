package daemon

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/scrape"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/tsg"
)

const sloPolicy = `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us, min_share: 0.85}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: lc-loose, match: {comm: "loose*"}, class: lc, objective: "p99<=50ms", trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
  - {name: bulk, match: {comm: "bulk*"}, class: be:3, trust_self_set: true}
slo: {enabled: true, window: 1s}
`

// sloRig is the reconciler over rmfake with an SLO loop whose LC latency
// follows the measured eager-PyTorch curve of the BE timeslice the fake
// driver actually holds: the loop only sees its decisions through what
// was applied.
type sloRig struct {
	*rig
	loop *slomode.Loop
}

func newSLORig(t *testing.T, pol string) *sloRig {
	g := newRig(t, pol)
	s := &sloRig{rig: g, loop: NewSLOLoop(g.Rec, g.m, testlog.New(t))}
	g.Tick(g.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	g.Tick(g.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	g.Tick(g.Start(300, policy.Process{Comm: "bulk"}) + time.Second)
	return s
}

// beTimeslice is what pid 200's compute group (BE, weight 1) holds.
func (s *sloRig) beTimeslice() time.Duration {
	return time.Duration(s.Groups(200)[0].Timeslice) * time.Microsecond
}

// window plays one window: the LC pushes (unless silent) its p50 under the
// BE timeslice in force, the loop steps, the reconciler applies.
func (s *sloRig) window(w slo.Workload, silent bool) {
	s.Now += time.Second
	if !silent {
		r, _ := w.At(s.beTimeslice())
		p50 := float64(w.Baseline) * r / 1e3
		s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: uint64(w.Requests),
			LatencyUs: map[string]float64{"p50": p50, "p99": 1.3 * p50}}})
	}
	s.loop.Step(s.Now)
	s.Tick(s.Now)
}

func gauge(t testing.TB, m *Metrics, name string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return math.NaN()
}

func TestSLOLoopEndToEnd(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.WantAll(100, 5_000_000, tsg.LevelHigh)
	s.WantAll(200, 200, tsg.LevelLow)
	// The first step only starts the controller; from then on the status
	// and metrics say the mode is on, at the safe setting (a client that
	// checks for SLO mode right after the daemon starts finds it).
	if st := s.loop.Status(); st.Enabled {
		t.Fatalf("enabled before the first step: %+v", st)
	}
	s.loop.Step(s.Now)
	if st := s.loop.Status(); !st.Enabled || st.Window != "1s" || st.BETimeslice != "200µs" || st.Safe != "200µs" || st.Ladder == "" || st.Last != nil {
		t.Fatalf("status after the first step: %+v", st)
	}
	if gauge(t, s.m, "gpreemptd_slo_enabled") != 1 || gauge(t, s.m, "gpreemptd_slo_be_timeslice_seconds") != 200e-6 {
		t.Error("metrics do not show the mode on at the safe setting")
	}
	if r := s.loop.Reply(100); !r.SLO {
		t.Errorf("reply %+v before the first window: want slo", r)
	}

	// The eager LC's knee is 1 ms (docs/SLO.md): found, applied to every
	// BE group with its weight, the LC left alone. Past the knee the
	// search tries each longer rung now and then (LC latency need not
	// grow with the BE timeslice), and is back at 1 ms within a few
	// windows of each try.
	at1ms := func() bool {
		st := s.loop.Status()
		return st.BETimeslice == "1ms" && st.Last != nil && !st.Last.Changed
	}
	for i := 0; i < 60 || (i < 80 && !at1ms()); i++ {
		s.window(slo.EagerPyTorchH100, false)
		// Two BE processes (trainer, bulk): never below the safe 200us,
		// where they would spend the GPU switching between each other.
		if ts := s.beTimeslice(); ts < 200*time.Microsecond {
			t.Fatalf("window %d: BE at %v with two BE processes", i, ts)
		}
	}
	s.WantAll(200, 1000, tsg.LevelLow)
	s.WantAll(300, 2960, tsg.LevelLow) // weight 3: 20 us + 3 x 980 us
	s.WantAll(100, 5_000_000, tsg.LevelHigh)
	st := s.loop.Status()
	if !st.Enabled || st.BETimeslice != "1ms" || st.Last == nil || st.LastChange == nil || st.Changes < 3 {
		t.Fatalf("status %+v", st)
	}
	if len(st.LC) != 1 || st.LC[0].PID != 100 || st.LC[0].Objective != "p50<=1.05x" || st.LC[0].Signal != "pushed" ||
		st.LC[0].Ratio == nil || *st.LC[0].Ratio > 1 || st.WorstLC == nil || st.BEShare != nil {
		t.Errorf("LC status %+v (worst %v, share %v)", st.LC, st.WorstLC, st.BEShare)
	}
	// What gpreemptctl reads. (At 1 ms the engine was told to stop
	// launching spinners: an engine that launches them keeps BE under
	// slo.spinner_ceiling, TestSLOLoopSpinnerCeiling.)
	s.loop.Push(100, api.Stats{Engine: &EngineState{Prepreempt: false, SkippedNoBenefit: 7}})
	var cs api.SLO
	if b, err := json.Marshal(s.loop.Status()); err != nil || json.Unmarshal(b, &cs) != nil ||
		cs.BETimeslice != "1ms" || len(cs.LC) != 1 || cs.LC[0].Ratio == nil || cs.Engines["100"].SkippedNoBenefit != 7 || cs.Last == nil {
		t.Errorf("status as the client reads it: %+v, %v", cs, err)
	}
	if got := gauge(t, s.m, "gpreemptd_slo_be_timeslice_seconds"); got != 0.001 {
		t.Errorf("timeslice gauge %v", got)
	}
	if !math.IsNaN(gauge(t, s.m, "gpreemptd_slo_be_share")) {
		t.Error("BE share gauge set without a share source")
	}
	for _, cause := range []string{slo.CauseExplore, slo.CauseViolation} {
		if counter(t, s.m, "gpreemptd_slo_changes_total", cause) < 1 {
			t.Errorf("no change counted for %s", cause)
		}
	}
	// 1 ms is at or above prepreempt_below (500 us): engines are told to
	// stop holding the GPU.
	if r := s.loop.Reply(100); r.Prepreempt || !r.SLO {
		t.Errorf("reply %+v at 1 ms, want prepreempt false", r)
	}

	// The LC stops pushing: ten windows later, the safe setting.
	for range 10 {
		s.window(slo.EagerPyTorchH100, true)
	}
	s.WantAll(200, 200, tsg.LevelLow)
	s.WantAll(300, 560, tsg.LevelLow)
	st = s.loop.Status()
	if st.Last.Cause != slo.CauseNoSignal || !st.Last.Fallback || st.LC[0].Signal != "stale" {
		t.Errorf("after signal loss: %+v %+v", st.Last, st.LC)
	}
	if counter(t, s.m, "gpreemptd_slo_changes_total", slo.CauseNoSignal) != 1 {
		t.Error("fallback change not counted")
	}
	if r := s.loop.Reply(100); !r.Prepreempt {
		t.Error("engines not told to pre-preempt again at the safe setting")
	}

	// A reload without the SLO mode: the policy's timeslice again.
	pol, err := policy.Parse([]byte("classes: {be: {timeslice: 300us}}\nrules:\n  - {match: {comm: \"lc*\"}, class: lc, trust_self_set: true}\n  - {match: {comm: \"train*\"}, class: be}\n  - {match: {comm: \"bulk*\"}, class: be:3, trust_self_set: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.Rec.SetPolicy(pol)
	s.window(slo.EagerPyTorchH100, false)
	s.WantAll(200, 300, tsg.LevelLow)
	s.WantAll(300, 860, tsg.LevelLow)
	if st := s.loop.Status(); st.Enabled || !s.loop.Reply(100).Prepreempt {
		t.Errorf("after reload without slo: %+v", st)
	}
	if gauge(t, s.m, "gpreemptd_slo_enabled") != 0 {
		t.Error("enabled gauge still 1")
	}
}

func TestSLOLoopSignals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		push   *LatencyWindow
		twice  bool // the same push seen by two windows
		signal string
	}{
		{"none", nil, false, "none pushed"},
		{"fresh", &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 100}}, false, "pushed"},
		{"used once", &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 100}}, true, "stale"},
		{"no quantile", &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p99": 100}}, false, "pushed without p50"},
		{"few requests", &LatencyWindow{DurationMs: 1000, Requests: 3, LatencyUs: map[string]float64{"p50": 100}}, false, "pushed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSLORig(t, sloPolicy)
			s.window(slo.EagerPyTorchH100, true) // the controller starts
			s.Now += time.Second
			if tc.push != nil {
				s.loop.Push(100, api.Stats{Window: tc.push})
			}
			if tc.twice {
				s.loop.Step(s.Now)
				s.Now += time.Second
			}
			s.loop.Step(s.Now)
			st := s.loop.Status()
			if len(st.LC) != 1 || st.LC[0].Signal != tc.signal {
				t.Fatalf("LC status %+v, want signal %q", st.LC, tc.signal)
			}
		})
	}
}

// TestSLOLCSpan: an LC's status row says when the requests its window counted ended, whatever
// the source: each request lies in the span of the one window that counted it. A traced request
// that ends just before a window's end is counted in the next, once its process has been quiet
// for its gap, and that window's span reaches back for it.
func TestSLOLCSpan(t *testing.T) {
	const ms = time.Millisecond
	// When each window's requests end, after its start: the counts differ window to window, so a
	// span that misses or takes one request counts another number. late is less than any quiet
	// gap (1 ms at least) before the window's end.
	late := time.Second - 500*time.Microsecond
	pattern := [][]time.Duration{{200 * ms, late}, {500 * ms}, {100 * ms, 400 * ms, late}, {600 * ms}}
	reg := prometheus.NewRegistry()
	e2e := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", Help: "e2e",
		Buckets: []float64{0.03, 0.06, 0.1}})
	reg.MustRegister(e2e)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	// Its server's metrics are scraped only where the case sets the loop's Scraped.
	pol := strings.Replace(sloPolicy, `{name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}`,
		`{name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true, objective: "p50<=2s", latency: {metrics: "`+srv.URL+`/metrics", preset: vllm}}`, 1)
	for _, tc := range []struct {
		source string
		// deliver hands the source the requests that end at ends, before the window that ends at end.
		deliver func(t *testing.T, s *sloRig) func(ends []time.Duration, end time.Duration)
	}{
		{signal.Pushed, func(t *testing.T, s *sloRig) func([]time.Duration, time.Duration) {
			var pending []time.Duration
			last := s.Now
			return func(ends []time.Duration, end time.Duration) {
				s.Now = end - 50*ms // the app's own window closes before the daemon's
				pending = append(pending, ends...)
				n := 0
				for n < len(pending) && pending[n] <= s.Now {
					n++
				}
				s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: float64(s.Now-last) / 1e6, Requests: uint64(n),
					LatencyUs: map[string]float64{"p50": 50e3}}})
				pending, last = pending[n:], s.Now
			}
		}},
		{signal.Scraped, func(t *testing.T, s *sloRig) func([]time.Duration, time.Duration) {
			s.loop.Scraped = &scrape.Scraped{Resolve: latencyEndpoints(s.Rec, nil), Fetch: scrape.Fetcher{Timeout: time.Minute}, Log: testlog.New(t)}
			return func(ends []time.Duration, _ time.Duration) {
				for range ends {
					e2e.Observe(0.05)
				}
			}
		}},
		{signal.TracedRequest, func(t *testing.T, s *sloRig) func([]time.Duration, time.Duration) {
			tl := signals.NewTracedLatency()
			s.loop.Traced = tl
			lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
			return func(ends []time.Duration, _ time.Duration) {
				for _, e := range ends { // 50 ms from its first launch to its synchronize's return at e
					for _, ev := range tracetest.Request(lc, 3, 50*ms, &tracetest.Clock{Now: uint64(e - 50*ms - 10*time.Microsecond)}) {
						tl.Apply(ev)
					}
				}
			}
		}},
	} {
		t.Run(tc.source, func(t *testing.T) {
			s := newSLORig(t, pol)
			deliver := tc.deliver(t, s)
			s.loop.Step(s.Now) // the controller starts; the sources' first windows begin
			var all []time.Duration
			read, prevTo := 0, int64(0)
			for i := range 3 * len(pattern) {
				start, ends := s.Now, []time.Duration(nil)
				for _, e := range pattern[i%len(pattern)] {
					ends = append(ends, start+e)
				}
				all = append(all, ends...)
				deliver(ends, start+time.Second)
				s.Now = start + time.Second
				s.loop.Step(s.Now)
				s.Tick(s.Now)
				st := s.loop.Status()
				if len(st.LC) != 1 {
					t.Fatalf("window %d: LC status %+v", i, st.LC)
				}
				row := st.LC[0]
				if !strings.HasPrefix(row.Signal, tc.source) {
					continue // traced only after TraceAfter windows without a push
				}
				if prevTo != 0 && row.FromMonoNs != prevTo {
					t.Errorf("window %d: span (%v, %v] after one to %v: want them to abut", i,
						time.Duration(row.FromMonoNs), time.Duration(row.ToMonoNs), time.Duration(prevTo))
				}
				read, prevTo = read+1, row.ToMonoNs
				in := 0
				for _, e := range all {
					if int64(e) > row.FromMonoNs && int64(e) <= row.ToMonoNs {
						in++
					}
				}
				if row.FromMonoNs <= 0 || row.ToMonoNs > int64(s.Now) || row.Requests != in {
					t.Errorf("window %d: span (%v, %v] holds %d requests, the row counted %d: %+v", i,
						time.Duration(row.FromMonoNs), time.Duration(row.ToMonoNs), in, row.Requests, row)
				}
			}
			if read < 2*len(pattern) {
				t.Errorf("%d windows read from the source, want %d at least", read, 2*len(pattern))
			}
		})
	}
}

func TestSLOLoopTwoObjectives(t *testing.T) {
	// An LC bounding its median and its tail: a status row, a sample and
	// a metric series per objective; a push without the tail's quantile
	// still counts for the median.
	s := newSLORig(t, `
classes:
  lc: {objective: "p99<=1.15x, p50<=1.05x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
  - {name: bulk, match: {comm: "bulk*"}, class: be:3, trust_self_set: true}
slo: {enabled: true, window: 1s}
`)
	s.window(slo.EagerPyTorchH100, true) // the controller starts
	s.Now += time.Second
	s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 6000}}})
	s.loop.Step(s.Now)
	st := s.loop.Status()
	if len(st.LC) != 2 || st.LC[0].Objective != "p50<=1.05x" || st.LC[0].Signal != "pushed" ||
		st.LC[1].Objective != "p99<=1.15x" || st.LC[1].Signal != "pushed without p99" {
		t.Fatalf("LC status %+v", st.LC)
	}
	for range 12 {
		s.window(slo.EagerPyTorchH100, false)
	}
	st = s.loop.Status()
	if len(st.LC) != 2 || st.LC[0].PID != 100 || st.LC[1].PID != 100 || st.LC[0].Ratio == nil || st.LC[1].Ratio == nil ||
		st.LC[0].Signal != "pushed" || st.LC[1].Signal != "pushed" || st.LC[1].LatencyUs <= st.LC[0].LatencyUs {
		t.Fatalf("LC status %+v", st.LC)
	}
	mfs, err := s.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	objectives := map[string]bool{}
	for _, mf := range mfs {
		if mf.GetName() == "gpreemptd_slo_lc_vs_objective" {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "objective" {
						objectives[l.GetValue()] = true
					}
				}
			}
		}
	}
	if !objectives["p50<=1.05x"] || !objectives["p99<=1.15x"] || len(objectives) != 2 {
		t.Errorf("metric series by objective %v", objectives)
	}
}

func TestSLOLoopCeilingForHintedTail(t *testing.T) {
	// An LC with a tail objective and a hint engine: pre-preemption is an
	// arm below slo.prepreempt_below (500 us by default), and the engine is
	// never told to pre-preempt at or past it (a spinner launched one
	// switch ahead cannot shorten a wait for a long BE timeslice); without
	// an engine the same LC is searched up to 1 ms.
	const pol = `
classes:
  lc: {objective: "p50<=1.05x, p99<=1.15x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s, spinner_ceiling: off}
`
	for _, hints := range []bool{true, false} {
		s := newSLORig(t, pol)
		s.loop.Step(s.Now)
		highest := time.Duration(0)
		for range 80 {
			if hints {
				s.loop.Push(100, api.Stats{Engine: &EngineState{Prepreempt: s.loop.Reply(100).Prepreempt}})
			}
			s.window(slo.EagerPyTorchH100, false)
			highest = max(highest, s.beTimeslice())
			if hints && s.loop.Reply(100).Prepreempt && s.beTimeslice() >= 500*time.Microsecond {
				t.Fatalf("engine told to pre-preempt at %v", s.beTimeslice())
			}
		}
		if highest < time.Millisecond {
			t.Errorf("hints %v: BE at most %v, want the eager knee (1ms)", hints, highest)
		}
	}
}

func TestSLOLoopSharedFloor(t *testing.T) {
	// slo.shared_floor lowers the floor kept while two or more processes
	// are in the be class: calibration runs at 50 us, not at 1 us (the
	// ladder's first rung) nor at the safe 200 us; the be:3 process gets
	// the 20 us slice overhead plus three times the other 30 us.
	s := newSLORig(t, `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
  - {name: bulk, match: {comm: "bulk*"}, class: be:3, trust_self_set: true}
slo: {enabled: true, window: 1s, shared_floor: 50us}
`)
	s.loop.Step(s.Now)
	if st := s.loop.Status(); st.SharedFloor != "50µs" || st.Safe != "200µs" {
		t.Fatalf("status %+v, want shared floor 50µs, safe 200µs", st)
	}
	lowest := time.Hour
	sawFloor := false
	for range 40 {
		s.window(slo.GraphHintsH100, false)
		ts := s.beTimeslice()
		lowest = min(lowest, ts)
		if ts == 50*time.Microsecond {
			sawFloor = true
			s.WantAll(300, 110, tsg.LevelLow)
		}
	}
	if lowest != 50*time.Microsecond || !sawFloor {
		t.Errorf("with two BE and shared_floor 50us: lowest BE timeslice %v, want 50µs", lowest)
	}
}

const sloPausePolicy = `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s, calibrate: pause, pause_windows: 3}
`

// slowBeside is an LC 1.30x its standalone latency beside BE under 1 us,
// within 1.05x at 200 us - 1 ms (slo's eagerSlowBeside, noiseless).
var slowBeside = slo.Workload{Baseline: 6 * time.Millisecond, Requests: 50, Points: []slo.Point{
	{BETimeslice: time.Microsecond, LCRatio: 1.30}, {BETimeslice: 200 * time.Microsecond, LCRatio: 1.02},
	{BETimeslice: time.Millisecond, LCRatio: 1.04}, {BETimeslice: 2 * time.Millisecond, LCRatio: 1.12},
	{BETimeslice: 3 * time.Millisecond, LCRatio: 1.17},
}}

// pausingLoop is an SLO loop whose Pauser stops real processes (n
// sleepers, returned), known to it by a proc directory that gives each its
// pid as start time, as the rig's inspector does.
func pausingLoop(t *testing.T, g *rig, n int) ([]policy.ProcRef, *slomode.Loop) {
	t.Helper()
	proc := t.TempDir()
	var bes []policy.ProcRef
	for range n {
		be := proctest.Sleeper(t)
		if err := os.MkdirAll(filepath.Join(proc, strconv.Itoa(be.PID)), 0o755); err != nil {
			t.Fatal(err)
		}
		stat := fmt.Sprintf("%d (trainer) S %s%d 0 0\n", be.PID, strings.Repeat("0 ", 18), be.PID)
		if err := os.WriteFile(filepath.Join(proc, strconv.Itoa(be.PID), "stat"), []byte(stat), 0o644); err != nil {
			t.Fatal(err)
		}
		bes = append(bes, be)
	}
	loop := NewSLOLoop(g.Rec, g.m, testlog.New(t))
	loop.Pause = &pause.Pauser{Proc: proc}
	t.Cleanup(loop.Close)
	return bes, loop
}

func TestSLOLoopPausesBE(t *testing.T) {
	// The BE process is a real one (a sleeper), stopped and resumed for
	// real; the rig's inspector gives every process its pid as start
	// time, and so does the Pauser's proc directory.
	g := newRig(t, sloPausePolicy)
	bes, loop := pausingLoop(t, g, 1)
	be := bes[0]
	g.Tick(g.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	g.Tick(g.Start(be.PID, policy.Process{Comm: "trainer"}) + time.Second)
	bets := func() time.Duration { return time.Duration(g.Groups(be.PID)[0].Timeslice) * time.Microsecond }
	window := func(lcs ...int) {
		g.Now += time.Second
		r, _ := slowBeside.At(bets())
		if loop.Pause.Holds(policy.ProcRef{PID: be.PID, Start: uint64(be.PID)}) {
			r = 1 // alone
		}
		for _, pid := range lcs {
			loop.Push(pid, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50,
				LatencyUs: map[string]float64{"p50": float64(slowBeside.Baseline) * r / 1e3}}})
		}
		loop.Step(g.Now)
		g.Tick(g.Now)
	}
	loop.Step(g.Now)
	if st := loop.Status(); st.Calibrate != "pause" {
		t.Fatalf("calibrate %q, want pause", st.Calibrate)
	}

	// The LC's first window: BE stopped for the window that drains its
	// queued work and one of the LC alone (50 requests: enough), its
	// timeslice kept, then resumed; the baseline is the LC alone (6 ms).
	window(100)
	proctest.WaitState(t, be.PID, true)
	if st := loop.Status(); len(st.BEStopped) != 1 || st.BEStopped[0] != be.PID || st.Last.Cause != slo.CauseCalibrate {
		t.Fatalf("status while learning the LC alone: stopped %v, last %+v", st.BEStopped, st.Last)
	}
	if gauge(t, g.m, "gpreemptd_slo_be_stopped") != 1 {
		t.Error("BE stopped gauge not 1 while stopped")
	}
	for i := range 1 {
		window(100)
		if proctest.State(t, be.PID) != 'T' || bets() != 200*time.Microsecond {
			t.Fatalf("paused window %d: BE state %c at %v; want stopped at 200us", i+2, proctest.State(t, be.PID), bets())
		}
	}
	window(100)
	proctest.WaitState(t, be.PID, false)
	st := loop.Status()
	if len(st.BEStopped) != 0 || len(st.LC) != 1 || st.LC[0].TargetUs != 6300 || gauge(t, g.m, "gpreemptd_slo_be_stopped") != 0 {
		t.Fatalf("after the pause: stopped %v, LC %+v; want none stopped, target 1.05 x 6 ms", st.BEStopped, st.LC)
	}
	// The search then holds the LC within 1.05x of its standalone latency
	// (200 us - 1 ms; 2 and 3 ms miss, tried now and then), with BE
	// running, where a baseline learnt beside BE under 1 us (1.30x)
	// would allow them.
	within := 0
	for i := range 40 {
		window(100)
		if loop.Pause.Holding() {
			t.Fatalf("window %d: BE stopped", i)
		}
		if bets() <= time.Millisecond {
			within++
		}
	}
	if within < 25 {
		t.Errorf("%d of 40 windows at 1 ms or less; want most (2-3 ms: 1.12x standalone)", within)
	}

	// A new LC is learnt alone too; the daemon stopping mid-pause resumes BE.
	g.Tick(g.Start(101, policy.Process{Comm: "lc-two"}) + g.Now - g.Now%time.Second + 500*time.Millisecond)
	window(100, 101)
	proctest.WaitState(t, be.PID, true)
	loop.Close()
	proctest.WaitState(t, be.PID, false)
	if loop.Pause.Holding() || loop.Pause.(*pause.Pauser).Held() != 0 {
		t.Error("still holding BE after Close")
	}
}

func TestSLOLoopSpinnerCeiling(t *testing.T) {
	// Pre-preemption is an arm where an LC has a hint engine: the engine
	// is told to pre-preempt only under arms at or under
	// slo.spinner_ceiling (50 us by default) and under
	// slo.prepreempt_below; an engine not told to may see the search go
	// to the eager knee. "off" lifts the ceiling to prepreempt_below.
	const pol = `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s%s}
`
	for _, tc := range []struct {
		name  string
		extra string
		up    time.Duration // the longest BE timeslice an engine is told to pre-preempt at
	}{
		{"default", "", 50 * time.Microsecond},
		{"ceiling off", ", spinner_ceiling: off", 200 * time.Microsecond},
		{"ceiling 200us", ", spinner_ceiling: 200us", 200 * time.Microsecond},
	} {
		s := newSLORig(t, fmt.Sprintf(pol, tc.extra))
		s.loop.Step(s.Now)
		highest, told := time.Duration(0), 0
		for range 80 {
			spin := s.loop.Reply(100).Prepreempt
			s.loop.Push(100, api.Stats{Engine: &EngineState{Prepreempt: spin}})
			s.window(slo.EagerPyTorchH100, false)
			highest = max(highest, s.beTimeslice())
			if s.loop.Reply(100).Prepreempt {
				told++
				if ts := s.beTimeslice(); ts > tc.up {
					t.Fatalf("%s: engine told to pre-preempt at %v", tc.name, ts)
				}
			}
		}
		if highest < time.Millisecond || told == 0 {
			t.Errorf("%s: BE at most %v (want the eager knee), engine told to pre-preempt in %d windows", tc.name, highest, told)
		}
	}
}

// newShareRig is an SLO loop over sloPolicy with no process yet, whose BE
// share comes from launches counted by the fake counter it returns.
func newShareRig(t *testing.T) (*sloRig, *tracetest.Launches) { return newShareRigOf(t, sloPolicy) }

// newShareRigOf is newShareRig over policy pol.
func newShareRigOf(t *testing.T, pol string) (*sloRig, *tracetest.Launches) {
	g := newRig(t, pol)
	s := &sloRig{rig: g, loop: NewSLOLoop(g.Rec, g.m, testlog.New(t))}
	f := tracetest.NewLaunches()
	p := signals.NewBEProgress(f, testlog.New(t))
	p.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
	s.loop.Share = p
	return s, f
}

// trainerAlone plays n silent windows in which the trainer (pid 200) launches alone kernels a
// second, its rate alone for gpreemptd to learn.
func (s *sloRig) trainerAlone(f *tracetest.Launches, alone uint64, n int) {
	for range n {
		f.N[200] += alone
		s.window(slo.EagerPyTorchH100, true)
	}
}

// TestSLOLoopMeasuresBEShare runs the loop with BE progress counted from
// launches (a fake counter): the rate alone is learnt while the trainer
// is the only GPU process, and once an LC runs, the share the controller,
// the status and the metrics see is the trainer's launches over that rate,
// here following the eager-PyTorch BE share of the timeslice applied.
func TestSLOLoopMeasuresBEShare(t *testing.T) {
	s, f := newShareRig(t)
	s.Tick(s.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	s.loop.Step(s.Now)   // the mode starts
	const alone = 10_000 // launches a second
	s.trainerAlone(f, alone, 4)
	st := s.loop.Status()
	if len(st.BE) != 1 || st.BE[0].PID != 200 || st.BE[0].AlonePerS != alone || st.BE[0].Share == nil || *st.BE[0].Share != 1 {
		t.Fatalf("after 3 windows alone: %+v", st.BE)
	}

	s.Start(100, policy.Process{Comm: "lc-server"})
	s.Tick(s.Now) // classed now, at the loop's clock
	var share float64
	for i := range 40 {
		_, share = slo.EagerPyTorchH100.At(s.beTimeslice())
		f.N[200] += uint64(share * alone)
		s.window(slo.EagerPyTorchH100, false)
		st = s.loop.Status()
		if i > 0 && (st.BEShare == nil || math.Abs(*st.BEShare-share) > 1e-3) {
			t.Fatalf("window %d beside the LC: share %v, want %.3f (BE %+v)", i, st.BEShare, share, st.BE)
		}
	}
	if got := gauge(t, s.m, "gpreemptd_slo_be_share"); math.Abs(got-share) > 1e-3 {
		t.Errorf("gpreemptd_slo_be_share %v, want %.3f", got, share)
	}
	// The frontier: the arm in force among those the search shows, each as the metrics say (a
	// series per arm shown, none left of another), its verdict the LC's by its bounds, and BE
	// under classes.be.min_share (0.85) said apart.
	if len(st.Searches) != 1 || !slices.ContainsFunc(st.Searches[0].Arms, func(a api.SLOArm) bool { return a.Arm == st.Arm && a.BEShare != nil }) {
		t.Fatalf("searches %+v: want one listing the arm in force, %s, with BE's share measured", st.Searches, st.Arm)
	}
	same := func(got float64, want *float64) bool {
		return want == nil && math.IsNaN(got) || want != nil && got == *want
	}
	for _, a := range st.Searches[0].Arms {
		labels := map[string]string{"gpu": api.GPUList(st.Searches[0].GPUs), "arm": a.Arm}
		if got := gaugeValue(t, s.m, "gpreemptd_slo_arm_be_share", labels); !same(got, a.BEShare) {
			t.Errorf("gpreemptd_slo_arm_be_share%v %v, status %v", labels, got, a.BEShare)
		}
		if got := gaugeValue(t, s.m, "gpreemptd_slo_arm_lc_vs_objective", labels); !same(got, a.LCVsObjective) {
			t.Errorf("gpreemptd_slo_arm_lc_vs_objective%v %v, status %v", labels, got, a.LCVsObjective)
		}
		lc, short := strings.CutSuffix(a.Verdict, ", BE under its minimum")
		switch {
		case short != (a.BEShare != nil && *a.BEShare < 0.85):
			t.Errorf("%s: verdict %q with BE's share %v against a minimum of 0.85", a.Arm, a.Verdict, a.BEShare)
		case lc == "misses" && !(a.Lo != nil && *a.Lo > 1), lc == "meets" && !(a.Hi != nil && *a.Hi <= 1):
			t.Errorf("%s: verdict %q with bounds %v to %v", a.Arm, a.Verdict, a.Lo, a.Hi)
		}
	}
	mfs, err := s.m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(mfs, func(mf *dto.MetricFamily) bool { return mf.GetName() == "gpreemptd_slo_arm_be_share" }); i < 0 || len(mfs[i].GetMetric()) != len(st.Searches[0].Arms) {
		t.Errorf("gpreemptd_slo_arm_be_share: want a series for each of the %d arms shown, no more", len(st.Searches[0].Arms))
	}
	if st.BE[0].Signal != "counted" || st.BE[0].LaunchesPerS != math.Floor(share*alone) {
		t.Errorf("BE row %+v", st.BE[0])
	}

	// A BE that came while the LC ran learns its rate alone once the LC
	// has gone, from the first window that began without it: the window
	// the LC left in is not alone.
	s.Start(300, policy.Process{Comm: "bulk"})
	s.Tick(s.Now)
	bulkSays := func(want string) {
		t.Helper()
		f.N[200], f.N[300] = f.N[200]+alone, f.N[300]+alone
		s.window(slo.EagerPyTorchH100, true)
		for _, b := range s.loop.Status().BE {
			if b.PID == 300 && !strings.HasPrefix(b.Signal, want) {
				t.Fatalf("bulk: %+v, want %q", b, want)
			}
		}
	}
	bulkSays("counting from this window")
	bulkSays("learning its rate alone (0 of 3")
	s.Feed(&trace.TaskExit{PID: 100, At: uint64(s.Now)})
	s.Tick(s.Now)
	bulkSays("learning its rate alone (0 of 3") // the LC ran in part of it
	bulkSays("learning its rate alone (1 of 3")
	if got := gaugeValue(t, s.m, "gpreemptd_slo_arm_be_share", nil); !math.IsNaN(got) { // no search, no frontier
		t.Errorf("gpreemptd_slo_arm_be_share %v with no LC: want no series", got)
	}
}

// TestBEAloneBesideAnMPSServer: an MPS server (a GPU process of no class)
// runs only its clients' work, so BE is alone beside it until a client
// comes; any other process outside class BE keeps the windows from being
// BE alone.
func TestBEAloneBesideAnMPSServer(t *testing.T) {
	for _, tc := range []struct {
		comm, exe string
		alone     bool
	}{
		{"nvidia-cuda-mps", "/usr/bin/nvidia-cuda-mps-server", true},
		{"nvidia-cuda-mps", "", true}, // its path unread: the name, as the kernel cuts it
		{"nvidia-cuda-mps", "/opt/app/nvidia-cuda-mps", false},
		{"nvidia-smi", "", false},
		{"nvidia-cuda-mp", "", false},
	} {
		t.Run(tc.comm+tc.exe, func(t *testing.T) {
			s, f := newShareRig(t)
			s.Tick(s.Start(150, policy.Process{Comm: tc.comm, Exe: tc.exe}) + time.Second)
			s.Tick(s.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
			s.loop.Step(s.Now) // the mode starts
			const alone = 10_000
			s.trainerAlone(f, alone, 4)
			st := s.loop.Status()
			if len(st.BE) != 1 || st.BE[0].PID != 200 {
				t.Fatalf("BE rows %+v", st.BE)
			}
			learnt := st.BE[0].AlonePerS == alone && st.BE[0].Share != nil
			if learnt != tc.alone {
				t.Fatalf("beside %s: rate alone learnt %v, want %v (%+v)", tc.comm, learnt, tc.alone, st.BE[0])
			}
			if !tc.alone {
				return
			}
			// A client (an LC process of its own) comes: from the window
			// it came in, BE is no longer alone, and its rate alone is
			// kept, not lowered.
			s.Start(100, policy.Process{Comm: "lc-server"})
			s.Tick(s.Now)
			for range 4 {
				f.N[200] += alone / 2
				s.window(slo.EagerPyTorchH100, false)
			}
			st = s.loop.Status()
			if st.BE[0].AlonePerS != alone || st.BEShare == nil || math.Abs(*st.BEShare-0.5) > 1e-9 {
				t.Errorf("beside the server and its client: %+v, share %v; want rate alone %d, share 0.5", st.BE[0], st.BEShare, alone)
			}
		})
	}
}

// TestExitedPusherForgotten: an exit forgets a process's metrics at once
// (so the metrics no longer list it as a pusher), and the sweep still
// forgets what it pushed to the SLO loop, which would otherwise cap BE at
// the spinner ceiling for a later LC under the same pid.
func TestExitedPusherForgotten(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	d := &Daemon{log: testlog.New(t), rec: s.Rec, slo: s.loop, metrics: s.m, inspect: s.Procs}
	st := api.HintStats{PID: 100, Stats: api.Stats{Engine: &EngineState{Prepreempt: true}}}
	s.m.Pushed(st, "lc-server") // as the socket's stats handler does
	s.loop.Push(100, st.Stats)
	delete(s.Procs, 100)
	s.Rec.Handle(reconcile.Event{Kind: reconcile.ProcessExited, PID: 100, At: s.Now})
	if slices.Contains(s.m.Pushers(), 100) {
		t.Fatal("premise: the exit left pid 100 among the metrics' pushers")
	}
	d.sweepPushers()
	if _, ok := s.loop.Status().Engines["100"]; ok || slices.Contains(s.loop.Pushers(), 100) {
		t.Errorf("pid 100's pushed state kept after the sweep: %v", s.loop.Status().Engines)
	}
	tail, err := policy.Parse([]byte("classes: {lc: {objective: \"p99<=1.1x\"}}\nslo: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	reused := policy.ProcRef{PID: 100, Start: 2, Decision: policy.Decision{Spec: class.Spec{Name: class.LC, Weight: 1}, Rule: "default"}}
	if c := s.loop.PrepreemptUpTo(tail, []policy.ProcRef{reused}); c != 0 {
		t.Errorf("pre-preemption arms up to %v for a new LC without a hint engine", c)
	}
}

// TestSLOLoopBEApartFromLC: on a node with two GPUs, the LC and the
// trainer on GPU 0, the bulk BE (be:3) on GPU 1, the search is for the
// trainer alone. The bulk keeps the policy's timeslice, learns its rate
// alone beside the running LC, and is left out of the share and of the
// floor two BE on one GPU would need (calibration goes to 1 us). An LC
// that comes to GPU 1 brings the bulk into the search at the next window.
func TestSLOLoopBEApartFromLC(t *testing.T) {
	s, f := newShareRig(t)
	s.Tick(s.Start(200, policy.Process{Comm: "trainer", GPUs: []policy.GPU{{Index: 0}}}) + time.Second)
	s.loop.Step(s.Now) // the mode starts
	const alone = 10_000
	s.trainerAlone(f, alone, 4)
	// The LC, then the bulk, are classed before NVML lists them, and
	// placed at the next window. The bulk comes while the LC runs.
	s.Tick(s.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	s.Procs[100] = policy.Process{Comm: "lc-server", GPUs: []policy.GPU{{Index: 0}}}
	s.Tick(s.Start(300, policy.Process{Comm: "bulk"}) + time.Second)
	s.Procs[300] = policy.Process{Comm: "bulk", GPUs: []policy.GPU{{Index: 1}}}
	lowest := time.Hour
	at1ms := func() bool {
		st := s.loop.Status()
		return st.BETimeslice == "1ms" && st.Last != nil && !st.Last.Changed
	}
	for i := 0; i < 60 || (i < 80 && !at1ms()); i++ {
		_, share := slo.EagerPyTorchH100.At(s.beTimeslice())
		f.N[200], f.N[300] = f.N[200]+uint64(share*alone), f.N[300]+alone/2
		s.window(slo.EagerPyTorchH100, false)
		lowest = min(lowest, s.beTimeslice())
		if i > 0 {
			s.WantAll(300, 560, tsg.LevelLow) // the policy's 200us at weight 3
		}
		st := s.loop.Status()
		if i > 1 && (st.BEShare == nil || math.Abs(*st.BEShare-share) > 1e-3) {
			t.Fatalf("window %d: share %v, want the trainer's %.3f (BE %+v)", i, st.BEShare, share, st.BE)
		}
	}
	if lowest != time.Microsecond {
		t.Errorf("lowest BE timeslice %v, want 1µs: the two BE share no GPU, so no floor", lowest)
	}
	st := s.loop.Status()
	if st.BETimeslice != "1ms" {
		t.Errorf("BE timeslice %s, want the eager knee 1ms", st.BETimeslice)
	}
	s.WantAll(200, 1000, tsg.LevelLow)
	for _, b := range st.BE {
		if b.Apart != (b.PID == 300) || b.Signal != "counted" || b.Share == nil {
			t.Errorf("BE row %+v: want counted, apart only for the bulk on GPU 1", b)
		}
		if b.PID == 300 && b.AlonePerS != alone/2 {
			t.Errorf("bulk's rate alone %v, want %d: learnt beside the LC on GPU 0", b.AlonePerS, alone/2)
		}
	}
	var cs api.SLO
	if b, err := json.Marshal(st); err != nil || json.Unmarshal(b, &cs) != nil || !slices.ContainsFunc(cs.BE, func(b api.SLOBE) bool { return b.Apart }) {
		t.Errorf("the status on the wire lost which BE is apart: %+v", cs.BE)
	}

	// The LC opens a context on GPU 1 too: it joins the two GPUs in one set,
	// whose search starts at its safe setting with both BE beside the LC.
	s.Procs[100] = policy.Process{Comm: "lc-server", GPUs: []policy.GPU{{Index: 0}, {Index: 1}}}
	_, share := slo.EagerPyTorchH100.At(s.beTimeslice())
	f.N[200], f.N[300] = f.N[200]+uint64(share*alone), f.N[300]+alone/2
	s.window(slo.EagerPyTorchH100, false)
	s.Tick(s.Now + time.Second)
	st = s.loop.Status()
	if len(st.Searches) != 1 || !slices.Equal(st.Searches[0].GPUs, []int{0, 1}) || st.BETimeslice != "200µs" {
		t.Fatalf("after the LC came to GPU 1: %+v, searches %+v", st, st.Searches)
	}
	s.WantAll(200, 200, tsg.LevelLow)
	s.WantAll(300, 560, tsg.LevelLow)
	for _, b := range st.BE {
		if b.Apart || b.Timeslice != "200µs" {
			t.Errorf("BE row %+v: want beside the LC, at the new search's 200µs", b)
		}
	}
}

// TestSLOLoopPausesPerGPU: each GPU's search stops its own BE to learn
// its LC alone (a BE on a GPU without LC is left running), and resumes
// them when it has, while the other GPU's search still holds its BE
// stopped.
func TestSLOLoopPausesPerGPU(t *testing.T) {
	g := newRig(t, sloPausePolicy)
	bes, loop := pausingLoop(t, g, 2)
	near, far := bes[0], bes[1]
	on := func(comm string, gpu int) policy.Process {
		return policy.Process{Comm: comm, GPUs: []policy.GPU{{Index: gpu}}}
	}
	g.Tick(g.Start(100, on("lc-server", 0)) + time.Second)
	g.Tick(g.Start(near.PID, on("trainer", 0)) + time.Second)
	g.Tick(g.Start(far.PID, on("trainer", 1)) + time.Second)
	held := func(p policy.ProcRef) bool { return loop.Pause.Holds(policy.ProcRef{PID: p.PID, Start: uint64(p.PID)}) }
	window := func(lcs map[int]policy.ProcRef) {
		g.Now += time.Second
		for pid, be := range lcs {
			r, _ := slowBeside.At(time.Duration(g.Groups(be.PID)[0].Timeslice) * time.Microsecond)
			if held(be) {
				r = 1 // alone
			}
			loop.Push(pid, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50,
				LatencyUs: map[string]float64{"p50": float64(slowBeside.Baseline) * r / 1e3}}})
		}
		loop.Step(g.Now)
		g.Tick(g.Now)
	}
	loop.Step(g.Now)
	window(map[int]policy.ProcRef{100: near})
	if !held(near) || held(far) {
		t.Fatalf("GPU 0's new LC: near held %v, far held %v; want near only", held(near), held(far))
	}
	proctest.WaitState(t, near.PID, true)
	if st := proctest.State(t, far.PID); st == 'T' {
		t.Error("the BE on GPU 1 was stopped to learn the LC on GPU 0 alone")
	}
	if st := loop.Status(); !slices.Equal(st.BEStopped, []int{near.PID}) {
		t.Errorf("stopped %v, want only %d", st.BEStopped, near.PID)
	}
	// A second LC comes to GPU 1 while GPU 0's is learnt alone.
	g.Tick(g.Start(101, on("lc-two", 1)) + g.Now - g.Now%time.Second + 500*time.Millisecond)
	both := map[int]policy.ProcRef{100: near, 101: far}
	window(both) // GPU 1's search starts
	window(both)
	if !held(far) {
		t.Fatalf("GPU 1's new LC: far held %v, want it learnt alone", held(far))
	}
	proctest.WaitState(t, far.PID, true)
	i := 0
	for ; held(near) && i < 10; i++ {
		window(both)
	}
	if held(near) || !held(far) {
		t.Fatalf("after %d windows: near held %v, far held %v; want GPU 0 done first", i, held(near), held(far))
	}
	proctest.WaitState(t, near.PID, false)
	if proctest.State(t, far.PID) != 'T' {
		t.Fatal("resuming GPU 0's BE resumed GPU 1's")
	}
	if st := loop.Status(); !slices.Equal(st.BEStopped, []int{far.PID}) {
		t.Errorf("stopped %v, want only %d", st.BEStopped, far.PID)
	}
	for i = 0; held(far) && i < 10; i++ {
		window(both)
		if held(near) {
			t.Fatal("GPU 0's BE stopped again")
		}
	}
	proctest.WaitState(t, far.PID, false)
	if p := loop.Pause.(*pause.Pauser); p.Held() != 0 || p.Holding() {
		t.Errorf("%d processes left held with nothing stopped", p.Held())
	}
}

// TestSLOLoopSearchPerGPU: on a node with two GPUs, an eager LC and a
// trainer on GPU 0, an LC with hints (the synthetic one) and a trainer on
// GPU 1. Each GPU's search finds its own knee: 1 ms for the eager LC, 200
// us or shorter for the one with hints, where one search for the node
// would give both trainers the shorter. The status, the metrics and what
// each hint engine is told are per GPU.
func TestSLOLoopSearchPerGPU(t *testing.T) {
	s, f := newShareRig(t)
	on := func(comm string, gpu int) policy.Process {
		return policy.Process{Comm: comm, GPUs: []policy.GPU{{Index: gpu}}}
	}
	s.Tick(s.Start(200, on("trainer", 0)) + time.Second)
	s.Tick(s.Start(201, on("trainer", 1)) + time.Second)
	s.loop.Step(s.Now) // the mode starts
	const alone = 10_000
	for range 4 {
		f.N[200], f.N[201] = f.N[200]+alone, f.N[201]+alone
		s.window(slo.EagerPyTorchH100, true)
	}
	s.Tick(s.Start(100, on("lc-server", 0)) + time.Second)
	s.Tick(s.Start(101, on("lc-graph", 1)) + time.Second)
	ts := func(pid int) time.Duration { return time.Duration(s.Groups(pid)[0].Timeslice) * time.Microsecond }
	sides := []struct {
		lc, be int
		w      slo.Workload
	}{{100, 200, slo.EagerPyTorchH100}, {101, 201, slo.GraphHintsH100}}
	settled := func() bool {
		st := s.loop.Status()
		return len(st.Searches) == 2 && ts(200) == time.Millisecond && st.Searches[0].Last != nil && !st.Searches[0].Last.Changed &&
			st.Searches[1].Last != nil && !st.Searches[1].Last.Changed
	}
	step := func() {
		for _, x := range sides {
			r, share := x.w.At(ts(x.be))
			f.N[x.be] += uint64(share * alone)
			p50 := float64(x.w.Baseline) * r / 1e3
			s.loop.Push(x.lc, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: uint64(x.w.Requests),
				LatencyUs: map[string]float64{"p50": p50, "p99": 1.3 * p50}}})
		}
		s.Now += time.Second
		s.loop.Step(s.Now)
		s.Tick(s.Now)
	}
	for i := 0; i < 60 || (i < 100 && !settled()); i++ {
		step()
	}
	if !settled() {
		t.Fatalf("not settled: trainer on GPU 0 at %v, status %+v", ts(200), s.loop.Status().Searches)
	}
	if got := ts(201); got > 200*time.Microsecond {
		t.Errorf("trainer on GPU 1 at %v, want 200µs or shorter: the LC with hints waits out BE's timeslice past it", got)
	}
	st := s.loop.Status()
	if st.BETimeslice != "" || st.Last != nil || !slices.Equal(st.Searches[0].GPUs, []int{0}) || !slices.Equal(st.Searches[1].GPUs, []int{1}) ||
		st.Searches[0].BETimeslice != "1ms" || st.Searches[0].LCs != 1 || st.Changes != st.Searches[0].Changes+st.Searches[1].Changes {
		t.Errorf("status %+v, searches %+v", st, st.Searches)
	}
	for _, l := range st.LC {
		if !slices.Equal(l.GPUs, []int{map[int]int{100: 0, 101: 1}[l.PID]}) || l.Ratio == nil || *l.Ratio > 1 {
			t.Errorf("LC row %+v", l)
		}
	}
	for _, b := range st.BE {
		if want := ts(b.PID).String(); b.Apart || b.Timeslice != want || b.Share == nil {
			t.Errorf("BE row %+v, want at %s", b, want)
		}
	}
	if got := labelled(t, s.m, "gpreemptd_slo_be_timeslice_seconds", "0"); got != 0.001 {
		t.Errorf("GPU 0's timeslice gauge %v, want 0.001", got)
	}
	if got := labelled(t, s.m, "gpreemptd_slo_be_timeslice_seconds", "1"); got != ts(201).Seconds() {
		t.Errorf("GPU 1's timeslice gauge %v, want %v", got, ts(201).Seconds())
	}
	// 1 ms is past prepreempt_below: the eager LC's engine is told to stop
	// pre-preempting, the other's is not.
	if r100, r101 := s.loop.Reply(100), s.loop.Reply(101); r100.Prepreempt || !r101.Prepreempt {
		t.Errorf("replies: GPU 0's LC %+v, GPU 1's %+v", r100, r101)
	}

	// A third LC starts, and two windows end before NVML lists it: the
	// first leaves it out, the second makes one search for the node that
	// sets both trainers (at its safe setting) while the searches per GPU
	// wait; listed, it is in GPU 1's, and they take over where they were.
	s.Tick(s.Start(102, policy.Process{Comm: "lc-new"}) + time.Second)
	step()
	st = s.loop.Status()
	gpu0 := st.Searches[0]
	if len(st.Searches) != 2 || ts(200).String() != gpu0.BETimeslice {
		t.Fatalf("an LC's first window on no GPU known: searches %+v, trainer on GPU 0 at %v", st.Searches, ts(200))
	}
	step()
	st = s.loop.Status()
	if len(st.Searches) != 1 || st.Searches[0].GPUs != nil || st.BETimeslice != "200µs" || ts(200) != 200*time.Microsecond || ts(201) != 200*time.Microsecond {
		t.Fatalf("with an LC on no GPU known: %+v, searches %+v; trainers at %v, %v", st, st.Searches, ts(200), ts(201))
	}
	s.Procs[102] = on("lc-new", 1)
	step()
	st = s.loop.Status()
	if len(st.Searches) != 2 || st.Searches[0].BETimeslice != gpu0.BETimeslice || ts(200).String() != gpu0.BETimeslice {
		t.Fatalf("once listed: searches %+v (GPU 0's before: %+v); trainer on GPU 0 at %v", st.Searches, gpu0, ts(200))
	}
	// The window it came back in ran its trainer at the node's setting:
	// nothing of it is judged.
	if last := st.Searches[0].Last; last == nil || last.Changed || last.Cause != slo.CauseNoSignal {
		t.Errorf("GPU 0's search judged the window it came back in: %+v", last)
	}

	// The eager LC exits: GPU 0's search is idle, its trainer back at the
	// policy's 200us, and the status is GPU 1's search alone.
	others, counted := st.Changes-st.Searches[1].Changes, changesOn(t, s.m, "0")
	s.Feed(&trace.TaskExit{PID: 100, At: uint64(s.Now)})
	s.Tick(s.Now)
	s.Now += time.Second
	s.loop.Step(s.Now)
	s.Tick(s.Now)
	s.WantAll(200, 200, tsg.LevelLow)
	st = s.loop.Status()
	if len(st.Searches) != 1 || st.BETimeslice != ts(201).String() || !slices.Equal(st.Searches[0].GPUs, []int{1}) {
		t.Errorf("after the eager LC left: %+v, searches %+v", st, st.Searches)
	}
	// Idle, GPU 0's search falls back to safe after ten windows without
	// LC latency: a decision that applies to no BE, neither shown nor
	// counted.
	sides = sides[1:]
	for range 11 {
		step()
	}
	st = s.loop.Status()
	if ts, _ := s.loop.SearchTimeslice("0"); ts != 200*time.Microsecond {
		t.Fatalf("GPU 0's idle search at %v, want safe (200µs)", ts)
	}
	if len(st.Searches) != 1 || st.Changes-st.Searches[0].Changes != others || changesOn(t, s.m, "0") != counted {
		t.Errorf("an idle search's fallback shown or counted: changes %d, GPU 1's %d, the others' %d before; GPU 0's counted %v (were %v); searches %+v",
			st.Changes, st.Searches[0].Changes, others, changesOn(t, s.m, "0"), counted, st.Searches)
	}
}

// changesOn sums gpreemptd_slo_changes_total over the causes of GPU set gpus.
func changesOn(t testing.TB, m *Metrics, gpus string) float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "gpreemptd_slo_changes_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			if slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "gpu" && l.GetValue() == gpus }) {
				n += x.GetCounter().GetValue()
			}
		}
	}
	return n
}

// labelled is the value of gauge name's series with a label of value v.
func labelled(t testing.TB, m *Metrics, name, v string) float64 {
	t.Helper()
	x := series(t, m, name, func(x *dto.Metric) bool {
		return slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == v })
	})
	if x == nil {
		return math.NaN()
	}
	return x.GetGauge().GetValue()
}

// TestSLOLoopUnlistedAfterRestart: an LC NVML never lists (the node's
// search is its only one) keeps its one window of grace when the mode
// starts again, by a reload of its settings or off and on: the windows it
// was first seen in were counted before.
func TestSLOLoopUnlistedAfterRestart(t *testing.T) {
	parse := func(slo string) *policy.Policy {
		pol, err := policy.Parse([]byte(strings.Replace(sloPolicy, "slo: {enabled: true, window: 1s}", slo, 1)))
		if err != nil {
			t.Fatal(err)
		}
		return pol
	}
	for _, restart := range []struct {
		name string
		pols []*policy.Policy
	}{
		{"reload", []*policy.Policy{parse("slo: {enabled: true, window: 1s, safe: 500us}")}},
		{"off and on", []*policy.Policy{parse("slo: {enabled: false}"), parse("slo: {enabled: true, window: 1s}")}},
	} {
		t.Run(restart.name, func(t *testing.T) {
			s, _ := newShareRig(t)
			s.Tick(s.Start(200, policy.Process{Comm: "trainer", GPUs: []policy.GPU{{Index: 0}}}) + time.Second)
			s.loop.Step(s.Now)
			for range 8 {
				s.window(slo.EagerPyTorchH100, true)
			}
			s.Tick(s.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
			node := func() bool {
				st := s.loop.Status()
				return len(st.Searches) == 1 && st.Searches[0].GPUs == nil && st.Searches[0].LCs == 1
			}
			for range 2 {
				s.window(slo.EagerPyTorchH100, true)
			}
			if !node() {
				t.Fatalf("an LC on no GPU after its first window: searches %+v, want the node's", s.loop.Status().Searches)
			}
			for _, pol := range restart.pols {
				s.Rec.SetPolicy(pol)
				s.window(slo.EagerPyTorchH100, true)
			}
			s.window(slo.EagerPyTorchH100, true)
			if !node() {
				t.Errorf("a window after the mode started again: searches %+v, want the node's", s.loop.Status().Searches)
			}
		})
	}
}

// TestSLOLoopUnlistedBEShown: a BE NVML does not list yet runs, in its
// first window, at the shortest setting of the live searches, and its
// status row says so.
func TestSLOLoopUnlistedBEShown(t *testing.T) {
	s, _ := newShareRig(t)
	on0 := []policy.GPU{{Index: 0}}
	s.Tick(s.Start(200, policy.Process{Comm: "trainer", GPUs: on0}) + time.Second)
	s.Tick(s.Start(100, policy.Process{Comm: "lc-server", GPUs: on0}) + time.Second)
	s.loop.Step(s.Now)
	for range 3 {
		s.window(slo.EagerPyTorchH100, false)
	}
	s.Tick(s.Start(201, policy.Process{Comm: "trainer"}) + time.Second)
	s.window(slo.EagerPyTorchH100, false)
	st := s.loop.Status()
	if len(st.Searches) != 1 || !slices.Equal(st.Searches[0].GPUs, []int{0}) {
		t.Fatalf("searches %+v, want GPU 0's alone", st.Searches)
	}
	want := st.Searches[0].BETimeslice
	i := slices.IndexFunc(st.BE, func(b api.SLOBE) bool { return b.PID == 201 })
	if i < 0 || st.BE[i].Timeslice != want || st.BE[i].Apart {
		t.Errorf("BE rows %+v: want pid 201 at %s", st.BE, want)
	}
	if got := time.Duration(s.Groups(201)[0].Timeslice) * time.Microsecond; got.String() != want {
		t.Errorf("pid 201 at %v, want %s", got, want)
	}
}

// TestSLOLoopAlignedWindows: a push's reply says when the loop next reads
// the windows; a window that began as the last decision took effect is
// learnt at once after a move, one that began well before it is not (it
// mixes the setting before).
func TestSLOLoopAlignedWindows(t *testing.T) {
	for _, tc := range []struct {
		name      string
		early     time.Duration // how long before the last step the window began
		wantMixed bool
	}{
		{"began with the move", 0, false},
		{"began within the slack", 40 * time.Millisecond, false},
		{"began a third of a window before", 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSLORig(t, sloPolicy)
			s.loop.Step(s.Now)
			s.Now += 300 * time.Millisecond
			if r := s.loop.Reply(100); r.NextWindowMs != 700 || r.WindowMs != 1000 {
				t.Errorf("reply 300 ms into a 1 s window: next %v ms, window %v ms; want 700, 1000", r.NextWindowMs, r.WindowMs)
			}
			s.Now += 2 * time.Second // past due: the read runs now
			if r := s.loop.Reply(100); r.NextWindowMs != 0.001 {
				t.Errorf("reply with the step 1.3 s late: next %v ms, want 0.001", r.NextWindowMs)
			}
			s.Now -= 2300 * time.Millisecond
			// Windows of the eager LC, each pushed as the next step reads
			// it, until the search moves.
			moved := false
			for i := 0; i < 40 && !moved; i++ {
				s.window(slo.EagerPyTorchH100, false)
				last := s.loop.Status().Last
				moved = last.Changed && slices.Contains([]string{slo.CauseExplore, slo.CauseKnownBetter, slo.CauseViolation}, last.Cause)
			}
			if !moved {
				t.Fatal("the search never moved")
			}
			r, _ := slo.EagerPyTorchH100.At(s.beTimeslice())
			p50 := float64(slo.EagerPyTorchH100.Baseline) * r / 1e3
			d := time.Second + tc.early
			s.Now += time.Second
			s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: float64(d) / 1e6, Requests: 50, LatencyUs: map[string]float64{"p50": p50}}})
			s.loop.Step(s.Now)
			if last := s.loop.Status().Last; last.Aligned == tc.wantMixed {
				t.Errorf("the window after a move, begun %v before it: aligned %v (%s); want it mixed (not learnt) %v", tc.early, last.Aligned, last.Reason, tc.wantMixed)
			}
		})
	}
}

// TestSLOLoopEngineToldLate: where pre-preemption is no arm (two BE share
// the GPU, and its floor is past the spinner's ceiling), an LC's engine is
// still told to pre-preempt below slo.prepreempt_below. A move across it
// changes what the engine does from its next push, which ends the window
// after the move: that window is not counted as aligned; the others,
// pushed as the daemon reads, are.
func TestSLOLoopEngineToldLate(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.loop.Step(s.Now)
	told := []bool{s.loop.Reply(100).Prepreempt} // after each step
	crossed, kept := 0, 0
	for i := range 60 {
		s.Now += time.Second
		r, _ := slo.EagerPyTorchH100.At(s.beTimeslice())
		p50 := float64(slo.EagerPyTorchH100.Baseline) * r / 1e3
		s.loop.Push(100, api.Stats{Engine: &EngineState{Prepreempt: told[max(i-1, 0)]}, Window: &LatencyWindow{DurationMs: 1000, Requests: 50,
			LatencyUs: map[string]float64{"p50": p50}}})
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		told = append(told, s.loop.Reply(100).Prepreempt)
		if i < 1 {
			continue
		}
		switch last := s.loop.Status().Last; {
		case told[i] != told[i-1] && last.Aligned:
			t.Errorf("window %d, after the engine was told %v: counted as aligned", i, told[i])
		case told[i] != told[i-1]:
			crossed++
		case last.Aligned:
			kept++
		}
	}
	if crossed == 0 || kept < 30 {
		t.Fatalf("windows after a move across prepreempt_below: %d; others aligned: %d of 60", crossed, kept)
	}
}
