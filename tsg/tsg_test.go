package tsg_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

var tracePath = filepath.Join("..", "testdata", "h100-580.159.04-alloc-sequence.txt")

// newTraced returns a fake driver with the real libcuda trace replayed as
// process pid.
func newTraced(tb testing.TB, pid int, opts ...rmfake.Option) *rmfake.Driver {
	tb.Helper()
	d := rmfake.New(opts...)
	if _, _, err := d.ReplayFile(pid, tracePath); err != nil {
		tb.Fatal(err)
	}
	return d
}

func discover(tb testing.TB, d *rmfake.Driver, pid int, opts tsg.ScanOptions) *tsg.Process {
	tb.Helper()
	p, err := tsg.NewAttachSource(d.Host(), opts).Discover(context.Background(), pid)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { p.Close() })
	return p
}

func TestDiscoverRealTrace(t *testing.T) {
	for _, readable := range []bool{false, true} {
		t.Run(fmt.Sprintf("interleave-readable=%v", readable), func(t *testing.T) {
			testDiscoverRealTrace(t, readable)
		})
	}
}

func testDiscoverRealTrace(t *testing.T, readable bool) {
	var opts []rmfake.Option
	wantLevel := tsg.LevelUnknown // GSP-RM: GET_INTERLEAVE_LEVEL not supported
	if readable {
		opts, wantLevel = append(opts, rmfake.WithReadableInterleave()), tsg.LevelMedium
	}
	d := newTraced(t, 100, opts...)
	p := discover(t, d, 100, tsg.ScanOptions{})
	type want struct {
		handle    ioctl.Handle
		engine    tsg.Engine
		channels  int
		timeslice tsg.Micros
	}
	// From the trace: the compute TSG first (context share, 8 channels
	// with HOPPER_COMPUTE_A), then three copy-only TSGs of 4 channels;
	// libcuda sets the compute TSG to 2048 us, the others keep 1024.
	wants := []want{
		{0x5c000015, tsg.EngineCompute, 8, 2048},
		{0x5c00003e, tsg.EngineCopy, 4, 1024},
		{0x5c00004c, tsg.EngineCopy, 4, 1024},
		{0x5c00005a, tsg.EngineCopy, 4, 1024},
	}
	if len(p.Groups) != len(wants) {
		t.Fatalf("found %d groups, want %d: %+v", len(p.Groups), len(wants), p.Groups)
	}
	for i, w := range wants {
		g := p.Groups[i]
		if g.Handle != w.handle || g.Engine != w.engine || g.Channels != w.channels || g.Timeslice != w.timeslice {
			t.Errorf("group %d = {%v %s %d ch %v}, want {%v %s %d ch %v}", i,
				g.Handle, g.Engine, g.Channels, g.Timeslice, w.handle, w.engine, w.channels, w.timeslice)
		}
		if g.PID != 100 || g.FD != 8 || g.Device != 0x5c000002 || g.Interleave != wantLevel {
			t.Errorf("group %d: pid %d fd %d device %v interleave %v", i, g.PID, g.FD, g.Device, g.Interleave)
		}
	}
	if p.Stats.Clients != 2 {
		t.Errorf("bound clients = %d, want 2 (libcuda makes two)", p.Stats.Clients)
	}
}

func TestDiscoverIsolatesProcesses(t *testing.T) {
	d := newTraced(t, 100)
	if _, _, err := d.ReplayFile(200, tracePath); err != nil {
		t.Fatal(err)
	}
	a := discover(t, d, 100, tsg.ScanOptions{})
	b := discover(t, d, 200, tsg.ScanOptions{})
	if len(a.Groups) != 4 || len(b.Groups) != 4 {
		t.Fatalf("groups: %d and %d, want 4 each", len(a.Groups), len(b.Groups))
	}
	if a.Groups[0].Client == b.Groups[0].Client {
		t.Errorf("both processes report client %v: clients must be bound to their own file", a.Groups[0].Client)
	}
}

func TestDiscoverScanIsBounded(t *testing.T) {
	// A machine that has created 200k clients since the driver loaded.
	d := newTraced(t, 100, rmfake.WithClientCounter(200000))
	p := discover(t, d, 100, tsg.ScanOptions{})
	if len(p.Groups) != 4 {
		t.Fatalf("found %d groups", len(p.Groups))
	}
	top := int64(p.Stats.ClientTop - ioctl.RS_CLIENT_HANDLE_BASE)
	if p.Stats.ClientProbes != top {
		t.Errorf("client probes = %d, want exactly the %d indices below our own client", p.Stats.ClientProbes, top)
	}
	// Object probes: the trace's ~0x94 handles plus the gap, not 2^32.
	if p.Stats.ObjectProbes > 2*4096+1024 {
		t.Errorf("object probes = %d, want about the handle gap per client", p.Stats.ObjectProbes)
	}
}

func TestDiscoverErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(d *rmfake.Driver) int
		opts  []rmfake.Option
		scan  tsg.ScanOptions
		want  error
	}{
		{"no such pid", func(*rmfake.Driver) int { return 4242 }, nil, tsg.ScanOptions{}, ioctl.ErrNoSuchProcess},
		{"no control fd", func(d *rmfake.Driver) int { d.NewProc(7); return 7 }, nil, tsg.ScanOptions{}, tsg.ErrNoGPUContext},
		{"client without device", func(d *rmfake.Driver) int {
			p := d.NewProc(7)
			fd := d.OpenControlAt(p, 3)
			if _, err := fd.Alloc(0, 0, 0, ioctl.NV01_ROOT_CLIENT, nil); err != nil {
				panic(err)
			}
			return 7
		}, nil, tsg.ScanOptions{}, tsg.ErrNoGPUContext},
		{"no ptrace rights", func(d *rmfake.Driver) int {
			p := d.NewProc(7)
			d.OpenControlAt(p, 3)
			p.Deny = true
			return 7
		}, nil, tsg.ScanOptions{}, ioctl.ErrPermission},
		{"unknown driver", func(d *rmfake.Driver) int {
			if _, _, err := d.ReplayFile(7, tracePath); err != nil {
				panic(err)
			}
			return 7
		}, []rmfake.Option{rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 1})}, tsg.ScanOptions{}, ioctl.ErrUnsupportedDriver},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := rmfake.New(tt.opts...)
			pid := tt.setup(d)
			_, err := tsg.NewAttachSource(d.Host(), tt.scan).Discover(context.Background(), pid)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Discover error = %v, want %v", err, tt.want)
			}
		})
	}
}

func TestDiscoverUnsupportedDriverOverride(t *testing.T) {
	d := newTraced(t, 100, rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 1}))
	p := discover(t, d, 100, tsg.ScanOptions{AllowUnsupportedDriver: true})
	if len(p.Groups) != 4 {
		t.Fatalf("found %d groups with the override", len(p.Groups))
	}
}

