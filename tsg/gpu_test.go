package tsg_test

// Tests and benchmarks against the real driver. They need /dev/nvidiactl, a
// CUDA-capable python3 with PyTorch (or GPREEMPT_TEST_TARGET, a shell
// command that creates a CUDA context, prints READY and waits), and rights
// to pidfd_getfd it (root). Elsewhere they skip, saying why. `make gpu-test`
// runs them on the GPU machine.

import (
	"bufio"
	"context"
	"errors"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

const defaultTarget = `python3 -c 'import sys, time, torch
x = torch.ones(1 << 20, device="cuda"); y = (x * 2).sum().item(); torch.cuda.synchronize()
print("READY", flush=True); sys.stdin.read()'`

// cudaTarget starts a CUDA process and returns its pid once its context
// exists. The process ends when the test does.
func cudaTarget(tb testing.TB) int {
	tb.Helper()
	if _, err := os.Stat(ioctl.ControlDevicePath); err != nil {
		tb.Skipf("no NVIDIA driver here (%v)", err)
	}
	if os.Geteuid() != 0 {
		tb.Skip("needs root for pidfd_getfd on another process")
	}
	script := os.Getenv("GPREEMPT_TEST_TARGET")
	if script == "" {
		if _, err := exec.LookPath("python3"); err != nil {
			tb.Skip("no python3 for the default CUDA target; set GPREEMPT_TEST_TARGET")
		}
		if err := exec.Command("python3", "-c", "import torch; assert torch.cuda.is_available()").Run(); err != nil {
			tb.Skip("python3 has no CUDA-enabled PyTorch; set GPREEMPT_TEST_TARGET")
		}
		script = defaultTarget
	}
	cmd := exec.Command("sh", "-c", "exec "+script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY") {
				ready <- nil
				return
			}
		}
		ready <- sc.Err()
	}()
	select {
	case err := <-ready:
		if err != nil {
			tb.Fatal(err)
		}
	case <-time.After(60 * time.Second):
		tb.Fatal("CUDA target did not print READY within 60 s")
	}
	return cmd.Process.Pid
}

