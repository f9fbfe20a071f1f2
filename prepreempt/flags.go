package prepreempt

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/gpreempt/gpreempt/internal/cuda"
)

// flagWords hold one 32-bit release word per spinner slot: the spinner
// polls it on the GPU, the host writes it to release the spinner.
type flagWords interface {
	// name is the backend's name, reported in Stats.
	name() string
	// devicePtr is the device address the spinner polls for slot.
	devicePtr(slot int) uint64
	// set writes v to slot's word, visible to the GPU.
	set(slot int, v uint32)
	close() error
}

// hostFlags keep the words in pinned host memory mapped into the device:
// the GPU polls across PCIe, the CPU writes to its own memory.
type hostFlags struct {
	buf   *cuda.HostBuffer
	words []uint32
}

func newHostFlags(ctx *cuda.Context, slots int) (*hostFlags, error) {
	buf, err := ctx.HostAlloc(slots*4, cuda.HostAllocPortable|cuda.HostAllocDeviceMap)
	if err != nil {
		return nil, fmt.Errorf("host-mapped flags: %w", err)
	}
	return &hostFlags{buf: buf, words: buf.Uint32s()}, nil
}

func (h *hostFlags) name() string { return "host-mapped" }

func (h *hostFlags) devicePtr(slot int) uint64 { return uint64(h.buf.DevicePtr()) + uint64(4*slot) }

func (h *hostFlags) set(slot int, v uint32) { atomic.StoreUint32(&h.words[slot], v) }

func (h *hostFlags) close() error { return h.buf.Free() }

// ErrGDRCopyUnavailable: the GDRCopy backend cannot be used here (no
// /dev/gdrdrv, or no libgdrapi.so.2).
var ErrGDRCopyUnavailable = errors.New("GDRCopy not available")

// gdrLib is the part of libgdrapi the backend uses; the real one is
// dlopened (gdrcopy_cgo.go), tests use a fake.
type gdrLib interface {
	Open() error
	// Pin pins [addr, addr+size) of device memory for BAR mapping.
	Pin(addr uint64, size uint64) (handle uint64, err error)
	// Map maps a pinned range into this process.
	Map(handle uint64, size uint64) (unsafe.Pointer, error)
	// InfoVA is the device address the mapping starts at (gdr_get_info's
	// va: the pinned range rounded down to the GPU page).
	InfoVA(handle uint64) (uint64, error)
	Unmap(handle uint64, p unsafe.Pointer, size uint64) error
	Unpin(handle uint64) error
	Close() error
}

// gpuPage is the granularity GDRCopy pins and maps at.
const gpuPage = 64 << 10

// gdrFlags keep the words in device memory; the CPU writes them through a
// BAR mapping, so the spinner polls local memory instead of PCIe.
type gdrFlags struct {
	lib    gdrLib
	free   func() error
	dev    uint64 // aligned device address of word 0
	handle uint64
	mapped unsafe.Pointer // CPU address of the pinned range
	off    uintptr        // offset of word 0 in the mapping
	size   uint64
}

// newGDRFlags sets up slots words in device memory at alloc's address.
// alloc returns device memory of the given size and a function freeing it.
func newGDRFlags(lib gdrLib, slots int, alloc func(size uint64) (uint64, func() error, error)) (_ *gdrFlags, err error) {
	if err := lib.Open(); err != nil {
		return nil, fmt.Errorf("%w: gdr_open: %v", ErrGDRCopyUnavailable, err)
	}
	g := &gdrFlags{lib: lib, size: gpuPage}
	defer func() {
		if err != nil {
			err = errors.Join(err, g.close())
		}
	}()
	need := uint64(slots * 4)
	if need > gpuPage {
		return nil, fmt.Errorf("gdrcopy flags: %d slots do not fit one GPU page", slots)
	}
	// Over-allocate so a whole aligned GPU page is ours to pin.
	base, free, err := alloc(2 * gpuPage)
	if err != nil {
		return nil, fmt.Errorf("gdrcopy flags: device memory: %w", err)
	}
	g.free = free
	g.dev = (base + gpuPage - 1) &^ (gpuPage - 1)
	if g.handle, err = lib.Pin(g.dev, g.size); err != nil {
		return nil, fmt.Errorf("gdr_pin_buffer: %w", err)
	}
	if g.mapped, err = lib.Map(g.handle, g.size); err != nil {
		return nil, fmt.Errorf("gdr_map: %w", err)
	}
	va, err := lib.InfoVA(g.handle)
	if err != nil {
		return nil, fmt.Errorf("gdr_get_info: %w", err)
	}
	if va > g.dev || g.dev-va >= g.size {
		return nil, fmt.Errorf("gdr_get_info: mapping starts at %#x, outside the pinned page %#x", va, g.dev)
	}
	g.off = uintptr(g.dev - va)
	for i := range slots {
		g.set(i, 0)
	}
	return g, nil
}

func (g *gdrFlags) name() string { return "gdrcopy" }

func (g *gdrFlags) devicePtr(slot int) uint64 { return g.dev + uint64(4*slot) }

func (g *gdrFlags) set(slot int, v uint32) {
	atomic.StoreUint32((*uint32)(unsafe.Add(g.mapped, g.off+uintptr(4*slot))), v)
}

func (g *gdrFlags) close() error {
	var errs []error
	if g.mapped != nil {
		errs = append(errs, g.lib.Unmap(g.handle, g.mapped, g.size))
		g.mapped = nil
	}
	if g.handle != 0 {
		errs = append(errs, g.lib.Unpin(g.handle))
		g.handle = 0
	}
	if g.free != nil {
		errs = append(errs, g.free())
		g.free = nil
	}
	errs = append(errs, g.lib.Close())
	return errors.Join(errs...)
}
