package prepreempt

import (
	"cmp"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
)

// cudaSpinners is the real spinnerGPU: one stream and one completion event
// per slot, stamps in pinned host memory mapped into the device.
type cudaSpinners struct {
	k       *kernels.Set
	flags   flagWords
	maxHold time.Duration
	streams []*cuda.Stream
	done    []*cuda.Event
	buf     *cuda.HostBuffer
	words   []uint64
}

func newCUDASpinners(cctx *cuda.Context, k *kernels.Set, flags flagWords, slots int, maxHold time.Duration) (_ *cudaSpinners, err error) {
	g := &cudaSpinners{k: k, flags: flags, maxHold: maxHold}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.close())
		}
	}()
	if g.buf, err = cctx.HostAlloc(slots*kernels.SpinStampWords*8, cuda.HostAllocPortable|cuda.HostAllocDeviceMap); err != nil {
		return nil, fmt.Errorf("spinner stamps: %w", err)
	}
	g.words = g.buf.Uint64s()
	for range slots {
		s, err := cctx.NewStream(cuda.StreamNonBlocking)
		if err != nil {
			return nil, err
		}
		g.streams = append(g.streams, s)
		ev, err := cctx.NewEvent(cuda.EventDisableTiming)
		if err != nil {
			return nil, err
		}
		g.done = append(g.done, ev)
	}
	return g, nil
}

// launch queues slot's spinner, the empty kernel behind it, and the
// completion event, on the slot's own stream.
func (g *cudaSpinners) launch(s *slot) error {
	one := cuda.Dim3{X: 1, Y: 1, Z: 1}
	stream := g.streams[s.idx]
	if err := g.k.SpinFlag.Launch(one, one, 0, stream,
		cuda.Ptr(cuda.DevicePtr(g.flags.devicePtr(s.idx))),
		cuda.U64(uint64(cmp.Or(s.hold, g.maxHold))),
		cuda.Ptr(g.buf.DevicePtr()+cuda.DevicePtr(8*kernels.SpinStampWords*s.idx))); err != nil {
		return fmt.Errorf("launch spinner: %w", err)
	}
	// The empty kernel keeps the channel group's pushbuffer non-empty while
	// the spinner runs: without pending work a resident group is switched
	// out after the waiting group's timeslice (docs/GPU-FACTS.md).
	if err := g.k.Empty.Launch(one, one, 0, stream); err != nil {
		return fmt.Errorf("launch pending kernel: %w", err)
	}
	if err := g.done[s.idx].Record(stream); err != nil {
		return fmt.Errorf("record spinner completion: %w", err)
	}
	return nil
}

func (g *cudaSpinners) stamps(s *slot) (int64, int64) {
	w := g.words[kernels.SpinStampWords*s.idx:]
	return int64(atomic.LoadUint64(&w[kernels.SpinStampStart])), int64(atomic.LoadUint64(&w[kernels.SpinStampEnd]))
}

func (g *cudaSpinners) clearStamps(s *slot) {
	w := g.words[kernels.SpinStampWords*s.idx:]
	atomic.StoreUint64(&w[kernels.SpinStampStart], 0)
	atomic.StoreUint64(&w[kernels.SpinStampEnd], 0)
}

func (g *cudaSpinners) finished(s *slot) (bool, error) { return g.done[s.idx].Query() }

func (g *cudaSpinners) close() error {
	var errs []error
	for _, s := range g.streams {
		errs = append(errs, s.Synchronize(), s.Destroy())
	}
	for _, ev := range g.done {
		errs = append(errs, ev.Destroy())
	}
	if g.buf != nil {
		errs = append(errs, g.buf.Free())
	}
	return errors.Join(errs...)
}
