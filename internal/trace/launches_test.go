package trace

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf/link"
)

// waitingApp is a started lcapp (testdata/lcapp.c): it makes its 6 launches
// once told to.
type waitingApp struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startLCApp(t testing.TB, app string) *waitingApp {
	t.Helper()
	cmd := exec.Command(app)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	return &waitingApp{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
}

// run lets the app make its calls, waits until it has, and returns the
// tid of its second thread.
func (a *waitingApp) run(t *testing.T) int {
	t.Helper()
	fmt.Fprintln(a.stdin, "go")
	var pid, tid int
	if _, err := fmt.Fscan(a.out, &pid, &tid); err != nil || pid != a.cmd.Process.Pid {
		t.Fatalf("lcapp said pid %d tid %d (%v)", pid, tid, err)
	}
	return tid
}

func openLaunchCounter(t testing.TB) *LaunchCounter {
	t.Helper()
	c, err := OpenLaunchCounter(nil)
	if errors.Is(err, ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// TestLaunchCounter puts the real counting program on a library exporting
// libcuda's launch functions, for two processes apart, and checks that each
// counts its own launches only (lcapp makes 6 a round: cuLaunchKernel x5 on
// two threads, cuLaunchKernelEx x1), that attaching again starts from zero,
// that a detached process is not counted, and that a process that exited
// cannot be attached, leaving nothing behind.
func TestLaunchCounter(t *testing.T) {
	lib, app := buildFakeCUDA(t)
	c := openLaunchCounter(t)

	a, b, other := startLCApp(t, app), startLCApp(t, app), startLCApp(t, app)
	pa, pb := a.cmd.Process.Pid, b.cmd.Process.Pid
	for _, pid := range []int{pa, pb} {
		if err := c.Attach(pid, lib); err != nil {
			t.Fatalf("attach %d: %v", pid, err)
		}
	}
	// Where the kernel has uprobe_multi links by process, one such link a process: a perf uprobe
	// would have other processes' hits take the probe's registration lock (LaunchCounter).
	multi := uprobeMultiSupport() == nil
	for _, pid := range []int{pa, pb} {
		links := c.procs[pid].links
		for _, l := range links {
			info, err := l.Info()
			if err != nil {
				t.Fatalf("link info: %v", err)
			}
			if want := map[bool]link.Type{true: link.UprobeMultiType, false: link.PerfEventType}[multi]; info.Type != want {
				t.Errorf("process %d: a link of type %v, want %v (uprobe_multi by process: %v)", pid, info.Type, want, multi)
			}
		}
		if multi && len(links) != 1 {
			t.Errorf("process %d: %d links, want one uprobe_multi link", pid, len(links))
		}
	}
	counts := func() (uint64, uint64) {
		na, oka := c.Count(pa)
		nb, okb := c.Count(pb)
		if !oka || !okb {
			t.Fatalf("count: attached %v %v", oka, okb)
		}
		return na, nb
	}
	if na, nb := counts(); na != 0 || nb != 0 {
		t.Fatalf("before any launch: %d %d", na, nb)
	}
	a.run(t)
	other.run(t) // not attached: counted nowhere
	if na, nb := counts(); na != 6 || nb != 0 {
		t.Fatalf("after a's launches: a %d b %d, want 6 0", na, nb)
	}
	b.run(t)
	b.run(t)
	if na, nb := counts(); na != 6 || nb != 12 {
		t.Fatalf("after b's launches: a %d b %d, want 6 12", na, nb)
	}
	if err := c.Attach(pb, lib); err != nil { // again: from zero, one set of probes
		t.Fatal(err)
	}
	b.run(t)
	if na, nb := counts(); na != 6 || nb != 6 {
		t.Fatalf("after attaching b again and its launches: a %d b %d, want 6 6", na, nb)
	}
	if c.Counting(other.cmd.Process.Pid) {
		t.Error("an unattached process is counted")
	}
	c.Detach(pa)
	if _, ok := c.Count(pa); ok || c.Counting(pa) {
		t.Error("a detached process still has a count")
	}
	b.stdin.Close()
	b.cmd.Wait()
	if err := c.Attach(pb, lib); err == nil || c.Counting(pb) {
		t.Errorf("attaching a process that exited: %v, counted %v", err, c.Counting(pb))
	}
	if n := c.libraries(); n != 0 {
		t.Errorf("%d libraries held with no process attached", n)
	}
}

func TestLaunchCounterErrors(t *testing.T) {
	lib, app := buildFakeCUDA(t)
	c := openLaunchCounter(t)
	p := startLCApp(t, app)
	pid := p.cmd.Process.Pid
	for _, tc := range []struct {
		name string
		pid  int
		lib  string
		want error
	}{
		{"no such library", pid, filepath.Join(t.TempDir(), "libcuda.so.1"), ErrNoLibrary},
		{"no launch function in it", pid, app, ErrNoSymbols},
		{"no process", 0, lib, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Attach(tc.pid, tc.lib)
			if err == nil || tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("Attach = %v, want %v", err, tc.want)
			}
			if c.Counting(tc.pid) {
				t.Error("a failed attach left the process counted")
			}
		})
	}
}
