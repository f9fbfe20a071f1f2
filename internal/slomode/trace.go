package slomode

import (
	"cmp"
	"maps"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// sampleSource is where an LC's windows come from (a Source constant): each numbers its own, used once.
type sampleSource struct {
	pid  int
	kind string
}

// traceWant is one LC as request tracing sees it: when first seen, whether traced, and the windows in a row it pushed since.
type traceWant struct {
	seen   time.Duration
	traced bool
	pushed int
}

// Tracing waits TraceAfter windows for a new LC to push, and traces one until it pushed UntraceAfter in a row (no attach-detach churn).
const TraceAfter, UntraceAfter = 2, 4

// toTrace lists the lcs request tracing is to measure: with an objective and no push in the last two windows, until it pushes steadily;
// not an MPS server (its clients launch from their own libcuda), nor one whose server's histograms are scraped.
func (l *Loop) toTrace(pol *policy.Policy, lcs []policy.ProcRef, now time.Duration) []policy.ProcRef {
	judged := map[string]bool{}
	var out []policy.ProcRef
	for _, p := range lcs {
		_, ok := pol.Objective(p.Decision)
		if ok && l.Scraped != nil {
			_, scraped := l.Scraped.Latest(p.PID)
			ok = !scraped
		}
		if !ok || isMPSServer(p) {
			continue
		}
		k := p.Key()
		judged[k] = true
		w := cmp.Or(l.tracing[k], &traceWant{seen: now})
		l.tracing[k] = w
		s, ok := l.Latency.Latest(p.PID)
		switch fresh := ok && now-s.At <= 2*pol.SLO.Window; { // the loop uses no older push
		case !w.traced:
			w.traced, w.pushed = !fresh && now-w.seen >= TraceAfter*pol.SLO.Window, 0
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
	maps.DeleteFunc(l.tracing, func(k string, _ *traceWant) bool { return !judged[k] })
	return out
}
