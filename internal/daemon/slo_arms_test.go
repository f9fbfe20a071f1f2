package daemon

import (
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
)

// fakeSteerer records what SLO mode tells the gate; heldSince: each BE (by pid) held without a
// break since then.
type fakeSteerer struct {
	holds, undelimited, selfGated, traps map[int]bool
	heldSince                            map[int]time.Duration
}

func (f *fakeSteerer) Steer(h map[int]bool)   { f.holds = maps.Clone(h) }
func (f *fakeSteerer) Delimits(pid int) bool  { return !f.undelimited[pid] }
func (f *fakeSteerer) SelfGated(pid int) bool { return f.selfGated[pid] }
func (f *fakeSteerer) Traps(pid int) bool     { return f.traps[pid] }
func (f *fakeSteerer) HeldSince(be policy.ProcRef, t time.Duration) bool {
	at, ok := f.heldSince[be.PID]
	return ok && at <= t
}

// llmDecodeLC is a launch-bound LC: ~1.4x its standalone latency beside BE
// whatever the BE timeslice, at standalone with the gate.
var llmDecodeLC = slo.Workload{Baseline: 10 * time.Millisecond, Requests: 60, Points: []slo.Point{
	{BETimeslice: time.Microsecond, LCRatio: 1.35, BEShare: 0.12}, {BETimeslice: 3 * time.Millisecond, LCRatio: 1.5, BEShare: 0.76}},
	Gated: []slo.Point{{BETimeslice: time.Microsecond, LCRatio: 1.02, BEShare: 0.7}, {BETimeslice: 3 * time.Millisecond, LCRatio: 1.02, BEShare: 0.79}}}

// gateArmPolicy: an LC with an absolute objective beside one BE, the
// gate's mode to fill in.
const gateArmPolicy = `
classes:
  lc: {objective: "p50<=12ms"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s}
gate: {mode: %s}
`

// TestSLOLoopGateArm: with the policy's gate on, an LC that only the gate
// brings within its absolute objective gets the gate arm, which the loop
// hands the request gate; with the gate off, or for an LC whose requests
// the gate does not see end, no gate arm is offered, and the status says
// the objective is missed.
func TestSLOLoopGateArm(t *testing.T) {
	for _, tt := range []struct {
		mode        string
		undelimited bool // the gate does not see the LC's requests end
	}{{policy.GateOn, false}, {policy.GateOff, false}, {policy.GateOn, true}} {
		mode := tt.mode
		s := newSLORig(t, strings.Replace(gateArmPolicy, "%s", mode, 1))
		f := &fakeSteerer{undelimited: map[int]bool{100: tt.undelimited}}
		s.loop.Gate = f
		s.loop.Step(s.Now)
		gated := 0
		for i := range 60 {
			s.Now += time.Second
			r, _ := llmDecodeLC.AtArm(slo.Arm{BETimeslice: s.beTimeslice(), Gate: f.holds[100]})
			pushP50(s.loop, 100, float64(llmDecodeLC.Baseline)*r/1e3)
			s.loop.Step(s.Now)
			s.Tick(s.Now)
			if i >= 30 && f.holds[100] {
				gated++
			}
		}
		st := s.loop.Status()
		offered := mode == policy.GateOn && !tt.undelimited
		switch {
		case offered && (gated < 25 || !strings.Contains(st.Arm, "+gate") || *st.WorstLC > 1):
			t.Errorf("gate on: %d of 30 windows gated, status arm %q, worst %v", gated, st.Arm, *st.WorstLC)
		case !offered && (gated > 0 || st.Last.Cause != slo.CauseAtLimit && st.Last.Cause != slo.CauseWithin && st.Last.Cause != slo.CauseViolation):
			t.Errorf("gate %s, LC undelimited %v: %d windows gated, last %+v", mode, tt.undelimited, gated, st.Last)
		}
	}
}

