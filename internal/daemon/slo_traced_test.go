package daemon

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

func TestSLOLoopTracedLatency(t *testing.T) {
	// The LC (pid 100) pushes nothing; request tracing measures it. The
	// windows follow the eager curve of the BE timeslice the fake driver
	// holds, so the loop steers on what it traced.
	s := newSLORig(t, sloPolicy)
	tl := signals.NewTracedLatency()
	s.loop.Traced = tl
	s.loop.Step(s.Now) // the controller starts, and the first traced window
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
	clock := &tracetest.Clock{}
	for i := range 40 {
		r, _ := slo.EagerPyTorchH100.At(s.beTimeslice())
		lat := time.Duration(float64(slo.EagerPyTorchH100.Baseline) * r)
		// 50 requests a window, 19 ms apart (the LC's learnt gap
		// delimits them: they are closer together than the ceiling).
		clock.Now = max(clock.Now, uint64(s.Now))
		tracetest.Spaced(tl.Apply, lc, 50, lat, 19*time.Millisecond, clock)
		s.Now += time.Second
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		st := s.loop.Status()
		want := "traced-request"
		if i < slomode.TraceAfter-1 { // a new LC is given two windows to push
			want = "none pushed or traced"
		}
		if len(st.LC) != 1 || st.LC[0].Signal != want || want == "traced-request" && st.LC[0].Requests != 50 {
			t.Fatalf("window %d: LC status %+v, want %s", i, st.LC, want)
		}
	}
	if st := s.loop.Status(); st.Changes == 0 || st.LC[0].Ratio == nil {
		t.Errorf("the loop did not steer on traced latency: %+v", st)
	}
	// A process that pushes is judged by what it pushes once it has
	// pushed in UntraceAfter windows in a row; until then by what is
	// traced, not by both.
	for i := 1; i <= slomode.UntraceAfter; i++ {
		clock.Now = max(clock.Now, uint64(s.Now))
		tracetest.Spaced(tl.Apply, lc, 50, slo.EagerPyTorchH100.Baseline, 19*time.Millisecond, clock)
		s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 6000}}})
		s.Now += time.Second
		s.loop.Step(s.Now)
		want := "traced-request"
		if i == slomode.UntraceAfter {
			want = "pushed"
		}
		if st := s.loop.Status(); st.LC[0].Signal != want {
			t.Errorf("push %d: %+v, want %s", i, st.LC, want)
		}
	}
}

// recordingTraced is a WindowedSource with no samples that records whom
// each Roll asks it to trace.
type recordingTraced struct{ asked [][]int }

func (r *recordingTraced) Latest(int) (signal.Latency, bool) {
	return signal.Latency{}, false
}

func (r *recordingTraced) Roll(_ time.Duration, lcs []policy.ProcRef) {
	var pids []int
	for _, p := range lcs {
		pids = append(pids, p.PID)
	}
	r.asked = append(r.asked, pids)
}

