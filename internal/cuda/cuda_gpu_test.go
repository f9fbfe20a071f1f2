package cuda_test

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/cuda/cudatest"
	"github.com/gpreempt/gpreempt/internal/kernels"
)

func TestGPUDevice(t *testing.T) {
	ctx := cudatest.Open(t)
	dev := ctx.Device()
	name, err := dev.Name()
	if err != nil || name == "" {
		t.Fatalf("Name() = %q, %v", name, err)
	}
	sms, err := dev.MultiprocessorCount()
	if err != nil || sms <= 0 {
		t.Fatalf("MultiprocessorCount() = %d, %v", sms, err)
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil || major < 7 {
		t.Fatalf("ComputeCapability() = %d.%d, %v", major, minor, err)
	}
	mem, err := dev.TotalMem()
	if err != nil || mem == 0 {
		t.Fatalf("TotalMem() = %d, %v", mem, err)
	}
	ver, err := cuda.DriverVersion()
	if err != nil || ver < 11000 {
		t.Fatalf("DriverVersion() = %d, %v", ver, err)
	}
	n, err := cuda.DeviceCount()
	if err != nil || n < 1 {
		t.Fatalf("DeviceCount() = %d, %v", n, err)
	}
	least, greatest, err := ctx.StreamPriorityRange()
	if err != nil || greatest > least {
		t.Fatalf("StreamPriorityRange() = %d, %d, %v", least, greatest, err)
	}
	t.Logf("%s: %d SMs, sm_%d%d, %d MiB, driver CUDA %d, stream priorities %d..%d", name, sms, major, minor, mem>>20, ver, least, greatest)

	if _, err := cuda.GetDevice(n + 100); !errors.Is(err, cuda.ResultInvalidDevice) {
		t.Errorf("GetDevice(out of range) = %v, want CUDA_ERROR_INVALID_DEVICE", err)
	}
}

func TestGPUMemcpyRoundTrip(t *testing.T) {
	ctx := cudatest.Open(t)
	const n = 1 << 20
	p, err := ctx.MemAlloc(n)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(p)
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i * 7)
	}
	if err := ctx.MemcpyHtoD(p, src); err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, n)
	if err := ctx.MemcpyDtoH(dst, p); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, dst) {
		t.Fatal("round trip changed the data")
	}
	words := []uint64{1, 1 << 63, 42}
	if err := cuda.CopyToDevice(ctx, p, words); err != nil {
		t.Fatal(err)
	}
	back := make([]uint64, 3)
	if err := cuda.CopyToHost(ctx, back, p); err != nil {
		t.Fatal(err)
	}
	if back[1] != 1<<63 || back[2] != 42 {
		t.Fatalf("typed round trip: %v", back)
	}
	if err := ctx.MemsetD32(p, 0x01020304, 2); err != nil {
		t.Fatal(err)
	}
	if err := cuda.CopyToHost(ctx, back[:1], p); err != nil {
		t.Fatal(err)
	}
	if back[0] != 0x0102030401020304 {
		t.Fatalf("MemsetD32: %#x", back[0])
	}
}

func TestGPUMappedHostMemory(t *testing.T) {
	ctx := cudatest.Open(t)
	buf, err := ctx.HostAlloc(4096, cuda.HostAllocDeviceMap|cuda.HostAllocPortable)
	if err != nil {
		t.Fatal(err)
	}
	defer buf.Free()
	if buf.DevicePtr() == 0 || buf.Len() != 4096 || len(buf.Uint64s()) != 512 {
		t.Fatalf("buffer: dptr %#x len %d", buf.DevicePtr(), buf.Len())
	}
	// The device pointer is a real device address: copy through it.
	buf.Uint64s()[0] = 0xfeedface
	out := make([]uint64, 1)
	if err := cuda.CopyToHost(ctx, out, buf.DevicePtr()); err != nil {
		t.Fatal(err)
	}
	if out[0] != 0xfeedface {
		t.Fatalf("read %#x through the device pointer", out[0])
	}
}

