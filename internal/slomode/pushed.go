package slomode

import (
	"maps"
	"slices"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// Push takes a stats push's latency window and engine state.
func (l *Loop) Push(pid int, st api.Stats) {
	var s *signal.Latency
	if st.Window != nil { // converted before the lock
		s = new(signal.FromPush(st.Window))
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