// TestSLOLoopTracesWhatDoesNotPush: request tracing is asked for an LC
// process once it has pushed nothing for two windows, and no longer once
// it has pushed in four windows in a row; one that pushes from the start
// is never traced; one that pushes every third window stays traced; SLO
// mode turned off detaches all.
func TestSLOLoopTracesWhatDoesNotPush(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.Tick(s.Start(400, policy.Process{Comm: "lc-pusher"}) + time.Second)
	rt := &recordingTraced{}
	s.loop.Traced = rt
	push := func(pid int) {
		s.loop.Push(pid, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 6000}}})
	}
	step := func(pushes ...int) []int {
		t.Helper()
		for _, pid := range pushes {
			push(pid)
		}
		s.Now += time.Second
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		return rt.asked[len(rt.asked)-1]
	}
	s.loop.Step(s.Now) // the mode starts: both seen now
	want := func(i int, got, want []int) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("window %d: traced %v, want %v", i, got, want)
		}
	}
	want(1, step(400), nil)        // a new LC gets TraceAfter windows
	want(2, step(400), []int{100}) // 100 has pushed nothing for two
	for i := 3; i <= 5; i++ {      // 100 pushes: still traced for 3 windows
		want(i, step(100, 400), []int{100})
	}
	want(6, step(100, 400), nil)   // the fourth in a row
	want(7, step(400), nil)        // its last push is still recent
	want(8, step(400), []int{100}) // a push is stamped when it comes: two windows old
	for i := 9; i <= 21; i++ {     // every third window: traced throughout
		var p []int
		if i%3 == 0 {
			p = append(p, 100)
		}
		want(i, step(append(p, 400)...), []int{100})
	}
	pol, err := policy.Parse([]byte("rules:\n  - {match: {comm: \"lc*\"}, class: lc, trust_self_set: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.Rec.SetPolicy(pol)
	want(22, step(), nil) // SLO mode off: every process detached
	n := len(rt.asked)
	step()
	if len(rt.asked) != n {
		t.Errorf("with SLO mode off and nothing traced, Roll was called again: %v", rt.asked[n:])
	}
}

// TestSLOLoopTracesOnlyWhatIsJudged: an LC process without an objective,
// and an MPS server classed lc (its clients launch from their own
// libcuda), are never traced.
func TestSLOLoopTracesOnlyWhatIsJudged(t *testing.T) {
	g := newRig(t, `
classes:
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc-server"}, class: lc, objective: "p50<=1.05x", trust_self_set: true}
  - {name: free, match: {comm: "lc-free"}, class: lc, trust_self_set: true}
  - {name: mps, match: {comm: "nvidia-cuda-mps"}, class: lc, objective: "p99<=2x", trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s}
`)
	s := &sloRig{rig: g, loop: NewSLOLoop(g.Rec, g.m, testlog.New(t))}
	s.Tick(s.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	s.Tick(s.Start(110, policy.Process{Comm: "lc-free"}) + time.Second)
	s.Tick(s.Start(120, policy.Process{Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server"}) + time.Second)
	s.Tick(s.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	if n := len(s.Rec.InClass(class.LC)); n != 3 {
		t.Fatalf("%d LC processes, want 3", n)
	}
	rt := &recordingTraced{}
	s.loop.Traced = rt
	s.loop.Step(s.Now)
	for i := range 6 {
		s.Now += time.Second
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		if got := rt.asked[len(rt.asked)-1]; i >= slomode.TraceAfter-1 && !slices.Equal(got, []int{100}) {
			t.Fatalf("window %d: traced %v, want [100]", i, got)
		}
	}
}

// TestTracedWindowNotCarriedThroughOff: with every process traced
// (--libcuda), requests keep coming while SLO mode is off; the window the
// loop closes when the mode comes back on spans the whole time off, and is
// not taken for a window of SLO mode's, also when the LC is idle in the
// windows after (nothing replaces it).
func TestTracedWindowNotCarriedThroughOff(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	tl := signals.NewTracedLatency()
	s.loop.Traced = tl
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
	clock := &tracetest.Clock{}
	window := func(n int, lat time.Duration) {
		clock.Now = max(clock.Now, uint64(s.Now))
		tracetest.Spaced(tl.Apply, lc, n, lat, 19*time.Millisecond, clock)
		s.Now += time.Second
		s.loop.Step(s.Now)
		s.Tick(s.Now)
	}
	setPolicy := func(text string) {
		pol, err := policy.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		s.Rec.SetPolicy(pol)
	}
	s.loop.Step(s.Now)
	for range 4 {
		window(50, 6*time.Millisecond)
	}
	if st := s.loop.Status(); len(st.LC) != 1 || st.LC[0].Signal != "traced-request" {
		t.Fatalf("setup: %+v", st.LC)
	}
	setPolicy(strings.Replace(sloPolicy, "enabled: true", "enabled: false", 1))
	for range 10 {
		window(50, 30*time.Millisecond) // off: no window of SLO mode's
	}
	setPolicy(sloPolicy)
	window(50, 30*time.Millisecond) // the mode comes on: its first window starts
	for i := range 4 {
		window(0, 0) // idle
		for _, l := range s.loop.Status().LC {
			if l.Requests > 0 {
				t.Errorf("idle window %d after the mode came back on: %+v, requests of the time it was off", i, l)
			}
		}
	}
}
