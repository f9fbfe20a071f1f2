package daemon

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

const twoLCPolicy = `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s}
`

// pushP50 pushes one 1 s window of 50 requests at a p50 of us for pid.
func pushP50(l *slomode.Loop, pid int, us float64) {
	l.Push(pid, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50,
		LatencyUs: map[string]float64{"p50": us}}})
}

// TestSLOLoopSlowPusherLearnt: a second LC whose app pushes every 2 s (the
// loop's window is 1 s: each push is used once, so it counts every other
// window) beside one that pushes every window is learnt; the BE timeslice
// does not flip between 1 us and 200 us at every window.
func TestSLOLoopSlowPusherLearnt(t *testing.T) {
	g := newRig(t, twoLCPolicy)
	s := &sloRig{rig: g, loop: NewSLOLoop(g.Rec, g.m, testlog.New(t))}
	loop := s.loop
	g.Tick(g.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	g.Tick(g.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	bets := s.beTimeslice
	window := func(i int, two bool) {
		g.Now += time.Second
		r, _ := slo.EagerPyTorchH100.At(bets())
		pushP50(loop, 100, 6000*r)
		if two && i%2 == 0 {
			pushP50(loop, 101, 3000*r)
		}
		loop.Step(g.Now)
		g.Tick(g.Now)
	}
	loop.Step(g.Now)
	for i := range 40 {
		window(i, false)
	}
	g.Tick(g.Start(101, policy.Process{Comm: "lc-two"}) + g.Now - g.Now%time.Second + 500*time.Millisecond)
	before := loop.Status().Changes
	var seen []time.Duration
	for i := range 30 {
		window(i, true)
		seen = append(seen, bets())
	}
	n := loop.Status().Changes - before
	t.Logf("BE timeslice per window: %v", seen)
	if n > 10 {
		t.Errorf("%d BE timeslice changes in 30 windows", n)
	}
}

// TestSLOLoopSlowPusherPausesBounded: with calibrate: pause the same
// stops the (real) BE process for a bounded number of windows (docs/SLO.md:
// a pause is taken up again "thrice at most"), not every other window.
func TestSLOLoopSlowPusherPausesBounded(t *testing.T) {
	g := newRig(t, sloPausePolicy)
	bes, loop := pausingLoop(t, g, 1)
	be := bes[0]
	g.Tick(g.Start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	g.Tick(g.Start(be.PID, policy.Process{Comm: "trainer"}) + time.Second)
	window := func(i int, two bool) bool {
		g.Now += time.Second
		pushP50(loop, 100, 6000)
		if two && i%2 == 0 {
			pushP50(loop, 101, 3000)
		}
		loop.Step(g.Now)
		g.Tick(g.Now)
		return loop.Pause.Holding()
	}
	loop.Step(g.Now)
	for i := range 30 {
		window(i, false)
	}
	g.Tick(g.Start(101, policy.Process{Comm: "lc-two"}) + g.Now - g.Now%time.Second + 500*time.Millisecond)
	stopped := 0
	for i := range 80 {
		if window(i, true) {
			stopped++
		}
		if i < 4 {
			st := loop.Status()
			t.Logf("window %d: stopped %v, %s: %s", i, st.BEStopped, st.Last.Cause, st.Last.Reason)
		}
	}
	if stopped > 3*(3+1+3) {
		t.Errorf("BE stopped in %d of 80 windows after a second LC that pushes every 2 windows came", stopped)
	}
}

// countTrue: how many of bs are true.
func countTrue(bs []bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// TestSLOLoopObjectiveReloadKeepsBaseline: a reload that changes only
// classes.lc.objective's factor keeps the controller and the LC's
// baseline: no 8 windows of BE at 1 us to learn again a latency that did
// not change.
func TestSLOLoopObjectiveReloadKeepsBaseline(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.loop.Step(s.Now)
	for range 60 {
		s.window(slo.EagerPyTorchH100, false)
	}
	before := s.beTimeslice()
	pol, err := policy.Parse([]byte(strings.Replace(sloPolicy, `objective: "p50<=1.05x"`, `objective: "p50<=1.06x"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	s.Rec.SetPolicy(pol)
	s.window(slo.EagerPyTorchH100, false)
	st := s.loop.Status()
	t.Logf("before the reload at %v; after: %s %v: %s", before, st.Last.Cause, st.BETimeslice, st.Last.Reason)
	if st.Last.Cause == slo.CauseCalibrate {
		t.Errorf("p50<=1.05x -> p50<=1.06x: the LC's p50 baseline is learnt again (%s)", st.Last.Reason)
	}
}

// TestSLOLoopPauseBudgetRealBE: a new LC process every 7 windows for two minutes, each
// to be learnt alone, beside a real BE process under calibrate: pause: the loop stops
// BE for some of them (the process stopped for real), and in no 60 windows for more than
// 6 (10% of any minute).
func TestSLOLoopPauseBudgetRealBE(t *testing.T) {
	g := newRig(t, sloPausePolicy)
	bes, loop := pausingLoop(t, g, 1)
	be := bes[0]
	g.Tick(g.Start(be.PID, policy.Process{Comm: "trainer"}) + time.Second)
	bets := func() time.Duration { return time.Duration(g.Groups(be.PID)[0].Timeslice) * time.Microsecond }
	var lcs []int
	var held []bool // each window's: BE stopped through it
	loop.Step(g.Now)
	for i := range 120 {
		if i%7 == 0 {
			pid := 100 + i/7
			g.Tick(g.Start(pid, policy.Process{Comm: fmt.Sprintf("lc-%d", i/7)}) + time.Millisecond)
			lcs = append(lcs, pid)
		}
		g.Now += time.Second
		r, _ := slowBeside.At(bets())
		if loop.Pause.Holds(policy.ProcRef{PID: be.PID, Start: uint64(be.PID)}) {
			r = 1 // alone
		}
		for _, pid := range lcs {
			pushP50(loop, pid, float64(slowBeside.Baseline)*r/1e3)
		}
		loop.Step(g.Now)
		g.Tick(g.Now)
		held = append(held, loop.Pause.Holding())
		proctest.WaitState(t, be.PID, held[i]) // the real process stopped while held, running once released
	}
	if n := countTrue(held); n < 4 {
		t.Fatalf("BE stopped in %d of 120 windows: fewer than two LCs learnt with BE stopped", n)
	}
	for i := range len(held) - 59 {
		if n := countTrue(held[i : i+60]); n > 6 {
			t.Fatalf("BE stopped in %d of the 60 windows from window %d: more than 10%% of a minute", n, i)
		}
	}
}
