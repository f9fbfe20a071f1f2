package tsg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// patched returns a fake driver carrying gpreempt's series with the libcuda
// trace replayed as each of pids, and the caller cfg.
func patched(tb testing.TB, cfg rmfake.EscapeConfig, pids ...int) (*rmfake.Driver, map[int]*rmfake.Proc) {
	tb.Helper()
	d := rmfake.New()
	d.EnableGpreemptEscapes(cfg)
	procs := map[int]*rmfake.Proc{}
	for _, pid := range pids {
		p, _, err := d.ReplayFile(pid, tracePath)
		if err != nil {
			tb.Fatal(err)
		}
		procs[pid] = p
	}
	return d, procs
}

func escapeSource(tb testing.TB, d *rmfake.Driver, opts tsg.EscapeOptions) *tsg.EscapeSource {
	tb.Helper()
	s := tsg.NewEscapeSource(d.Host(), opts)
	tb.Cleanup(func() { s.Close() })
	return s
}

var root = rmfake.EscapeConfig{CallerPrivileged: true}

// TestAutoSourceStockDriver is the fallback decision against a driver that
// refuses the escape as every stock branch does (EINVAL, argument
// untouched): the attach source is used, and the driver is probed once.
func TestAutoSourceStockDriver(t *testing.T) {
	d := newTraced(t, 100)
	esc := escapeSource(t, d, tsg.EscapeOptions{})
	if ok, err := esc.Available(); ok || err != nil {
		t.Fatalf("Available() on a stock driver = %v, %v; want false, nil", ok, err)
	}
	if _, err := esc.Discover(context.Background(), 100); !errors.Is(err, ioctl.ErrNoGpreemptEscapes) {
		t.Errorf("escape Discover on a stock driver: %v", err)
	}
	auto := tsg.NewAutoSource(esc, tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}), tsg.AutoOptions{})
	for range 3 {
		p, err := auto.Discover(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		if p.Source != "attach" || len(p.Groups) != 4 {
			t.Errorf("auto on a stock driver: source %q, %d groups; want attach, 4", p.Source, len(p.Groups))
		}
		p.Close()
	}
	if n := d.Escapes(ioctl.NV_ESC_RM_GPREEMPT_QUERY_TSGS); n != 1 {
		t.Errorf("QUERY issued %d times, want once (the probe)", n)
	}
	if auto.Chosen().Name() != "attach" {
		t.Errorf("chosen %q", auto.Chosen().Name())
	}
}

// noDriverHost cannot open the control node.
type noDriverHost struct{ tsg.Host }

func (noDriverHost) OpenControl() (tsg.Device, error) { return nil, ioctl.ErrNoDriver }

func TestAutoSourceProbeFailure(t *testing.T) {
	d := newTraced(t, 100)
	h := noDriverHost{d.Host()}
	esc := tsg.NewEscapeSource(h, tsg.EscapeOptions{})
	if ok, err := esc.Available(); ok || !errors.Is(err, ioctl.ErrNoDriver) {
		t.Fatalf("Available() = %v, %v; want false, ErrNoDriver", ok, err)
	}
	auto := tsg.NewAutoSource(esc, tsg.NewAttachSource(h, tsg.ScanOptions{}), tsg.AutoOptions{})
	// The attach source reports the same problem in its own terms.
	if _, err := auto.Discover(context.Background(), 100); !errors.Is(err, ioctl.ErrNoDriver) {
		t.Errorf("auto Discover: %v", err)
	}
	if auto.Chosen().Name() != "attach" {
		t.Errorf("chosen %q", auto.Chosen().Name())
	}
}

// TestEscapeSourceMatchesAttach: on a patched driver both sources see the
// same groups, on the same GPU; the escape also reads the interleave level that GSP-RM's
// GET_INTERLEAVE_LEVEL refuses.
func TestEscapeSourceMatchesAttach(t *testing.T) {
	d, _ := patched(t, root, 100)
	auto := tsg.NewAutoSource(escapeSource(t, d, tsg.EscapeOptions{}), tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}), tsg.AutoOptions{})
	viaEscape, err := auto.Discover(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer viaEscape.Close()
	if viaEscape.Source != "escape" {
		t.Fatalf("auto chose %q on a patched driver", viaEscape.Source)
	}
	viaAttach := discover(t, d, 100, tsg.ScanOptions{})
	if len(viaEscape.Groups) != len(viaAttach.Groups) {
		t.Fatalf("escape found %d groups, attach %d", len(viaEscape.Groups), len(viaAttach.Groups))
	}
	for i, e := range viaEscape.Groups {
		a := viaAttach.Groups[i]
		if e.Client != a.Client || e.Handle != a.Handle || e.Device != a.Device || e.TSGID != a.TSGID ||
			e.Engine != a.Engine || e.Channels != a.Channels || e.Timeslice != a.Timeslice || e.PID != 100 ||
			e.GPUID != a.GPUID || e.GPUID != rmfake.GPUID {
			t.Errorf("group %d: escape %+v, attach %+v", i, e, a)
		}
		if e.FD != -1 || e.Interleave != tsg.LevelMedium {
			t.Errorf("group %d: FD %d interleave %v; want -1, medium", i, e.FD, e.Interleave)
		}
	}
}

