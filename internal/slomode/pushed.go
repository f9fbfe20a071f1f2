package slomode

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// Push takes a stats push's latency window and engine state.
func (l *Loop) Push(pid int, st api.Stats) {
	var s *signal.Latency
	if w := st.Window; w != nil { // converted before the lock: up to MaxSamples values a metric
		us := func(x float64) time.Duration { return time.Duration(x * float64(time.Microsecond)) }
		s = &signal.Latency{Source: signal.Pushed, Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
			Tokens: int(min(w.Tokens, math.MaxInt32)), Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}}
		for q, x := range w.LatencyUs {
			s.Quantiles[q] = us(x)
		}
		for m, xs := range w.SamplesUs { // the daemon checked the names and values
			metric := map[string]string{"request": signal.MetricRequest, "ttft": signal.MetricTTFT, "tpot": signal.MetricTPOT}[m]
			for _, x := range xs[:min(len(xs), signal.MaxSamples)] {
				s.Samples[metric] = append(s.Samples[metric], us(x))
			}
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if st.Engine != nil {
		l.engines[pid] = *st.Engine
	}
	if s != nil {
		s.At, s.Seq = l.now(), l.pushed[pid].Seq+1
		l.pushed[pid] = *s
	}
}

// Latest is pid's last pushed window.
func (l *Loop) Latest(pid int) (signal.Latency, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.pushed[pid]
	return s, ok
}

// Pushers are the processes that pushed a window or an engine's state.
func (l *Loop) Pushers() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Concat(slices.Collect(maps.Keys(l.pushed)), slices.Collect(maps.Keys(l.engines)))
}

// Forget drops an exited process's pushed state.
func (l *Loop) Forget(pid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.pushed, pid)
	delete(l.engines, pid)
}
