package kernels

import (
	"math"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/cuda/cudatest"
)

// ptxVariants are the modules to test: the embedded one, and the file named
// by GPREEMPT_TEST_PTX if set (e.g. gen-ptx.sh's nvcc output, to check that
// it behaves like the hand-written PTX before committing it).
func ptxVariants(t *testing.T) map[string][]byte {
	v := map[string][]byte{"embedded": PTX}
	if path := os.Getenv("GPREEMPT_TEST_PTX"); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		v[path] = b
	}
	return v
}

func loadSet(t *testing.T, ctx *cuda.Context, ptx []byte) *Set {
	t.Helper()
	set, err := LoadPTX(ctx, ptx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = set.Unload() })
	return set
}

// fmaRef is be_fma's per-thread result computed on the CPU.
func fmaRef(idx uint32, iters uint64) float32 {
	const mul, add float32 = 0.9999, 1e-4
	base := float32(idx) * float32(1e-6)
	a := [4]float32{base, base + 0.1, base + 0.2, base + 0.3}
	for range iters {
		for j := range a {
			a[j] = float32(math.FMA(float64(a[j]), float64(mul), float64(add)))
		}
	}
	return (a[0] + a[1]) + (a[2] + a[3])
}

func TestGPUBEFMA(t *testing.T) {
	ctx := cudatest.Open(t)
	for name, ptx := range ptxVariants(t) {
		t.Run(name, func(t *testing.T) {
			set := loadSet(t, ctx, ptx)
			const blocks, threads, iters = 8, 128, 1000
			out, err := ctx.MemAlloc(blocks * threads * 4)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.MemFree(out)
			if err := ctx.MemsetD32(out, math.Float32bits(float32(math.NaN())), blocks*threads); err != nil {
				t.Fatal(err)
			}
			if err := set.BEFMA.Launch(cuda.Dim3{X: blocks}, cuda.Dim3{X: threads}, 0, nil, cuda.Ptr(out), cuda.U64(iters)); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, blocks*threads)
			if err := cuda.CopyToHost(ctx, got, out); err != nil {
				t.Fatal(err)
			}
			for i, g := range got {
				want := fmaRef(uint32(i), iters)
				if math.IsNaN(float64(g)) || math.Abs(float64(g-want)) > 1e-5*math.Abs(float64(want)) {
					t.Fatalf("out[%d] = %v, want %v", i, g, want)
				}
			}
		})
	}
}

