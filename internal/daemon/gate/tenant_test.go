package gate

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// TestGateShareIsPerTenant (issue 52, finding 3): an LC of uid A that
// synchronizes every millisecond kept another uid's BE stopped 56.6% of
// 120 s through the gate's one global budget, and an honest LC of a third
// uid on the same GPU got its own hold for 11 of 120 requests. Each
// tenant now has its part of the share: A's LC keeps the BE stopped no
// more than A's part (half of the share with two tenants' LCs followed,
// plus one full part at the start), and the honest LC's every request is
// held. On the gate's own clock: no wall-clock time.
func TestGateShareIsPerTenant(t *testing.T) {
	pol := gatePolicy(policy.GateOn) // share 0.5, max_hold 2 s
	r := newGateRig(t, pol)
	r.procs.lc = nil
	r.g.followLCs(nil) // the rig's LC, of another tenant, goes
	r.procs.lc = []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}, {PID: 11, Start: 1, GPUs: []int{0}}}
	r.procs.be = []policy.ProcRef{{PID: 20, Start: 1, GPUs: []int{0}}}
	r.g.Tenant = func(pid int) string { return map[int]string{10: "uid 1001", 11: "uid 1003"}[pid] }
	r.g.followLCs(nil)
	const total = 120 * time.Second
	var stopped time.Duration
	honest, honestHeld := 0, uint64(0)
	for r.now < total {
		// The hostile LC: a call every millisecond, so a hold never idles.
		r.launch(10, 1)
		// The honest LC: a 10 ms request each second.
		if r.now%time.Second == 500*time.Millisecond {
			before := r.g.Stats().Held
			r.launch(11, 2)
			if r.g.Stats().Held > before || r.openFor(11) {
				honestHeld++
			}
			honest++
		}
		if r.now%time.Second == 510*time.Millisecond {
			r.syncReturn(11, 2)
		}
		if r.pause.isStopped(20) {
			stopped += time.Millisecond
		}
		r.advance(time.Millisecond)
	}
	part := pol.Gate.Share / 2
	bound := time.Duration(part*float64(total)) + time.Duration(part*float64(policy.GateWindow)) + // A's part, and its first fill
		time.Duration(honest)*20*time.Millisecond // the honest requests' own holds (10 ms and the idle that ends each)
	if stopped > bound {
		t.Errorf("the BE was stopped %v of %v (%.1f%%); want at most %v (A's part %.2f)", stopped, total, 100*stopped.Seconds()/total.Seconds(), bound, part)
	}
	if honestHeld != uint64(honest) {
		t.Errorf("the honest LC's requests held: %d of %d", honestHeld, honest)
	}
}

// openFor reports whether pid's request holds BE now.
func (r *gateRig) openFor(pid int) bool {
	r.g.mu.Lock()
	defer r.g.mu.Unlock()
	return r.g.open[pid] != nil
}

// TestGateLCOnNoKnownGPUStopsNothing (issue 52, finding 3): an LC whose
// GPUs are not known yet stopped BE on every GPU. It now stops nothing
// until its GPUs are known, then the BE on its GPU alone.
func TestGateLCOnNoKnownGPUStopsNothing(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.procs.lc = []policy.ProcRef{{PID: 12, Start: 1}}
	r.g.followLCs(nil)
	r.launch(12, 1)
	for _, be := range []int{20, 21, 22} {
		if r.pause.everStopped(be) {
			t.Errorf("BE %d stopped for an LC on no known GPU", be)
		}
	}
	r.syncReturn(12, 1)
	r.advance(10 * time.Millisecond)
	r.procs.lc = []policy.ProcRef{{PID: 12, Start: 1, GPUs: []int{1}}}
	r.g.followLCs(nil)
	r.launch(12, 1)
	if !r.pause.isStopped(21) || r.pause.everStopped(20) {
		t.Errorf("its GPU known (1): stopped %v; want BE 21 (GPU 1) and 22 (no known GPU), not 20", r.pause.stopped)
	}
}
