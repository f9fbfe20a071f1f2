package reconcile_test

import (
	"context"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/policy"
	. "github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// asRM makes the programs' events of RM calls made on /dev/null read as
// RM's answers: the kernel said ENOTTY, but the parameter blocks (status
// NV_OK preset) are what RM would have left.
type asRM struct {
	tr  *trace.Tracer
	out chan trace.Event
}

func newAsRM(tb testing.TB, tr *trace.Tracer) asRM {
	s := asRM{tr: tr, out: make(chan trace.Event, 1024)}
	go func() {
		defer close(s.out)
		for ev := range tr.Events() {
			if e, ok := ev.(*trace.RMCall); ok && e.Ret == -int64(unix.ENOTTY) {
				e.Ret = 0
			}
			s.out <- ev
		}
	}()
	return s
}

func (s asRM) Err() error { return s.tr.Err() }

func (s asRM) Events() <-chan trace.Event { return s.out }

// TestBPFEndToEnd loads the real RM programs, makes the RM calls of a
// libcuda context (the recorded H100 allocation sequence, then libcuda's
// GPFIFO_SCHEDULE and SET_TIMESLICE(2048)) on /dev/null, and checks that
// the events, through the adapter and the reconciler, class the context in
// the fake driver holding the same objects: after libcuda's own SET, not
// before; and that freeing the client leaves no state.
func TestBPFEndToEnd(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	me := os.Getpid()
	tr, err := trace.Open(ctx, trace.Options{RM: true, PID: me, MountTracefs: true, Poll: 2 * time.Millisecond})
	if errors.Is(err, trace.ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		t.Fatalf("open tracer: %v", err)
	}
	defer tr.Close()

	g := newRig(t, reconciletest.Policy)
	g.Procs[me] = policy.Process{Comm: "trainer"}
	p := g.Driver.NewProc(me)
	if _, err := g.Driver.Replay(p, g.Allocs); err != nil {
		t.Fatal(err)
	}
	raw := newAsRM(t, tr).Events()
	reg := registry.New(registry.Options{})
	// next translates the next raw event as TraceEvents.Run does, and
	// hands the daemon events to the reconciler.
	timeout := time.After(20 * time.Second)
	next := func() []Event {
		t.Helper()
		select {
		case ev := <-raw:
			evs := Translate(reg, ev)
			for _, e := range evs {
				if e.PID != me {
					t.Fatalf("event for pid %d, want %d: %+v", e.PID, me, e)
				}
				g.Rec.Handle(e)
			}
			return evs
		case <-timeout:
			t.Fatal("timed out waiting for events")
		}
		return nil
	}

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	compute := map[ioctl.Handle]bool{}
	var groups []ioctl.Handle
	var client ioctl.Handle
	for _, a := range g.Allocs {
		params := ioctl.NVOS64_PARAMETERS{HRoot: a.Client, HObjectParent: a.Parent, HObjectNew: a.Handle, HClass: a.Class}
		if errno := rmIoctl(fd, ioctl.NV_ESC_RM_ALLOC, &params); errno != unix.ENOTTY {
			t.Fatalf("alloc on /dev/null: %v", errno)
		}
		switch {
		case ioctl.IsChannelGroupClass(a.Class):
			groups, client = append(groups, a.Handle), a.Client
		case a.Class == ioctl.FERMI_CONTEXT_SHARE_A:
			compute[a.Parent] = true
		}
	}
	for _, h := range groups {
		sched := ioctl.NVOS54_PARAMETERS{HClient: client, HObject: h, Cmd: ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE}
		sp := ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575{BEnable: 1}
		rmControl(fd, &sched, &sp)
		if compute[h] {
			set := ioctl.NVOS54_PARAMETERS{HClient: client, HObject: h, Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE}
			ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 2048}
			rmControl(fd, &set, &ts)
		}
	}

	// Every call made is one event; wait for them all (not for time).
	var created int
	var libcudaSet, last time.Duration
	for range len(g.Allocs) + len(groups) + 1 {
		for _, e := range next() {
			last = max(last, e.At)
			switch {
			case e.Kind == GroupCreated:
				created++
			case e.Kind == GroupSet && e.Timeslice == 2048:
				libcudaSet = e.At
			}
		}
	}
	if created != 4 || libcudaSet == 0 {
		t.Fatalf("%d groups created, libcuda's SET seen: %v", created, libcudaSet != 0)
	}
	g.Tick(last + 29*time.Millisecond)
	for _, x := range g.Groups(me) {
		if uint64(x.Timeslice) == 200 {
			t.Fatal("classed before the debounce after libcuda's SET")
		}
	}
	g.Tick(last + 30*time.Millisecond)
	g.WantAll(me, 200, tsg.LevelLow)

	// Free the client: its groups go, and so does the process's state.
	free := ioctl.NVOS00_PARAMETERS{HRoot: client, HObjectParent: client, HObjectOld: client}
	rmIoctl(fd, ioctl.NV_ESC_RM_FREE, &free)
	freed := 0
	for _, e := range next() {
		if e.Kind == GroupFreed {
			freed++
		}
	}
	if freed != 4 {
		t.Fatalf("%d groups freed with the client, want 4", freed)
	}
	if k := g.Rec.Known(); len(k) != 0 {
		t.Fatalf("state left after the client was freed: %v", k)
	}
}