// TestSLOLoopReferenceNamed: every LC row of a relative objective names
// its reference, its source and the p50 the daemon sees (and so do the
// metrics), and what learning it cost is in the status.
func TestSLOLoopReferenceNamed(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.loop.Step(s.Now)
	for range 20 {
		s.window(slo.EagerPyTorchH100, false)
	}
	st := s.loop.Status()
	if len(st.LC) != 1 || !strings.HasPrefix(st.LC[0].Reference, "beside BE under 200µs") || st.Calibration == nil || st.LC[0].P50Us != 5640 || st.LC[0].Source != "pushed" {
		t.Errorf("LC %+v, calibration %+v", st.LC, st.Calibration)
	}
	// The metrics say the same per source.
	if n, p50 := labelled(t, s.m, "gpreemptd_slo_lc_samples", "pushed"), labelled(t, s.m, "gpreemptd_slo_lc_p50_seconds", "pushed"); n != 50 || p50 != 5640e-6 {
		t.Errorf("metrics: %v samples, p50 %v s; want 50 and 5.64ms from the pushed source", n, p50)
	}
}

// TestSLOLoopTPOT: an LLM server pushes its time per output token beside
// its request latency; a tpot_p50 objective is judged by it, and a window
// may carry ttft_ and tpot_ quantiles where request_latency_us may not.
func TestSLOLoopTPOT(t *testing.T) {
	s := newSLORig(t, strings.Replace(sloPolicy, `lc: {objective: "p50<=1.05x"}`, `lc: {objective: "tpot_p50<=12ms"}`, 1))
	s.loop.Step(s.Now)
	for range 3 {
		s.Now += time.Second
		s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 60,
			LatencyUs: map[string]float64{"p50": 400e3, "tpot_p50": 9000}}})
		s.loop.Step(s.Now)
		s.Tick(s.Now)
	}
	st := s.loop.Status()
	if len(st.LC) != 1 || st.LC[0].Objective != "tpot_p50<=12ms" || st.LC[0].LatencyUs != 9000 || st.LC[0].Ratio == nil || *st.LC[0].Ratio != 0.75 {
		t.Errorf("LC %+v", st.LC)
	}
	if got := st.LC[0].Measurements; got != 3 { // one a window: 60 tokens of 60 requests each
		t.Errorf("status counts %d measurements, want 3", got)
	}
	if _, _, err := server.ParseStats([]byte(`{"window":{"duration_ms":1000,"requests":60,"latency_us":{"p50":400000,"tpot_p50":9000,"ttft_p99":90000}}}`)); err != nil {
		t.Errorf("a window with tpot_ and ttft_ quantiles refused: %v", err)
	}
	if _, _, err := server.ParseStats([]byte(`{"request_latency_us":{"tpot_p50":9000}}`)); err == nil {
		t.Error("request_latency_us took a tpot_ quantile")
	}
	if _, _, err := server.ParseStats([]byte(`{"window":{"duration_ms":1000,"requests":6,"latency_us":{"tbt_p50":9000}}}`)); err == nil {
		t.Error("a window took an unknown metric")
	}
}

// TestSLOLoopTPOTTokens: an LLM server finishes a request or two a
// window; its tpot_ quantiles are over the window's tokens, which a
// tpot_ objective counts as its samples, from at least 10 requests (a
// request's tokens move together). Without tokens the requests count; a
// window of too few accumulates toward the next measurement.
func TestSLOLoopTPOTTokens(t *testing.T) {
	for _, tc := range []struct {
		name             string
		requests, tokens uint64
		signal           string
	}{
		{"tokens", 10, 150, "pushed"},
		{"tokens of too few requests", 2, 30, "pushed (30 tokens accumulated toward a measurement)"},
		{"few tokens", 1, 15, "pushed (15 tokens accumulated toward a measurement)"},
		{"requests only", 2, 0, "pushed (2 tokens accumulated toward a measurement)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSLORig(t, strings.Replace(sloPolicy, `lc: {objective: "p50<=1.05x"}`, `lc: {objective: "tpot_p50<=12ms"}`, 1))
			s.loop.Step(s.Now)
			s.Now += time.Second
			s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: tc.requests, Tokens: tc.tokens,
				LatencyUs: map[string]float64{"p50": 400e3, "tpot_p50": 9000}}})
			s.loop.Step(s.Now)
			st := s.loop.Status()
			if len(st.LC) != 1 || st.LC[0].Signal != tc.signal || st.LC[0].Requests != int(tc.requests) {
				t.Fatalf("LC %+v, want signal %q", st.LC, tc.signal)
			}
			if counted := st.LC[0].Ratio != nil && *st.LC[0].Ratio == 0.75; counted != (tc.signal == "pushed") {
				t.Errorf("ratio %v: counted %v", st.LC[0].Ratio, counted)
			}
		})
	}
	if _, code, err := server.ParseStats([]byte(`{"window":{"duration_ms":1000,"requests":2,"tokens":30,"latency_us":{"p50":400000}}}`)); err == nil || code != http.StatusBadRequest {
		t.Errorf("tokens without tpot_p50: %d %v, want 400", code, err)
	}
}