func TestDiscoverDetectsTooSmallGap(t *testing.T) {
	d := rmfake.New()
	p := d.NewProc(9)
	fd := d.OpenControlAt(p, 3)
	c, err := fd.Alloc(0, 0, 0, ioctl.NV01_ROOT_CLIENT, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustAlloc := func(parent, h ioctl.Handle, class uint32) {
		t.Helper()
		if _, err := fd.Alloc(c, parent, h, class, nil); err != nil {
			t.Fatal(err)
		}
	}
	mustAlloc(c, 0x5c000002, ioctl.NV01_DEVICE_0)
	mustAlloc(0x5c000002, 0x5c002000, ioctl.KEPLER_CHANNEL_GROUP_A) // 8k handles later
	_, err = tsg.NewAttachSource(d.Host(), tsg.ScanOptions{HandleGap: 1024}).Discover(context.Background(), 9)
	if err == nil || !strings.Contains(err.Error(), "missed TSG") {
		t.Fatalf("Discover with a small gap = %v, want a 'missed TSG' error", err)
	}
	pr := discover(t, d, 9, tsg.ScanOptions{HandleGap: 16384})
	if len(pr.Groups) != 1 || pr.Groups[0].Engine != tsg.EngineUnknown {
		t.Fatalf("with a large gap: %+v", pr.Groups)
	}
}

func timeslices(d *rmfake.Driver, pid int) []uint64 {
	var out []uint64
	for _, g := range d.Groups(pid, 8) {
		out = append(out, uint64(g.Timeslice))
	}
	return out
}

// TestApplyAllOrNothing: a failed Apply restores what the driver reported
// before, and says exactly what it restored. Where the driver does not
// report the interleave level (the fake's default, like GSP-RM on the
// H100), the levels already changed are left at the new value and the
// error says so; they used to be "restored" to MEDIUM, whatever they had
// been (issue 14, defect 5).
func TestApplyAllOrNothing(t *testing.T) {
	ctx := context.Background()
	high := tsg.LevelHigh
	ts := 200 * time.Microsecond
	lastLevel := &rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, Object: 0x5c00005a, Status: ioctl.NV_ERR_INVALID_STATE}
	tests := []struct {
		name     string
		opts     []rmfake.Option
		setup    func(t *testing.T, p *tsg.Process) // before the failing Apply
		fault    *rmfake.Fault
		settings tsg.Settings
		wantErr  error
		say      string
		// levelsLeft lists the groups whose level may not be restored.
		levelsLeft []ioctl.Handle
	}{
		{"third SET_TIMESLICE fails", nil, nil,
			&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Nth: 3, Status: ioctl.NV_ERR_INVALID_STATE},
			tsg.Settings{Timeslice: tsg.Some(ts)}, ioctl.NV_ERR_INVALID_STATE, "(timeslice of 2 groups restored)", nil},
		{"interleave refused after timeslice set", []rmfake.Option{rmfake.WithUnprivilegedCaller()}, nil, nil,
			tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(high)}, ioctl.NV_ERR_INSUFFICIENT_PERMISSIONS, "(timeslice of 1 groups restored)", nil},
		{"last group's interleave fails, level readable", []rmfake.Option{rmfake.WithReadableInterleave()}, nil, lastLevel,
			tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(high)}, ioctl.NV_ERR_INVALID_STATE,
			"(timeslice of 4 groups restored; interleave level of 3 groups restored)", nil},
		{"last group's interleave fails, level not reported (GSP)", nil, nil, lastLevel,
			tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(high)}, ioctl.NV_ERR_INVALID_STATE,
			"(timeslice of 4 groups restored; interleave level of 3 groups left at high: the driver does not report the previous level)",
			[]ioctl.Handle{0x5c000015, 0x5c00003e, 0x5c00004c}},
		{"level set low before, readable: restored to low, not medium", []rmfake.Option{rmfake.WithReadableInterleave()},
			func(t *testing.T, p *tsg.Process) {
				if err := p.SetInterleave(ctx, p.Groups, tsg.LevelLow); err != nil {
					t.Fatal(err)
				}
			}, lastLevel,
			tsg.Settings{Interleave: tsg.Some(high)}, ioctl.NV_ERR_INVALID_STATE, "(interleave level of 3 groups restored)", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTraced(t, 100, tt.opts...)
			p := discover(t, d, 100, tsg.ScanOptions{})
			if tt.setup != nil {
				tt.setup(t, p)
			}
			before := d.Groups(100, 8)
			cached := p.Groups[0].Timeslice
			if tt.fault != nil {
				d.AddFault(tt.fault)
			}
			err := p.Apply(ctx, p.Groups, tt.settings)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply error = %v, want %v", err, tt.wantErr)
			}
			if !strings.HasSuffix(err.Error(), tt.say) {
				t.Errorf("Apply error = %q, want it to end %q", err, tt.say)
			}
			after := d.Groups(100, 8)
			for i := range before {
				if slices.Contains(tt.levelsLeft, before[i].Handle) {
					if after[i].Interleave != high {
						t.Errorf("group %v: level %v, the error says it was left at high", before[i].Handle, after[i].Interleave)
					}
					after[i].Interleave = before[i].Interleave
				}
				if before[i] != after[i] {
					t.Errorf("group %v not restored: before %+v after %+v", before[i].Handle, before[i], after[i])
				}
			}
			if p.Groups[0].Timeslice != cached {
				t.Errorf("cached timeslice changed to %v on failure", p.Groups[0].Timeslice)
			}
		})
	}
}

func TestApplyClassChangesEveryGroup(t *testing.T) {
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	ts, low := time.Microsecond, tsg.LevelLow
	if err := p.Apply(context.Background(), p.Groups, tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(low)}); err != nil {
		t.Fatal(err)
	}
	for _, g := range d.Groups(100, 8) {
		if g.Timeslice != 1 || g.Interleave != low {
			t.Errorf("group %v: %d us, level %d", g.Handle, g.Timeslice, g.Interleave)
		}
	}
	for _, g := range p.Groups {
		if g.Timeslice != 1 || g.Interleave != low {
			t.Errorf("cached group %v: %v %v", g.Handle, g.Timeslice, g.Interleave)
		}
	}
	// Refresh reads back what RM holds.
	if err := p.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Groups[0].Timeslice != 1 {
		t.Errorf("after refresh: %v", p.Groups[0].Timeslice)
	}
}

func TestApplyRejectsBadValuesBeforeTouchingRM(t *testing.T) {
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	n := d.Controls(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE)
	for _, ts := range []time.Duration{0, 500 * time.Nanosecond, 6 * time.Second, 1500 * time.Nanosecond} {
		if err := p.SetTimeslice(context.Background(), p.Groups, ts); !errors.Is(err, tsg.ErrInvalidArgument) {
			t.Errorf("SetTimeslice(%v) = %v, want ErrInvalidArgument", ts, err)
		}
	}
	bad := tsg.Level(7)
	if err := p.SetInterleave(context.Background(), p.Groups, bad); !errors.Is(err, tsg.ErrInvalidArgument) {
		t.Errorf("SetInterleave(7) = %v", err)
	}
	if got := d.Controls(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE); got != n {
		t.Errorf("%d SET_TIMESLICE issued for invalid values", got-n)
	}
}

