package cuda

/*
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"unsafe"
)

// Context is a retained primary context. Every object created from it keeps
// a reference to it and makes it current before each driver call.
type Context struct {
	dev Device
	h   C.CUcontext
}

// Device returns the device the context belongs to.
func (c *Context) Device() Device { return c.dev }

// Release drops this process's reference to the primary context; the driver
// destroys the context (and its TSGs) when the last reference goes. Objects
// created from c must not be used afterwards.
func (c *Context) Release() error {
	return check("cuDevicePrimaryCtxRelease_v2", C.gp_primary_ctx_release(c.dev.h))
}

// Synchronize waits until all work in the context has completed.
func (c *Context) Synchronize() error {
	return check("cuCtxSynchronize", C.gp_ctx_synchronize(c.h))
}

// StreamPriorityRange returns the numerically least and greatest stream
// priorities. Lower numbers are higher priorities, so greatest <= least.
func (c *Context) StreamPriorityRange() (least, greatest int, err error) {
	var l, g C.int
	if err := check("cuCtxGetStreamPriorityRange", C.gp_ctx_stream_priority_range(c.h, &l, &g)); err != nil {
		return 0, 0, err
	}
	return int(l), int(g), nil
}

// Module is a loaded CUDA module.
type Module struct {
	ctx *Context
	h   C.CUmodule
}

// jitLogSize bounds the JIT error log kept for a module that fails to load.
const jitLogSize = 16 << 10

// LoadModule loads a module image: PTX text (JIT-compiled for the device by
// the driver), a cubin or a fatbin. PTX need not be NUL-terminated; a copy
// is. When the JIT rejects the PTX, the returned *Error carries its log.
func (c *Context) LoadModule(image []byte) (*Module, error) {
	if len(image) == 0 {
		return nil, errors.New("load module: empty image")
	}
	img := C.malloc(C.size_t(len(image) + 1))
	if img == nil {
		return nil, errors.New("load module: out of host memory")
	}
	defer freeC(img)
	buf := unsafe.Slice((*byte)(img), len(image)+1)
	copy(buf, image)
	buf[len(image)] = 0

	var logBuf [jitLogSize]C.char
	var h C.CUmodule
	r := C.gp_module_load(c.h, &h, img, &logBuf[0], C.uint(len(logBuf)))
	if r != 0 {
		return nil, &Error{Op: "cuModuleLoadDataEx", Code: Result(r), Log: C.GoString(&logBuf[0])}
	}
	return &Module{ctx: c, h: h}, nil
}

// Unload unloads the module; its functions must not be used afterwards.
func (m *Module) Unload() error {
	return check("cuModuleUnload", C.gp_module_unload(m.ctx.h, m.h))
}

// Function looks up a kernel entry point by its (unmangled, extern "C")
// name.
func (m *Module) Function(name string) (*Function, error) {
	cname := cString(name)
	defer freeC(unsafe.Pointer(cname))
	var h C.CUfunction
	if err := check("cuModuleGetFunction", C.gp_module_function(m.ctx.h, &h, m.h, cname)); err != nil {
		return nil, fmt.Errorf("kernel %q: %w", name, err)
	}
	return &Function{ctx: m.ctx, h: h, name: name}, nil
}

// FunctionAttribute is a CUfunction_attribute.
type FunctionAttribute int

// Function attributes. Values from cuda.h.
const (
	FuncMaxThreadsPerBlock FunctionAttribute = 0
	FuncSharedSizeBytes    FunctionAttribute = 1
	FuncLocalSizeBytes     FunctionAttribute = 3
	FuncNumRegs            FunctionAttribute = 4
	FuncPTXVersion         FunctionAttribute = 5
	FuncBinaryVersion      FunctionAttribute = 6
)

// Function is a kernel in a loaded module.
type Function struct {
	ctx  *Context
	h    C.CUfunction
	name string
}

// Name returns the kernel's entry name.
func (f *Function) Name() string { return f.name }

// Attribute returns one attribute of the compiled kernel.
func (f *Function) Attribute(a FunctionAttribute) (int, error) {
	var v C.int
	if err := check("cuFuncGetAttribute", C.gp_func_attribute(f.ctx.h, &v, C.int(a), f.h)); err != nil {
		return 0, fmt.Errorf("kernel %q attribute %d: %w", f.name, int(a), err)
	}
	return int(v), nil
}