// TestSLOLoopSelfGatedLags: an LC whose engine gates its own requests
// takes the gate arm from its next push reply, so the window after a move
// that turned the gate on or off is not counted as aligned; one the
// daemon gates is held from its next request, and that window is.
func TestSLOLoopSelfGatedLags(t *testing.T) {
	for _, self := range []bool{true, false} {
		s := newSLORig(t, strings.Replace(gateArmPolicy, "%s", policy.GateOn, 1))
		f := &fakeSteerer{selfGated: map[int]bool{100: self}}
		s.loop.Gate = f
		s.loop.Step(s.Now)
		moves, aligned := 0, 0
		for range 60 {
			held := f.holds[100]
			s.Now += time.Second
			r, _ := llmDecodeLC.AtArm(slo.Arm{BETimeslice: s.beTimeslice(), Gate: f.holds[100]})
			pushP50(s.loop, 100, float64(llmDecodeLC.Baseline)*r/1e3)
			s.loop.Step(s.Now)
			s.Tick(s.Now)
			if f.holds[100] == held {
				continue
			}
			// The gate moved at this step: judge the next window.
			s.Now += time.Second
			r, _ = llmDecodeLC.AtArm(slo.Arm{BETimeslice: s.beTimeslice(), Gate: f.holds[100]})
			pushP50(s.loop, 100, float64(llmDecodeLC.Baseline)*r/1e3)
			s.loop.Step(s.Now)
			s.Tick(s.Now)
			if moves++; s.loop.Status().Last.Aligned {
				aligned++
			}
		}
		if moves == 0 || self && aligned > 0 || !self && aligned < moves {
			t.Errorf("self-gated %v: %d of %d windows after a gate move counted as aligned", self, aligned, moves)
		}
	}
}

// TestSLOLoopLagFromWhatWasTold: the window that starts as SLO mode comes
// on runs what engines were told before: to pre-preempt (the mode off
// says so) and, for an engine that gates itself, the policy's gate. Where
// the mode's first word differs (a safe BE timeslice past
// prepreempt_below; the safe arm without the gate), that window is not
// counted as aligned.
func TestSLOLoopLagFromWhatWasTold(t *testing.T) {
	t.Run("pre-preemption", func(t *testing.T) {
		s := newSLORig(t, strings.Replace(sloPolicy, "window: 1s}", "window: 1s, prepreempt_below: 100us}", 1))
		s.loop.Push(100, api.Stats{Engine: &EngineState{Prepreempt: true}})
		if !s.loop.Reply(100).Prepreempt {
			t.Fatal("an engine not told to pre-preempt with the mode off")
		}
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		if s.loop.Reply(100).Prepreempt {
			t.Fatal("the mode's first word is to pre-preempt: nothing to test")
		}
		s.pushWindow(100)
		if last := s.loop.Status().Last; last == nil || last.Aligned {
			t.Errorf("the first window, run pre-preempting, counted as aligned: %+v", last)
		}
	})
	t.Run("an engine's own gate", func(t *testing.T) {
		s := newSLORig(t, strings.Replace(gateArmPolicy, "%s", policy.GateOn, 1))
		f := &fakeSteerer{selfGated: map[int]bool{100: true}}
		s.loop.Gate = f
		s.loop.Step(s.Now)
		s.Tick(s.Now)
		if hold, steered := f.holds[100]; !steered || hold {
			t.Fatalf("the mode's first word is not the gate off (steered %v, hold %v): nothing to test", steered, hold)
		}
		s.pushWindow(100)
		if last := s.loop.Status().Last; last == nil || last.Aligned {
			t.Errorf("the first window, gated as the policy says, counted as aligned: %+v", last)
		}
	})
}

