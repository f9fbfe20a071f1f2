package trace_test

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

func loadTrace(tb testing.TB) []rmfake.TraceAlloc {
	tb.Helper()
	allocs, err := rmfake.ParseTraceFile(filepath.Join("..", "..", "testdata", "h100-580.159.04-alloc-sequence.txt"))
	if err != nil {
		tb.Fatal(err)
	}
	return allocs
}

// viaRecords passes events through the record form the BPF programs send,
// so the registry sees exactly what the decoder makes of real records.
func viaRecords(tb testing.TB, evs []trace.Event) []trace.Event {
	tb.Helper()
	out := make([]trace.Event, len(evs))
	for i, ev := range evs {
		b, err := trace.Encode(ev)
		if err != nil {
			tb.Fatal(err)
		}
		if out[i], err = trace.Decode(b); err != nil {
			tb.Fatal(err)
		}
	}
	return out
}

var (
	python = tracetest.Process{PID: 4242, TID: 4242, Comm: "python3"}
	ctl    = tracetest.Process{PID: 999, TID: 999, Comm: "gpreemptctl"}
)

const (
	client     ioctl.Handle = 0xc1d00022
	device     ioctl.Handle = 0x5c000002
	computeTSG ioctl.Handle = 0x5c000015
	copyTSG    ioctl.Handle = 0x5c00003e
)

