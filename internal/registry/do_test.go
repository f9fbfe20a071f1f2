package registry_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// discoveryNow is the events' clock as the registry reads it at a
// discovery: after the test's allocations (tracetest.Clock starts at 1e9).
const discoveryNow = 2e9

// machine is a fake driver, its process table and a registry that
// discovers through the attach source, as gpreemptd does on a stock driver.
type machine struct {
	d     *rmfake.Driver
	procs *procs
	src   *hookSource
	r     *registry.Registry
}

// hookSource is the attach source with a hook run after each discovery,
// while the duplicates are open.
type hookSource struct {
	tsg.Source
	after func(pid int)
}

func (s *hookSource) Discover(ctx context.Context, pid int) (*tsg.Process, error) {
	p, err := s.Source.Discover(ctx, pid)
	if err == nil && s.after != nil {
		s.after(pid)
	}
	return p, err
}

func newMachine(t testing.TB) *machine {
	t.Helper()
	m := &machine{d: rmfake.New(), procs: newProcs()}
	m.src = &hookSource{Source: tsg.NewAttachSource(m.d.Host(), tsg.ScanOptions{})}
	m.r = registry.New(registry.Options{Source: m.src, Lister: m.d.Host(), Procs: m.procs, Self: int(daemon.PID),
		Now: func() uint64 { return discoveryNow }})
	return m
}

// spawn starts a process that creates the traced libcuda context.
func (m *machine) spawn(t testing.TB, pid int, start uint64, comm string) (registry.ProcessID, []ioctl.Handle) {
	t.Helper()
	_, clients, err := m.d.ReplayFile(pid, tracePath)
	if err != nil {
		t.Fatal(err)
	}
	return m.procs.start(pid, start, comm), clients
}

// exit ends a process as the kernel does: its descriptors close, and the
// pid is free.
func (m *machine) exit(pid int) {
	m.d.Exit(pid)
	m.procs.end(pid)
}

// alive reports which of clients RM still holds.
func (m *machine) alive(clients []ioctl.Handle) []ioctl.Handle {
	var out []ioctl.Handle
	for _, c := range m.d.Clients() {
		if slices.Contains(clients, c) {
			out = append(out, c)
		}
	}
	return out
}

func TestDo(t *testing.T) {
	m := newMachine(t)
	id, clients := m.spawn(t, 100, 1000, "python3")
	sub := m.r.Subscribe(16)
	err := m.r.Do(t.Context(), id, func(p *tsg.Process) error {
		gs, err := p.Select(tsg.Selector{ComputeOnly: true})
		if err != nil {
			return err
		}
		return p.SetTimeslice(t.Context(), gs, 200*time.Microsecond)
	})
	if err != nil {
		t.Fatal(err)
	}
	if fake := m.d.Groups(100, 8); fake[0].Timeslice != 200 || fake[1].Timeslice != 1024 {
		t.Errorf("fake driver's groups after Do: %+v", fake)
	}
	p, ok := m.r.Process(100)
	if !ok || p.ID != id || p.Comm != "python3" || len(p.Groups) != 4 || !slices.Equal(p.Clients, clients[1:]) {
		t.Fatalf("Process(100) = %+v, %v", p, ok)
	}
	if g := p.Groups[0]; g.Engine != tsg.EngineCompute || g.Timeslice != 200 || g.Channels != 8 || g.FD != 8 || g.Comm != "python3" {
		t.Errorf("compute group %+v: want the setting Do left", g)
	}
	if g := p.Groups[1]; g.Engine != tsg.EngineCopy || g.Timeslice != 1024 || g.TSGID == p.Groups[0].TSGID {
		t.Errorf("copy group %+v", g)
	}
	found := 0
	for len(sub.Updates()) > 0 {
		if u := <-sub.Updates(); u.Kind == registry.UpdateTSGFound && u.Process == id {
			found++
		}
	}
	if found != 4 {
		t.Errorf("%d tsg-found updates, want 4", found)
	}
	// Nothing of the operation is left open: the process's exit frees its
	// clients at once.
	m.exit(100)
	if left := m.alive(clients); len(left) != 0 {
		t.Errorf("clients %v outlive their process: a duplicate is still open", left)
	}
}

