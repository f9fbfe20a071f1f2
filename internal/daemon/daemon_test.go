package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestDaemonScanModeLockReloadRestore runs the whole daemon in scan mode
// over rmfake: a process that exists at start is adopted and classed; a
// second daemon on the same socket is refused; a bad policy file is
// refused with the running policy kept and a good one taken; stopping
// restores the driver's defaults.
func TestDaemonScanModeLockReloadRestore(t *testing.T) {
	dir := t.TempDir()
	polFile := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(polFile, []byte("default: be\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	drv := rmfake.New()
	if _, _, err := drv.ReplayFile(100, reconciletest.AllocTrace); err != nil {
		t.Fatal(err)
	}
	cfg := Config{PolicyFile: polFile, Socket: filepath.Join(dir, "run", "d.sock"), Mode: "scan",
		ScanInterval: 10 * time.Millisecond, PolicyPoll: -1, Host: drv.Host(),
		Inspect: reconciletest.Procs{100: {Comm: "trainer"}}, Log: testlog.New(t)}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, cfg); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second daemon: %v, want ErrAlreadyRunning", err)
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()

	timeslices := func() []uint64 {
		var out []uint64
		for _, g := range drv.Groups(100, 8) {
			out = append(out, uint64(g.Timeslice))
		}
		return out
	}
	proctest.WaitFor(t, "the existing process classed be", func() bool {
		ts := timeslices()
		return len(ts) == 4 && ts[0] == 200 && ts[3] == 200
	})

	cl := api.New(cfg.Socket)
	st, err := cl.Status(ctx)
	if err != nil || st["mode"] != "scan" {
		t.Fatalf("status %v, %v", st, err)
	}
	os.WriteFile(polFile, []byte("default: be\nrules:\n  - clas: lc\n"), 0o644)
	if err := cl.Reload(ctx); err == nil {
		t.Fatal("a bad policy reloaded")
	}
	if d.Reconciler().Policy().Default.Spec.Name != class.BE {
		t.Fatal("bad reload replaced the policy")
	}
	os.WriteFile(polFile, []byte("default: burstable\n"), 0o644)
	if err := cl.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, "re-classed burstable after reload", func() bool {
		ts := timeslices()
		return len(ts) == 4 && ts[0] == 2000 && ts[3] == 2000
	})
	// SIGHUP reloads too.
	os.WriteFile(polFile, []byte("default: be:2\n"), 0o644)
	syscall.Kill(os.Getpid(), syscall.SIGHUP)
	proctest.WaitFor(t, "SIGHUP reload", func() bool { return d.Reconciler().Policy().Default.Spec.Weight == 2 })
	os.WriteFile(polFile, []byte("default: burstable\n"), 0o644)
	if err := cl.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	proctest.WaitFor(t, "re-classed burstable again", func() bool {
		ts := timeslices()
		return len(ts) == 4 && ts[0] == 2000 && ts[3] == 2000
	})
	procs, err := cl.Processes(ctx)
	if err != nil || len(procs) != 1 || procs[0].Class != "burstable" || procs[0].Groups[0].Interleave != tsg.LevelMedium.String() {
		t.Fatalf("processes %+v, %v", procs, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	gs := drv.Groups(100, 8)
	for i, g := range gs {
		want := uint64(1024)
		if i == 0 {
			want = 2048
		}
		if uint64(g.Timeslice) != want || tsg.Level(g.Interleave) != tsg.LevelMedium {
			t.Errorf("after stop, group %v: %dus %v, want %dus medium", g.Handle, uint64(g.Timeslice), tsg.Level(g.Interleave), want)
		}
	}
	if _, err := os.Stat(cfg.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("socket left behind: %v", err)
	}
	// The lock is free again.
	d2, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("restart after stop: %v", err)
	}
	d2.close()
	_ = policy.None
}
