package slomode

import (
	"maps"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// sampleSource is where an LC process's windows come from ("pushed" or
// "traced"): each numbers its own, and a window is used once.
type sampleSource struct {
	pid  int
	kind string
}

// traceWant is one LC process as request tracing sees it: when the loop
// first saw it, whether tracing is asked for it, and for how many windows
// in a row it has pushed since.
type traceWant struct {
	seen   time.Duration
	traced bool
	pushed int
}

// Request tracing waits TraceAfter windows for a new LC process to push
// (an app that pushes has done so by then), and goes on tracing one that
// starts pushing until it has pushed in UntraceAfter windows in a row: an
// app that pushes less often than every two windows is not attached and
// detached in turn.
const (
	TraceAfter   = 2
	UntraceAfter = 4
)

// toTrace lists the processes of lcs request tracing is to measure: those
// with an objective whose app pushed no window in the last two, and each
// one traced until it pushes steadily. Once a window.
func (l *Loop) toTrace(pol *policy.Policy, lcs []policy.ProcRef, now time.Duration) []policy.ProcRef {
	window := pol.SLO.Window
	var judged, out []policy.ProcRef
	for _, p := range lcs {
		// Not judged, or an MPS server classed lc (its clients launch
		// from their own libcuda): nothing to measure. Nor one whose
		// server's histograms are scraped.
		if _, ok := pol.Objective(p.Decision); ok && !isMPSServer(p) && !l.scraped(p.PID) {
			judged = append(judged, p)
		}
	}
	keys := make(map[string]bool, len(judged))
	for _, p := range judged {
		keys[p.Key()] = true
	}
	maps.DeleteFunc(l.tracing, func(k string, _ *traceWant) bool { return !keys[k] })
	for _, p := range judged {
		k := p.Key()
		w := l.tracing[k]
		if w == nil {
			w = &traceWant{seen: now}
			l.tracing[k] = w
		}
		s, ok := l.Latency.Latest(p.PID)
		fresh := ok && now-s.At <= 2*window // the loop uses no older push
		switch {
		case !w.traced:
			w.traced = !fresh && now-w.seen >= TraceAfter*window
			w.pushed = 0
		case fresh:
			w.pushed++
			w.traced = w.pushed < UntraceAfter
		default:
			w.pushed = 0
		}
		if w.traced {
			out = append(out, p)
		}
	}
	return out
}

// scraped says whether process pid's latency comes from its server's
// histograms this window (Scraped gave a window).
func (l *Loop) scraped(pid int) bool {
	if l.Scraped == nil {
		return false
	}
	_, ok := l.Scraped.Latest(pid)
	return ok
}
