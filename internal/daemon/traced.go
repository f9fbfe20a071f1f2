package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// TracedLatency measures LC request latency from uprobes on libcuda, for
// apps that do not push their own: on each thread a request is the kernel
// launches until a synchronize call returns (trace.RequestTracker, what
// `gpreemptctl trace requests` shows), its latency first launch to that
// return. That is the GPU part of a request as the app's thread waits for
// it, not arrival to result: CPU-side preparation before the first launch
// is not in it. The SLO loop closes a window once per its own window
// (Roll) and reads each process's last closed window (Latest). Safe for
// concurrent use: Apply runs on the tracer's reader, the rest on the loop.
type TracedLatency struct {
	mu      sync.Mutex
	tracker *trace.RequestTracker
	cur     map[int][]time.Duration // this window's latencies by pid
	last    map[int]LatencySample   // the last closed window's
	start   time.Duration           // when this window began (the loop's clock; -1: not yet)
	seq     uint64
}

// NewTracedLatency returns a source with no window yet.
func NewTracedLatency() *TracedLatency {
	return &TracedLatency{tracker: trace.NewRequestTracker(), cur: map[int][]time.Duration{},
		last: map[int]LatencySample{}, start: -1}
}

// maxTracedPerWindow bounds what one process keeps per window (a
// launch-bound app can complete thousands of requests a second; its
// quantiles are taken over the first ones).
const maxTracedPerWindow = 1 << 16

// Apply folds one tracer event in.
func (t *TracedLatency) Apply(ev trace.Event) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if x, ok := ev.(*trace.TaskExit); ok {
		delete(t.cur, int(x.PID))
		delete(t.last, int(x.PID))
	}
	r, ok := t.tracker.Apply(ev)
	if !ok || r.Result != 0 || r.Latency() <= 0 {
		return // a failed synchronization is not a served request
	}
	pid := int(r.PID)
	if len(t.cur[pid]) < maxTracedPerWindow {
		t.cur[pid] = append(t.cur[pid], r.Latency())
	}
}

// Roll closes the window that ends at now: each process with requests in
// it gets a sample of their quantiles.
func (t *TracedLatency) Roll(now time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.start < 0 || now <= t.start {
		t.start = now
		clear(t.cur) // requests before the first window began are not in any
		return
	}
	for pid, lat := range t.cur {
		t.seq++
		t.last[pid] = LatencySample{At: now, Window: now - t.start, Requests: len(lat), Quantiles: latencyQuantiles(lat), Seq: t.seq}
	}
	clear(t.cur)
	t.start = now
}

// Latest is pid's last closed window.
func (t *TracedLatency) Latest(pid int) (LatencySample, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.last[pid]
	return s, ok
}

// latencyQuantiles are the quantiles the SLO loop reads (quantileName),
// nearest-rank over lat as stats.Summarize takes them.
func latencyQuantiles(lat []time.Duration) map[string]time.Duration {
	ns := make([]float64, len(lat))
	for i, d := range lat {
		ns[i] = float64(d)
	}
	s := stats.Summarize(ns)
	return map[string]time.Duration{"p50": time.Duration(s.P50), "p90": time.Duration(s.P90),
		"p99": time.Duration(s.P99), "p999": time.Duration(s.P999), "max": time.Duration(s.Max)}
}

// OpenTracedLatency attaches uprobes on lib's launch and synchronize
// functions (trace.DefaultLaunchSymbols, trace.DefaultSyncSymbols) for
// every process but this one, and feeds what they report into a
// TracedLatency until ctx is done. lib "": the libcuda the linker's cache
// names. The returned func detaches. Errors are the tracer's
// (trace.ErrNotRoot, trace.ErrBPFUnavailable, trace.ErrNoLibrary,
// trace.ErrNoSymbols).
func OpenTracedLatency(ctx context.Context, lib string, log *slog.Logger) (*TracedLatency, func() error, error) {
	path, err := trace.FindLibrary(trace.LibCUDA, lib, 0)
	if err != nil {
		return nil, nil, err
	}
	var probes []trace.Probe
	for _, s := range trace.DefaultLaunchSymbols {
		probes = append(probes, trace.Probe{Library: path, Symbol: s, Role: trace.RoleLaunch})
	}
	for _, s := range trace.DefaultSyncSymbols {
		probes = append(probes, trace.Probe{Library: path, Symbol: s, Role: trace.RoleSync})
	}
	tr, err := trace.Open(ctx, trace.Options{Probes: probes, MountTracefs: true, Buffer: 1 << 14, Logger: log})
	if err != nil {
		return nil, nil, fmt.Errorf("request tracing on %s: %w", path, err)
	}
	t := NewTracedLatency()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range tr.Events() {
			t.Apply(ev)
		}
	}()
	return t, func() error {
		tr.Stop()
		<-done
		return tr.Close()
	}, nil
}
