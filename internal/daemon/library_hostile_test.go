package daemon

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// testMapArg makes the test binary a process that maps a file (args: the
// path, and "fifo" to then put a FIFO named "PATH (deleted)" where it
// was), says "mapped", and waits to be killed.
const testMapArg = "__test-map-file"

func runMapper(args []string) int {
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ, syscall.MAP_PRIVATE); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if args[1] == "fifo" {
		// The file goes; maps now says "PATH (deleted)", which names
		// this FIFO: opened for reading, it waits for a writer for good.
		if err := os.Remove(args[0]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		if err := unix.Mkfifo(args[0]+" (deleted)", 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	os.Stdout.WriteString("mapped\n")
	os.Stdin.Read(make([]byte, 1))
	return 1
}

// sparseELF writes at path a 64-bit ELF file whose .dynsym claims dynsym
// bytes: a few KB on disk, sparse up to its claimed size.
func sparseELF(t *testing.T, path string, dynsym uint64) {
	t.Helper()
	le := binary.LittleEndian
	b := make([]byte, 4096+4*64)
	copy(b, "\x7fELF")
	b[4], b[5], b[6] = 2, 1, 1
	le.PutUint16(b[16:], 3)
	le.PutUint16(b[18:], 62)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[40:], 4096)
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[58:], 64)
	le.PutUint16(b[60:], 4)
	le.PutUint16(b[62:], 3)
	names := "\x00.dynsym\x00.dynstr\x00.shstrtab\x00"
	copy(b[1024:], names)
	copy(b[2048:], "\x00cuLaunchKernel\x00")
	sh := func(i int, name, typ uint32, off, size uint64, link uint32, entsize uint64) {
		s := b[4096+64*i:]
		le.PutUint32(s[0:], name)
		le.PutUint32(s[4:], typ)
		le.PutUint64(s[24:], off)
		le.PutUint64(s[32:], size)
		le.PutUint32(s[40:], link)
		le.PutUint64(s[56:], entsize)
	}
	sh(1, 1, 11, 1<<20, dynsym, 2, 24)
	sh(2, 9, 3, 2048, 16, 0, 0)
	sh(3, 17, 3, 1024, uint64(len(names)), 0, 0)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(1<<20+dynsym)); err != nil {
		t.Fatal(err)
	}
}

// mapper starts a process of uid that maps path (mode: "" or "fifo").
func mapper(t *testing.T, uid, gid uint32, path, mode string) policy.ProcRef {
	t.Helper()
	cmd := exec.Command(proctest.OtherUsersExe(t), testMapArg, path, mode)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "mapped" {
		t.Fatalf("mapper said %q", line)
	}
	return proctest.Current(t, policy.ProcRef{PID: cmd.Process.Pid, Comm: "mapper"})
}

// TestHostileLibCUDA (issue 52, finding 1): a user's processes map their
// own "libcuda.so.1": a sparse ELF whose .dynsym claims 240 MiB (one pass
// took 9.8 s at 1.1 GiB RSS), the same file root-owned (as a pod's root
// makes it), and one deleted and replaced by a FIFO named
// "libcuda.so.1 (deleted)" (the daemon blocked on it for good, and froze
// the SLO loop). A window's BE progress over them, with the real launch
// counter, refuses all three at once, within a bounded allocation.
func TestHostileLibCUDA(t *testing.T) {
	uid, gid := proctest.NewUser(t)
	counter, err := trace.OpenLaunchCounter(nil)
	if err != nil {
		t.Skipf("launch counter: %v", err)
	}
	defer counter.Close()
	dir := proctest.ReachableDir(t)
	own := filepath.Join(dir, "own")
	rootOwned := filepath.Join(dir, "root")
	for _, d := range []string{own, rootOwned} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chown(own, int(uid), int(gid)); err != nil {
		t.Fatal(err)
	}
	sparse, fifo, rooted := filepath.Join(own, "libcuda.so.1"), filepath.Join(own, "x", "libcuda.so.1"), filepath.Join(rootOwned, "libcuda.so.1")
	sparseELF(t, sparse, 240<<20)
	os.Chown(sparse, int(uid), int(gid))
	os.Mkdir(filepath.Dir(fifo), 0o755)
	os.Chown(filepath.Dir(fifo), int(uid), int(gid))
	sparseELF(t, fifo, 24)
	os.Chown(fifo, int(uid), int(gid))
	sparseELF(t, rooted, 240<<20)
	bes := []policy.ProcRef{mapper(t, uid, gid, sparse, ""), mapper(t, uid, gid, fifo, "fifo"), mapper(t, uid, gid, rooted, "")}

	p := signals.NewBEProgress(counter, nil)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ws []signal.BEWindow
		for _, b := range bes {
			ws = append(ws, signal.BEWindow{ProcRef: b})
		}
		p.Roll(time.Second, ws)
	}()
	// A hang detector, not a bound the fix is measured by: a FIFO opened
	// for reading blocked the window for good.
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("a window's BE progress blocked on a hostile libcuda")
	}
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 32<<20 {
		t.Errorf("a window allocated %d MiB over hostile libraries", n>>20)
	}
	st := p.Status()
	if len(st) != len(bes) {
		t.Fatalf("status %+v", st)
	}
	for i, s := range st {
		if !strings.HasPrefix(s.Signal, "not counted") || counter.Counting(bes[i].PID) {
			t.Errorf("process %d (%s): %q; want refused", s.PID, []string{"sparse", "fifo", "root-owned sparse"}[i], s.Signal)
		}
	}
	if !strings.Contains(st[0].Signal, "not root") || !strings.Contains(st[2].Signal, "dynamic symbols") {
		t.Errorf("reasons: %q, %q", st[0].Signal, st[2].Signal)
	}
}