func TestEscapeApply(t *testing.T) {
	d, _ := patched(t, root, 100)
	p, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SetTimeslice(context.Background(), p.Groups, 200*time.Microsecond); err != nil {
		t.Fatal(err)
	}
	if got := timeslices(d, 100); !slices.Equal(got, []uint64{200, 200, 200, 200}) {
		t.Errorf("timeslices after SetTimeslice = %v", got)
	}
	if err := p.SetInterleave(context.Background(), p.Groups[:1], tsg.LevelHigh); err != nil {
		t.Fatal(err)
	}
	if g := d.Groups(100, 8)[0]; g.Interleave != ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH {
		t.Errorf("interleave = %d, want high", g.Interleave)
	}
	// The controls went through RM's control path (the fake counts them).
	if d.Controls(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE) < 4 || d.Controls(ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL) != 1 {
		t.Errorf("SET_TIMESLICE %d, SET_INTERLEAVE_LEVEL %d", d.Controls(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE), d.Controls(ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL))
	}
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Groups[0].Interleave != tsg.LevelHigh || p.Groups[1].Timeslice != 200 {
		t.Errorf("refreshed: %+v", p.Groups[:2])
	}
}

func TestEscapeApplyRollsBack(t *testing.T) {
	d, _ := patched(t, root, 100)
	p, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	before := timeslices(d, 100)
	d.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Nth: 3, Status: ioctl.NV_ERR_INSUFFICIENT_RESOURCES})
	err = p.SetTimeslice(context.Background(), p.Groups, 50*time.Microsecond)
	if !errors.Is(err, ioctl.NV_ERR_INSUFFICIENT_RESOURCES) {
		t.Fatalf("err = %v", err)
	}
	if got := timeslices(d, 100); !slices.Equal(got, before) {
		t.Errorf("timeslices %v after a failed apply, want %v restored", got, before)
	}
}

// TestEscapeRights: an unprivileged caller sees and changes only the
// clients its euid created; processes outside its pid namespace are
// invisible even to a privileged caller.
func TestEscapeRights(t *testing.T) {
	ctx := context.Background()
	d, _ := patched(t, rmfake.EscapeConfig{CallerUID: 1000}, 100, 200, 300)
	d.SetProcUID(100, 1000)
	d.SetProcUID(200, 1001)
	d.SetProcUID(300, 1000)
	d.HideFromCaller(300)
	s := escapeSource(t, d, tsg.EscapeOptions{})
	if p, err := s.Discover(ctx, 100); err != nil || len(p.Groups) != 4 {
		t.Fatalf("own process: %v", err)
	} else {
		// RM's own rule for an owner: SET_INTERLEAVE_LEVEL is privileged.
		if err := p.SetInterleave(ctx, p.Groups, tsg.LevelLow); !errors.Is(err, ioctl.NV_ERR_INSUFFICIENT_PERMISSIONS) {
			t.Errorf("owner SetInterleave: %v", err)
		}
		if err := p.SetTimeslice(ctx, p.Groups, time.Millisecond); err != nil {
			t.Errorf("owner SetTimeslice: %v", err)
		}
		p.Close()
	}
	for _, pid := range []int{200, 300} {
		if _, err := s.Discover(ctx, pid); !errors.Is(err, tsg.ErrNoGPUContext) {
			t.Errorf("pid %d: %v, want ErrNoGPUContext", pid, err)
		}
	}
	l, err := s.DiscoverAll(ctx)
	if err != nil || len(l.Processes) != 1 || l.Processes[0].PID != 100 {
		t.Fatalf("DiscoverAll as uid 1000: %+v, %v", l, err)
	}

	d2, _ := patched(t, root, 100, 200, 300)
	d2.HideFromCaller(300)
	l, err = escapeSource(t, d2, tsg.EscapeOptions{}).DiscoverAll(ctx)
	if err != nil || len(l.Processes) != 2 || l.Processes[0].PID != 100 || l.Processes[1].PID != 200 {
		t.Errorf("DiscoverAll privileged: %+v, %v", l, err)
	}
}

