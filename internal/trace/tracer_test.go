package trace

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// openTracer loads and attaches the real programs. It skips only when the
// kernel refuses for lack of rights, saying so.
func openTracer(tb testing.TB, opts Options) *Tracer {
	tb.Helper()
	opts.MountTracefs = true
	tr, err := Open(context.Background(), opts)
	if errors.Is(err, ErrNotRoot) {
		tb.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		tb.Fatalf("open tracer: %v", err)
	}
	tb.Cleanup(func() { tr.Close() })
	return tr
}

// collect receives events until want of them satisfy keep, or fails after
// a timeout.
func collect(tb testing.TB, tr *Tracer, want int, keep func(Event) bool) []Event {
	tb.Helper()
	var got []Event
	timeout := time.After(10 * time.Second)
	for len(got) < want {
		select {
		case ev, ok := <-tr.Events():
			if !ok {
				tb.Fatalf("events closed after %d of %d (err %v)", len(got), want, tr.Err())
			}
			if keep(ev) {
				got = append(got, ev)
			}
		case <-timeout:
			tb.Fatalf("timed out with %d of %d events", len(got), want)
		}
	}
	return got
}

func threadComm(tb testing.TB, tid int) string {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/self/task/%d/comm", tid))
	if err != nil {
		tb.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRMTracepoints loads the real ioctl programs and makes RM ioctls on
// /dev/null: the kernel answers ENOTTY, but the tracepoints fire and the
// programs copy the parameter blocks, which must decode to what was sent.
func TestRMTracepoints(t *testing.T) {
	tr := openTracer(t, Options{RM: true, PID: os.Getpid()})

	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())

	// A status other than NV_OK is preset in every block: the programs
	// must carry what is in user memory at exit.
	const preset = ioctl.NV_ERR_INVALID_CLIENT
	alloc64 := ioctl.NVOS64_PARAMETERS{HRoot: 0xc1d00022, HObjectParent: 0x5c000002, HObjectNew: 0x5c000015,
		HClass: ioctl.KEPLER_CHANNEL_GROUP_A, ParamsSize: 0, Status: uint32(preset)}
	alloc21 := ioctl.NVOS21_PARAMETERS{HRoot: 0xc1d00022, HObjectParent: 0x5c000015, HObjectNew: 0x5c00001c,
		HClass: ioctl.HOPPER_CHANNEL_GPFIFO_A, Status: uint32(preset)}
	setTS := ioctl.NVOS54_PARAMETERS{HClient: 0xc1d00022, HObject: 0x5c000015, Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Status: uint32(preset)}
	ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 2048}
	sched := ioctl.NVOS54_PARAMETERS{HClient: 0xc1d00022, HObject: 0x5c000015, Cmd: ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE}
	schedParams := ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575{BEnable: 1}
	otherCtl := ioctl.NVOS54_PARAMETERS{HClient: 0xc1d00022, HObject: 0xc1d00022, Cmd: ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO}
	handleInfo := ioctl.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{HObject: 0x5c000015, Index: 2}
	free := ioctl.NVOS00_PARAMETERS{HRoot: 0xc1d00022, HObjectParent: 0x5c000002, HObjectOld: 0x5c000015, Status: uint32(preset)}

	mustENOTTY := func(what string, errno unix.Errno) {
		t.Helper()
		if errno != unix.ENOTTY {
			t.Fatalf("%s on /dev/null: errno %v, want ENOTTY", what, errno)
		}
	}
	mustENOTTY("alloc64", rmIoctl(fd, ioctl.NV_ESC_RM_ALLOC, &alloc64))
	// Not traced: not type 'F', an escape the programs ignore, a size RM
	// would refuse.
	var termios unix.Termios
	ioctlPtr(fd, unix.TCGETS, &termios)
	ioctlPtr(fd, ioctl.IOWR(ioctl.NV_ESC_RM_MAP_MEMORY, 48), &alloc64)
	ioctlPtr(fd, ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 40), &alloc64)
	mustENOTTY("alloc21", rmIoctl(fd, ioctl.NV_ESC_RM_ALLOC, &alloc21))
	mustENOTTY("set timeslice", control(fd, &setTS, &ts))
	mustENOTTY("schedule", control(fd, &sched, &schedParams))
	mustENOTTY("handle info", control(fd, &otherCtl, &handleInfo))
	mustENOTTY("free", rmIoctl(fd, ioctl.NV_ESC_RM_FREE, &free))
	// A parameter block the programs cannot read: traced, without a body.
	ioctlBadPointer(fd, ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 32))

	evs := collect(t, tr, 7, func(ev Event) bool { _, ok := ev.(*RMCall); return ok })
	comm := threadComm(t, tid)
	for i, ev := range evs {
		e := ev.(*RMCall)
		if e.PID != uint32(os.Getpid()) || e.TID != uint32(tid) || e.Comm != comm || e.FD != int32(fd) {
			t.Errorf("event %d: pid %d tid %d comm %q fd %d, want %d %d %q %d", i, e.PID, e.TID, e.Comm, e.FD, os.Getpid(), tid, comm, fd)
		}
		if e.Ret != -int64(unix.ENOTTY) {
			t.Errorf("event %d: ret %d, want -ENOTTY", i, e.Ret)
		}
		if e.Enter < tr.Start() || e.Exit < e.Enter || e.Duration() > time.Second {
			t.Errorf("event %d: enter %d exit %d (start %d)", i, e.Enter, e.Exit, tr.Start())
		}
		if i < 6 && (!e.StatusKnown || (e.Status != preset && e.Control == nil)) {
			t.Errorf("event %d: status %v known %v, want %v", i, e.Status, e.StatusKnown, preset)
		}
	}

	if a := evs[0].(*RMCall).Alloc; a == nil || !a.Long || a.Client != 0xc1d00022 || a.Parent != 0x5c000002 ||
		a.Object != 0x5c000015 || a.Class != ioctl.KEPLER_CHANNEL_GROUP_A {
		t.Errorf("NVOS64 alloc decoded as %+v", a)
	}
	if a := evs[1].(*RMCall).Alloc; a == nil || a.Long || a.Parent != 0x5c000015 || a.Object != 0x5c00001c || a.Class != ioctl.HOPPER_CHANNEL_GPFIFO_A {
		t.Errorf("NVOS21 alloc decoded as %+v", a)
	}
	c := evs[2].(*RMCall).Control
	if c == nil || c.Cmd != ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE || c.Object != 0x5c000015 || c.ParamsSize != 8 {
		t.Fatalf("SET_TIMESLICE decoded as %+v", c)
	}
	if us, ok := c.TimesliceUs(); !ok || us != 2048 {
		t.Errorf("SET_TIMESLICE value = %d, %v; want 2048 (params head %x / %x)", us, ok, c.In, c.Out)
	}
	if evs[2].(*RMCall).Status != preset {
		t.Errorf("SET_TIMESLICE status %v", evs[2].(*RMCall).Status)
	}
	if on, ok := evs[3].(*RMCall).Control.ScheduleEnable(); !ok || !on {
		t.Errorf("GPFIFO_SCHEDULE enable = %v, %v (head %x, size %d)", on, ok, evs[3].(*RMCall).Control.In, evs[3].(*RMCall).Control.ParamsSize)
	}
	if c := evs[4].(*RMCall).Control; c == nil || c.Cmd != ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO || c.In != nil {
		t.Errorf("a control on a client: %+v (its parameters must not be copied)", c)
	}
	if f := evs[5].(*RMCall).Free; f == nil || f.Client != 0xc1d00022 || f.Object != 0x5c000015 {
		t.Errorf("free decoded as %+v", f)
	}
	if e := evs[6].(*RMCall); e.Alloc != nil || e.Free != nil || e.Control != nil || e.StatusKnown {
		t.Errorf("unreadable block decoded as %+v", e)
	}
	if lost := tr.Lost(); lost != 0 {
		t.Errorf("lost %d events", lost)
	}
}

