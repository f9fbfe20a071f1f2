package registry_test

import (
	"context"
	"errors"
	"testing"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// allSource discovers every process at once, as tsg's DiscoverAll does.
type allSource struct {
	tsg.Source
	host tsg.Host
}

func (s allSource) DiscoverAll(ctx context.Context) (*tsg.Listing, error) {
	return s.Source.DiscoverAll(ctx)
}

func TestScan(t *testing.T) {
	for _, how := range []string{"lister", "DiscoverAll"} {
		t.Run(how, func(t *testing.T) {
			m := newMachine(t)
			if how == "DiscoverAll" {
				m.r = registry.New(registry.Options{Source: allSource{m.src, m.d.Host()}, Procs: m.procs,
					Now: func() uint64 { return discoveryNow }})
			}
			a, aClients := m.spawn(t, 100, 1000, "python3")
			b, bClients := m.spawn(t, 200, 2000, "trainer")
			if err := m.r.Scan(t.Context()); err != nil {
				t.Fatal(err)
			}
			ps := m.r.Processes()
			if len(ps) != 2 || ps[0].ID != a || ps[1].ID != b || len(ps[0].Groups) != 4 || len(ps[1].Groups) != 4 {
				t.Fatalf("after the first scan: %+v", ps)
			}
			sub := m.r.Subscribe(16)
			m.exit(100)
			if err := m.r.Scan(t.Context()); err != nil {
				t.Fatal(err)
			}
			if ps := m.r.Processes(); len(ps) != 1 || ps[0].ID != b {
				t.Errorf("after python3 exited: %+v", ps)
			}
			var kinds []registry.UpdateKind
			for len(sub.Updates()) > 0 {
				kinds = append(kinds, (<-sub.Updates()).Kind)
			}
			if len(kinds) != 5 || kinds[4] != registry.UpdateProcessExit {
				t.Errorf("updates %v, want 4 tsg-exit and a process-exit", kinds)
			}
			if left := m.alive(append(aClients, bClients...)); len(left) != len(bClients) {
				t.Errorf("clients alive after the scans: %v, want only the trainer's %v", left, bClients)
			}
		})
	}
}

// TestScanMergesEvents: discovery and events describe the same groups;
// what each alone knows is kept, and a group discovery does not find is
// gone only if the events do not show it made after discovery began.
func TestScanMergesEvents(t *testing.T) {
	m := newMachine(t)
	_, clients := m.spawn(t, 100, 1000, "python3")
	owner := tracetest.Process{PID: 100, TID: 100, Comm: "python3", ClientOffset: uint32(clients[0] - 0xc1d00021)}
	clock := tracetest.Clock{Now: 1e9}
	for _, ev := range tracetest.LibcudaContext(loadTrace(t), owner, &clock) {
		m.r.Apply(ev)
	}
	// Two groups the fake driver does not have: one freed unseen before
	// the scan, one allocated while it ran.
	const stale, fresh ioctl.Handle = 0x5c000f00, 0x5c000f01
	m.r.Apply(tracetest.Alloc(owner, 8, clients[1], device, stale, ioctl.KEPLER_CHANNEL_GROUP_A, &clock))
	clock.Now = discoveryNow + 1
	m.r.Apply(tracetest.Alloc(owner, 8, clients[1], device, fresh, ioctl.KEPLER_CHANNEL_GROUP_A, &clock))
	if n := len(m.r.Groups()); n != 6 {
		t.Fatalf("%d groups from events", n)
	}
	if err := m.r.Scan(t.Context()); err != nil {
		t.Fatal(err)
	}
	gs := m.r.Groups()
	var handles []ioctl.Handle
	for _, g := range gs {
		handles = append(handles, g.Handle)
	}
	want := []ioctl.Handle{computeTSG, copyTSG, 0x5c00004c, 0x5c00005a, fresh}
	if len(gs) != len(want) {
		t.Fatalf("groups %v, want %v", handles, want)
	}
	for i, g := range gs {
		if g.Handle != want[i] {
			t.Errorf("groups %v, want %v", handles, want)
			break
		}
	}
	c := gs[0]
	if c.Created == 0 || len(c.Changes) != 2 || c.Timeslice != 2048 || c.Schedule != registry.ScheduleEnabled || c.Channels != 8 || c.Engine != tsg.EngineCompute {
		t.Errorf("compute group after the scan lost what the events knew: %+v", c)
	}
	if gs[1].TSGID == c.TSGID {
		t.Errorf("hardware ids not taken from discovery: %d, %d", c.TSGID, gs[1].TSGID)
	}
}

// TestScanSkipsVanishing: a process that exits between the listing and
// its discovery is skipped, not an error.
func TestScanSkipsVanishing(t *testing.T) {
	m := newMachine(t)
	m.spawn(t, 100, 1000, "python3")
	m.spawn(t, 200, 2000, "trainer")
	m.procs.end(200) // gone from /proc, its files not yet released
	if err := m.r.Scan(t.Context()); err != nil {
		t.Fatal(err)
	}
	if ps := m.r.Processes(); len(ps) != 1 || ps[0].ID.PID != 100 {
		t.Errorf("%+v", ps)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := m.r.Scan(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled scan = %v", err)
	}
}
