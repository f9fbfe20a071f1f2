// Package signals measures what SLO mode steers by where an app pushes
// nothing: the latency of LC requests traced with uprobes on libcuda
// (TracedLatency) and the progress of BE processes as their kernel
// launches per second (BEProgress), as internal/signal's sources, which
// SLO mode reads once a window.
package signals

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/daemon/attach"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// LaunchCounter counts a process's kernel launches (trace.LaunchCounter:
// uprobes on its libcuda, counted in the kernel).
type LaunchCounter interface {
	Attach(pid int, library string) error
	Count(pid int) (uint64, bool)
	Detach(pid int)
}

// BEProgress measures BE progress as kernel launches per second, for the
// SLO mode's BE share: each BE process's rate over a window, against its
// rate in windows when every GPU process the daemon knows on its GPUs was
// BE (or an MPS server, which runs only its clients' work) at the
// window's start and its end (BE alone: before an LC came, after the last
// one went, or on a GPU no LC uses; signal.BEWindow.Alone). A training
// step launches the same kernels each time, and a launch blocks once the
// queue is full, so over a window of many steps the launch rate follows
// the completion rate. Only the BE processes are probed: the LC pays
// nothing. A process whose rate alone is not known yet adds nothing to
// the share; with none known the share is unknown (NaN), as without a
// signal.ShareSource. Roll runs on the SLO loop; Status is safe from others.
type BEProgress struct {
	Counter LaunchCounter
	// Library finds the libcuda a process has mapped (default:
	// trace.FindLibrary with its pid).
	Library func(pid int) (string, error)
	Log     *slog.Logger

	procs map[string]*beProc // by ProcRef.Key
	// guard bounds what one process's library costs a window (attach).
	guard attach.Guard

	mu     sync.Mutex
	status []api.SLOBE
}

type beProc struct {
	pid   int
	at    time.Duration // the last reading's time (the loop's clock)
	count uint64        // the last reading
	rate  float64       // launches/s over the last window; NaN: none yet
	alone []float64     // rates of its last BE-alone windows, oldest first
	err   string        // why it is not counted
}

// Alone windows kept per process, and needed before its rate alone is
// trusted. A median of a few windows: one window that caught a burst of
// host work (a checkpoint, a data loader stall) does not set it.
const (
	aloneKept = 9
	aloneMin  = 3
)

// attachFailed logs that p could not be attached: a warning the first
// time, and at debug level on each retry (said once already).
func attachFailed(log *slog.Logger, retry bool, msg string, p policy.ProcRef, err error) {
	level := slog.LevelWarn
	if retry {
		level = slog.LevelDebug
	}
	log.Log(context.Background(), level, msg, "pid", p.PID, "comm", p.Comm, "err", err, "retry_in", attach.Retry)
}

// NewBEProgress counts launches with c.
func NewBEProgress(c LaunchCounter, log *slog.Logger) *BEProgress {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &BEProgress{Counter: c, Log: log, procs: map[string]*beProc{}}
}