// TestTaskExit checks that a process's end reaches the registry's feed.
func TestTaskExit(t *testing.T) {
	tr := openTracer(t, Options{RM: true})
	cmd := exec.Command("/bin/true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	pid := uint32(cmd.Process.Pid)
	collect(t, tr, 1, func(ev Event) bool { e, ok := ev.(*TaskExit); return ok && e.PID == pid })
}

// buildFakeCUDA compiles testdata/fakecuda.c into a shared library and
// testdata/lcapp.c into a program linked with it.
func buildFakeCUDA(tb testing.TB) (lib, app string) {
	tb.Helper()
	lib, progs := buildWithFakeCUDA(tb, "lcapp")
	return lib, progs[0]
}

// buildWithFakeCUDA builds the fake libcuda and, linked with it, the
// programs testdata/<name>.c.
func buildWithFakeCUDA(tb testing.TB, names ...string) (lib string, progs []string) {
	tb.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		tb.Fatalf("gcc is needed for the uprobe tests (README: Set up): %v", err)
	}
	dir := tb.TempDir()
	lib = filepath.Join(dir, "libfakecuda.so")
	builds := [][]string{{"-shared", "-fPIC", "-O2", "-o", lib, "testdata/fakecuda.c"}}
	for _, name := range names {
		prog := filepath.Join(dir, name)
		progs = append(progs, prog)
		builds = append(builds, []string{"-O2", "-o", prog, "testdata/" + name + ".c", "-L" + dir, "-lfakecuda", "-Wl,-rpath," + dir, "-lpthread"})
	}
	for _, args := range builds {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			tb.Fatalf("gcc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return lib, progs
}

func fakeProbes(lib string) []Probe {
	var ps []Probe
	for _, s := range DefaultLaunchSymbols {
		ps = append(ps, Probe{Library: lib, Symbol: s, Role: RoleLaunch})
	}
	for _, s := range DefaultSyncSymbols {
		ps = append(ps, Probe{Library: lib, Symbol: s, Role: RoleSync})
	}
	return append(ps,
		Probe{Library: lib, Symbol: DefaultHintSymbol, Role: RoleHint},
		Probe{Library: lib, Symbol: DefaultReadySymbol, Role: RoleReady},
		Probe{Library: lib, Symbol: DefaultCancelSymbol, Role: RoleCancel},
		Probe{Library: lib, Symbol: "cuNotInThisLibrary", Role: RoleLaunch},
	)
}

// attachModes are the ways a process's functions are attached
// (Options.PID, or AttachProcess with Options.PerProcess).
var attachModes = []struct {
	name string
	// perProcess: attached by AttachProcess, as the request gate does;
	// otherwise Options.PID.
	perProcess  bool
	perFunction bool // Options.perFunction
	// refuseMulti makes every uprobe_multi link fail as a kernel
	// without them does: the tracer falls back to per-function uprobes.
	refuseMulti bool
	multi       bool // a process's probes end up as uprobe_multi links
}{
	{name: "pid"},
	{name: "per-process/uprobe_multi", perProcess: true, multi: true},
	{name: "per-process/per-function", perProcess: true, perFunction: true},
	{name: "per-process/uprobe_multi-refused", perProcess: true, refuseMulti: true},
}

// openPerProcessTracer opens a per-process tracer of probes attached the
// way mode says. A mode that needs uprobe_multi links skips where the
// kernel has none that filter by process, saying why.
func openPerProcessTracer(t *testing.T, probes []Probe, perFunction, refuseMulti bool) *Tracer {
	t.Helper()
	tr := openTracer(t, Options{Probes: probes, PerProcess: true, perFunction: perFunction})
	if !perFunction && !tr.multi {
		t.Skipf("no uprobe_multi links for a process in this kernel: %v", uprobeMultiSupport())
	}
	if refuseMulti {
		tr.uprobeMulti = func(*link.Executable, bool, []string, *ebpf.Program, *link.UprobeMultiOptions) (link.Link, error) {
			return nil, fmt.Errorf("create uprobe_multi link: %w", ebpf.ErrNotSupported)
		}
	}
	return tr
}

// checkAttached checks how pid's probes are attached: as uprobe_multi
// links (one per program) or one per function and return.
func checkAttached(t *testing.T, tr *Tracer, pid int, multi bool, multiLinks, perFunctionLinks int) {
	t.Helper()
	tr.pmu.Lock()
	defer tr.pmu.Unlock()
	want := perFunctionLinks
	if multi {
		want = multiLinks
	}
	if got := len(tr.procLinks[pid].links); tr.multi != multi || got != want {
		t.Errorf("process %d: %d links, uprobe_multi %v; want %d, %v", pid, got, tr.multi, want, multi)
	}
}

// TestUprobes puts the real uprobe programs on a library exporting
// libcuda's and the hint API's names, attached to one process, each way a
// process is attached, and checks the requests and hint timelines built
// from what they report: each call's role and symbol decode from its
// cookie alike whichever way it was attached.
func TestUprobes(t *testing.T) {
	lib, app := buildFakeCUDA(t)
	for _, mode := range attachModes {
		t.Run(mode.name, func(t *testing.T) {
			a := startLCApp(t, app)
			pid := a.cmd.Process.Pid

			var tr *Tracer
			if !mode.perProcess {
				tr = openTracer(t, Options{Probes: fakeProbes(lib), PID: pid})
				var skipped []string
				for _, s := range tr.Skipped() {
					skipped = append(skipped, s.Probe.Symbol)
				}
				if want := "cuLaunchKernel_ptsz cuLaunchKernelEx_ptsz cuGraphLaunch cuGraphLaunch_ptsz cuStreamSynchronize_ptsz cuCtxSynchronize_v2 cuNotInThisLibrary"; strings.Join(skipped, " ") != want {
					t.Errorf("skipped %v, want %s", skipped, want)
				}
			} else {
				tr = openPerProcessTracer(t, fakeProbes(""), mode.perFunction, mode.refuseMulti)
				if err := tr.AttachProcess(pid, lib); err != nil {
					t.Fatal(err)
				}
				// 8 functions, 4 traced at return too (3 syncs, the
				// hint); as uprobe_multi: entries, the hint's entry,
				// returns.
				checkAttached(t, tr, pid, mode.multi, 3, 8+4)
			}

			otherTID := a.run(t)
			a.stdin.Close()
			if err := a.cmd.Wait(); err != nil {
				t.Fatal(err)
			}
			tr.Stop()
			var calls []*Call
			for ev := range tr.Events() {
				if c, ok := ev.(*Call); ok {
					calls = append(calls, c)
				}
			}
			checkLCAppCalls(t, calls, pid, otherTID)
		})
	}
}

// checkLCAppCalls checks the calls traced in one round of lcapp's
// (testdata/lcapp.c) against what it does.
func checkLCAppCalls(t *testing.T, calls []*Call, pid, otherTID int) {
	t.Helper()
	// 6 launches, 3 syncs and 2 hints (entry and return), 1 ready, 1 cancel.
	if len(calls) != 6+3*2+2*2+1+1 {
		for _, c := range calls {
			t.Logf("%+v", *c)
		}
		t.Fatalf("%d calls traced", len(calls))
	}

	// Each symbol with the role it was given, as many times as lcapp
	// calls it (entries, returns).
	type seen struct {
		role             Role
		enters, returns  int
		onOther, onFirst int
	}
	want := map[string]seen{
		"cuLaunchKernel":      {RoleLaunch, 5, 0, 3, 2},
		"cuLaunchKernelEx":    {RoleLaunch, 1, 0, 0, 1},
		"cuStreamSynchronize": {RoleSync, 1, 1, 0, 2},
		"cuEventSynchronize":  {RoleSync, 1, 1, 0, 2},
		"cuCtxSynchronize":    {RoleSync, 1, 1, 2, 0},
		DefaultHintSymbol:     {RoleHint, 2, 2, 0, 4},
		DefaultReadySymbol:    {RoleReady, 1, 0, 0, 1},
		DefaultCancelSymbol:   {RoleCancel, 1, 0, 0, 1},
	}
	got := map[string]seen{}
	for _, c := range calls {
		g := got[c.Symbol]
		g.role = c.Role
		if c.Kind == CallReturn {
			g.returns++
		} else {
			g.enters++
		}
		if c.TID == uint32(otherTID) {
			g.onOther++
		} else {
			g.onFirst++
		}
		if w, ok := want[c.Symbol]; ok && c.Role != w.role {
			t.Errorf("call %+v: role %v, want %v", *c, c.Role, w.role)
		}
		got[c.Symbol] = g
	}
	if !maps.Equal(got, want) {
		t.Errorf("calls by symbol (role, entries, returns, on the second thread, on the first):\n got %v\nwant %v", got, want)
	}

	checkOnCPU(t, calls, otherTID)

	for _, c := range calls {
		if c.PID != uint32(pid) || c.Comm != "lcapp" || c.Symbol == "" {
			t.Errorf("call %+v: want pid %d comm lcapp and a symbol", *c, pid)
		}
	}
	checkLCAppOrder(t, calls, otherTID, true)
}

// checkLCAppOrder checks the order of one round of lcapp's calls on each
// thread (with the hint API's calls, if hints), what the calls carry, and
// the times of its three requests: launches, then a synchronize that
// sleeps 2 ms. What a request or a hint timeline is, is package
// internal/trace/request's; this is what it is built from.
func checkLCAppOrder(t *testing.T, calls []*Call, otherTID int, hints bool) {
	t.Helper()
	want := map[bool][]string{ // by whether on the second thread
		false: {"hint(infer, 500)", "hint = 1", "cuLaunchKernel", "cuLaunchKernel", "ready(1)", "cuStreamSynchronize", "cuStreamSynchronize = 0",
			"cuLaunchKernelEx", "cuEventSynchronize", "cuEventSynchronize = 700", // a failing request
			"hint(warmup, 7)", "hint = 2", "cancel(2)"},
		true: {"cuLaunchKernel", "cuLaunchKernel", "cuLaunchKernel", "cuCtxSynchronize", "cuCtxSynchronize = 0"},
	}
	if !hints {
		for other, w := range want {
			want[other] = slices.DeleteFunc(slices.Clone(w), func(s string) bool {
				return strings.HasPrefix(s, "hint") || strings.HasPrefix(s, "ready") || strings.HasPrefix(s, "cancel")
			})
		}
	}
	got := map[bool][]string{}
	// Per thread: its request's first launch and synchronize entry, and
	// the last release (gpreempt_ready).
	start, enter, release := map[bool]uint64{}, map[bool]uint64{}, map[bool]uint64{}
	requests := 0
	for _, c := range calls {
		other := c.TID == uint32(otherTID)
		var step string
		switch {
		case c.Role == RoleHint && c.Kind == CallEnter:
			step = fmt.Sprintf("hint(%s, %d)", c.Str, c.Arg1)
		case c.Role == RoleHint:
			step = fmt.Sprintf("hint = %d", c.Ret)
		case c.Role == RoleReady:
			step, release[other] = fmt.Sprintf("ready(%d)", c.Arg0), c.At
		case c.Role == RoleCancel:
			step = fmt.Sprintf("cancel(%d)", c.Arg0)
		case c.Role == RoleLaunch:
			step = c.Symbol
			if start[other] == 0 {
				start[other] = c.At
			}
		case c.Role == RoleSync && c.Kind == CallEnter:
			step, enter[other] = c.Symbol, c.At
		case c.Role == RoleSync:
			step = fmt.Sprintf("%s = %d", c.Symbol, c.Ret)
			requests++
			// The synchronize calls sleep 2 ms.
			if lat := time.Duration(c.At - start[other]); start[other] == 0 || lat < 2*time.Millisecond || lat > time.Second || enter[other] < start[other] || c.At < enter[other] {
				t.Errorf("request %d: latency %v (start %d sync %d end %d)", requests, lat, start[other], enter[other], c.At)
			}
			// The hinted request's synchronize, after its release: what
			// the GPU added after the preparation.
			if r := release[other]; hints && r != 0 && (c.At < r || time.Duration(c.At-r) < 2*time.Millisecond) {
				t.Errorf("request %d: released at %d, synchronize returned at %d", requests, r, c.At)
			}
			start[other], enter[other], release[other] = 0, 0, 0
		}
		got[other] = append(got[other], step)
	}
	for _, other := range []bool{false, true} {
		if !slices.Equal(got[other], want[other]) {
			t.Errorf("calls on the %s thread:\n got %q\nwant %q", map[bool]string{false: "first", true: "second"}[other], got[other], want[other])
		}
	}
}

// checkOnCPU checks the CPU time and blocks lcapp's second thread's calls carry: it
// grows by the 20 ms of CPU work between its last launch and its
// synchronize, and hardly at all while the synchronize sleeps. The sleep's
// bound has room for the scheduler's accounting of the synchronize's own
// few microseconds, not for a tick: the work's last clock read left the
// account up to date.
func checkOnCPU(t *testing.T, calls []*Call, otherTID int) {
	t.Helper()
	var launch, enter, ret *Call
	for _, c := range calls {
		if c.TID != uint32(otherTID) {
			continue
		}
		switch {
		case c.Role == RoleLaunch:
			launch = c
		case c.Role == RoleSync && c.Kind == CallEnter:
			enter = c
		case c.Role == RoleSync && c.Kind == CallReturn:
			ret = c
		}
	}
	if launch == nil || enter == nil || ret == nil {
		t.Fatalf("second thread: launch %v, synchronize %v, return %v", launch, enter, ret)
	}
	// The thread is new: the scheduler may not have accounted any of its
	// time by its last launch (0, unknown), but has by the synchronize.
	if enter.OnCPU == 0 || enter.OnCPU < launch.OnCPU || ret.OnCPU < enter.OnCPU {
		t.Fatalf("CPU time at the last launch %v, the synchronize %v, its return %v: want it known at the synchronize and never falling",
			launch.OnCPU, enter.OnCPU, ret.OnCPU)
	}
	if work := enter.OnCPU - launch.OnCPU; work < 20*time.Millisecond {
		t.Errorf("CPU time across 20 ms of CPU work: %v", work)
	}
	if slept := ret.OnCPU - enter.OnCPU; slept > time.Millisecond {
		t.Errorf("CPU time across a 2 ms sleep: %v", slept)
	}
	// How often it blocked: known, the same across the CPU work, grown across the sleep.
	if launch.Blocked == 0 || enter.Blocked != launch.Blocked || ret.Blocked <= enter.Blocked {
		t.Errorf("blocks at the last launch %d, the synchronize %d, its return %d: want the same across CPU work and more after a sleep",
			launch.Blocked, enter.Blocked, ret.Blocked)
	}
}

func TestOpenNothing(t *testing.T) {
	if _, err := Open(context.Background(), Options{}); err == nil {
		t.Fatal("Open with nothing to trace succeeded")
	}
}

func TestOpenNoSymbols(t *testing.T) {
	lib, _ := buildFakeCUDA(t)
	_, err := Open(context.Background(), Options{Probes: []Probe{{Library: lib, Symbol: "nope", Role: RoleSync}}})
	if errors.Is(err, ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if !errors.Is(err, ErrNoSymbols) {
		t.Fatalf("Open = %v, want ErrNoSymbols", err)
	}
}

func TestNoTracefs(t *testing.T) {
	saved := tracefsPaths
	t.Cleanup(func() { tracefsPaths = saved })
	tracefsPaths = []string{t.TempDir()}
	if err := ensureTracefs(false, nil); !errors.Is(err, ErrNoTracefs) {
		t.Fatalf("ensureTracefs without tracefs = %v, want ErrNoTracefs", err)
	}
}

func TestPrivileges(t *testing.T) {
	tests := []struct {
		caps uint64
		want bool
	}{
		{0, false},
		{1 << capSysAdmin, true},
		{1 << capBPF, false},
		{1<<capBPF | 1<<capPerfmon, true},
		{0x000001ffffffffff, true}, // root
	}
	for _, tt := range tests {
		if got := canTrace(tt.caps); got != tt.want {
			t.Errorf("canTrace(%#x) = %v", tt.caps, got)
		}
	}
	caps, err := parseCapEff([]byte("Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n"))
	if err != nil || caps != 0x1ffffffffff {
		t.Errorf("parseCapEff = %#x, %v", caps, err)
	}
	if _, err := parseCapEff([]byte("Name:\tx\n")); err == nil {
		t.Error("parseCapEff without CapEff succeeded")
	}
}

// TestIgnorePID checks that the ignored process's RM ioctls are never
// delivered while another process's are: this test's own free (made
// first) must not arrive before the child's.
func TestIgnorePID(t *testing.T) {
	if os.Getenv("GPREEMPT_TRACE_IGNORE_CHILD") == "1" {
		t.Skip("child side")
	}
	tr := openTracer(t, Options{RM: true, IgnorePID: os.Getpid()})
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	const mine, theirs = 0x5c0000a1, 0x5c0000b2
	free := ioctl.NVOS00_PARAMETERS{HRoot: 0xc1d00022, HObjectParent: 0x5c000002, HObjectOld: mine}
	if errno := rmIoctl(int(f.Fd()), ioctl.NV_ESC_RM_FREE, &free); errno != unix.ENOTTY {
		t.Fatalf("free on /dev/null: %v", errno)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestIgnorePIDChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GPREEMPT_TRACE_IGNORE_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	child := uint32(cmd.Process.Pid)
	evs := collect(t, tr, 1, func(ev Event) bool {
		e, ok := ev.(*RMCall)
		if !ok || e.Free == nil {
			return false
		}
		if e.Free.Object == mine {
			t.Errorf("the ignored pid's free was delivered: %+v", e)
		}
		return e.Free.Object == theirs
	})
	if e := evs[0].(*RMCall); e.PID != child {
		t.Errorf("child's free from pid %d, want %d", e.PID, child)
	}
}

// TestIgnorePIDChild is TestIgnorePID's other process.
func TestIgnorePIDChild(t *testing.T) {
	if os.Getenv("GPREEMPT_TRACE_IGNORE_CHILD") != "1" {
		t.Skip("run by TestIgnorePID")
	}
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	free := ioctl.NVOS00_PARAMETERS{HRoot: 0xc1d00022, HObjectParent: 0x5c000002, HObjectOld: 0x5c0000b2}
	rmIoctl(int(f.Fd()), ioctl.NV_ESC_RM_FREE, &free)
}

// TestPerProcessUprobes attaches the uprobe programs to chosen processes
// only (Options.PerProcess), each through the library it has mapped: an
// attached process's requests are seen, another's not, and a detached
// one's no longer; each way a process is attached.
func TestPerProcessUprobes(t *testing.T) {
	lib, app := buildFakeCUDA(t)
	var probes []Probe
	for _, p := range fakeProbes("") {
		if p.Role == RoleLaunch || p.Role == RoleSync {
			probes = append(probes, p)
		}
	}
	for _, mode := range attachModes {
		if !mode.perProcess {
			continue
		}
		t.Run(mode.name, func(t *testing.T) {
			testPerProcessUprobes(t, lib, app, probes, mode.perFunction, mode.refuseMulti, mode.multi)
		})
	}
}

func testPerProcessUprobes(t *testing.T, lib, app string, probes []Probe, perFunction, refuseMulti, multi bool) {
	tr := openPerProcessTracer(t, probes, perFunction, refuseMulti)
	a, other := startLCApp(t, app), startLCApp(t, app)
	pa := a.cmd.Process.Pid
	if err := tr.AttachProcess(pa, filepath.Join(t.TempDir(), "libcuda.so.1")); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("a missing library: %v; want ErrNoLibrary", err)
	}
	a.run(t) // untraced; once it has run, a is in main and has its library mapped
	mapped, err := FindLibrary("libfakecuda.so", "", pa)
	if err != nil || !sameFile(t, mapped, lib) {
		t.Fatalf("library a maps: %q, %v", mapped, err)
	}
	if err := tr.AttachProcess(pa, mapped); err != nil {
		t.Fatal(err)
	}
	if err := tr.AttachProcess(pa, mapped); err != nil { // again: one set of probes
		t.Fatal(err)
	}
	// 5 functions, 3 traced at return too; as uprobe_multi: entries,
	// returns.
	checkAttached(t, tr, pa, multi, 2, 5+3)
	otherTID := a.run(t)
	other.run(t)
	tr.DetachProcess(pa)
	tr.pmu.Lock()
	if len(tr.exes) != 0 || len(tr.procLinks) != 0 {
		t.Errorf("after the last detach: libraries %v, processes %v; want none", tr.exes, tr.procLinks)
	}
	tr.pmu.Unlock()
	a.run(t)
	tr.Stop()
	if err := tr.AttachProcess(pa, mapped); err == nil {
		t.Error("AttachProcess after Stop: no error")
	}
	var calls []*Call
	for ev := range tr.Events() {
		c, ok := ev.(*Call)
		if !ok {
			continue
		}
		if c.PID != uint32(pa) || c.Symbol == "" {
			t.Errorf("call %+v: want pid %d and a symbol", *c, pa)
		}
		calls = append(calls, c)
	}
	// One round of lcapp's: three requests, the second failing.
	checkLCAppOrder(t, calls, otherTID, false)
}

func TestAttachProcessNeedsPerProcess(t *testing.T) {
	lib, _ := buildFakeCUDA(t)
	tr := openTracer(t, Options{Probes: fakeProbes(lib), PID: os.Getpid()})
	if err := tr.AttachProcess(os.Getpid(), lib); err == nil {
		t.Error("AttachProcess on a tracer opened for one pid: no error")
	}
}

// TestAttachProcessGone attaches a process that has exited, each way: an
// error, nothing left attached, and a refusal that is not the kernel
// lacking uprobe_multi links keeps them in use.
func TestAttachProcessGone(t *testing.T) {
	lib, _ := buildFakeCUDA(t)
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	gone := cmd.Process.Pid
	for _, mode := range attachModes {
		if !mode.perProcess || mode.refuseMulti {
			continue
		}
		t.Run(mode.name, func(t *testing.T) {
			tr := openPerProcessTracer(t, fakeProbes(""), mode.perFunction, false)
			err := tr.AttachProcess(gone, lib)
			if err == nil || errors.Is(err, ebpf.ErrNotSupported) {
				t.Fatalf("attach process %d, which has exited: %v; want an error other than not supported", gone, err)
			}
			tr.pmu.Lock()
			defer tr.pmu.Unlock()
			if len(tr.procLinks) != 0 || len(tr.exes) != 0 || tr.multi != mode.multi {
				t.Errorf("after %v: processes %v, libraries %v, uprobe_multi %v", err, tr.procLinks, tr.exes, tr.multi)
			}
		})
	}
}

// TestWithinAttachedSpan: only events wholly inside the span every probe was attached for are
// delivered; a detach in progress sees synchronizes without their launches.
func TestWithinAttachedSpan(t *testing.T) {
	tests := []struct {
		name string
		ev   Event
		stop uint64
		want bool
	}{
		{"before every probe was attached", &Call{At: 99}, 0, false},
		{"at the start", &Call{At: 100}, 0, true},
		{"running", &Call{At: 5000}, 0, true},
		{"at the stop", &Call{At: 400}, 400, true},
		{"after the stop, while detaching", &Call{At: 401}, 400, false},
		{"an ioctl entered before the start", &RMCall{Enter: 90, Exit: 150}, 0, false},
		{"an ioctl within", &RMCall{Enter: 110, Exit: 390}, 400, true},
		{"an ioctl returned after the stop", &RMCall{Enter: 110, Exit: 450}, 400, false},
		{"a task exit within", &TaskExit{At: 200}, 400, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := &Tracer{start: 100}
			tr.stopAt.Store(tt.stop)
			if got := tr.within(tt.ev); got != tt.want {
				t.Errorf("within = %v, want %v", got, tt.want)
			}
		})
	}
}
