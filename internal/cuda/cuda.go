// Package cuda is a small binding to the CUDA driver API (libcuda).
//
// It opens libcuda.so.1 with dlopen at run time and calls every entry point
// through a pointer resolved with dlsym, so programs that import it build
// without CUDA headers or toolkit and start on machines without a GPU: there,
// [Init] returns an error wrapping [ErrLibraryNotFound], or a [Result] such as
// [ResultNoDevice], instead of the process failing to load.
//
// The binding covers what gpreempt's benchmark and pre-preemption engine need:
// the device's primary context, PTX modules, kernel launches, streams, events,
// device memory and pinned, device-mapped host memory. It is not a general
// CUDA wrapper.
//
// Every call that acts within a context makes that context current on the
// calling OS thread first (cheaply: only when it is not already), because
// goroutines migrate between threads and CUDA's current context is per
// thread. Hot-path calls ([Function.Launch], [Stream.Synchronize],
// [Event.Query], ...) are one cgo call each and do not allocate.
package cuda

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include "shim.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"
)

// ErrLibraryNotFound is returned (wrapped) by [Load] and [Init] when
// libcuda.so.1 cannot be opened: no NVIDIA driver is installed, or the
// library is not on the loader's path.
var ErrLibraryNotFound = errors.New("libcuda.so.1 not found (is the NVIDIA driver installed?)")

// ErrSymbolNotFound is returned (wrapped) when libcuda.so.1 lacks an entry
// point this package needs, which means the driver is too old.
var ErrSymbolNotFound = errors.New("libcuda.so.1 lacks a required entry point (driver too old?)")

var (
	loadOnce sync.Once
	loadErr  error
)

// Load opens libcuda.so.1 and resolves the driver entry points. It is safe to
// call more than once and from several goroutines; only the first call does
// work. Most programs call [Init] instead.
func Load() error {
	loadOnce.Do(func() {
		var buf [512]C.char
		switch C.gp_load(&buf[0], C.size_t(len(buf))) {
		case 0:
		case 1:
			loadErr = fmt.Errorf("%w: %s", ErrLibraryNotFound, C.GoString(&buf[0]))
		default:
			loadErr = fmt.Errorf("%w: %s", ErrSymbolNotFound, C.GoString(&buf[0]))
		}
	})
	return loadErr
}

var (
	initOnce sync.Once
	initErr  error
)

// Init loads libcuda and initializes the driver (cuInit). Like Load, only the
// first call does work; later calls return the first call's result.
func Init() error {
	initOnce.Do(func() {
		if err := Load(); err != nil {
			initErr = err
			return
		}
		initErr = check("cuInit", C.gp_init(0))
	})
	return initErr
}

// DriverVersion returns the CUDA version the driver supports, encoded as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func DriverVersion() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var v C.int
	if err := check("cuDriverGetVersion", C.gp_driver_version(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// Open initializes the driver, and retains and returns the primary context of
// the device with the given ordinal, with the given scheduling flags. It is
// the one-call way to get a usable context; release it with
// [Context.Release].
func Open(ordinal int, flags ContextFlags) (*Context, error) {
	if err := Init(); err != nil {
		return nil, err
	}
	dev, err := GetDevice(ordinal)
	if err != nil {
		return nil, err
	}
	return dev.RetainPrimaryContext(flags)
}

// cString copies s into C memory; the caller frees it.
func cString(s string) *C.char { return C.CString(s) }

func freeC(p unsafe.Pointer) { C.free(p) }