func discoverReal(tb testing.TB, pid int) *tsg.Process {
	tb.Helper()
	p, err := tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}).Discover(context.Background(), pid)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func TestGPUDiscoverAndControl(t *testing.T) {
	pid := cudaTarget(t)
	start := time.Now()
	p := discoverReal(t, pid)
	elapsed := time.Since(start)
	t.Logf("pid %d: %d groups in %v (%d client probes below %v, %d object probes)",
		pid, len(p.Groups), elapsed, p.Stats.ClientProbes, p.Stats.ClientTop, p.Stats.ObjectProbes)
	for _, g := range p.Groups {
		t.Logf("  %+v", g)
	}
	if elapsed > time.Second {
		t.Errorf("discovery took %v, want under 1 s", elapsed)
	}
	// NV2080_CTRL_CMD_GPU_GET_ID on the target's subdevice is best
	// effort in discovery; on the real driver it is expected to answer.
	for _, g := range p.Groups {
		if g.GPUID == 0 {
			t.Errorf("group %v: GPU not identified (NV2080_CTRL_CMD_GPU_GET_ID refused? see -v debug log)", g.Handle)
		}
	}
	// DiscoverAll finds the same process.
	l, err := tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}).DiscoverAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, q := range l.Processes {
		found = found || q.PID == pid
	}
	l.Close()
	if !found {
		t.Errorf("DiscoverAll did not list pid %d: %+v", pid, l)
	}
	var compute []tsg.Group
	for _, g := range p.Groups {
		if g.Engine == tsg.EngineCompute {
			compute = append(compute, g)
		}
	}
	// One context: the compute TSG at libcuda's 2048 us and three copy
	// TSGs at RM's default 1024 us (docs/GPU-FACTS.md).
	if len(compute) < 1 || compute[0].Timeslice != 2048 {
		t.Fatalf("compute groups %+v, want one at 2048 us", compute)
	}
	ctx := context.Background()
	if err := p.SetTimeslice(ctx, p.Groups, 200*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range p.Groups {
		if g.Timeslice != 200 {
			t.Errorf("group %v reads back %v after setting 200us", g.Handle, g.Timeslice)
		}
	}
	if err := p.SetInterleave(ctx, p.Groups, tsg.LevelLow); err != nil {
		t.Fatal(err)
	}
	if err := p.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	for _, g := range p.Groups {
		// GSP-RM does not report the level (NV_ERR_NOT_SUPPORTED): then
		// only the SET's NV_OK is checked.
		if g.Interleave != tsg.LevelLow && g.Interleave != tsg.LevelUnknown {
			t.Errorf("group %v interleave %v after setting low", g.Handle, g.Interleave)
		}
	}
	if err := p.Preempt(ctx, compute, true, 0); err != nil {
		t.Fatal(err)
	}
	if err := p.Schedule(ctx, p.Groups, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Schedule(ctx, p.Groups, true); err != nil {
		t.Fatal(err)
	}
}

// TestGPUForeignFileRefused checks the driver rule discovery rests on: our
// own /dev/nvidiactl cannot name the target's client.
func TestGPUForeignFileRefused(t *testing.T) {
	pid := cudaTarget(t)
	p := discoverReal(t, pid)
	own, err := ioctl.OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	g := p.Groups[0]
	var ts ioctl.NVA06C_CTRL_TIMESLICE_PARAMS
	err = ioctl.Control(own, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, &ts)
	if err == nil || !strings.Contains(err.Error(), "NV_ERR_INVALID_CLIENT") {
		t.Fatalf("GET_TIMESLICE through a fresh fd = %v, want NV_ERR_INVALID_CLIENT", err)
	}
}

// BenchmarkGPUControl measures each control's cost on the real driver
// (per op: one RM control on the compute TSG).
func BenchmarkGPUControl(b *testing.B) {
	pid := cudaTarget(b)
	p := discoverReal(b, pid)
	ctx := context.Background()
	compute, err := p.Select(tsg.Selector{ComputeOnly: true})
	if err != nil {
		b.Fatal(err)
	}
	g := compute[0]
	c := g.Controller()
	abi, err := ioctl.LookupABI(p.Driver, false)
	if err != nil {
		b.Fatal(err)
	}
	// One raw control per op, so each number is one RM call.
	control := func(cmd uint32, params []byte) func() error {
		return func() error { return c.ControlBytes(g.Client, g.Handle, cmd, params) }
	}
	le := func(v uint64, n int) []byte {
		out := make([]byte, n)
		for i := range out {
			out[i] = byte(v >> (8 * i))
		}
		return out
	}
	benches := []struct {
		name string
		fn   func() error
	}{
		{"GET_TIMESLICE", control(ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, le(0, 8))},
		{"SET_TIMESLICE", control(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, le(2048, 8))},
		{"PREEMPT", control(ioctl.NVA06C_CTRL_CMD_PREEMPT, []byte{1, 0, 0, 0, 0, 0, 0, 0})},
		{"GPFIFO_SCHEDULE", control(ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, abi.ScheduleParams(true))},
		{"GET_INTERLEAVE_LEVEL", control(ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, le(0, 4))},
		{"SET_INTERLEAVE_LEVEL", control(ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, le(ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM, 4))},
		{"GET_INFO", control(ioctl.NVA06C_CTRL_CMD_GET_INFO, le(0, 4))},
		{"GET_HANDLE_INFO", func() error {
			q := ioctl.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{HObject: g.Handle, Index: ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID}
			return ioctl.Control(c, g.Client, g.Client, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, &q)
		}},
		{"client_probe_miss", func() error {
			q := ioctl.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{HObject: 0xc1dfffff, Index: ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID}
			err := ioctl.Control(c, 0xc1dfffff, 0xc1dfffff, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, &q)
			if err == nil {
				return errors.New("probe of an unused client succeeded")
			}
			return nil
		}},
	}
	_ = ctx
	for _, bb := range benches {
		b.Run(bb.name, func(b *testing.B) {
			// GSP-RM refuses some controls outright; that is a fact of
			// the driver, not a failure of ours.
			if err := bb.fn(); errors.Is(err, ioctl.NV_ERR_NOT_SUPPORTED) {
				b.Skipf("driver does not support it: %v", err)
			}
			for b.Loop() {
				if err := bb.fn(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("Discover", func(b *testing.B) {
		for b.Loop() {
			q, err := tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{}).Discover(ctx, pid)
			if err != nil {
				b.Fatal(err)
			}
			q.Close()
		}
	})
}

// TestGPUComputeProcessesAreTheMakers checks the driver fact gpreemptd
// decides a group's owner by where no allocation was traced (and that
// rmfake's ComputeProcesses follows): NVML lists the process that made a
// context, not one that holds a duplicate of its control file, as this
// test does while discovery's handle is open.
func TestGPUComputeProcessesAreTheMakers(t *testing.T) {
	pid := cudaTarget(t)
	p := discoverReal(t, pid)
	if len(p.Groups) == 0 {
		t.Fatal("no groups found in the CUDA process")
	}
	info, err := gpu.Open(nil)
	if err != nil {
		t.Skipf("no NVML: %v", err)
	}
	defer info.Close()
	devs, err := info.Devices(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	listed := map[int]bool{}
	for _, d := range devs {
		for _, x := range d.Processes {
			listed[x.PID] = true
		}
	}
	t.Logf("NVML compute processes: %v; the CUDA process %d, this one %d", slices.Sorted(maps.Keys(listed)), pid, os.Getpid())
	if !listed[pid] {
		t.Errorf("NVML does not list the CUDA process %d", pid)
	}
	if listed[os.Getpid()] {
		t.Errorf("NVML lists this process %d, which holds only a duplicate of the CUDA process's file", os.Getpid())
	}
}
