package cuda

/*
#cgo noescape gp_memcpy_htod
#cgo nocallback gp_memcpy_htod
#cgo noescape gp_memcpy_dtoh
#cgo nocallback gp_memcpy_dtoh
#include "shim.h"
*/
import "C"

import (
	"errors"
	"unsafe"
)

// MemAlloc allocates size bytes of device memory.
func (c *Context) MemAlloc(size uint64) (DevicePtr, error) {
	var p C.CUdeviceptr
	if err := check("cuMemAlloc_v2", C.gp_mem_alloc(c.h, &p, C.size_t(size))); err != nil {
		return 0, err
	}
	return DevicePtr(p), nil
}

// MemFree frees device memory from MemAlloc.
func (c *Context) MemFree(p DevicePtr) error {
	return check("cuMemFree_v2", C.gp_mem_free(c.h, C.CUdeviceptr(p)))
}

// MemcpyHtoD copies src to device memory at dst, synchronously.
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	return check("cuMemcpyHtoD_v2", C.gp_memcpy_htod(c.h, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))))
}

// MemcpyDtoH copies len(dst) bytes from device memory at src into dst,
// synchronously.
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	return check("cuMemcpyDtoH_v2", C.gp_memcpy_dtoh(c.h, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))))
}

// MemsetD8 sets n bytes at dst to v (cuMemsetD8: ordered after earlier work
// on the legacy default stream, like the synchronous copies).
func (c *Context) MemsetD8(dst DevicePtr, v uint8, n uint64) error {
	return check("cuMemsetD8_v2", C.gp_memset_d8(c.h, C.CUdeviceptr(dst), C.uchar(v), C.size_t(n)))
}

// MemsetD32 sets n 32-bit words at dst to v.
func (c *Context) MemsetD32(dst DevicePtr, v uint32, n uint64) error {
	return check("cuMemsetD32_v2", C.gp_memset_d32(c.h, C.CUdeviceptr(dst), C.uint(v), C.size_t(n)))
}

// Scalar is an element type that can be copied to and from device memory as
// raw bytes.
type Scalar interface {
	~uint8 | ~int8 | ~uint16 | ~int16 | ~uint32 | ~int32 | ~uint64 | ~int64 | ~float32 | ~float64
}

func asBytes[T Scalar](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(zero)))
}

// CopyToHost copies len(dst) elements from device memory at src.
func CopyToHost[T Scalar](c *Context, dst []T, src DevicePtr) error {
	return c.MemcpyDtoH(asBytes(dst), src)
}

// CopyToDevice copies src to device memory at dst.
func CopyToDevice[T Scalar](c *Context, dst DevicePtr, src []T) error {
	return c.MemcpyHtoD(dst, asBytes(src))
}

// HostAllocFlags are CU_MEMHOSTALLOC_* flags.
type HostAllocFlags uint32

// Host allocation flags. Values from cuda.h.
const (
	// HostAllocPortable makes the memory pinned for every context, not just
	// the allocating one.
	HostAllocPortable HostAllocFlags = 1
	// HostAllocDeviceMap maps the memory into the device's address space, so
	// kernels can read and write it directly (a host flag a kernel polls).
	HostAllocDeviceMap HostAllocFlags = 2
	// HostAllocWriteCombined makes host writes fast and host reads slow.
	HostAllocWriteCombined HostAllocFlags = 4
)

// HostBuffer is page-locked host memory from cuMemHostAlloc. Its memory is C
// memory, not Go's, so the garbage collector never moves it and kernels may
// keep using it while Go code reads and writes it (use sync/atomic for words
// shared with a running kernel).
type HostBuffer struct {
	ctx  *Context
	p    unsafe.Pointer
	size int
	dptr DevicePtr
}

// HostAlloc allocates size bytes of pinned host memory. With
// HostAllocDeviceMap, [HostBuffer.DevicePtr] gives the address kernels use.
func (c *Context) HostAlloc(size int, flags HostAllocFlags) (*HostBuffer, error) {
	if size <= 0 {
		return nil, errors.New("host alloc: size must be positive")
	}
	var p unsafe.Pointer
	if err := check("cuMemHostAlloc", C.gp_host_alloc(c.h, &p, C.size_t(size), C.uint(flags))); err != nil {
		return nil, err
	}
	b := &HostBuffer{ctx: c, p: p, size: size}
	if flags&HostAllocDeviceMap != 0 {
		var d C.CUdeviceptr
		if err := check("cuMemHostGetDevicePointer_v2", C.gp_host_device_pointer(c.h, &d, p)); err != nil {
			_ = b.Free()
			return nil, err
		}
		b.dptr = DevicePtr(d)
	}
	// Pinned memory is not zeroed by the driver; start from a known state.
	clear(b.Bytes())
	return b, nil
}

// DevicePtr returns the device address of a buffer allocated with
// HostAllocDeviceMap, or 0.
func (b *HostBuffer) DevicePtr() DevicePtr { return b.dptr }

// Len returns the buffer's size in bytes.
func (b *HostBuffer) Len() int { return b.size }

// Bytes returns the buffer as a byte slice, valid until Free.
func (b *HostBuffer) Bytes() []byte { return unsafe.Slice((*byte)(b.p), b.size) }

// Uint32s returns the buffer as 32-bit words, valid until Free.
func (b *HostBuffer) Uint32s() []uint32 { return unsafe.Slice((*uint32)(b.p), b.size/4) }

// Uint64s returns the buffer as 64-bit words, valid until Free.
func (b *HostBuffer) Uint64s() []uint64 { return unsafe.Slice((*uint64)(b.p), b.size/8) }

// Free releases the buffer. Slices obtained from it must not be used
// afterwards, and no kernel may still be using it.
func (b *HostBuffer) Free() error {
	if b.p == nil {
		return nil
	}
	err := check("cuMemFreeHost", C.gp_host_free(b.ctx.h, b.p))
	b.p, b.size, b.dptr = nil, 0, 0
	return err
}
