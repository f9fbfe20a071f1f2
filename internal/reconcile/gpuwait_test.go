package reconcile

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestPerGPURuleWaitsForTheGPU: a process a per-GPU rule could match is
// not classed before NVML lists its GPU (deciding without it would give
// it the class of the processes on another GPU, or none); once the GPU is
// known it is classed by that rule. A process an earlier rule matches is
// classed at once.
func TestPerGPURuleWaitsForTheGPU(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "infer"})
	now := last + 30*time.Millisecond
	for range 3 {
		g.tick(now)
		if ts := uint64(g.groups(100)[0].Timeslice); ts != 2048 {
			t.Fatalf("classed (compute group at %d us) before its GPU was known", ts)
		}
		now += gpuWait
	}
	info := g.insp[100]
	info.GPUs = []policy.GPU{{Index: 1}}
	g.insp[100] = info
	now += gpuWait
	g.tick(now)
	g.wantAll(100, 2000, tsg.LevelMedium) // rule gpu1: burstable, 2 ms

	// The trainer rule comes before the GPU rule: no wait.
	last = g.start(200, policy.Process{Comm: "trainer"})
	g.tick(last + 30*time.Millisecond)
	g.wantAll(200, 200, tsg.LevelLow)
}
