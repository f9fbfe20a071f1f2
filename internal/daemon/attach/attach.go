// Package attach bounds the library work gpreemptd does for one process
// (finding the libcuda it mapped, reading its symbols, attaching uprobes):
// the SLO loop and the request gate's loop wait for it no longer than a
// deadline, whatever file the process maps.
package attach

import (
	"errors"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// Guard bounds the time one process's library work (finding the
// libcuda it mapped, reading its symbols, attaching uprobes) may take its
// caller: the SLO loop and the gate's loop wait for it no longer than a
// deadline. The file is the process's choice: the trace package refuses
// FIFOs and devices and bounds what it reads, but an open or a read on a
// file system its owner serves (FUSE) can still wait for good. Work that
// outlives its deadline goes on alone; if it then succeeds, what it
// attached is undone, and the process is not tried again while it runs.
type Guard struct {
	mu   sync.Mutex
	busy map[int]*job // by pid, while its work runs
}

type job struct {
	finished, abandoned bool
	err                 error
	done                chan struct{}
}

// Budget is how long one pass of a loop (a window's Roll, the
// gate's follow) waits for the library work of all its processes.
const Budget = 250 * time.Millisecond

var (
	errAttachTimeout = errors.New("its library took too long to open and read; not traced")
	errAttachHung    = errors.New("an earlier attach to it has not ended; not traced")
)

// Run runs work for pid, waiting until deadline at most. Past it, run
// returns errAttachTimeout, and undo is called if the work later
// succeeds. While an earlier work for pid runs on, run returns
// errAttachHung at once.
func (g *Guard) Run(pid int, deadline time.Time, work func() error, undo func()) error {
	g.mu.Lock()
	if g.busy == nil {
		g.busy = map[int]*job{}
	}
	if g.busy[pid] != nil {
		g.mu.Unlock()
		return errAttachHung
	}
	j := &job{done: make(chan struct{})}
	g.busy[pid] = j
	g.mu.Unlock()
	go func() {
		err := work()
		g.mu.Lock()
		j.finished, j.err = true, err
		abandoned := j.abandoned
		if !abandoned {
			delete(g.busy, pid)
		}
		close(j.done)
		g.mu.Unlock()
		if !abandoned {
			return
		}
		if err == nil && undo != nil {
			undo()
		}
		g.mu.Lock()
		delete(g.busy, pid)
		g.mu.Unlock()
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-j.done:
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !j.finished {
		j.abandoned = true
		return errAttachTimeout
	}
	return j.err
}

// Running reports whether work for pid still runs.
func (g *Guard) Running(pid int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.busy[pid] != nil
}

// Retry is how long a process that could not be counted (or
// traced) waits before the next try.
const Retry = 30 * time.Second

// MappedLibCUDA is the libcuda pid has mapped, through /proc/PID/root.
func MappedLibCUDA(pid int) (string, error) { return trace.FindLibrary(trace.LibCUDA, "", pid) }
