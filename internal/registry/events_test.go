package registry_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

var (
	python = tracetest.Process{PID: 4242, TID: 4242, Comm: "python3"}
	ctl    = tracetest.Process{PID: 999, TID: 999, Comm: "gpreemptctl"}
	daemon = tracetest.Process{PID: 777, TID: 778, Comm: "gpreemptd"}
)

const (
	client     ioctl.Handle = 0xc1d00022
	device     ioctl.Handle = 0x5c000002
	computeTSG ioctl.Handle = 0x5c000015
	copyTSG    ioctl.Handle = 0x5c00003e
)

// eventRegistry is a registry fed by events, whose processes python3
// (started at tick 100) and the others are.
func eventRegistry(t testing.TB) (*registry.Registry, *procs) {
	ps := newProcs()
	ps.start(int(python.PID), 100, python.Comm)
	ps.start(4343, 200, "lc-server")
	return registry.New(registry.Options{Procs: ps, Self: int(daemon.PID)}), ps
}

// TestReplaysLibcuda replays the real libcuda context creation
// (allocations from the H100 trace, then libcuda's GPFIFO_SCHEDULE and
// SET_TIMESLICE(2048)) and checks the registry's groups.
func TestReplaysLibcuda(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	r, _ := eventRegistry(t)
	var updates []registry.Update
	for _, ev := range viaRecords(t, tracetest.LibcudaContext(loadTrace(t), python, &clock)) {
		updates = append(updates, r.Apply(ev)...)
	}
	groups := r.Groups()
	type want struct {
		handle   ioctl.Handle
		engine   tsg.Engine
		channels int
		ts       tsg.Micros
	}
	wants := []want{{computeTSG, tsg.EngineCompute, 8, 2048}, {copyTSG, tsg.EngineCopy, 4, 0}, {0x5c00004c, tsg.EngineCopy, 4, 0}, {0x5c00005a, tsg.EngineCopy, 4, 0}}
	if len(groups) != len(wants) {
		t.Fatalf("%d groups: %+v", len(groups), groups)
	}
	for i, w := range wants {
		g := groups[i]
		if g.Handle != w.handle || g.Engine != w.engine || g.Channels != w.channels || g.Timeslice != w.ts ||
			g.PID != 4242 || g.Comm != "python3" || g.FD != 8 || g.Client != client || g.Device != device ||
			g.Schedule != registry.ScheduleEnabled || g.Created == 0 {
			t.Errorf("group %d = %+v, want %+v", i, g, w)
		}
	}
	// Who set the compute group's timeslice: libcuda itself, in python3.
	c := groups[0].Changes
	if len(c) != 2 || c[1].Name != "NVA06C_CTRL_CMD_SET_TIMESLICE" || c[1].Value != "2048us" || c[1].By.PID != 4242 ||
		c[1].TookNs != uint64(tracetest.TimesliceCost) || c[0].Value != "enable" {
		t.Errorf("compute group's changes: %+v", c)
	}

	count := map[registry.UpdateKind]int{}
	for _, u := range updates {
		count[u.Kind]++
		if u.Process != (registry.ProcessID{PID: 4242, Start: 100}) {
			t.Errorf("%s update for %v, want python3's identity", u.Kind, u.Process)
		}
	}
	if want := map[registry.UpdateKind]int{registry.UpdateTSGAlloc: 4, registry.UpdateChannelAlloc: 20, registry.UpdateEngine: 4, registry.UpdateControl: 5}; !reflect.DeepEqual(count, want) {
		t.Errorf("updates %v, want %v", count, want)
	}
	// libcuda's own SET_TIMESLICE after channel setup: what a daemon waits
	// for before it applies a policy.
	var sets []registry.Update
	for _, u := range updates {
		if u.ChangesSettings() {
			sets = append(sets, u)
		}
	}
	if len(sets) != 1 || sets[0].Origin != registry.OriginOwner || sets[0].Change.Value != "2048us" || sets[0].After.Handle != computeTSG {
		t.Errorf("libcuda's SET_TIMESLICE updates: %+v", sets)
	}
	if p, ok := r.Process(4242); !ok || p.ID.Start != 100 || len(p.Groups) != 4 || !reflect.DeepEqual(p.Clients, []ioctl.Handle{0xc1d00021, client}) {
		t.Errorf("Process(4242) = %+v, %v", p, ok)
	}

	// gpreemptctl, through a duplicate of python3's file, makes the copy
	// group BE: the change is recorded as its own, the owner stays.
	us := r.Apply(tracetest.SetTimeslice(ctl, 5, client, copyTSG, 200, ioctl.NV_OK, &clock))
	if len(us) != 1 || us[0].Before.Timeslice != 0 || us[0].After.Timeslice != 200 || us[0].Origin != registry.OriginOther {
		t.Fatalf("set timeslice update %+v", us)
	}
	g, _ := r.Group(tsg.GroupID{Client: client, Handle: copyTSG})
	if last := g.Changes[len(g.Changes)-1]; last.By.Comm != "gpreemptctl" || last.By.PID != 999 || g.PID != 4242 || last.Value != "200us" {
		t.Errorf("after gpreemptctl: %+v", g)
	}
	// A refused control changes nothing but is reported.
	us = r.Apply(tracetest.SetTimeslice(ctl, 5, client, copyTSG, 1, ioctl.NV_ERR_INVALID_CLIENT, &clock))
	if g2, _ := r.Group(tsg.GroupID{Client: client, Handle: copyTSG}); len(us) != 1 || us[0].Change != nil || g2.Timeslice != 200 || len(g2.Changes) != len(g.Changes) {
		t.Errorf("a refused SET_TIMESLICE changed the group: %+v", g2)
	}
	r.Apply(tracetest.Preempt(ctl, 5, client, computeTSG, 250e3, &clock))
	r.Apply(tracetest.SetInterleave(ctl, 5, client, computeTSG, ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH, &clock))
	if g, _ := r.Group(tsg.GroupID{Client: client, Handle: computeTSG}); g.Preemptions != 1 || g.Interleave != tsg.LevelHigh {
		t.Errorf("after preempt and interleave: %+v", g)
	}

	// Frees: a channel, then a group, then the device takes the rest.
	r.Apply(tracetest.Free(python, 8, client, copyTSG, 0x5c000040, &clock))
	if g, _ := r.Group(tsg.GroupID{Client: client, Handle: copyTSG}); g.Channels != 3 {
		t.Errorf("after freeing a channel: %d channels", g.Channels)
	}
	if us := r.Apply(tracetest.Free(python, 8, client, device, copyTSG, &clock)); len(us) != 1 || us[0].Kind != registry.UpdateTSGFree {
		t.Errorf("free group: %+v", us)
	}
	if us := r.Apply(tracetest.Free(python, 8, client, client, device, &clock)); len(us) != 3 {
		t.Errorf("free device: %d updates", len(us))
	}
	if n := len(r.Groups()); n != 0 {
		t.Errorf("%d groups left", n)
	}
}