// TestRegistryReplaysLibcuda replays the real libcuda context creation
// (allocations from the H100 trace, then libcuda's GPFIFO_SCHEDULE and
// SET_TIMESLICE(2048)) and checks the registry's groups.
func TestRegistryReplaysLibcuda(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	r := trace.NewRegistry()
	var updates []trace.Update
	for _, ev := range viaRecords(t, tracetest.LibcudaContext(loadTrace(t), python, &clock)) {
		updates = append(updates, r.Apply(ev)...)
	}
	groups := r.Groups()
	type want struct {
		handle   ioctl.Handle
		engine   tsg.Engine
		channels int
		ts       uint64
	}
	wants := []want{{computeTSG, tsg.EngineCompute, 8, 2048}, {copyTSG, tsg.EngineCopy, 4, 0}, {0x5c00004c, tsg.EngineCopy, 4, 0}, {0x5c00005a, tsg.EngineCopy, 4, 0}}
	if len(groups) != len(wants) {
		t.Fatalf("%d groups: %+v", len(groups), groups)
	}
	for i, w := range wants {
		g := groups[i]
		if g.Handle != w.handle || g.Engine != w.engine || g.Channels != w.channels || g.TimesliceUs != w.ts ||
			g.PID != 4242 || g.Comm != "python3" || g.FD != 8 || g.Client != client || g.Device != device ||
			g.Schedule != trace.ScheduleEnabled || g.Created == 0 {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	// Who set the compute group's timeslice: libcuda itself, in python3.
	c := groups[0].Changes
	if len(c) != 2 || c[1].Name != "NVA06C_CTRL_CMD_SET_TIMESLICE" || c[1].Value != "2048us" || c[1].By.PID != 4242 ||
		c[1].TookNs != uint64(tracetest.TimesliceCost) || c[0].Value != "enable" {
		t.Errorf("compute group's changes: %+v", c)
	}

	count := map[trace.UpdateKind]int{}
	for _, u := range updates {
		count[u.Kind]++
	}
	if want := map[trace.UpdateKind]int{trace.UpdateTSGAlloc: 4, trace.UpdateChannelAlloc: 20, trace.UpdateEngine: 4, trace.UpdateControl: 5}; !reflect.DeepEqual(count, want) {
		t.Errorf("updates %v, want %v", count, want)
	}

	// gpreemptctl, through a duplicate of python3's file, makes the copy
	// group BE: the change is recorded as its own, the owner stays.
	us := r.Apply(tracetest.SetTimeslice(ctl, 5, client, copyTSG, 200, ioctl.NV_OK, &clock))
	if len(us) != 1 || us[0].Before.TimesliceUs != 0 || us[0].After.TimesliceUs != 200 {
		t.Fatalf("set timeslice update %+v", us)
	}
	g, _ := r.Group(client, copyTSG)
	if last := g.Changes[len(g.Changes)-1]; last.By.Comm != "gpreemptctl" || last.By.PID != 999 || g.PID != 4242 || last.Value != "200us" {
		t.Errorf("after gpreemptctl: %+v", g)
	}
	// A refused control changes nothing but is reported.
	us = r.Apply(tracetest.SetTimeslice(ctl, 5, client, copyTSG, 1, ioctl.NV_ERR_INVALID_CLIENT, &clock))
	if g2, _ := r.Group(client, copyTSG); len(us) != 1 || g2.TimesliceUs != 200 || len(g2.Changes) != len(g.Changes) {
		t.Errorf("a refused SET_TIMESLICE changed the group: %+v", g2)
	}
	r.Apply(tracetest.Preempt(ctl, 5, client, computeTSG, 250e3, &clock))
	r.Apply(tracetest.SetInterleave(ctl, 5, client, computeTSG, ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH, &clock))
	if g, _ := r.Group(client, computeTSG); g.Preemptions != 1 || g.Interleave != tsg.LevelHigh {
		t.Errorf("after preempt and interleave: %+v", g)
	}

	// Frees: a channel, then a group, then the device takes the rest.
	r.Apply(tracetest.Free(python, 8, client, copyTSG, 0x5c000040, &clock))
	if g, _ := r.Group(client, copyTSG); g.Channels != 3 {
		t.Errorf("after freeing a channel: %d channels", g.Channels)
	}
	if us := r.Apply(tracetest.Free(python, 8, client, device, copyTSG, &clock)); len(us) != 1 || us[0].Kind != trace.UpdateTSGFree {
		t.Errorf("free group: %+v", us)
	}
	if us := r.Apply(tracetest.Free(python, 8, client, client, device, &clock)); len(us) != 3 {
		t.Errorf("free device: %d updates", len(us))
	}
	if n := len(r.Groups()); n != 0 {
		t.Errorf("%d groups left", n)
	}
}

func TestRegistryClientFreeAndExit(t *testing.T) {
	allocs := loadTrace(t)
	clock := tracetest.Clock{Now: 1e9}
	r := trace.NewRegistry()
	other := tracetest.Process{PID: 4343, TID: 4343, Comm: "lc-server", ClientOffset: 0x10}
	for _, ev := range tracetest.LibcudaContext(allocs, python, &clock) {
		r.Apply(ev)
	}
	for _, ev := range tracetest.LibcudaContext(allocs, other, &clock) {
		r.Apply(ev)
	}
	if n := len(r.Groups()); n != 8 {
		t.Fatalf("%d groups", n)
	}
	// The second process frees its client: its groups go.
	if us := r.Apply(tracetest.Free(other, 8, client+0x10, client+0x10, client+0x10, &clock)); len(us) != 4 {
		t.Errorf("client free: %d updates", len(us))
	}
	// The first exits: RM frees its groups with its files.
	us := r.Apply(&trace.TaskExit{PID: 4242, Comm: "python3", At: clock.Now})
	if len(us) != 4 || us[0].Kind != trace.UpdateTSGExit || us[0].Call != nil {
		t.Errorf("exit: %+v", us)
	}
	if n := len(r.Groups()); n != 0 {
		t.Errorf("%d groups left", n)
	}
}

// TestRegistryGroupBeforeTracing: a control on a group whose allocation was
// not seen makes the group known, its owner taken from its client.
func TestRegistryGroupBeforeTracing(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	r := trace.NewRegistry()
	r.Apply(tracetest.Alloc(python, 8, 0, 0, client, ioctl.NV01_ROOT_CLIENT, &clock))
	us := r.Apply(tracetest.SetTimeslice(ctl, 5, client, computeTSG, 5000000, ioctl.NV_OK, &clock))
	if len(us) != 1 || us[0].After.PID != 4242 || us[0].After.Created != 0 || us[0].After.TimesliceUs != 5000000 {
		t.Errorf("%+v", us)
	}
	// Unknown client, refused: reported, not kept.
	us = r.Apply(tracetest.SetTimeslice(ctl, 5, 0xc1d00099, computeTSG, 1, ioctl.NV_ERR_INVALID_CLIENT, &clock))
	if len(us) != 1 || len(r.Groups()) != 1 {
		t.Errorf("%+v, %d groups", us, len(r.Groups()))
	}
}

// FuzzRegistry applies arbitrary decoded records after a real context: the
// registry must not panic nor count negative channels.
func FuzzRegistry(f *testing.F) {
	clock := tracetest.Clock{Now: 1e9}
	prefix := tracetest.LibcudaContext(loadTrace(f), python, &clock)
	for _, ev := range prefix[len(prefix)-8:] {
		b, err := trace.Encode(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, b)
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		r := trace.NewRegistry()
		for _, ev := range prefix {
			r.Apply(ev)
		}
		for _, rec := range [][]byte{a, b, a} {
			if ev, err := trace.Decode(rec); err == nil {
				r.Apply(ev)
			}
		}
		for _, g := range r.Groups() {
			if g.Channels < 0 || len(g.Changes) > 32 {
				t.Fatalf("group %+v", g)
			}
		}
	})
}