// TestDoIdentity: an operation reaches the process it names or fails with
// ErrNoSuchProcess; it never acts on whoever holds the pid now.
func TestDoIdentity(t *testing.T) {
	tests := []struct {
		name string
		// setup makes the process and returns the identity to act on.
		setup   func(t *testing.T, m *machine) registry.ProcessID
		wantErr error
		// forgotten: the registry no longer knows pid 100 as it did.
		forgotten bool
	}{
		{"live", func(t *testing.T, m *machine) registry.ProcessID {
			id, _ := m.spawn(t, 100, 1000, "python3")
			return id
		}, nil, false},
		{"exited", func(t *testing.T, m *machine) registry.ProcessID {
			id, _ := m.spawn(t, 100, 1000, "python3")
			m.known(t, id)
			m.exit(100)
			return id
		}, ioctl.ErrNoSuchProcess, true},
		{"pid reused", func(t *testing.T, m *machine) registry.ProcessID {
			id, _ := m.spawn(t, 100, 1000, "python3")
			m.known(t, id)
			m.exit(100)
			m.spawn(t, 100, 5000, "trainer")
			return id
		}, ioctl.ErrNoSuchProcess, true},
		{"pid changes hands during discovery", func(t *testing.T, m *machine) registry.ProcessID {
			id, clients := m.spawn(t, 100, 1000, "python3")
			m.known(t, id)
			m.src.after = func(int) {
				m.src.after = nil
				m.exit(100)
				m.spawn(t, 100, 5000, "trainer")
				if len(m.alive(clients)) == 0 {
					t.Error("the old process's clients died while the discovery held its file")
				}
			}
			t.Cleanup(func() {
				if left := m.alive(clients); len(left) != 0 {
					t.Errorf("the old process's clients %v outlive the operation", left)
				}
			})
			return id
		}, ioctl.ErrNoSuchProcess, true},
		{"no start time", func(t *testing.T, m *machine) registry.ProcessID {
			m.spawn(t, 100, 1000, "python3")
			return registry.ProcessID{PID: 100}
		}, tsg.ErrInvalidArgument, false},
		{"no GPU context", func(t *testing.T, m *machine) registry.ProcessID {
			m.d.NewProc(100)
			return m.procs.start(100, 1000, "bash")
		}, tsg.ErrNoGPUContext, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(t)
			id := tt.setup(t, m)
			sub := m.r.Subscribe(64)
			called := false
			err := m.r.Do(t.Context(), id, func(*tsg.Process) error { called = true; return nil })
			if !errors.Is(err, tt.wantErr) || (err != nil) == called {
				t.Fatalf("Do(%v) = %v (fn called: %v), want %v", id, err, called, tt.wantErr)
			}
			if p, ok := m.r.Process(100); tt.forgotten && ok && p.ID == id {
				t.Errorf("%v still known: %+v", id, p)
			}
			if tt.forgotten {
				exited := false
				for len(sub.Updates()) > 0 {
					u := <-sub.Updates()
					exited = exited || (u.Kind == registry.UpdateProcessExit && u.Process == id)
				}
				if !exited {
					t.Error("no process-exit update")
				}
			}
		})
	}
}

// known makes the registry know id's groups, as an earlier operation did.
func (m *machine) known(t testing.TB, id registry.ProcessID) {
	t.Helper()
	if err := m.r.Do(context.Background(), id, nil); err != nil {
		t.Fatal(err)
	}
}

// TestDuplicateLifetime: a tsg.Process kept between operations (what
// gpreemptctl's one-shot commands do, and what a daemon must not) holds
// duplicates of the target's file, so RM keeps a dead process's clients;
// the registry's per-operation attach lets them go once the operation
// returns, even when the target exits in the middle of it.
func TestDuplicateLifetime(t *testing.T) {
	t.Run("cached tsg.Process leaks", func(t *testing.T) {
		m := newMachine(t)
		_, clients := m.spawn(t, 100, 1000, "python3")
		cached, err := m.src.Discover(t.Context(), 100)
		if err != nil {
			t.Fatal(err)
		}
		m.exit(100)
		if left := m.alive(clients); !slices.Equal(left, clients) {
			t.Errorf("clients alive after exit with a cached Process: %v, want all of %v (the leak)", left, clients)
		}
		cached.Close()
		if left := m.alive(clients); len(left) != 0 {
			t.Errorf("clients %v alive after the cached Process closed", left)
		}
	})
	t.Run("registry operation does not", func(t *testing.T) {
		m := newMachine(t)
		id, clients := m.spawn(t, 100, 1000, "python3")
		err := m.r.Do(t.Context(), id, func(p *tsg.Process) error {
			m.exit(100) // the target exits mid-operation
			if left := m.alive(clients); len(left) == 0 {
				t.Error("clients freed while the operation held the file")
			}
			// The file is still open, so RM still answers on it.
			_, err := p.GetTimeslice(p.Groups[0])
			return err
		})
		if err != nil {
			t.Errorf("Do: %v", err)
		}
		if left := m.alive(clients); len(left) != 0 {
			t.Errorf("clients %v outlive the operation on their exited process", left)
		}
		if err := m.r.Do(t.Context(), id, nil); !errors.Is(err, ioctl.ErrNoSuchProcess) {
			t.Errorf("Do after exit = %v", err)
		}
	})
}

