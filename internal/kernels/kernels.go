// Package kernels holds gpreempt's GPU kernels as PTX embedded in the
// binary, and loads them into a CUDA context.
//
// kernels.cu is the CUDA C source; kernels.ptx, the embedded module, is its
// hand-written PTX equivalent (gen-ptx.sh regenerates it with nvcc on a
// machine with the toolkit). Shipping PTX rather than a cubin lets one binary
// run on any GPU at least as new as the PTX target: the driver JIT-compiles
// it at load time, with no CUDA toolkit needed where the binary is built.
package kernels

import (
	_ "embed"
	"errors"
	"fmt"

	"github.com/gpreempt/gpreempt/internal/cuda"
)

// PTX is the embedded module text.
//
//go:embed kernels.ptx
var PTX []byte

// Entry names, as declared in kernels.cu (extern "C") and kernels.ptx.
const (
	// EntryEmpty is empty(): does nothing.
	EntryEmpty = "empty"
	// EntryBEFMA is be_fma(float *out, unsigned long long iters): the
	// best-effort load, fixed FMA work per thread; out holds one float per
	// thread of the grid.
	EntryBEFMA = "be_fma"
	// EntryLCWork is lc_work(unsigned long long *stamps, unsigned long long
	// iters): the latency-critical request, the same work plus GPU-side
	// start and end stamps (see the Stamp* constants).
	EntryLCWork = "lc_work"
	// EntrySpinFlag is spin_flag(volatile unsigned int *flag, unsigned long
	// long max_ns, unsigned long long *stamp): one thread polls *flag until
	// it is nonzero or max_ns have passed; launch as <<<1, 1>>>.
	EntrySpinFlag = "spin_flag"
)

// Entries lists every entry point the module must define.
var Entries = []string{EntryEmpty, EntryBEFMA, EntryLCWork, EntrySpinFlag}

// Layout of lc_work's stamps buffer, in 64-bit words.
const (
	// LCStampStart is %globaltimer (ns) when block 0 started.
	LCStampStart = 0
	// LCStampEnd is the latest %globaltimer (ns) at which a block finished.
	// Kernels only raise it (atomic max), so it needs no reset.
	LCStampEnd = 1
	// LCStampWords is the size to allocate for the stamps buffer (word 2 is
	// the kernel's never-written result sink; word 3 is padding).
	LCStampWords = 4
)

// Layout of spin_flag's stamp buffer, in 64-bit words.
const (
	// SpinStampStart is %globaltimer (ns) when the spinner started.
	SpinStampStart = 0
	// SpinStampEnd is %globaltimer (ns) when it stopped spinning.
	SpinStampEnd = 1
	// SpinStampWords is the size to allocate for the stamp buffer.
	SpinStampWords = 2
)

// FMAsPerIter is how many FMAs one thread of be_fma or lc_work does per
// iteration (four independent chains).
const FMAsPerIter = 4

// Set is the loaded module and its kernels.
type Set struct {
	Module   *cuda.Module
	Empty    *cuda.Function
	BEFMA    *cuda.Function
	LCWork   *cuda.Function
	SpinFlag *cuda.Function
}

// Load JIT-compiles the embedded PTX in ctx and looks up every entry point.
func Load(ctx *cuda.Context) (*Set, error) {
	return LoadPTX(ctx, PTX)
}

// LoadPTX is Load with another PTX text, e.g. nvcc's output to compare with
// the embedded one.
func LoadPTX(ctx *cuda.Context, ptx []byte) (*Set, error) {
	mod, err := ctx.LoadModule(ptx)
	if err != nil {
		return nil, fmt.Errorf("load kernels: %w", err)
	}
	s := &Set{Module: mod}
	for _, e := range []struct {
		name string
		dst  **cuda.Function
	}{
		{EntryEmpty, &s.Empty},
		{EntryBEFMA, &s.BEFMA},
		{EntryLCWork, &s.LCWork},
		{EntrySpinFlag, &s.SpinFlag},
	} {
		f, err := mod.Function(e.name)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("load kernels: %w", err), mod.Unload())
		}
		*e.dst = f
	}
	return s, nil
}

// Unload unloads the module.
func (s *Set) Unload() error { return s.Module.Unload() }