func TestGPULCWorkStamps(t *testing.T) {
	ctx := cudatest.Open(t)
	dev := ctx.Device()
	sms, err := dev.MultiprocessorCount()
	if err != nil {
		t.Fatal(err)
	}
	for name, ptx := range ptxVariants(t) {
		t.Run(name, func(t *testing.T) {
			set := loadSet(t, ctx, ptx)
			stamps, err := ctx.MemAlloc(LCStampWords * 8)
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.MemFree(stamps)
			if err := ctx.MemsetD8(stamps, 0, LCStampWords*8); err != nil {
				t.Fatal(err)
			}
			s, err := ctx.NewStream(cuda.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			var prevEnd uint64
			for i := range 3 {
				if err := set.LCWork.Launch(cuda.Dim3{X: uint32(sms)}, cuda.Dim3{X: 256}, 0, s, cuda.Ptr(stamps), cuda.U64(20000)); err != nil {
					t.Fatal(err)
				}
				if err := s.Synchronize(); err != nil {
					t.Fatal(err)
				}
				got := make([]uint64, LCStampWords)
				if err := cuda.CopyToHost(ctx, got, stamps); err != nil {
					t.Fatal(err)
				}
				start, end := got[LCStampStart], got[LCStampEnd]
				t.Logf("launch %d: GPU span %v", i, time.Duration(end-start))
				if start == 0 || end <= start {
					t.Fatalf("stamps %v: want 0 < start < end", got)
				}
				if start <= prevEnd {
					t.Fatalf("launch %d started at %d, not after the previous end %d", i, start, prevEnd)
				}
				if got[2] != 0 {
					t.Fatalf("sink word written: %#x", got[2])
				}
				prevEnd = end
			}
		})
	}
}

func TestGPUSpinFlag(t *testing.T) {
	ctx := cudatest.Open(t)
	for name, ptx := range ptxVariants(t) {
		t.Run(name, func(t *testing.T) {
			set := loadSet(t, ctx, ptx)
			flag, err := ctx.HostAlloc(64, cuda.HostAllocDeviceMap|cuda.HostAllocPortable)
			if err != nil {
				t.Fatal(err)
			}
			defer flag.Free()
			stamp, err := ctx.HostAlloc(SpinStampWords*8, cuda.HostAllocDeviceMap|cuda.HostAllocPortable)
			if err != nil {
				t.Fatal(err)
			}
			defer stamp.Free()
			s, err := ctx.NewStream(cuda.StreamNonBlocking)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Destroy()
			words := flag.Uint32s()
			st := stamp.Uint64s()

			// Never released: ends on its own after max_ns.
			const maxNs = 2_000_000
			if err := set.SpinFlag.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 32}, 0, s, cuda.Ptr(flag.DevicePtr()), cuda.U64(maxNs), cuda.Ptr(stamp.DevicePtr())); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if d := st[SpinStampEnd] - st[SpinStampStart]; st[SpinStampStart] == 0 || d < maxNs || d > 50*maxNs {
				t.Fatalf("timeout spin lasted %v (stamps %v), want just over %v", time.Duration(d), st[:2], time.Duration(maxNs))
			}

			// Released by the host after 5 ms, well before its 2 s limit.
			if err := set.SpinFlag.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, s, cuda.Ptr(flag.DevicePtr()), cuda.U64(2_000_000_000), cuda.Ptr(stamp.DevicePtr())); err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Millisecond)
			if done, err := s.Query(); err != nil || done {
				t.Fatalf("spinner finished before release (done=%v, err=%v)", done, err)
			}
			atomic.StoreUint32(&words[0], 1)
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(st[SpinStampEnd] - st[SpinStampStart]); d < 4*time.Millisecond || d > time.Second {
				t.Fatalf("released spin lasted %v, want about 5ms", d)
			}

			// A NULL stamp must not fault.
			if err := set.SpinFlag.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, s, cuda.Ptr(flag.DevicePtr()), cuda.U64(1000), cuda.Ptr(0)); err != nil {
				t.Fatal(err)
			}
			if err := s.Synchronize(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGPUEmpty(t *testing.T) {
	ctx := cudatest.Open(t)
	set := loadSet(t, ctx, PTX)
	for range 10 {
		if err := set.Empty.Launch(cuda.Dim3{X: 1}, cuda.Dim3{X: 1}, 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := ctx.Synchronize(); err != nil {
		t.Fatal(err)
	}
	regs, err := set.BEFMA.Attribute(cuda.FuncNumRegs)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("be_fma: %d registers", regs)
}

// TestGPUKernelTimings logs standalone kernel times at the benchmark's
// default shapes; the numbers size gpreempt-bench's defaults.
func TestGPUKernelTimings(t *testing.T) {
	ctx := cudatest.Open(t)
	sms, err := ctx.Device().MultiprocessorCount()
	if err != nil {
		t.Fatal(err)
	}
	for name, ptx := range ptxVariants(t) {
		t.Run(name, func(t *testing.T) {
			set := loadSet(t, ctx, ptx)
			buf, err := ctx.MemAlloc(uint64(2*sms*256*4 + 64))
			if err != nil {
				t.Fatal(err)
			}
			defer ctx.MemFree(buf)
			if err := ctx.MemsetD8(buf, 0, uint64(2*sms*256*4+64)); err != nil {
				t.Fatal(err)
			}
			start, _ := ctx.NewEvent(cuda.EventDefault)
			end, _ := ctx.NewEvent(cuda.EventDefault)
			defer start.Destroy()
			defer end.Destroy()
			timeIt := func(f *cuda.Function, grid uint32, iters uint64) time.Duration {
				var best time.Duration
				for i := range 4 {
					_ = start.Record(nil)
					if err := f.Launch(cuda.Dim3{X: grid}, cuda.Dim3{X: 256}, 0, nil, cuda.Ptr(buf), cuda.U64(iters)); err != nil {
						t.Fatal(err)
					}
					_ = end.Record(nil)
					if err := end.Synchronize(); err != nil {
						t.Fatal(err)
					}
					d, err := cuda.ElapsedTime(start, end)
					if err != nil {
						t.Fatal(err)
					}
					if i == 0 || d < best {
						best = d
					}
				}
				return best
			}
			for _, iters := range []uint64{10000, 100000, 300000} {
				t.Logf("be_fma  grid %d x 256, %7d iters: %v", 2*sms, iters, timeIt(set.BEFMA, uint32(2*sms), iters))
			}
			for _, iters := range []uint64{500, 1000, 2000, 4000} {
				t.Logf("lc_work grid %d x 256, %7d iters: %v", sms, iters, timeIt(set.LCWork, uint32(sms), iters))
			}
		})
	}
}
