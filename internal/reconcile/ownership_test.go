package reconcile_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestForkedChildDoesNotTakeItsParentsGroups: a worker forked after its
// parent made a CUDA context (a data loader's) holds the parent's
// /dev/nvidiactl open file, so its groups read through its descriptors
// are the parent's. They stay the parent's: the worker, classed by the
// default, does not undo the lc the parent asked for, whichever of the
// two the scan finds first.
func TestForkedChildDoesNotTakeItsParentsGroups(t *testing.T) {
	for _, childFirst := range []bool{false, true} {
		g := newRig(t, "default: be\nrequests: {default_max: lc}\n")
		g.Procs[100] = policy.Process{Comm: "server", UID: 1000}
		g.Procs[101] = policy.Process{Comm: "server", UID: 1000}
		// The worker, pid 101, started later (reconciletest.Procs).
		g.Driver.NewProc(100)
		if _, err := g.Driver.Replay(g.Driver.Proc(100), g.Allocs); err != nil {
			t.Fatal(err)
		}
		g.Driver.Fork(100, 101)
		scan := g.Scan
		if childFirst {
			scan(101)
			scan(100)
		} else {
			scan(100)
			scan(101)
		}
		g.Tick(g.Now + time.Second)
		// Never asked for anything, the parent is classed (be, the
		// default), and its groups are its own.
		g.WantAll(100, 200, tsg.LevelLow)
		if refs := g.Rec.InClass(class.BE); len(refs) != 1 || refs[0].PID != 100 {
			t.Fatalf("child first %v: be processes %+v, want the parent alone", childFirst, refs)
		}
		if _, err := g.Rec.Request(context.Background(), 100, 0, class.Spec{Name: class.LC, Weight: 1}, nil); err != nil {
			t.Fatal(err)
		}
		scan(100) // the next resync
		scan(101)
		for range 5 {
			g.Tick(g.Now + time.Second)
		}
		g.WantAll(100, 5000000, tsg.LevelHigh)
		if n := len(g.Rec.InClass(class.BE)); n != 0 {
			t.Errorf("child first %v: %d processes classed be, want none (the worker holds no group)", childFirst, n)
		}
		if known := g.Rec.Known(); !slices.Equal(known, []int{100}) {
			t.Errorf("child first %v: known %v, want the parent alone", childFirst, known)
		}
		// Shutdown puts back what libcuda set, not a class's value.
		if _, err := g.Rec.RestoreAll(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, x := range g.Groups(100) {
			if us := uint64(x.Timeslice); us != 2048 && us != 1024 {
				t.Errorf("child first %v: group %v restored to %dus, want libcuda's 2048/1024", childFirst, x.Handle, us)
			}
		}
	}
}

// TestUntracedGroupsBelongToTheirMaker: where no allocation was traced
// (groups made before gpreemptd started, or the scan mode), a process
// that started before a GPU app and holds duplicates of its files (a
// monitoring agent) reaches the app's groups through them. NVML lists the
// process that allocated a client, not those holding its file, so the
// groups stay the app's, classed by its rule, whatever order the scans
// come in; the agent holds none. Before NVML lists the app the earliest
// start decides, and the app takes its groups at the first scan after.
// Without NVML the earliest start decides.
func TestUntracedGroupsBelongToTheirMaker(t *testing.T) {
	const pol = "default: none\nrules:\n  - {name: agent, match: {comm: agent}, class: be}\n  - {name: server, match: {comm: server}, class: lc, trust_self_set: true}\n"
	tests := []struct {
		name       string
		nvml       bool
		agentFirst bool
		// listedLate: NVML does not list the app at the first scan.
		listedLate bool
		wantOwner  int
	}{
		{"app scanned first", true, false, false, 100},
		{"agent scanned first", true, true, false, 100},
		{"app listed after the first scan", true, true, true, 100},
		{"no NVML: the earliest start", false, false, false, 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t, pol)
			insp := driverInspector{g.Procs, g.Driver, map[int]bool{}}
			if tt.nvml {
				g.Rec.SetInspector(insp)
			}
			// The agent, pid 50, started before the app (reconciletest.Procs).
			g.Procs[50] = policy.Process{Comm: "agent", UID: 0}
			g.Procs[100] = policy.Process{Comm: "server", UID: 1000}
			if _, err := g.Driver.Replay(g.Driver.NewProc(100), g.Allocs); err != nil {
				t.Fatal(err)
			}
			g.Driver.GetFDs(100, 50)
			insp.notYet[100] = tt.listedLate
			order := []int{100, 50}
			if tt.agentFirst {
				order = []int{50, 100}
			}
			for _, pid := range order {
				g.Scan(pid)
			}
			g.Tick(g.Now + time.Second)
			delete(insp.notYet, 100)
			for range 2 { // the next resyncs
				for _, pid := range order {
					g.Scan(pid)
				}
				g.Tick(g.Now + time.Second)
			}
			want := map[int]class.Name{100: class.LC, 50: class.BE}[tt.wantOwner]
			level := map[class.Name]tsg.Level{class.LC: tsg.LevelHigh, class.BE: tsg.LevelLow}[want]
			us := map[class.Name]uint64{class.LC: 5000000, class.BE: 200}[want]
			g.WantAll(100, us, level)
			if refs := g.Rec.InClass(want); len(refs) != 1 || refs[0].PID != tt.wantOwner {
				t.Errorf("%s processes %+v, want pid %d alone", want, refs, tt.wantOwner)
			}
			if known := g.Rec.Known(); !slices.Equal(known, []int{tt.wantOwner}) {
				t.Errorf("known %v, want the owner alone", known)
			}
			// Shutdown puts back what libcuda set, whoever held the
			// groups first.
			if _, err := g.Rec.RestoreAll(context.Background()); err != nil {
				t.Fatal(err)
			}
			for _, x := range g.Groups(100) {
				if us := uint64(x.Timeslice); us != 2048 && us != 1024 {
					t.Errorf("group %v restored to %dus, want libcuda's 2048/1024", x.Handle, us)
				}
			}
		})
	}
}

