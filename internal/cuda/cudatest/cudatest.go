// Package cudatest opens a GPU for tests that need one.
package cudatest

import (
	"errors"
	"testing"

	"github.com/gpreempt/gpreempt/internal/cuda"
)

// Open returns a context on device 0 (spin scheduling), released when the
// test ends. It skips the test where there is no driver or no device, the
// only reasons a GPU test may not run; any other failure fails it.
func Open(tb testing.TB) *cuda.Context {
	tb.Helper()
	ctx, err := cuda.Open(0, cuda.SchedSpin)
	if errors.Is(err, cuda.ErrLibraryNotFound) || errors.Is(err, cuda.ResultNoDevice) {
		tb.Skipf("needs a GPU: %v", err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := ctx.Release(); err != nil {
			tb.Error(err)
		}
	})
	return ctx
}
