package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// The window after an engine that gates its own requests is told another
// gate runs the gate it had, and is not counted as aligned; one whose word
// did not change is (TestSLOLoopSelfGatedLags has the arm's own moves).

// toldGate is what gate.Gate.Pushed tells a self-gated engine with the
// policy's gate on: the steered hold, else the policy's mode (on).
func toldGate(f *fakeSteerer, pid int) bool {
	if h, ok := f.holds[pid]; ok {
		return h
	}
	return true
}

// gateLagRig is SLO mode with the policy's gate on, LC 100 (and 101, once
// started) gating its own requests, three windows of LC 100 played.
func gateLagRig(t *testing.T) (*sloRig, *fakeSteerer) {
	s := newSLORig(t, strings.Replace(gateArmPolicy, "%s", policy.GateOn, 1))
	f := &fakeSteerer{selfGated: map[int]bool{100: true, 101: true}}
	s.loop.Gate = f
	s.loop.Step(s.Now)
	s.Tick(s.Now)
	for range 3 {
		s.pushWindow(100)
	}
	if f.holds[100] {
		t.Fatal("the search's arm has the gate: nothing to test")
	}
	return s, f
}

// pushWindow plays one window of the LCs pids, each pushing just before
// the step.
func (s *sloRig) pushWindow(pids ...int) {
	s.Now += time.Second
	for _, pid := range pids {
		pushP50(s.loop, pid, 6000)
	}
	s.loop.Step(s.Now)
	s.Tick(s.Now)
}

// lagAfter plays the window in which LC pid is first steered and the
// next, and checks how the loop counted the next: lagged where pid's
// engine was told the gate in its reply before (the policy's) and not
// after (the arm's).
func lagAfter(t *testing.T, s *sloRig, f *fakeSteerer, pid int, pids ...int) {
	t.Helper()
	s.Now = s.Now.Truncate(time.Second)
	before := toldGate(f, pid)
	s.pushWindow(pids...)
	after := toldGate(f, pid)
	s.pushWindow(pids...)
	if !before || after {
		t.Fatalf("LC %d told the gate %v, then %v: nothing to test", pid, before, after)
	}
	if last := s.loop.Status().Last; last == nil || last.Aligned {
		t.Errorf("the window LC %d's engine ran gated under an arm without the gate counted as aligned: %+v", pid, last)
	}
}

// An LC joins a live search whose arm has no gate: until then its engine
// was told the policy's gate (on); it is told off at its next push.
func TestSLOLoopGateLagLCJoins(t *testing.T) {
	s, f := gateLagRig(t)
	s.Clock.Now = uint64(s.Now)
	s.Tick(s.Start(101, policy.Process{Comm: "lc-two"}) + 500*time.Millisecond)
	lagAfter(t, s, f, 101, 100, 101)
}

// The search's LC exits; idle, it falls back to the safe arm (no gate). A
// new LC, told the policy's gate (on) until a search has it, revives it.
func TestSLOLoopGateLagSearchRevived(t *testing.T) {
	s, f := gateLagRig(t)
	s.Feed(&trace.TaskExit{PID: 100, At: uint64(s.Now)})
	s.Tick(s.Now)
	for range 5 {
		s.pushWindow()
	}
	s.Clock.Now = uint64(s.Now)
	s.Tick(s.Start(101, policy.Process{Comm: "lc-two"}) + 500*time.Millisecond)
	lagAfter(t, s, f, 101, 101)
}

// The SLO settings change while the arm has no gate: the engine was told
// off and is told off again, though the new search starts afresh.
func TestSLOLoopGateLagReload(t *testing.T) {
	s, f := gateLagRig(t)
	pol, err := policy.Parse([]byte(strings.Replace(strings.Replace(gateArmPolicy, "%s", policy.GateOn, 1), "window: 1s}", "window: 1s, safe: 300us}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	s.Rec.SetPolicy(pol)
	before := toldGate(f, 100)
	s.pushWindow(100)
	after := toldGate(f, 100)
	s.pushWindow(100)
	if before || after {
		t.Fatalf("told the gate %v, then %v: nothing to test", before, after)
	}
	if last := s.loop.Status().Last; last == nil || !last.Aligned {
		t.Errorf("a window whose engine's word did not change counted as lagged: %+v", last)
	}
}
