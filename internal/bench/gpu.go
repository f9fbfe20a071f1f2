package bench

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
)

// DeviceInfo describes the GPU a run used.
type DeviceInfo struct {
	Name    string `json:"name"`
	SMs     int    `json:"sms"`
	CC      string `json:"compute_capability"`
	Driver  int    `json:"driver_cuda_version"`
	Ordinal int    `json:"ordinal"`
}

// probeDevice checks, without creating a context (so without creating TSGs
// of its own on the GPU), that the driver and device are there, and
// describes the device.
func probeDevice(ordinal int) (DeviceInfo, error) {
	if err := cuda.Init(); err != nil {
		return DeviceInfo{}, gpuError(err)
	}
	dev, err := cuda.GetDevice(ordinal)
	if err != nil {
		return DeviceInfo{}, gpuError(err)
	}
	return describe(dev)
}

func describe(dev cuda.Device) (DeviceInfo, error) {
	info := DeviceInfo{Ordinal: dev.Ordinal()}
	var err error
	if info.Name, err = dev.Name(); err != nil {
		return info, err
	}
	if info.SMs, err = dev.MultiprocessorCount(); err != nil {
		return info, err
	}
	major, minor, err := dev.ComputeCapability()
	if err != nil {
		return info, err
	}
	info.CC = fmt.Sprintf("%d.%d", major, minor)
	if info.Driver, err = cuda.DriverVersion(); err != nil {
		return info, err
	}
	return info, nil
}

// ErrNoGPU marks failures to reach a GPU at all (no driver, no device).
var ErrNoGPU = errors.New("no usable GPU")

// gpuError adds context to the two errors a GPU-less machine gives.
func gpuError(err error) error {
	switch {
	case errors.Is(err, cuda.ErrLibraryNotFound):
		return fmt.Errorf("%w: %w; gpreempt-bench must run on a machine with an NVIDIA GPU and driver", ErrNoGPU, err)
	case errors.Is(err, cuda.ResultNoDevice):
		return fmt.Errorf("%w: the NVIDIA driver sees no CUDA device: %w", ErrNoGPU, err)
	}
	return err
}

// gpu is a worker's CUDA state: the primary context and the kernels.
type gpu struct {
	info DeviceInfo
	ctx  *cuda.Context
	k    *kernels.Set
}

func openGPU(ordinal int, flags cuda.ContextFlags) (*gpu, error) {
	ctx, err := cuda.Open(ordinal, flags)
	if err != nil {
		return nil, gpuError(err)
	}
	info, err := describe(ctx.Device())
	if err != nil {
		return nil, errors.Join(err, ctx.Release())
	}
	k, err := kernels.Load(ctx)
	if err != nil {
		return nil, errors.Join(err, ctx.Release())
	}
	return &gpu{info: info, ctx: ctx, k: k}, nil
}

func (g *gpu) close() error {
	return errors.Join(g.k.Unload(), g.ctx.Release())
}

// calibrate finds the iteration count at which a fixed-work kernel takes
// target on an otherwise idle GPU. timeIt runs the kernel with the given
// iteration count and returns its GPU time. Kernel time is close to affine
// in the count (a fixed launch and ramp cost plus work), so a few rescaling
// steps converge; it stops within 1% or after 8 rounds and returns the
// count and the time measured for it.
func calibrate(target time.Duration, initial uint64, timeIt func(iters uint64) (time.Duration, error)) (uint64, time.Duration, error) {
	if target <= 0 {
		return 0, 0, fmt.Errorf("%w: calibration target %v", ErrInvalidArgument, target)
	}
	iters := max(initial, 1)
	var d time.Duration
	for range 8 {
		var err error
		if d, err = timeIt(iters); err != nil {
			return 0, 0, err
		}
		if d <= 0 {
			return 0, 0, fmt.Errorf("calibration: kernel of %d iterations took %v", iters, d)
		}
		ratio := float64(target) / float64(d)
		if math.Abs(ratio-1) < 0.01 {
			return iters, d, nil
		}
		// Clamp the step so that one noisy (or launch-dominated) reading
		// cannot send the count wild.
		ratio = min(max(ratio, 0.05), 20)
		next := uint64(math.Round(float64(iters) * ratio))
		next = max(next, 1)
		if next == iters {
			break
		}
		iters = next
	}
	var err error
	d, err = timeIt(iters)
	return iters, d, err
}

// kernelTimer times one launch configuration with events, on an idle GPU,
// as the best of a few runs (the minimum is the kernel's own time; anything
// above is interference).
type kernelTimer struct {
	g          *gpu
	start, end *cuda.Event
	stream     *cuda.Stream
}

func newKernelTimer(g *gpu, s *cuda.Stream) (*kernelTimer, error) {
	start, err := g.ctx.NewEvent(cuda.EventDefault)
	if err != nil {
		return nil, err
	}
	end, err := g.ctx.NewEvent(cuda.EventDefault)
	if err != nil {
		return nil, errors.Join(err, start.Destroy())
	}
	return &kernelTimer{g: g, start: start, end: end, stream: s}, nil
}

func (t *kernelTimer) close() error { return errors.Join(t.start.Destroy(), t.end.Destroy()) }

func (t *kernelTimer) time(fn *cuda.Function, grid, block cuda.Dim3, runs int, args ...cuda.Arg) (time.Duration, error) {
	var best time.Duration
	for i := range runs {
		if err := t.start.Record(t.stream); err != nil {
			return 0, err
		}
		if err := fn.Launch(grid, block, 0, t.stream, args...); err != nil {
			return 0, err
		}
		if err := t.end.Record(t.stream); err != nil {
			return 0, err
		}
		if err := t.end.Synchronize(); err != nil {
			return 0, err
		}
		d, err := cuda.ElapsedTime(t.start, t.end)
		if err != nil {
			return 0, err
		}
		if i == 0 || d < best {
			best = d
		}
	}
	return best, nil
}
