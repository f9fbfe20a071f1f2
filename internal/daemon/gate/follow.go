package gate

import (
	"context"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// The gate's following of LC processes: which it traces and the GPUs it
// learns for them and their BE (probes.go turns their launch probes on or off).

// gpuLearner reads again which GPUs the classed processes are on.
type gpuLearner interface{ LearnGPUs() }

// gpuRelearn is how often the gate asks for the GPUs of processes whose
// GPUs are not known yet: NVML lists a new context ~80 ms after its
// channel groups appear, after it was classed, and a BE on no known GPU is
// stopped for every LC.
const gpuRelearn = 250 * time.Millisecond

// learnLoop asks l for the GPUs of the followed LCs and of BE while one of
// them is on no known GPU, off the gate's loop (NVML calls), until ctx is
// done.
func (g *Gate) learnLoop(ctx context.Context, l gpuLearner) {
	t := time.NewTicker(gpuRelearn)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.mu.Lock()
		following := len(g.lcs) > 0
		g.mu.Unlock()
		if !following {
			continue
		}
		unknown := func(r policy.ProcRef) bool { return len(r.GPUs) == 0 }
		if slices.ContainsFunc(g.Procs.InClass(class.LC), unknown) || slices.ContainsFunc(g.Procs.InClass(class.BE), unknown) {
			l.LearnGPUs()
		}
	}
}

// followLCs brings the followed LC processes up to the policy: the lc
// class's processes while the gate is on or auto, none while it is off.
func (g *Gate) followLCs(follow func([]policy.ProcRef)) {
	lcs := g.Procs.InClass(class.LC)
	var want []policy.ProcRef
	if g.Procs.Policy().Gate.Mode != policy.GateOff {
		want = slices.Clone(lcs)
	}
	g.mu.Lock()
	want = slices.DeleteFunc(want, func(r policy.ProcRef) bool { return g.selfGated[r.PID] })
	for pid := range g.selfGated {
		if !slices.ContainsFunc(lcs, func(r policy.ProcRef) bool { return r.PID == pid }) {
			delete(g.selfGated, pid) // gone, or no longer lc
		}
	}
	// The share's parts are refilled at the rate of the tenants so far.
	pol := g.Procs.Policy().Gate
	g.refillLocked(g.Now(), pol)
	if pol.LaunchProbes != g.launchProbes { // every followed LC's probes to the new mode
		g.launchProbes = pol.LaunchProbes
		for pid, lc := range g.lcs {
			lc.kept, lc.probeSpans = false, nil // auto judges anew, not on spans another mode shaped
			g.armLocked(pid)
		}
	}
	changed := len(want) != len(g.lcs)
	keep := map[int]bool{}
	for _, r := range want {
		keep[r.PID] = true
		if lc := g.lcs[r.PID]; lc == nil || lc.ref.Start != r.Start {
			changed = true
			pid := r.PID
			g.lcs[pid] = &gateLC{ref: r, delim: request.NewDelimiter(uint32(pid), request.DelimiterConfig{Ceiling: g.Procs.Policy().Gate.Idle,
				// While its launches are not traced, its last call's thread
				// running is it launching the request's next step.
				Busy: func(tid uint32) bool { return g.Running(pid, int(tid)) }}), tenant: g.Tenant(pid)}
		} else {
			lc.ref.GPUs = r.GPUs // learnt since it was followed
		}
	}
	for pid := range g.lcs {
		if !keep[pid] {
			g.closeLocked(pid, "off")
			delete(g.lcs, pid)
		}
	}
	g.pruneBucketsLocked(pol)
	g.mu.Unlock()
	if changed && follow != nil {
		follow(want)
	}
}