// TestDoConcurrent runs operations on two processes from many goroutines
// beside a stream of events and a subscriber (run with -race): operations
// on one pid never overlap, and none leaves a duplicate behind.
func TestDoConcurrent(t *testing.T) {
	m := newMachine(t)
	ids := map[int]registry.ProcessID{}
	var clients []ioctl.Handle
	for _, pid := range []int{100, 200} {
		id, cs := m.spawn(t, pid, uint64(pid)*10, "worker")
		ids[pid] = id
		clients = append(clients, cs...)
	}
	m.procs.start(int(python.PID), 100, python.Comm)
	sub := m.r.Subscribe(8)
	var inFlight [2]atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 6 {
				pid := []int{100, 200}[(w+i)%2]
				slot := &inFlight[(w+i)%2]
				errs <- m.r.Do(t.Context(), ids[pid], func(p *tsg.Process) error {
					if slot.Add(1) != 1 {
						t.Errorf("two operations on pid %d at once", pid)
					}
					defer slot.Add(-1)
					return p.SetTimeslice(t.Context(), p.Groups, time.Duration(1+w*10+i)*time.Microsecond)
				})
			}
		}()
	}
	wg.Add(2)
	go func() {
		defer wg.Done()
		clock := tracetest.Clock{Now: 1e9}
		for _, ev := range tracetest.LibcudaContext(loadTrace(t), python, &clock) {
			m.r.Apply(ev)
		}
		m.r.Apply(&trace.TaskExit{PID: python.PID, At: clock.Now})
	}()
	go func() {
		defer wg.Done()
		for range 20 {
			m.r.Groups()
			m.r.Processes()
			select {
			case <-sub.Updates():
			default:
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	sub.Close()
	if n := len(m.r.Groups()); n != 8 {
		t.Errorf("%d groups, want the workers' 8", n)
	}
	m.exit(100)
	m.exit(200)
	if left := m.alive(clients); len(left) != 0 {
		t.Errorf("clients %v outlive their processes", left)
	}
}

func TestDoCancelledWhileWaiting(t *testing.T) {
	m := newMachine(t)
	id, _ := m.spawn(t, 100, 1000, "python3")
	ctx, cancel := context.WithCancel(t.Context())
	err := m.r.Do(t.Context(), id, func(*tsg.Process) error {
		cancel()
		// A second operation on the same pid waits for this one, and gives
		// up with its context.
		return m.r.Do(ctx, id, nil)
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("nested Do = %v, want context.Canceled", err)
	}
}

func TestNoSource(t *testing.T) {
	r := registry.New(registry.Options{Procs: newProcs()})
	if err := r.Do(t.Context(), registry.ProcessID{PID: 1, Start: 1}, nil); !errors.Is(err, registry.ErrNoSource) {
		t.Errorf("Do = %v", err)
	}
	if err := r.Scan(t.Context()); !errors.Is(err, registry.ErrNoSource) {
		t.Errorf("Scan = %v", err)
	}
}

// TestLateExit: exit events arrive up to a poll late. One from before a
// discovery found the pid's current process alive is an earlier holder's
// and must not remove it; one from after is its own.
func TestLateExit(t *testing.T) {
	tests := []struct {
		name      string
		withGPU   bool
		at        uint64
		forgotten bool
	}{
		{"exit before the discovery: an earlier holder's", true, discoveryNow - 1, false},
		{"exit after the discovery", true, discoveryNow + 1, true},
		// A zombie has closed its files: a discovery finding no group
		// proves nothing about its exit.
		{"exit before a discovery that found no group", false, discoveryNow - 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newMachine(t)
			var id registry.ProcessID
			if tt.withGPU {
				id, _ = m.spawn(t, 100, 1000, "python3")
			} else {
				// Known from its client; its files closed since.
				m.d.NewProc(100)
				id = m.procs.start(100, 1000, "python3")
				clock := tracetest.Clock{Now: 1e9}
				m.r.Apply(tracetest.Alloc(tracetest.Process{PID: 100, TID: 100, Comm: "python3"}, 8, 0, 0, client, ioctl.NV01_ROOT_CLIENT, &clock))
			}
			if err := m.r.Do(t.Context(), id, nil); err != nil && !errors.Is(err, tsg.ErrNoGPUContext) {
				t.Fatal(err)
			}
			if _, ok := m.r.Process(100); !ok {
				t.Fatal("not known after Do")
			}
			m.r.Apply(&trace.TaskExit{PID: 100, At: tt.at})
			if _, ok := m.r.Process(100); ok == tt.forgotten {
				t.Errorf("known after the exit event: %v, want %v", ok, !tt.forgotten)
			}
		})
	}
}

func TestIdentify(t *testing.T) {
	m := newMachine(t)
	want := m.procs.start(100, 1000, "python3")
	if id, err := m.r.Identify(100); err != nil || id != want {
		t.Errorf("Identify(100) = %v, %v; want %v", id, err, want)
	}
	if _, err := m.r.Identify(101); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("Identify(101) = %v", err)
	}
}
