package registry_test

import (
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
)

// TestFollowTracer wires the real BPF programs into a registry: RM calls
// issued here, on a duplicate of /dev/null (ENOTTY once the tracepoints
// have read them), reach a subscriber as updates.
func TestFollowTracer(t *testing.T) {
	tr, err := trace.Open(t.Context(), trace.Options{RM: true, PID: os.Getpid(), MountTracefs: true, Poll: time.Millisecond})
	if errors.Is(err, trace.ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		t.Fatalf("open tracer: %v", err)
	}
	defer tr.Close()
	r := registry.New(registry.Options{})
	sub := r.Subscribe(16)
	followed := make(chan error, 1)
	go func() { followed <- r.Follow(t.Context(), tr.Events()) }()

	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	// A duplicate through pidfd_getfd, as the attach source makes them.
	dup, err := ioctl.Attach(os.Getpid(), int(null.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	const c, dev, group ioctl.Handle = 0xc1d00077, 0x5c000002, 0x5c000015
	if _, err := dup.Alloc(c, dev, group, ioctl.KEPLER_CHANNEL_GROUP_A, nil); !errors.Is(err, syscall.ENOTTY) {
		t.Fatalf("alloc on /dev/null: %v", err)
	}
	if err := dup.ControlBytes(c, group, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, make([]byte, 8)); !errors.Is(err, syscall.ENOTTY) {
		t.Fatalf("control on /dev/null: %v", err)
	}

	want := []struct {
		kind   registry.UpdateKind
		origin registry.Origin
	}{{registry.UpdateTSGAlloc, registry.OriginNone}, {registry.UpdateControl, registry.OriginSelf}}
	timeout := time.After(10 * time.Second) // a failure's bound, not a measurement
	for i, w := range want {
		select {
		case u := <-sub.Updates():
			if u.Kind != w.kind || u.Origin != w.origin || u.Call == nil || u.Call.PID != uint32(os.Getpid()) ||
				u.Call.Ret != -int64(syscall.ENOTTY) || u.Before.Client != c || u.Before.Handle != group {
				t.Errorf("update %d: %+v, want %s from this process refused with ENOTTY", i, u, w.kind)
			}
		case <-timeout:
			t.Fatalf("timed out waiting for update %d (tracer error %v)", i, tr.Err())
		}
	}
	if n := len(r.Groups()); n != 0 {
		t.Errorf("%d groups from refused calls", n)
	}
	tr.Stop()
	if err := <-followed; err != nil {
		t.Errorf("Follow after the tracer stopped: %v", err)
	}
}
