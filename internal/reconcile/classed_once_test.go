package reconcile

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestClassedOnceWhenSetupArrivesLate: the tracer delivers the second half
// of a context's setup (the copy groups, GPFIFO_SCHEDULE, libcuda's own
// SET_TIMESLICE(2048)) only after the debounce fired and the context was
// classed, though all of it happened before. The context is classed once,
// with one latency sample, and libcuda's SET is not drift.
func TestClassedOnceWhenSetupArrivesLate(t *testing.T) {
	g := newRig(t, testPolicy)
	g.insp[100] = policy.Process{Comm: "trainer"}
	p := g.drv.NewProc(100)
	if _, err := g.drv.Replay(p, g.allocs); err != nil {
		t.Fatal(err)
	}
	if err := g.drv.LibcudaPostSetup(p, 8, g.groups(100)[0].Client); err != nil {
		t.Fatal(err)
	}
	evs := tracetest.LibcudaContext(g.allocs, tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}, &g.clock)
	half := len(evs) / 2
	for _, ev := range evs[:half] {
		g.feed(ev)
	}
	end := time.Duration(g.clock.Now)
	g.tick(end + 30*time.Millisecond)
	g.wantAll(100, 200, tsg.LevelLow)
	for _, ev := range evs[half:] {
		g.feed(ev)
	}
	if next := g.tick(end + 35*time.Millisecond); next != 0 {
		t.Errorf("late setup events scheduled work at %v", next)
	}
	g.wantAll(100, 200, tsg.LevelLow)
	if n := histCount(t, g.prom, "gpreemptd_classed_latency_seconds"); n != 1 {
		t.Errorf("classed %d times, want 1", n)
	}
	if got := counter(t, g.prom, "gpreemptd_drift_total", "reapplied"); got != 0 {
		t.Errorf("libcuda's own SET before classing counted as drift: %v re-applies", got)
	}
	if got := counter(t, g.prom, "gpreemptd_applies_total", "be"); got != 4 {
		t.Errorf("%v group applies, want 4", got)
	}
}

// TestSetAfterClassingIsDrift: a SET that reached RM after our apply is
// drift, whoever made it (the owner too).
func TestSetAfterClassingIsDrift(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})
	at := last + 30*time.Millisecond
	g.tick(at)
	compute := g.groups(100)[0]
	owner := tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}
	g.clock.Now = uint64(at + time.Millisecond)
	g.feed(tracetest.SetTimeslice(owner, 8, compute.Client, compute.Handle, 2048, 0, &g.clock))
	if next := g.tick(at + 2*time.Millisecond); next != 0 {
		t.Fatalf("next %v", next)
	}
	if got := counter(t, g.prom, "gpreemptd_drift_total", "reapplied"); got != 1 {
		t.Errorf("drift re-applied %v times, want 1", got)
	}
}
