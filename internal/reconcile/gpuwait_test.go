package reconcile_test

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	. "github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestPerGPURuleWaitsForTheGPU: a process a per-GPU rule could match is
// not classed before NVML lists its GPU (deciding without it would give
// it the class of the processes on another GPU, or none); once the GPU is
// known it is classed by that rule. A process an earlier rule matches is
// classed at once.
func TestPerGPURuleWaitsForTheGPU(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "infer"})
	now := last + 30*time.Millisecond
	for range 3 {
		g.Tick(now)
		if ts := uint64(g.Groups(100)[0].Timeslice); ts != 2048 {
			t.Fatalf("classed (compute group at %d us) before its GPU was known", ts)
		}
		now += GPUWait
	}
	info := g.Procs[100]
	info.GPUs = []policy.GPU{{Index: 1}}
	g.Procs[100] = info
	now += GPUWait
	g.Tick(now)
	g.WantAll(100, 2000, tsg.LevelMedium) // rule gpu1: burstable, 2 ms

	// The trainer rule comes before the GPU rule: no wait.
	last = g.Start(200, policy.Process{Comm: "trainer"})
	g.Tick(last + 30*time.Millisecond)
	g.WantAll(200, 200, tsg.LevelLow)
}