// TestSLOLoopBEIdleUnderTheGate: under the gate's arm, a window in which BE launched nothing
// though the gate left it free to is BE idle of its own accord: the LC ran alone, and the window
// is not the arm's (a BE that works half the time would halve the arm's BE share and the LC's
// latency under it). A window the gate held BE through all along is the arm's; one in which a
// hold began only after the window did is not (BE had a moment).
func TestSLOLoopBEIdleUnderTheGate(t *testing.T) {
	for _, held := range []time.Duration{-1, 0, 500 * time.Millisecond} { // none, from before the window, from half way
		g := &fakeSteerer{heldSince: map[int]time.Duration{}}
		s, step := gateDutyRig(t, strings.Replace(gateArmPolicy, "%s", policy.GateOn, 1), g, false)
		for i := 0; i < 60 && !g.holds[100]; i++ {
			step(50, true, false)
		}
		if !g.holds[100] {
			t.Fatalf("held %v: no gate arm in 60 windows: %+v", held, s.loop.Status().Last)
		}
		// Windows of 5 requests: a measurement needs 4 of them under the arm.
		step(5, true, false)
		if held >= 0 {
			g.heldSince[200] = s.Now + held // the window after this one began at s.Now
		}
		before := s.loop.Status().LC[0].Pending
		step(5, false, false)
		st := s.loop.Status()
		want := map[bool]int{false: 0, true: 5}[held == 0]
		if grew := st.LC[0].Pending - before; grew != want || !g.holds[100] {
			t.Errorf("held from %v into the window: BE idle under %s added %d requests toward the arm's measurement (pending %d): want %d",
				held, st.Arm, grew, st.LC[0].Pending, want)
		}
	}
}

// gateDutyRig is the share rig with the gate g (and a Pauser where pauses), a trainer (pid 200)
// learnt alone over 4 windows and an LC (pid 100) just started; step plays one window of the LC's
// requests under the arm in force (at its baseline where alone) and BE's launches where it works.
func gateDutyRig(t *testing.T, pol string, g *fakeSteerer, pauses bool) (*sloRig, func(requests uint64, beWorks, alone bool)) {
	s, f := newShareRigOf(t, pol)
	s.loop.Gate = g
	if pauses {
		s.loop.Pause = &pause.Pauser{Proc: t.TempDir()}
	}
	s.Tick(s.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	s.loop.Step(s.Now)
	const rate = 10_000 // BE's launches a second, alone
	for range 4 {
		f.N[200] += rate
		s.window(llmDecodeLC, true)
	}
	s.Start(100, policy.Process{Comm: "lc-server"})
	s.Tick(s.Now)
	return s, func(requests uint64, beWorks, alone bool) {
		s.Now += time.Second
		r, share := llmDecodeLC.AtArm(slo.Arm{BETimeslice: s.beTimeslice(), Gate: g.holds[100]})
		if beWorks {
			f.N[200] += uint64(share * rate)
		}
		if alone {
			r = 1
		}
		s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: requests,
			LatencyUs: map[string]float64{"p50": float64(llmDecodeLC.Baseline) * r / 1e3}}})
		s.loop.Step(s.Now)
		s.Tick(s.Now)
	}
}

// TestSLOLoopGateTrapsKeepReferences: under the gate's arm, a window in which BE idled teaches an
// LC's reference only where the gate says its launches do not trap through its requests (its
// probes come off for each): where they trap, the LC under the gate is not the LC alone.
func TestSLOLoopGateTrapsKeepReferences(t *testing.T) {
	pol := strings.NewReplacer("%s", policy.GateOn, "p50<=12ms", "p50<=1.10x", "window: 1s", "window: 1s, calibrate: pause").Replace(gateArmPolicy)
	for _, traps := range []bool{false, true} {
		g := &fakeSteerer{traps: map[int]bool{100: traps}}
		s, step := gateDutyRig(t, pol, g, true) // references learnt alone; BE idles, so none is stopped
		// BE idles the first half of every 8 windows and works the second, as --be-duty 8s.
		duty := func(i int) string {
			step(50, i%8 >= 4, i%8 < 4)
			return s.loop.Status().LC[0].Reference
		}
		i := 0
		for ; i < 60 && !g.holds[100]; i++ {
			duty(i)
		}
		if !g.holds[100] {
			t.Fatalf("traps %v: no gate arm in 60 windows: %+v", traps, s.loop.Status().Last)
		}
		for ; i%8 != 2; i++ { // into BE's idle half, a window past the move
			duty(i)
		}
		if ref := duty(i); strings.Contains(ref, "its last sample 0s ago") == traps || !g.holds[100] {
			t.Errorf("traps %v: BE idle under %s: reference %q, want it learnt there: %v", traps, s.loop.Status().Arm, ref, !traps)
		}
	}
}
