package libfile

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// hostileELF returns a 64-bit ELF file's first bytes whose .dynsym claims
// dynsym bytes at offset 1 MiB: written and truncated to its size, a
// sparse file of a few KB on disk (issue 52, finding 1: 240 MiB made one
// pass take 9.8 s at 1.1 GiB RSS).
func hostileELF(dynsym uint64) []byte {
	le := binary.LittleEndian
	var b bytes.Buffer
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF")
	hdr[4], hdr[5], hdr[6] = 2, 1, 1 // 64-bit, little-endian, version 1
	le.PutUint16(hdr[16:], 3)        // ET_DYN
	le.PutUint16(hdr[18:], 62)       // x86-64
	le.PutUint32(hdr[20:], 1)
	le.PutUint64(hdr[40:], 4096) // section headers
	le.PutUint16(hdr[52:], 64)
	le.PutUint16(hdr[58:], 64)
	le.PutUint16(hdr[60:], 4) // sections
	le.PutUint16(hdr[62:], 3) // .shstrtab
	b.Write(hdr)
	names := "\x00.dynsym\x00.dynstr\x00.shstrtab\x00"
	b.Write(make([]byte, 1024-b.Len()))
	b.WriteString(names) // at 1024
	b.Write(make([]byte, 2048-b.Len()))
	b.WriteString("\x00cuLaunchKernel\x00") // .dynstr at 2048
	b.Write(make([]byte, 4096-b.Len()))
	sh := func(name, typ uint32, off, size uint64, link uint32, entsize uint64) {
		s := make([]byte, 64)
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[24:], off)
		le.PutUint64(s[32:], size)
		le.PutUint32(s[40:], link)
		le.PutUint64(s[56:], entsize)
		b.Write(s)
	}
	sh(0, 0, 0, 0, 0, 0)
	sh(1, 11, 1<<20, dynsym, 2, 24) // SHT_DYNSYM
	sh(9, 3, 2048, 16, 0, 0)        // SHT_STRTAB
	sh(17, 3, 1024, uint64(len(names)), 0, 0)
	return b.Bytes()
}

func writeSparse(tb testing.TB, path string, head []byte, size int64) {
	tb.Helper()
	if err := os.WriteFile(path, head, 0o644); err != nil {
		tb.Fatal(err)
	}
	if err := os.Truncate(path, size); err != nil {
		tb.Fatal(err)
	}
}

// openClosed opens path for cuLaunchKernel as the tracer does, closes it,
// and returns the function's offset (0: not defined).
func openClosed(path string) (uint64, error) {
	l, err := Open(path, []string{"cuLaunchKernel"})
	if err != nil {
		return 0, err
	}
	defer l.Close()
	off, _ := l.Offset("cuLaunchKernel")
	return off, nil
}

// launchSymbols are the names the tracer asks a libcuda for
// (trace.DefaultLaunchSymbols).
var launchSymbols = []string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz"}

// TestLibraryRefusesHostileFiles (issue 52, finding 1): what a process
// maps under libcuda's name is opened and read as untrusted: a FIFO is
// never opened (it blocked the daemon for good), a file of another user
// or one others may write is not read, and a root-owned file's symbol
// tables are read within bounds (a sparse 240 MiB .dynsym cost 1.1 GiB).
func TestLibraryRefusesHostileFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("files of another owner need root to make")
	}
	dir := t.TempDir()
	fifo := filepath.Join(dir, "libcuda.so.1")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	sparse := filepath.Join(dir, "sparse", "libcuda.so.1")
	os.Mkdir(filepath.Dir(sparse), 0o755)
	writeSparse(t, sparse, hostileELF(240<<20), 1<<20+240<<20)
	others := filepath.Join(dir, "others", "libcuda.so.1")
	os.Mkdir(filepath.Dir(others), 0o755)
	writeSparse(t, others, hostileELF(1024), 1<<20+1024)
	if err := os.Chown(others, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	writable := filepath.Join(dir, "writable", "libcuda.so.1")
	os.Mkdir(filepath.Dir(writable), 0o755)
	writeSparse(t, writable, hostileELF(1024), 1<<20+1024)
	os.Chmod(writable, 0o666)
	huge := filepath.Join(dir, "huge", "libcuda.so.1")
	os.Mkdir(filepath.Dir(huge), 0o755)
	writeSparse(t, huge, hostileELF(1024), 4<<30)
	for _, tt := range []struct{ name, path string }{
		{"fifo", fifo}, {"sparse dynsym", sparse}, {"another user's", others},
		{"group and world writable", writable}, {"4 GiB", huge},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := openClosed(tt.path)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, ErrUntrusted) {
				t.Errorf("Open(%s) = %v; want ErrUntrusted", tt.path, err)
			}
			if n := after.TotalAlloc - before.TotalAlloc; n > 8<<20 {
				t.Errorf("allocated %d bytes refusing it", n)
			}
		})
	}
	// A known libcuda is read whoever owns it.
	if err := Trust(others); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { known.Lock(); clear(known.m); known.Unlock() })
	if _, err := openClosed(others); err != nil {
		t.Errorf("a known library of another owner: %v", err)
	}
	// Changed since (its change time moves; an inode reused by another
	// file has another): no longer the file known.
	if err := os.Chmod(others, 0o640); err != nil {
		t.Fatal(err)
	}
	if _, err := openClosed(others); !errors.Is(err, ErrUntrusted) {
		t.Errorf("a known library changed since: %v; want ErrUntrusted", err)
	}
}

// TestFunctionOffsetsBounded: the tables are read within maxLibraryRead
// whatever the headers claim: a .dynsym under the per-table bound but a
// .dynstr and section count at theirs are refused or read, never past
// the budget.
func TestFunctionOffsetsBounded(t *testing.T) {
	for _, size := range []uint64{0, 24, 1 << 20, maxDynsym, maxDynsym + 24} {
		head := hostileELF(size)
		f := bytes.NewReader(append(head, make([]byte, 1<<20-len(head))...))
		br := &countingReader{r: f}
		_, err := functionOffsets(br, 1<<20+int64(size), []string{"cuLaunchKernel"})
		if size > maxDynsym && !errors.Is(err, ErrUntrusted) {
			t.Errorf("dynsym %d: %v; want ErrUntrusted", size, err)
		}
		if br.n > maxLibraryRead {
			t.Errorf("dynsym %d: read %d bytes", size, br.n)
		}
	}
}

type countingReader struct {
	r interface {
		ReadAt([]byte, int64) (int, error)
	}
	n int64
}

func (c *countingReader) ReadAt(p []byte, off int64) (int, error) {
	c.n += int64(len(p))
	return c.r.ReadAt(p, off)
}

// FuzzFunctionOffsets: any bytes are read within the budget, without a
// panic.
func FuzzFunctionOffsets(f *testing.F) {
	f.Add(hostileELF(24))
	f.Add(hostileELF(240 << 20))
	f.Add([]byte("\x7fELF"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r := &countingReader{r: bytes.NewReader(b)}
		functionOffsets(r, int64(len(b)), launchSymbols)
		if r.n > maxLibraryRead {
			t.Errorf("read %d bytes", r.n)
		}
	})
}
