package ctl_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/golden"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// defaults is what the driver and libcuda leave a replayed context's groups
// at: compute 2048 us, copy 1024 us, MEDIUM.
func checkDefaults(t *testing.T, d *rmfake.Driver, pid int) {
	t.Helper()
	for _, g := range d.Groups(pid, 8) {
		want := uint64(1024)
		if g.Handle == 0x5c000015 { // the compute group
			want = 2048
		}
		if uint64(g.Timeslice) != want || g.Interleave != tsg.LevelMedium {
			t.Errorf("pid %d group %v: %d us, level %d; want %d us, MEDIUM", pid, g.Handle, uint64(g.Timeslice), g.Interleave, want)
		}
	}
}

func TestReset(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		golden string
		pids   []int // reset
		kept   int   // left in class be
	}{
		{"one process", []string{"reset", "--pid", "4242"}, "reset", []int{4242}, 4343},
		{"every process", []string{"-o", "json", "reset", "--all"}, "reset-all-json", []int{4242, 4343}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, env, stdout, stderr := world(t)
			for _, pid := range []string{"4242", "4343"} {
				if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "class", "--pid", pid, "be"}); code != 0 {
					t.Fatalf("class be: exit %d: %s", code, stderr)
				}
			}
			stdout.Reset()
			if code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...)); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			golden.Check(t, tt.golden, stdout.Bytes())
			for _, pid := range tt.pids {
				checkDefaults(t, d, pid)
			}
			if tt.kept != 0 {
				for _, g := range d.Groups(tt.kept, 8) {
					if uint64(g.Timeslice) != 200 {
						t.Errorf("pid %d group %v changed to %d us", tt.kept, g.Handle, uint64(g.Timeslice))
					}
				}
			}
		})
	}
}

// A reset that fails on a copy group leaves the compute group, reset
// before it, as it was.
func TestResetAllOrNothing(t *testing.T) {
	d, env, _, stderr := world(t)
	if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "set-timeslice", "--pid", "4242", "300us"}); code != 0 {
		t.Fatalf("set-timeslice: %s", stderr)
	}
	d.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: 0x5c00005a, Status: ioctl.NV_ERR_INVALID_STATE})
	code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "reset", "--pid", "4242"})
	if code != ctl.ExitFailure {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	if !bytes.Contains(stderr.Bytes(), []byte("the 1 groups reset before were restored")) {
		t.Errorf("stderr does not say the compute group was restored: %s", stderr)
	}
	for _, g := range d.Groups(4242, 8) {
		if uint64(g.Timeslice) != 300 {
			t.Errorf("group %v left at %d us", g.Handle, uint64(g.Timeslice))
		}
	}
}

func TestResetErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		deny bool
		code int
		want string
	}{
		{"neither", []string{"reset"}, false, ctl.ExitUsage, "reset needs one of --pid and --all"},
		{"both", []string{"reset", "--pid", "4242", "--all"}, false, ctl.ExitUsage, "reset needs one of --pid and --all"},
		{"no such process", []string{"reset", "--pid", "99999"}, false, ctl.ExitNoProcess, "99999"},
		// One process refuses attaching: the other is still reset, and
		// the exit code says why the first was not.
		{"all with one refused", []string{"reset", "--all"}, true, ctl.ExitPermission, "1 processes could not be examined"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, env, _, stderr := world(t)
			if tt.deny {
				p, _, err := d.ReplayFile(4444, tracePath)
				if err != nil {
					t.Fatal(err)
				}
				p.Deny = true
			}
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code || !bytes.Contains(stderr.Bytes(), []byte(tt.want)) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tt.code, tt.want)
			}
			if tt.deny {
				checkDefaults(t, d, 4242)
				checkDefaults(t, d, 4343)
			}
		})
	}
}
