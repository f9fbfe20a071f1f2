package cuda

/*
#cgo noescape gp_launch
#cgo nocallback gp_launch
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math"
	"unsafe"
)

// MaxArgs is the most parameters a kernel launched through this package may
// take.
const MaxArgs = C.GP_MAX_ARGS

// DevicePtr is a device address (CUdeviceptr). With unified addressing, a
// mapped host buffer's device pointer is one too.
type DevicePtr uint64

// Arg is one kernel parameter, by value. Build it with [U64], [U32], [I32],
// [F32] or [Ptr]; its width must match the kernel's parameter declaration.
type Arg struct {
	bits  uint64
	width uint8
}

// U64 is a 64-bit integer parameter (.param .u64 / unsigned long long).
func U64(v uint64) Arg { return Arg{bits: v, width: 8} }

// U32 is a 32-bit integer parameter (.param .u32 / unsigned int).
func U32(v uint32) Arg { return Arg{bits: uint64(v), width: 4} }

// I32 is a signed 32-bit integer parameter (.param .s32 / int).
func I32(v int32) Arg { return Arg{bits: uint64(uint32(v)), width: 4} }

// F32 is a float parameter (.param .f32 / float).
func F32(v float32) Arg { return Arg{bits: uint64(math.Float32bits(v)), width: 4} }

// Ptr is a pointer parameter (.param .u64 holding a device address).
func Ptr(p DevicePtr) Arg { return Arg{bits: uint64(p), width: 8} }

// Dim3 is a grid or block shape. Zero Y or Z count as 1, so Dim3{X: n} is a
// one-dimensional shape.
type Dim3 struct{ X, Y, Z uint32 }

func orOne(v uint32) C.uint {
	if v == 0 {
		return 1
	}
	return C.uint(v)
}

// Launch enqueues the kernel on stream s (nil: the legacy default stream)
// with the given grid and block shapes, dynamic shared memory and
// parameters. It is one cgo call and does not allocate, so it can sit on a
// latency-critical path; it returns once the launch is queued, not when the
// kernel has run.
func (f *Function) Launch(grid, block Dim3, sharedMem uint32, s *Stream, args ...Arg) error {
	if len(args) > MaxArgs {
		return fmt.Errorf("launch %s: %d arguments, at most %d supported", f.name, len(args), MaxArgs)
	}
	var slots [MaxArgs]C.uint64_t
	for i, a := range args {
		if a.width == 4 {
			// The kernel reads 4 bytes at the slot's address; writing them
			// there rather than into the low half of a uint64 keeps this right
			// on big-endian hosts too.
			*(*uint32)(unsafe.Pointer(&slots[i])) = uint32(a.bits)
		} else {
			slots[i] = C.uint64_t(a.bits)
		}
	}
	var stream C.CUstream
	if s != nil {
		stream = s.h
	}
	r := C.gp_launch(f.ctx.h, f.h,
		orOne(grid.X), orOne(grid.Y), orOne(grid.Z),
		orOne(block.X), orOne(block.Y), orOne(block.Z),
		C.uint(sharedMem), stream, &slots[0], C.int(len(args)))
	if r != 0 {
		return &Error{Op: "cuLaunchKernel(" + f.name + ")", Code: Result(r)}
	}
	return nil
}
