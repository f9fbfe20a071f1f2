package tsg_test

// The gpreempt escapes against the real driver. On a stock driver (every
// GPU machine we can use: the patched modules are never loaded there) the
// escape must be detected as absent and the attach source chosen; set
// GPREEMPT_EXPECT_ESCAPES=1 on a machine running a patched driver to
// expect the opposite. `make gpu-test` runs them (-test.run GPU).

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

func expectEscapes() bool { return os.Getenv("GPREEMPT_EXPECT_ESCAPES") == "1" }

func TestGPUEscapeProbe(t *testing.T) {
	if _, err := os.Stat(ioctl.ControlDevicePath); err != nil {
		t.Skipf("no NVIDIA driver here (%v)", err)
	}
	f, err := ioctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	version, err := f.DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	// The raw answer: a stock driver refuses the number with EINVAL and
	// leaves the block untouched.
	_, qerr := ioctl.QueryTSGs(f, uint32(os.Getpid()), 0)
	t.Logf("driver %s: QUERY on our own pid: %v", version, qerr)
	switch {
	case expectEscapes() && qerr != nil:
		t.Errorf("patched driver expected, QUERY failed: %v", qerr)
	case !expectEscapes() && (!errors.Is(qerr, ioctl.ErrNoGpreemptEscapes) || !errors.Is(qerr, syscall.EINVAL)):
		t.Errorf("stock driver expected: QUERY gave %v, want ErrNoGpreemptEscapes from EINVAL", qerr)
	}

	esc := tsg.NewEscapeSource(tsg.ProcHost{}, tsg.EscapeOptions{})
	defer esc.Close()
	start := time.Now()
	ok, err := esc.Available()
	t.Logf("Available() = %v, %v in %v", ok, err, time.Since(start))
	if err != nil || ok != expectEscapes() {
		t.Errorf("Available() = %v, %v; want %v, nil", ok, err, expectEscapes())
	}
	auto := tsg.NewAutoSource(esc, tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}), tsg.AutoOptions{})
	want := "attach"
	if expectEscapes() {
		want = "escape"
	}
	if got := auto.Chosen().Name(); got != want {
		t.Errorf("auto chose %q, want %q", got, want)
	}
}

func TestGPUEscapeAutoDiscover(t *testing.T) {
	pid := cudaTarget(t)
	esc := tsg.NewEscapeSource(tsg.ProcHost{}, tsg.EscapeOptions{})
	defer esc.Close()
	auto := tsg.NewAutoSource(esc, tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}), tsg.AutoOptions{})
	p, err := auto.Discover(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	want := "attach"
	if expectEscapes() {
		want = "escape"
	}
	if p.Source != want || len(p.Groups) == 0 {
		t.Fatalf("auto discovered %d groups through %q, want some through %q", len(p.Groups), p.Source, want)
	}
	// Both sources name the same GPU.
	viaAttach, err := tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}).Discover(context.Background(), pid)
	if err != nil {
		t.Fatal(err)
	}
	defer viaAttach.Close()
	for i := range min(len(p.Groups), len(viaAttach.Groups)) {
		if p.Groups[i].GPUID != viaAttach.Groups[i].GPUID || p.Groups[i].GPUID == 0 {
			t.Errorf("group %v: GPU %#x through %s, %#x through attach", p.Groups[i].Handle, p.Groups[i].GPUID, p.Source, viaAttach.Groups[i].GPUID)
		}
	}
	compute, err := p.Select(tsg.Selector{ComputeOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.SetTimeslice(context.Background(), compute, 1500*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if got, err := p.GetTimeslice(compute[0]); err != nil || got != 1500*time.Microsecond {
		t.Errorf("timeslice read back %v, %v", got, err)
	}
}