func TestScheduleSuspendResume(t *testing.T) {
	for _, v := range []ioctl.DriverVersion{{Major: 580, Minor: 159, Patch: 4}, {Major: 570, Minor: 86, Patch: 15}} {
		t.Run(v.String(), func(t *testing.T) {
			d := newTraced(t, 100, rmfake.WithVersion(v))
			p := discover(t, d, 100, tsg.ScanOptions{})
			ctx := context.Background()
			if err := p.Schedule(ctx, p.Groups, false); err != nil {
				t.Fatal(err)
			}
			for _, g := range d.Groups(100, 8) {
				if d.Scheduled(g) {
					t.Errorf("group %v still enabled after suspend", g.Handle)
				}
			}
			if err := p.Schedule(ctx, p.Groups, true); err != nil {
				t.Fatal(err)
			}
			for _, g := range d.Groups(100, 8) {
				if !d.Scheduled(g) {
					t.Errorf("group %v not enabled after resume", g.Handle)
				}
			}
		})
	}
}

// TestScheduleFailureLeavesWhatWasDone: a suspend that fails part way
// leaves the groups it suspended suspended and names them. It used to
// resume them, which also resumed a group someone had suspended before
// (issue 14, defect 5): RM does not report a group's previous state.
func TestScheduleFailureLeavesWhatWasDone(t *testing.T) {
	ctx := context.Background()
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	// Someone suspended the compute group before.
	compute, err := p.Select(tsg.Selector{ComputeOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Schedule(ctx, compute, false); err != nil {
		t.Fatal(err)
	}
	d.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, Object: 0x5c00004c, Nth: 1, Status: ioctl.NV_ERR_INVALID_STATE})
	err = p.Schedule(ctx, p.Groups, false)
	if !errors.Is(err, ioctl.NV_ERR_INVALID_STATE) {
		t.Fatalf("Schedule = %v", err)
	}
	const say = "(groups 0x5c000015, 0x5c00003e were suspended before the failure and are left so: the driver does not report their previous state)"
	if !strings.HasSuffix(err.Error(), say) {
		t.Errorf("Schedule error = %q, want it to end %q", err, say)
	}
	want := map[ioctl.Handle]bool{0x5c000015: false, 0x5c00003e: false, 0x5c00004c: true, 0x5c00005a: true}
	for _, g := range d.Groups(100, 8) {
		if got := d.Scheduled(g); got != want[g.Handle] {
			t.Errorf("group %v scheduled = %v, want %v", g.Handle, got, want[g.Handle])
		}
	}
}

func TestPreempt(t *testing.T) {
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	ctx := context.Background()
	if err := p.Preempt(ctx, p.Groups, true, 0); err != nil {
		t.Fatal(err)
	}
	if got := d.Controls(ioctl.NVA06C_CTRL_CMD_PREEMPT); got != 4 {
		t.Errorf("PREEMPT issued %d times, want 4", got)
	}
	if err := p.Preempt(ctx, p.Groups, true, 2*time.Second); !errors.Is(err, tsg.ErrInvalidArgument) {
		t.Errorf("Preempt with a 2 s timeout = %v, want ErrInvalidArgument", err)
	}
	if err := p.Preempt(ctx, p.Groups, true, 100*time.Millisecond); err != nil {
		t.Errorf("Preempt with a 100 ms timeout: %v", err)
	}
}

func TestSelect(t *testing.T) {
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	tests := []struct {
		sel     tsg.Selector
		want    int
		wantErr error
	}{
		{tsg.Selector{}, 4, nil},
		{tsg.Selector{ComputeOnly: true}, 1, nil},
		{tsg.Selector{Handle: 0x5c00003e}, 1, nil},
		{tsg.Selector{Handle: 0x5c00003e, ComputeOnly: true}, 0, tsg.ErrNoSuchGroup},
		{tsg.Selector{Handle: 0x1234}, 0, tsg.ErrNoSuchGroup},
	}
	for _, tt := range tests {
		gs, err := p.Select(tt.sel)
		if !errors.Is(err, tt.wantErr) || len(gs) != tt.want {
			t.Errorf("Select(%+v) = %d groups, %v; want %d, %v", tt.sel, len(gs), err, tt.want, tt.wantErr)
		}
	}
}

func TestClientBoundToFile(t *testing.T) {
	// A fresh open of /dev/nvidiactl cannot control another process's
	// client: that is why discovery attaches to the target's own file.
	d := newTraced(t, 100)
	p := discover(t, d, 100, tsg.ScanOptions{})
	own, err := d.Host().OpenControl()
	if err != nil {
		t.Fatal(err)
	}
	g := p.Groups[0]
	var ts ioctl.NVA06C_CTRL_TIMESLICE_PARAMS
	err = ioctl.Control(own, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, &ts)
	if !errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT) {
		t.Fatalf("GET_TIMESLICE from another file = %v, want NV_ERR_INVALID_CLIENT", err)
	}
}