// TestOrigin: who made a control, as a daemon tells libcuda's own setting
// (apply the policy after it), its own (nothing to do) and anyone else's
// (drift) apart.
func TestOrigin(t *testing.T) {
	tests := []struct {
		name   string
		by     tracetest.Process
		status ioctl.NvStatus
		want   registry.Origin
		change bool
	}{
		{"the owner (libcuda)", python, ioctl.NV_OK, registry.OriginOwner, true},
		{"the registry's user", daemon, ioctl.NV_OK, registry.OriginSelf, true},
		{"another process", ctl, ioctl.NV_OK, registry.OriginOther, true},
		{"another process, refused", ctl, ioctl.NV_ERR_INVALID_CLIENT, registry.OriginOther, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := tracetest.Clock{Now: 1e9}
			r, _ := eventRegistry(t)
			for _, ev := range tracetest.LibcudaContext(loadTrace(t), python, &clock) {
				r.Apply(ev)
			}
			us := r.Apply(tracetest.SetTimeslice(tt.by, 5, client, computeTSG, 1, tt.status, &clock))
			if len(us) != 1 || us[0].Origin != tt.want || (us[0].Change != nil) != tt.change || us[0].ChangesSettings() != tt.change {
				t.Fatalf("update %+v, want origin %v, change %v", us, tt.want, tt.change)
			}
		})
	}
}

func TestClientFreeAndExit(t *testing.T) {
	allocs := loadTrace(t)
	clock := tracetest.Clock{Now: 1e9}
	r, _ := eventRegistry(t)
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
	// The first exits: RM frees its groups with its files, and the process
	// goes after them.
	us := r.Apply(&trace.TaskExit{PID: 4242, Comm: "python3", At: clock.Now})
	if len(us) != 5 || us[0].Kind != registry.UpdateTSGExit || us[0].Call != nil ||
		us[4].Kind != registry.UpdateProcessExit || us[4].Process != (registry.ProcessID{PID: 4242, Start: 100}) {
		t.Errorf("exit: %+v", us)
	}
	if n := len(r.Groups()); n != 0 {
		t.Errorf("%d groups left", n)
	}
	if _, ok := r.Process(4242); ok {
		t.Error("python3 still known after its exit")
	}
}

