package gate

import (
	"context"
	"slices"
	"sort"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// The gate's following of LC processes: which it traces, the GPUs it
// learns for them and their BE, and their launch probes on or off.

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

// armLoop turns the followed LCs' launch probes off while they hold BE
// and on between their requests, until ctx is done: what each LC asked
// for last, as the gate stands when it gets to it (a hold that opened and
// ended meanwhile costs no detach and attach).
func (g *Gate) armLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.armKick:
		}
		g.mu.Lock()
		pids := make([]int, 0, len(g.arming))
		for pid := range g.arming {
			pids = append(pids, pid)
		}
		clear(g.arming)
		g.mu.Unlock()
		sort.Ints(pids)
		for _, pid := range pids {
			g.mu.Lock()
			on := g.launchesWantedLocked(pid)
			_, followed := g.lcs[pid]
			g.mu.Unlock()
			if followed && ctx.Err() == nil {
				g.Arm(pid, on)
			}
		}
	}
}

// launchesWanted reports whether pid's launch probes are to be on: between
// its requests (through them too with launch_probes: always), unless SLO
// mode steered it off the gate (no hold opens for it, and a uprobe on every
// launch costs an eager LC microseconds each).
func (g *Gate) launchesWanted(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.launchesWantedLocked(pid)
}

func (g *Gate) launchesWantedLocked(pid int) bool {
	_, held := g.open[pid]
	hold, steered := g.steered[pid]
	return (g.keepsProbesLocked(pid) || !held) && (!steered || hold)
}

// keepsProbesLocked is whether pid's launch probes stay on through its requests (launch_probes).
func (g *Gate) keepsProbesLocked(pid int) bool {
	switch g.launchProbes {
	case policy.LaunchProbesAlways:
		return true
	case policy.LaunchProbesAuto:
		return g.lcs[pid] != nil && g.lcs[pid].kept
	}
	return false
}

// NoteRewrite records how long pid's launch probes took to come off (detach) or on again
// (LaunchProbesAuto weighs them).
func (g *Gate) NoteRewrite(pid int, took time.Duration, detach bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	lc := g.lcs[pid]
	if lc == nil {
		return
	}
	d := &lc.attaches
	if detach {
		d = &lc.detaches
	}
	if *d = append(*d, took); len(*d) > 16 {
		*d = (*d)[1:]
	}
	g.judgeProbesLocked(pid, lc)
}

// judgeProbesLocked decides again whether lc keeps its launch probes on through its requests
// (LaunchProbesAuto), and brings them to it. A request shorter than a detach gains nothing from
// one: its launches trap until the detach ends. Spans measured while detaching are lengthened by
// the rewrites themselves (a 40 ms graph decode measured 61-68 ms on the H200), so an LC that
// detaches is judged against its detach and attach together, one that keeps against its detach,
// each on four or more spans measured since it last changed.
func (g *Gate) judgeProbesLocked(pid int, lc *gateLC) {
	if len(lc.probeSpans) < 4 || len(lc.detaches) == 0 {
		return
	}
	bound := median(lc.detaches)
	if !lc.kept && len(lc.attaches) > 0 {
		bound += median(lc.attaches)
	}
	if keep := median(lc.probeSpans) < bound; keep != lc.kept {
		g.Log.Info("request gate: an LC's launch probes "+map[bool]string{true: "kept on: its requests end before a detach would", false: "off for its requests again"}[keep],
			"pid", pid, "request_p50", median(lc.probeSpans), "bound", bound)
		lc.kept, lc.probeSpans = keep, nil
		g.armLocked(pid)
	}
}

// armLocked asks armLoop to bring pid's launch probes up to its state.
func (g *Gate) armLocked(pid int) {
	g.arming[pid] = true
	select {
	case g.armKick <- struct{}{}:
	default: // it is awake already
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
		for pid := range g.lcs {
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