// Roll closes the window that ends at now over the BE processes bes. It
// returns, by ProcRef.Key, the rate of each one counted, not stopped, whose
// rate alone is known (signal.BEShare sums them over a set).
func (b *BEProgress) Roll(now time.Duration, bes []signal.BEWindow) map[string]signal.BERate {
	refs := make([]policy.ProcRef, len(bes))
	for i, w := range bes {
		refs[i] = w.ProcRef
	}
	dropGone(b.procs, refs, func(p *beProc) { b.Counter.Detach(p.pid) })
	rates := map[string]signal.BERate{}
	var st []api.SLOBE
	deadline := time.Now().Add(attach.Budget)
	for _, w := range bes {
		p, alone, paused := w.ProcRef, w.Alone, w.Stopped
		k := p.Key()
		bp := b.procs[k]
		retry := bp != nil && bp.err != "" && now-bp.at >= attach.Retry
		if retry {
			b.Counter.Detach(bp.pid) // try again: a process may map libcuda late
		}
		if bp == nil || retry {
			bp = b.attach(p, now, retry, deadline)
			b.procs[k] = bp
		}
		s := api.SLOBE{PID: p.PID, Comm: p.Comm}
		switch {
		case bp.err != "":
			s.Signal = "not counted: " + bp.err
		case bp.at == now: // attached now: its first window starts
			s.Signal = "counting from this window"
		default:
			b.read(bp, now)
			if bp.err != "" {
				s.Signal = "not counted: " + bp.err
				break
			}
			// A window with no launch alone is a process not yet at work
			// (loading its data or model), not its rate alone.
			if bp.rate > 0 && alone && !paused { // false for NaN
				if bp.alone = append(bp.alone, bp.rate); len(bp.alone) > aloneKept {
					bp.alone = bp.alone[1:]
				}
			}
			if !math.IsNaN(bp.rate) { // a rate is NaN or finite (read)
				s.LaunchesPerS = bp.rate
			}
			s.Signal = "counted"
			if len(bp.alone) < aloneMin {
				s.Signal = fmt.Sprintf("learning its rate alone (%d of %d windows without LC)", len(bp.alone), aloneMin)
				break
			}
			s.AlonePerS = stats.Median(bp.alone)
			if math.IsNaN(bp.rate) || paused || s.AlonePerS <= 0 {
				break
			}
			share := math.Min(1, bp.rate/s.AlonePerS)
			s.Share = &share
			rates[k] = signal.BERate{Rate: bp.rate, Alone: s.AlonePerS}
		}
		st = append(st, s)
	}
	b.mu.Lock()
	b.status = st
	b.mu.Unlock()
	return rates
}

// BELibrary finds a BE process's libcuda when --libcuda names one: the
// file the process has mapped, else that one. With the chart's request
// tracing --libcuda is the host's file, and a pod that brings its own
// libcuda (CUDA forward compatibility) maps another, whose launches a
// count on the host's file would never see.
func BELibrary(explicit string) func(pid int) (string, error) {
	return func(pid int) (string, error) {
		if lib, err := attach.MappedLibCUDA(pid); err == nil {
			return lib, nil
		}
		return explicit, nil
	}
}

// attach starts counting p's launches, waiting for its library until
// deadline at most (attach.Guard).
func (b *BEProgress) attach(p policy.ProcRef, now time.Duration, retry bool, deadline time.Time) *beProc {
	bp := &beProc{pid: p.PID, at: now, rate: math.NaN()}
	find := b.Library
	if find == nil {
		find = attach.MappedLibCUDA
	}
	var lib string
	err := b.guard.Run(p.PID, deadline, func() error {
		l, err := find(p.PID)
		if err == nil {
			err = b.Counter.Attach(p.PID, l)
		}
		lib = l
		return err
	}, func() { b.Counter.Detach(p.PID) })
	if err != nil {
		bp.err = err.Error()
		attachFailed(b.Log, retry, "BE progress: not counting a BE process's launches; BE share leaves it out", p, err)
		return bp
	}
	b.Log.Info("BE progress: counting launches", "pid", p.PID, "comm", p.Comm, "libcuda", lib)
	return bp
}

// read takes bp's count at now and its rate since the last reading. A
// count that cannot be read marks bp not counted, to be attached again
// after attach.Retry; one that went back starts a new baseline.
func (b *BEProgress) read(bp *beProc, now time.Duration) {
	n, ok := b.Counter.Count(bp.pid)
	switch {
	case !ok:
		bp.rate, bp.err, bp.at = math.NaN(), "its count could not be read", now
		return
	case n < bp.count || now <= bp.at:
		// Counted again from zero under us, or the clock did not move:
		// no rate for this window.
		bp.rate, bp.count, bp.at = math.NaN(), n, now
		return
	}
	bp.rate = float64(n-bp.count) / (now - bp.at).Seconds()
	bp.count, bp.at = n, now
}

// Status is each BE process's progress as of the last window.
func (b *BEProgress) Status() []api.SLOBE {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.status)
}

// Close stops counting every process (SLO mode turned off).
func (b *BEProgress) Close() {
	for k, p := range b.procs {
		b.Counter.Detach(p.pid)
		delete(b.procs, k)
	}
}