// TestEscapeSetChecksTheTarget issues SET directly: a client named with
// another pid (a handle reused after its process exited), another user's
// client and a handle that is not a TSG are all refused, and nothing
// changes.
func TestEscapeSetChecksTheTarget(t *testing.T) {
	d, _ := patched(t, rmfake.EscapeConfig{CallerUID: 1000}, 100, 200)
	d.SetProcUID(100, 1000)
	d.SetProcUID(200, 0)
	own, err := d.Host().OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	esc := own.(ioctl.Escaper)
	g100, g200 := d.Groups(100, 8)[1], d.Groups(200, 8)[1]
	set := func(pid uint32, client, h ioctl.Handle) error {
		p := ioctl.NV_GPREEMPT_SET_TSG_PARAMS{Pid: pid, HClient: client, HTsg: h,
			Flags: ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE, TimesliceUs: 77}
		return ioctl.SetTSG(esc, &p)
	}
	for _, tt := range []struct {
		name   string
		err    error
		pid    uint32
		client ioctl.Handle
		tsg    ioctl.Handle
	}{
		{"wrong pid", ioctl.NV_ERR_INVALID_CLIENT, 200, g100.Client, g100.Handle},
		{"another user's", ioctl.NV_ERR_INVALID_CLIENT, 200, g200.Client, g200.Handle},
		{"no such client", ioctl.NV_ERR_INVALID_CLIENT, 100, 0xc1d0ffff, g100.Handle},
		{"not a TSG", ioctl.NV_ERR_INVALID_OBJECT_HANDLE, 100, g100.Client, 0x5c000002},
		{"pid 0", ioctl.NV_ERR_INVALID_ARGUMENT, 0, g100.Client, g100.Handle},
	} {
		if err := set(tt.pid, tt.client, tt.tsg); !errors.Is(err, tt.err) {
			t.Errorf("%s: %v, want %v", tt.name, err, tt.err)
		}
	}
	for _, g := range append(d.Groups(100, 8), d.Groups(200, 8)...) {
		if g.Timeslice == 77 {
			t.Errorf("%v/%v changed by a refused SET", g.Client, g.Handle)
		}
	}
	if err := set(100, g100.Client, g100.Handle); err != nil {
		t.Errorf("own group: %v", err)
	}
}

// TestEscapePaging: more groups than one QUERY page holds come back whole,
// in order, each once.
func TestEscapePaging(t *testing.T) {
	pids := []int{101, 102, 103, 104, 105, 106, 107, 108, 109, 110} // 40 groups
	d, _ := patched(t, root, pids...)
	l, err := escapeSource(t, d, tsg.EscapeOptions{}).DiscoverAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	all := l.Processes
	if len(all) != len(pids) {
		t.Fatalf("%d processes, want %d", len(all), len(pids))
	}
	seen := map[uint64]bool{}
	for i, p := range all {
		if p.PID != pids[i] || len(p.Groups) != 4 {
			t.Errorf("process %d: pid %d, %d groups", i, p.PID, len(p.Groups))
		}
		for _, g := range p.Groups {
			k := ioctl.TSGKey(g.Client, g.Handle)
			if seen[k] {
				t.Errorf("group %v/%v twice", g.Client, g.Handle)
			}
			seen[k] = true
		}
	}
	// The probe, then two pages.
	if n := d.Escapes(ioctl.NV_ESC_RM_GPREEMPT_QUERY_TSGS); n != 3 {
		t.Errorf("QUERY issued %d times, want 3", n)
	}
}

