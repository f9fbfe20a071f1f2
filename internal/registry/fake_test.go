package registry_test

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
)

var tracePath = filepath.Join("..", "..", "testdata", "h100-580.159.04-alloc-sequence.txt")

func loadTrace(tb testing.TB) []rmfake.TraceAlloc {
	tb.Helper()
	allocs, err := rmfake.ParseTraceFile(tracePath)
	if err != nil {
		tb.Fatal(err)
	}
	return allocs
}

// procs is a process table whose pids the test starts, ends and reuses.
type procs struct {
	mu    sync.Mutex
	live  map[int]registry.ProcInfo
	stats int
}

func newProcs() *procs { return &procs{live: map[int]registry.ProcInfo{}} }

func (p *procs) start(pid int, start uint64, comm string) registry.ProcessID {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.live[pid] = registry.ProcInfo{Start: start, Comm: comm}
	return registry.ProcessID{PID: pid, Start: start}
}

func (p *procs) end(pid int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.live, pid)
}

func (p *procs) Stat(pid int) (registry.ProcInfo, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats++
	info, ok := p.live[pid]
	if !ok {
		return registry.ProcInfo{}, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	}
	return info, nil
}

// viaRecords passes events through the record form the BPF programs send,
// so the registry sees exactly what the decoder makes of real records.
func viaRecords(tb testing.TB, evs []trace.Event) []trace.Event {
	tb.Helper()
	out := make([]trace.Event, len(evs))
	for i, ev := range evs {
		b, err := trace.Encode(ev)
		if err != nil {
			tb.Fatal(err)
		}
		if out[i], err = trace.Decode(b); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}
