package gate

import (
	"context"
	"maps"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// The followed LCs' launch probes: on between their requests, off for each (launch_probes: between)
// or kept on through them (always, or auto for an LC whose requests end before a detach would).

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
		pids := slices.Sorted(maps.Keys(g.arming))
		clear(g.arming)
		g.mu.Unlock()
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
	if detach {
		pushRecent(&lc.detaches, took)
	} else {
		pushRecent(&lc.attaches, took)
	}
	g.judgeProbesLocked(pid, lc)
}

// judgeProbesLocked decides again whether lc keeps its launch probes on through its requests
// (LaunchProbesAuto), and brings them to it. A request shorter than a detach gains nothing from
// one: its launches trap until the detach ends. Spans measured while detaching are lengthened by
// the rewrites themselves (docs/GATE.md), so an LC that detaches is judged against its detach and
// attach together, one that keeps against its detach, each on four or more spans measured since
// it last changed.
func (g *Gate) judgeProbesLocked(pid int, lc *gateLC) {
	if g.launchProbes != policy.LaunchProbesAuto || len(lc.probeSpans) < 4 || len(lc.detaches) == 0 {
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

// pushRecent appends d to *ds, keeping the last 16: an LC's recent spans and rewrites.
func pushRecent(ds *[]time.Duration, d time.Duration) {
	if *ds = append(*ds, d); len(*ds) > 16 {
		*ds = (*ds)[1:]
	}
}