// TestPIDReuseWithoutExit: a process's exit event was lost and a new
// process got its pid; its first client shows the old one gone.
func TestPIDReuseWithoutExit(t *testing.T) {
	allocs := loadTrace(t)
	clock := tracetest.Clock{Now: 1e9}
	r, ps := eventRegistry(t)
	for _, ev := range tracetest.LibcudaContext(allocs, python, &clock) {
		r.Apply(ev)
	}
	ps.start(4242, 300, "trainer")
	reborn := tracetest.Process{PID: 4242, TID: 4242, Comm: "trainer", ClientOffset: 0x20}
	var kinds []registry.UpdateKind
	for _, ev := range tracetest.LibcudaContext(allocs, reborn, &clock) {
		for _, u := range r.Apply(ev) {
			kinds = append(kinds, u.Kind)
		}
	}
	exits := 0
	for _, k := range kinds[:5] {
		if k == registry.UpdateTSGExit || k == registry.UpdateProcessExit {
			exits++
		}
	}
	if exits != 5 || kinds[4] != registry.UpdateProcessExit {
		t.Errorf("first updates %v, want 4 tsg-exit and process-exit for the old process", kinds[:5])
	}
	p, _ := r.Process(4242)
	if p.ID.Start != 300 || p.Comm != "trainer" || len(p.Groups) != 4 || p.Groups[0].Client != client+0x20 {
		t.Errorf("process 4242 = %+v, want only the trainer's groups", p)
	}
}

// TestGroupBeforeTracing: a control on a group whose allocation was not
// seen makes the group known, its owner taken from its client.
func TestGroupBeforeTracing(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	r, _ := eventRegistry(t)
	r.Apply(tracetest.Alloc(python, 8, 0, 0, client, ioctl.NV01_ROOT_CLIENT, &clock))
	us := r.Apply(tracetest.SetTimeslice(ctl, 5, client, computeTSG, 5000000, ioctl.NV_OK, &clock))
	if len(us) != 1 || us[0].After.PID != 4242 || us[0].After.Created != 0 || us[0].After.Timeslice != 5000000 ||
		us[0].Process.Start != 100 {
		t.Errorf("%+v", us)
	}
	// gpreemptctl's own client, allocated to bound a scan and freed at
	// once, leaves no process behind.
	r.Apply(tracetest.Alloc(ctl, 3, 0, 0, 0xc1d00050, ioctl.NV01_ROOT_CLIENT, &clock))
	if _, ok := r.Process(int(ctl.PID)); !ok {
		t.Error("gpreemptctl unknown while it holds a client")
	}
	r.Apply(tracetest.Free(ctl, 3, 0xc1d00050, 0xc1d00050, 0xc1d00050, &clock))
	if _, ok := r.Process(int(ctl.PID)); ok {
		t.Error("gpreemptctl still known after freeing its only client")
	}
	// Unknown client, refused: reported, not kept.
	us = r.Apply(tracetest.SetTimeslice(ctl, 5, 0xc1d00099, computeTSG, 1, ioctl.NV_ERR_INVALID_CLIENT, &clock))
	if len(us) != 1 || len(r.Groups()) != 1 {
		t.Errorf("%+v, %d groups", us, len(r.Groups()))
	}
}

// TestGroupJSON pins the wire form `trace tsg -o json` prints, whatever
// tsg.Group's own JSON becomes.
func TestGroupJSON(t *testing.T) {
	g := registry.Group{
		Group: tsg.Group{PID: 1, FD: 8, Client: client, Device: device, Handle: computeTSG, TSGID: 3,
			Engine: tsg.EngineCompute, Channels: 8, Timeslice: 2048, Interleave: tsg.LevelUnknown},
		Comm: "python3", Created: 5, Schedule: registry.ScheduleEnabled,
	}
	b, err := json.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"pid":1,"comm":"python3","fd":8,"client":"0xc1d00022","device":"0x5c000002","handle":"0x5c000015",` +
		`"created_ns":5,"channels":8,"engine":"compute","timeslice_us":2048,"interleave":"n/a","schedule":"enabled","preemptions":0}`
	if string(b) != want {
		t.Errorf("JSON\n%s\nwant\n%s", b, want)
	}
	if strings.Contains(string(b), "tsg_id") {
		t.Error("tsg_id in the wire form")
	}
}

// TestFollow feeds a closed channel of events and a cancelled context.
func TestFollow(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	evs := tracetest.LibcudaContext(loadTrace(t), python, &clock)
	ch := make(chan trace.Event, len(evs))
	for _, ev := range evs {
		ch <- ev
	}
	close(ch)
	r, _ := eventRegistry(t)
	if err := r.Follow(t.Context(), ch); err != nil || len(r.Groups()) != 4 {
		t.Errorf("Follow = %v, %d groups", err, len(r.Groups()))
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := r.Follow(ctx, make(chan trace.Event)); !errors.Is(err, context.Canceled) {
		t.Errorf("Follow after cancel = %v", err)
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
		r, _ := eventRegistry(t)
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
