package cuda

/*
#include <stdint.h>
#include "shim.h"

// A CUstream handle is an opaque pointer-sized value; converting it here
// keeps Go from treating it as a Go pointer.
static inline CUstream gp_stream_from_handle(uintptr_t h) { return (CUstream)h; }
*/
import "C"

// ForeignStream wraps a CUstream created by someone else in c (PyTorch's
// torch.cuda.current_stream().cuda_stream, say) so work and events can be
// queued on it. Destroy must not be called on the result: the stream is
// not ours. h 0 is the legacy default stream.
func (c *Context) ForeignStream(h uintptr) *Stream {
	return &Stream{ctx: c, h: C.gp_stream_from_handle(C.uintptr_t(h))}
}

// RetainPrimary retains the device's primary context without touching its
// flags: for joining a context an application (PyTorch, say) already
// created and configured.
func (d Device) RetainPrimary() (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.gp_primary_ctx_retain(&h, d.h)); err != nil {
		return nil, err
	}
	return &Context{dev: d, h: h}, nil
}
