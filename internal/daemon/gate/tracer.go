package gate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/attach"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// Tracer attaches uprobes on libcuda's launch and synchronize
// functions to the LC processes the request gate follows, one process at
// a time (a BE launching 20,000 kernels a second is never traced), and
// feeds what they report to the gate. Launches and synchronizations are
// two tracers: a followed LC's launch probes are attached between its
// requests (arm), where the first launch is the one that matters, and
// through them where launch_probes keeps them. The
// tracers are opened at the first LC to follow, so a policy with the gate
// off costs nothing.
type Tracer struct {
	ctx  context.Context
	gate *Gate
	log  *slog.Logger
	// Library finds the libcuda a process has mapped (default
	// attach.MappedLibCUDA).
	Library func(pid int) (string, error)

	mu       sync.Mutex
	syncs    *trace.Tracer // synchronize probes, while followed
	launches *trace.Tracer // launch probes, while armed
	done     sync.WaitGroup
	attached map[string]policy.ProcRef // ProcRef.Key -> the process
	libs     map[int]string            // pid -> its libcuda
	armed    map[int]bool
	failed   error // opening the tracers failed: not retried
	// guard bounds what one process's library costs the gate's loop;
	// refused holds when each process whose attach failed is tried
	// again (attach.Retry on).
	guard   attach.Guard
	refused map[string]time.Time
}

func NewTracer(ctx context.Context, g *Gate, log *slog.Logger) *Tracer {
	return &Tracer{ctx: ctx, gate: g, log: log, attached: map[string]policy.ProcRef{}, libs: map[int]string{}, armed: map[int]bool{}}
}

// Follow attaches the processes of lcs not traced yet and detaches the
// others.
func (t *Tracer) Follow(lcs []policy.ProcRef) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.syncs == nil && len(lcs) > 0 && t.failed == nil {
		if err := t.open(); err != nil {
			t.failed = err
			t.log.Error("request gate: cannot trace LC processes; the gate holds nothing", "err", err)
		}
	}
	want := map[string]policy.ProcRef{}
	for _, p := range lcs {
		want[p.Key()] = p
	}
	for k, p := range t.attached {
		if _, ok := want[k]; !ok {
			t.syncs.DetachProcess(p.PID)
			if t.armed[p.PID] {
				t.launches.DetachProcess(p.PID)
			}
			delete(t.attached, k)
			delete(t.libs, p.PID)
			delete(t.armed, p.PID)
		}
	}
	if t.syncs == nil {
		return
	}
	find := t.Library
	if find == nil {
		find = attach.MappedLibCUDA
	}
	if t.refused == nil {
		t.refused = map[string]time.Time{}
	}
	for k := range t.refused {
		if _, ok := want[k]; !ok {
			delete(t.refused, k)
		}
	}
	deadline := time.Now().Add(attach.Budget)
	for k, p := range want {
		if _, ok := t.attached[k]; ok {
			continue
		}
		if at, ok := t.refused[k]; ok && time.Since(at) < attach.Retry {
			continue
		}
		// Launch probes only where a hold may open (not steered off).
		launches := t.gate == nil || t.gate.launchesWanted(p.PID)
		var lib string
		err := t.guard.Run(p.PID, deadline, func() error {
			l, err := find(p.PID)
			if err == nil {
				err = t.syncs.AttachProcess(p.PID, l)
			}
			if err == nil && launches {
				if err = t.launches.AttachProcess(p.PID, l); err != nil {
					t.syncs.DetachProcess(p.PID)
				}
			}
			lib = l
			return err
		}, func() {
			t.syncs.DetachProcess(p.PID)
			t.launches.DetachProcess(p.PID)
		})
		if err != nil {
			t.refused[k] = time.Now()
			t.log.Warn("request gate: not tracing an LC process", "pid", p.PID, "comm", p.Comm, "err", err, "retry_in", attach.Retry)
			continue
		}
		t.attached[k], t.libs[p.PID], t.armed[p.PID] = p, lib, launches
		t.log.Info("request gate: following an LC process", "pid", p.PID, "comm", p.Comm, "libcuda", lib)
	}
}

// Arm attaches pid's launch probes (on) or detaches them.
func (t *Tracer) Arm(pid int, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	lib, ok := t.libs[pid]
	if !ok || t.launches == nil || t.armed[pid] == on {
		return
	}
	// Until the probes are off, every launch of the held request traps:
	// how long each change takes is logged, and weighed by the gate (launch_probes).
	start, launches := time.Now(), t.launches // the guard's calls may outlive this one
	if !on {
		launches.DetachProcess(pid)
	} else if err := t.guard.Run(pid, time.Now().Add(attach.Budget), func() error { return launches.AttachProcess(pid, lib) },
		func() { launches.DetachProcess(pid) }); err != nil { // the library is opened again: bounded as follow's attach is
		t.log.Warn("request gate: re-arming an LC's launch probes", "pid", pid, "err", err)
		return
	}
	t.armed[pid] = on
	took := time.Since(start)
	t.log.Debug("request gate: launch probes "+map[bool]string{true: "on", false: "off"}[on], "pid", pid, "took", took)
	if t.gate != nil {
		t.gate.NoteRewrite(pid, took, !on)
	}
}

func (t *Tracer) open() error {
	// The synchronizes stay on; the launches and queued work go off while a hold is open.
	all := trace.RequestProbes("")
	syncs := slices.DeleteFunc(slices.Clone(all), func(p trace.Probe) bool { return p.Role != trace.RoleSync })
	launches := slices.DeleteFunc(all, func(p trace.Probe) bool { return p.Role == trace.RoleSync })
	openOne := func(what string, probes []trace.Probe) (*trace.Tracer, error) {
		// Read every 2 ms (a shorter deadline rounds to 0 in the ring buffer
		// reader's epoll wait, which would spin): a request's first launch reaches the gate
		// a poll late, and BE runs beside the request until then.
		tr, err := trace.Open(t.ctx, trace.Options{Probes: probes, PerProcess: true, MountTracefs: true, Buffer: 1 << 14, Poll: 2 * time.Millisecond, Logger: t.log})
		if err != nil {
			return nil, fmt.Errorf("request gate tracing (%s): %w", what, err)
		}
		t.done.Go(func() {
			for ev := range tr.Events() {
				t.gate.Observe(ev)
			}
		})
		return tr, nil
	}
	var err error
	if t.syncs, err = openOne("sync", syncs); err != nil {
		return err
	}
	if t.launches, err = openOne("launch", launches); err != nil {
		t.syncs.Stop()
		t.done.Wait()
		t.syncs.Close()
		t.syncs = nil
		return err
	}
	return nil
}

// Close detaches everything.
func (t *Tracer) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.syncs == nil {
		return nil
	}
	t.syncs.Stop()
	t.launches.Stop()
	t.done.Wait()
	err := errors.Join(t.syncs.Close(), t.launches.Close())
	t.syncs, t.launches = nil, nil
	return err
}