// TestHandedFileDoesNotTakeTheGroups: a process that started before a GPU
// app and was handed duplicates of its files (a monitoring agent using
// pidfd_getfd) reaches the app's groups through them, but the app's
// allocations were traced: the groups stay the app's, classed by its
// rule, whatever order the scans come in; the agent holds none.
func TestHandedFileDoesNotTakeTheGroups(t *testing.T) {
	for _, agentFirst := range []bool{false, true} {
		g := newRig(t, "default: none\nrules:\n  - {name: agent, match: {comm: agent}, class: be}\n  - {name: server, match: {comm: server}, class: lc, trust_self_set: true}\n")
		// The agent, pid 50, started before the app (reconciletest.Procs).
		g.Procs[50] = policy.Process{Comm: "agent", UID: 0}
		last := g.Start(100, policy.Process{Comm: "server", UID: 1000})
		g.Driver.GetFDs(100, 50)
		scan := g.Scan
		order := []int{100, 50}
		if agentFirst {
			order = []int{50, 100}
		}
		for _, pid := range order {
			scan(pid)
		}
		g.Tick(last + time.Second)
		for _, pid := range order { // the next resync
			scan(pid)
		}
		for range 3 {
			g.Tick(g.Now + time.Second)
		}
		g.WantAll(100, 5000000, tsg.LevelHigh)
		if refs := g.Rec.InClass(class.BE); len(refs) != 0 {
			t.Errorf("agent first %v: be processes %+v, want none (the agent holds no group of its own)", agentFirst, refs)
		}
		if refs := g.Rec.InClass(class.LC); len(refs) != 1 || refs[0].PID != 100 {
			t.Errorf("agent first %v: lc processes %+v, want the app", agentFirst, refs)
		}
	}
}
