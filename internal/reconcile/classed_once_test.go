package reconcile_test

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestClassedOnceWhenSetupArrivesLate: the tracer delivers the second half
// of a context's setup (the copy groups, GPFIFO_SCHEDULE, libcuda's own
// SET_TIMESLICE(2048)) only after the debounce fired and the context was
// classed, though all of it happened before. The context is classed once,
// with one latency sample, and libcuda's SET is not drift.
func TestClassedOnceWhenSetupArrivesLate(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	g.Procs[100] = policy.Process{Comm: "trainer"}
	p := g.Driver.NewProc(100)
	if _, err := g.Driver.Replay(p, g.Allocs); err != nil {
		t.Fatal(err)
	}
	if err := g.Driver.LibcudaPostSetup(p, 8, g.Groups(100)[0].Client); err != nil {
		t.Fatal(err)
	}
	evs := tracetest.LibcudaContext(g.Allocs, tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}, &g.Clock)
	half := len(evs) / 2
	for _, ev := range evs[:half] {
		g.Feed(ev)
	}
	end := time.Duration(g.Clock.Now)
	g.Tick(end + 30*time.Millisecond)
	g.WantAll(100, 200, tsg.LevelLow)
	for _, ev := range evs[half:] {
		g.Feed(ev)
	}
	if next := g.Tick(end + 35*time.Millisecond); next != 0 {
		t.Errorf("late setup events scheduled work at %v", next)
	}
	g.WantAll(100, 200, tsg.LevelLow)
	if n := reconciletest.HistCount(t, g.Prom, "gpreemptd_classed_latency_seconds"); n != 1 {
		t.Errorf("classed %d times, want 1", n)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_drift_total", "reapplied"); got != 0 {
		t.Errorf("libcuda's own SET before classing counted as drift: %v re-applies", got)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_applies_total", "be"); got != 4 {
		t.Errorf("%v group applies, want 4", got)
	}
}

// TestSetAfterClassingIsDrift: a SET that reached RM after our apply is
// drift, whoever made it (the owner too).
func TestSetAfterClassingIsDrift(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})
	at := last + 30*time.Millisecond
	g.Tick(at)
	compute := g.Groups(100)[0]
	owner := tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}
	g.Clock.Now = uint64(at + time.Millisecond)
	g.Feed(tracetest.SetTimeslice(owner, 8, compute.Client, compute.Handle, 2048, 0, &g.Clock))
	if next := g.Tick(at + 2*time.Millisecond); next != 0 {
		t.Fatalf("next %v", next)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_drift_total", "reapplied"); got != 1 {
		t.Errorf("drift re-applied %v times, want 1", got)
	}
}
