package reconcile_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	. "github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// startedAt is a Procs whose every process started at one tick.
type startedAt uint64

func (s startedAt) Stat(pid int) (registry.ProcInfo, error) {
	return registry.ProcInfo{Start: uint64(s), Comm: fmt.Sprint("p", pid)}, nil
}

// newFastRig is newRig whose controller opens the groups the rig's
// registry knows (TraceEvents.Known), as the daemon does in bpf mode:
// processes start at tick start, tracing (fastAfter) began at tick 100.
func newFastRig(t *testing.T, start uint64, known func(te *TraceEvents) func(int) (int, []tsg.Group, bool)) *reconciletest.Rig {
	t.Helper()
	return reconciletest.New(t, reconciletest.Policy, reconciletest.Options{
		Procs: startedAt(start),
		Known: func(reg *registry.Registry) func(int) (int, []tsg.Group, bool) {
			return known(TraceEventsFastAfter(reg, 100))
		},
	})
}

func probes(d *rmfake.Driver) int { return d.Controls(ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO) }

// TestFastPathClassesWithoutScan: a context whose setup the tracer saw
// is classed with one client probe, not a scan of every handle.
func TestFastPathClassesWithoutScan(t *testing.T) {
	g := newFastRig(t, 500, func(te *TraceEvents) func(int) (int, []tsg.Group, bool) { return te.Known })
	last := g.Start(100, policy.Process{Comm: "trainer"})
	before := probes(g.Driver)
	g.Tick(last + 30*time.Millisecond)
	g.WantAll(100, 200, tsg.LevelLow)
	if n := probes(g.Driver) - before; n != 1 {
		t.Errorf("classing made %d GET_HANDLE_INFO probes, want 1 (no scan)", n)
	}
}

// TestFastPathFallsBack: groups the registry cannot vouch for (a process
// older than tracing), or a fast open that fails, go through discovery.
func TestFastPathFallsBack(t *testing.T) {
	for _, tt := range []struct {
		name  string
		start uint64
		known func(te *TraceEvents) func(int) (int, []tsg.Group, bool)
	}{
		{"started before tracing", 50, func(te *TraceEvents) func(int) (int, []tsg.Group, bool) { return te.Known }},
		{"wrong fd", 500, func(te *TraceEvents) func(int) (int, []tsg.Group, bool) {
			return func(pid int) (int, []tsg.Group, bool) {
				fd, gs, ok := te.Known(pid)
				return fd + 1, gs, ok
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			g := newFastRig(t, tt.start, tt.known)
			last := g.Start(100, policy.Process{Comm: "trainer"})
			before := probes(g.Driver)
			g.Tick(last + 30*time.Millisecond)
			g.WantAll(100, 200, tsg.LevelLow)
			if n := probes(g.Driver) - before; n < 100 {
				t.Errorf("classing made %d probes: discovery did not run", n)
			}
		})
	}
}