func TestGPUModuleErrors(t *testing.T) {
	ctx := cudatest.Open(t)
	_, err := ctx.LoadModule([]byte(".version 8.0\n.target sm_70\n.address_size 64\n.visible .entry broken() { bogus.instruction; }\n"))
	var cerr *cuda.Error
	if !errors.As(err, &cerr) {
		t.Fatalf("LoadModule(broken) = %v, want *cuda.Error", err)
	}
	t.Logf("broken PTX: %v", err)
	mod, err := ctx.LoadModule(kernels.PTX)
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	if _, err := mod.Function("no_such_kernel"); !errors.Is(err, cuda.ResultNotFound) {
		t.Fatalf("Function(missing) = %v, want CUDA_ERROR_NOT_FOUND", err)
	}
	fn, err := mod.Function(kernels.EntryEmpty)
	if err != nil {
		t.Fatal(err)
	}
	args := make([]cuda.Arg, cuda.MaxArgs+1)
	if err := fn.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, nil, args...); err == nil {
		t.Fatal("Launch with too many args succeeded")
	}
}

// TestGPULaunchHotPath checks that launching, recording and querying do not
// allocate: the LC worker and the pre-preemption engine call them on a
// request's critical path.
func TestGPULaunchHotPath(t *testing.T) {
	ctx := cudatest.Open(t)
	set, err := kernels.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Unload()
	s, err := ctx.NewStream(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	ev, err := ctx.NewEvent(cuda.EventDisableTiming)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Destroy()
	out, err := ctx.MemAlloc(64)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(out)
	grid, block := cuda.Dim3{X: 1}, cuda.Dim3{X: 1}
	allocs := testing.AllocsPerRun(100, func() {
		if err := set.Empty.Launch(grid, block, 0, s); err != nil {
			t.Fatal(err)
		}
		if err := set.BEFMA.Launch(grid, block, 0, s, cuda.Ptr(out), cuda.U64(1)); err != nil {
			t.Fatal(err)
		}
		if err := ev.Record(s); err != nil {
			t.Fatal(err)
		}
		if _, err := ev.Query(); err != nil {
			t.Fatal(err)
		}
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("hot path allocates %v times per iteration", allocs)
	}
}

func TestGPUEventsAndStreams(t *testing.T) {
	ctx := cudatest.Open(t)
	set, err := kernels.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer set.Unload()
	least, greatest, err := ctx.StreamPriorityRange()
	if err != nil {
		t.Fatal(err)
	}
	hi, err := ctx.NewStreamWithPriority(cuda.StreamNonBlocking, greatest)
	if err != nil {
		t.Fatal(err)
	}
	defer hi.Destroy()
	lo, err := ctx.NewStreamWithPriority(cuda.StreamNonBlocking, least)
	if err != nil {
		t.Fatal(err)
	}
	defer lo.Destroy()
	start, err := ctx.NewEvent(cuda.EventDefault)
	if err != nil {
		t.Fatal(err)
	}
	defer start.Destroy()
	end, err := ctx.NewEvent(cuda.EventBlockingSync)
	if err != nil {
		t.Fatal(err)
	}
	defer end.Destroy()
	out, err := ctx.MemAlloc(132 * 256 * 4)
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.MemFree(out)

	if err := start.Record(lo); err != nil {
		t.Fatal(err)
	}
	if err := set.BEFMA.Launch(cuda.Dim3{X: 132}, cuda.Dim3{X: 256}, 0, lo, cuda.Ptr(out), cuda.U64(200000)); err != nil {
		t.Fatal(err)
	}
	if err := end.Record(lo); err != nil {
		t.Fatal(err)
	}
	// hi waits for lo's kernel through the event, without blocking the host.
	if err := hi.WaitEvent(end); err != nil {
		t.Fatal(err)
	}
	if err := set.Empty.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, hi); err != nil {
		t.Fatal(err)
	}
	if done, err := hi.Query(); err != nil || done {
		t.Fatalf("hi stream done before lo's kernel (done=%v, err=%v)", done, err)
	}
	if err := hi.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if done, err := end.Query(); err != nil || !done {
		t.Fatalf("end event not done after hi synchronized (done=%v, err=%v)", done, err)
	}
	d, err := cuda.ElapsedTime(start, end)
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 || d > 10*time.Second {
		t.Fatalf("elapsed %v", d)
	}
	t.Logf("be_fma(132x256, 200000 iters): %v", d)
}
