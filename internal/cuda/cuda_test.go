package cuda

import (
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"
)

// TestLoadWithoutDriver checks the promise that matters on machines without
// a GPU: a clear, typed error instead of a crash.
func TestLoadWithoutDriver(t *testing.T) {
	err := Load()
	if err == nil {
		t.Skip("libcuda.so.1 is present; this test is for machines without a driver")
	}
	if !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("Load() = %v, want ErrLibraryNotFound", err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Fatalf("error %q does not name the library", err)
	}
	// Everything built on Load reports the same error.
	if _, err := Open(0, SchedSpin); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("Open() = %v, want ErrLibraryNotFound", err)
	}
	if _, err := DeviceCount(); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("DeviceCount() = %v, want ErrLibraryNotFound", err)
	}
	if _, err := DriverVersion(); !errors.Is(err, ErrLibraryNotFound) {
		t.Fatalf("DriverVersion() = %v, want ErrLibraryNotFound", err)
	}
}

func TestErrorMatching(t *testing.T) {
	var err error = &Error{Op: "cuInit", Code: ResultNoDevice}
	if !errors.Is(err, ResultNoDevice) {
		t.Error("errors.Is(Error{NoDevice}, ResultNoDevice) = false")
	}
	if errors.Is(err, ResultNotReady) {
		t.Error("errors.Is(Error{NoDevice}, ResultNotReady) = true")
	}
	var r Result
	if !errors.As(err, &r) || r != ResultNoDevice {
		t.Errorf("errors.As gave %v", r)
	}
	if !strings.HasPrefix(err.Error(), "cuInit: ") {
		t.Errorf("Error() = %q, want it to start with the entry point", err)
	}
	withLog := &Error{Op: "cuModuleLoadDataEx", Code: ResultInvalidPTX, Log: "ptxas fatal: line 3"}
	if !strings.Contains(withLog.Error(), "ptxas fatal: line 3") {
		t.Errorf("Error() = %q, want the JIT log", withLog)
	}
	// Without the library, names fall back to the number; with it, the
	// driver's name.
	name := ResultNoDevice.Name()
	if name != "CUDA_ERROR_NO_DEVICE" && name != "CUresult(100)" {
		t.Errorf("Name() = %q", name)
	}
}

func TestArgEncoding(t *testing.T) {
	tests := []struct {
		name      string
		arg       Arg
		wantBits  uint64
		wantWidth uint8
	}{
		{"u64", U64(1 << 40), 1 << 40, 8},
		{"u32", U32(0xdeadbeef), 0xdeadbeef, 4},
		{"i32 negative", I32(-1), 0xffffffff, 4},
		{"f32", F32(1.5), uint64(math.Float32bits(1.5)), 4},
		{"ptr", Ptr(0x7f0000001000), 0x7f0000001000, 8},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.arg.bits != tt.wantBits || tt.arg.width != tt.wantWidth {
				t.Fatalf("got bits %#x width %d, want %#x width %d", tt.arg.bits, tt.arg.width, tt.wantBits, tt.wantWidth)
			}
		})
	}
}

func TestAsBytes(t *testing.T) {
	words := []uint64{1, 2, 3}
	b := asBytes(words)
	if len(b) != 24 || unsafe.Pointer(&b[0]) != unsafe.Pointer(&words[0]) {
		t.Fatalf("asBytes: len %d, want 24 bytes aliasing the slice", len(b))
	}
	if asBytes([]float32(nil)) != nil {
		t.Fatal("asBytes(nil) != nil")
	}
}
