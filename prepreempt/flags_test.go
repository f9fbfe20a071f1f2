package prepreempt

import (
	"errors"
	"os"
	"testing"
	"unsafe"
)

// fakeGDR maps "device memory" onto a Go buffer, as libgdrapi maps it onto
// the BAR.
type fakeGDR struct {
	openErr error
	mem     []byte
	pinned  uint64
	vaShift uint64
	closed  bool
	unpins  int
}

func (f *fakeGDR) Open() error { return f.openErr }
func (f *fakeGDR) Pin(addr, size uint64) (uint64, error) {
	if addr%gpuPage != 0 {
		return 0, errors.New("unaligned pin")
	}
	f.pinned = addr
	return 7, nil
}
func (f *fakeGDR) Map(h, size uint64) (unsafe.Pointer, error) {
	f.mem = make([]byte, size)
	return unsafe.Pointer(&f.mem[0]), nil
}
func (f *fakeGDR) InfoVA(h uint64) (uint64, error)                  { return f.pinned - f.vaShift, nil }
func (f *fakeGDR) Unmap(h uint64, p unsafe.Pointer, s uint64) error { return nil }
func (f *fakeGDR) Unpin(h uint64) error                             { f.unpins++; return nil }
func (f *fakeGDR) Close() error                                     { f.closed = true; return nil }

func TestGDRFlags(t *testing.T) {
	lib := &fakeGDR{}
	freed := false
	g, err := newGDRFlags(lib, 16, func(size uint64) (uint64, func() error, error) {
		return 0x7f0000012340, func() error { freed = true; return nil }, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if g.name() != "gdrcopy" {
		t.Error(g.name())
	}
	if g.devicePtr(0)%gpuPage != 0 || g.devicePtr(0) < 0x7f0000012340 {
		t.Errorf("word 0 at %#x: not the aligned page inside the allocation", g.devicePtr(0))
	}
	if g.devicePtr(3)-g.devicePtr(0) != 12 {
		t.Error("words are not 4 bytes apart")
	}
	g.set(3, 1)
	if lib.mem[12] != 1 {
		t.Errorf("set(3, 1) did not reach the mapped word: % x", lib.mem[:16])
	}
	if err := g.close(); err != nil {
		t.Fatal(err)
	}
	if !freed || !lib.closed || lib.unpins != 1 {
		t.Errorf("Close: freed %v closed %v unpins %d", freed, lib.closed, lib.unpins)
	}
}

func TestGDRFlagsUnavailable(t *testing.T) {
	_, err := newGDRFlags(&fakeGDR{openErr: errors.New("no /dev/gdrdrv")}, 16, nil)
	if !errors.Is(err, ErrGDRCopyUnavailable) {
		t.Fatalf("err = %v, want ErrGDRCopyUnavailable", err)
	}
	if _, statErr := os.Stat(GDRDevicePath); statErr == nil {
		t.Skip("this machine has GDRCopy")
	}
	// The real library on a machine without GDRCopy: a clear error, no crash.
	_, err = newGDRFlags(&cgoGDR{}, 16, nil)
	if !errors.Is(err, ErrGDRCopyUnavailable) {
		t.Fatalf("real libgdrapi here: %v, want ErrGDRCopyUnavailable", err)
	}
}

func TestGDRFlagsRejectsBadMapping(t *testing.T) {
	lib := &fakeGDR{vaShift: 2 * gpuPage}
	_, err := newGDRFlags(lib, 16, func(size uint64) (uint64, func() error, error) {
		return 0x100000, func() error { return nil }, nil
	})
	if err == nil || !lib.closed {
		t.Fatalf("a mapping outside the pinned page was accepted (%v), or not cleaned up", err)
	}
}