// TestEscapePreemptAndSchedule: the escapes carry neither; by default the
// control falls back to the target's own file, and says so when it cannot.
func TestEscapePreemptAndSchedule(t *testing.T) {
	ctx := context.Background()
	d, procs := patched(t, root, 100)
	p, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Preempt(ctx, p.Groups, true, 0); err != nil {
		t.Fatalf("preempt through the fallback: %v", err)
	}
	if n := d.Controls(ioctl.NVA06C_CTRL_CMD_PREEMPT); n != 4 {
		t.Errorf("PREEMPT issued %d times", n)
	}
	if err := p.Schedule(ctx, p.Groups, false); err != nil {
		t.Fatal(err)
	}
	for _, g := range d.Groups(100, 8) {
		if d.Scheduled(g) {
			t.Errorf("%v still scheduled after suspend", g.Handle)
		}
	}
	p.Close()

	strict, err := escapeSource(t, d, tsg.EscapeOptions{NoAttachFallback: true}).Discover(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := strict.Preempt(ctx, strict.Groups, false, 0); !errors.Is(err, tsg.ErrNotSupported) {
		t.Errorf("preempt without fallback: %v", err)
	}

	procs[100].Deny = true
	denied, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	err = denied.Schedule(ctx, denied.Groups, true)
	if !errors.Is(err, tsg.ErrNotSupported) || !errors.Is(err, ioctl.ErrPermission) {
		t.Errorf("schedule with the fallback refused: %v", err)
	}
	// Timeslices still work: they need no attach.
	if err := denied.SetTimeslice(ctx, denied.Groups, time.Millisecond); err != nil {
		t.Errorf("SetTimeslice without ptrace rights: %v", err)
	}
}

func TestEscapeGroupGone(t *testing.T) {
	d, _ := patched(t, root, 100)
	p, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(context.Background(), 100)
	if err != nil {
		t.Fatal(err)
	}
	d.Exit(100)
	if err := p.SetTimeslice(context.Background(), p.Groups, time.Millisecond); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("SetTimeslice after exit: %v", err)
	}
	if _, err := p.GetTimeslice(p.Groups[0]); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("GetTimeslice after exit: %v", err)
	}
	if err := p.Preempt(context.Background(), p.Groups, false, 0); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("Preempt after exit: %v", err)
	}
}

// TestEscapeTargetExitsDuringChange: the target exits after two of its
// four groups were changed. The change reports the process gone
// (ioctl.ErrNoSuchProcess, gpreemptctl's exit code 4) and restores
// nothing; it used to try, and report "restoring also failed:
// NV_ERR_INVALID_CLIENT" (issue 14, defect 10).
func TestEscapeTargetExitsDuringChange(t *testing.T) {
	for _, after := range []int{1, 2, 4} {
		d, _ := patched(t, root, 100)
		h := d.ExitAfterSet(d.Host(), 100, after)
		s := tsg.NewEscapeSource(h, tsg.EscapeOptions{})
		t.Cleanup(func() { s.Close() })
		p, err := s.Discover(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		ts := 100 * time.Microsecond
		err = p.Apply(context.Background(), p.Groups, tsg.Settings{Timeslice: tsg.Some(ts)})
		if after == len(p.Groups) {
			// The last SET went through before the exit: the change
			// succeeded.
			if err != nil {
				t.Errorf("exit after the last SET: %v", err)
			}
			continue
		}
		if !errors.Is(err, ioctl.ErrNoSuchProcess) {
			t.Errorf("exit after SET %d: %v, want ErrNoSuchProcess", after, err)
		}
		if err != nil && (strings.Contains(err.Error(), "also failed") || errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT)) {
			t.Errorf("exit after SET %d: %q reads like a failed restore", after, err)
		}
		if issued := h.Issued(); issued != after {
			t.Errorf("exit after SET %d: %d SETs issued, want no restore attempt", after, issued)
		}
	}
}

// TestEscapeFallbackAttachRacesClose: the escape source's fallback attaches
// to the target while another goroutine closes the Process; with -race
// this checks that the duplicated files are recorded under the lock Close
// takes (issue 14, defect 10). A file attached after Close is closed at
// once, and the preempt fails instead of using it.
func TestEscapeFallbackAttachRacesClose(t *testing.T) {
	for range 20 {
		d, _ := patched(t, root, 100)
		p, err := escapeSource(t, d, tsg.EscapeOptions{}).Discover(context.Background(), 100)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Go(func() { p.Preempt(context.Background(), p.Groups, false, 0) })
		wg.Go(func() { p.Close() })
		wg.Wait()
		p.Close()
	}
}

func TestEscapeDiscoverArguments(t *testing.T) {
	d, _ := patched(t, root, 100)
	s := escapeSource(t, d, tsg.EscapeOptions{})
	for _, pid := range []int{0, -1} {
		if _, err := s.Discover(context.Background(), pid); !errors.Is(err, tsg.ErrInvalidArgument) {
			t.Errorf("pid %d: %v", pid, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Discover(ctx, 100); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled: %v", err)
	}
}
