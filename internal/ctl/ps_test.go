package ctl_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// noDriver is a machine without the NVIDIA driver: no control node to
// open, no process holding one.
type noDriver struct{ tsg.Host }

func (noDriver) OpenControl() (tsg.Device, error) {
	return nil, ioctl.ErrNoDriver
}

func (noDriver) Processes() ([]int, int, error) { return nil, 0, nil }

// TestPsFirstTenMinutes is what a new user meets (issue 14): ps says what
// is wrong on stderr with the documented exit code, keeps stdout for the
// listing (valid JSON with -o json), and counts what it could not see.
func TestPsFirstTenMinutes(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		noDrv   bool
		deny    []int // processes the caller may not examine
		code    int
		pids    []int  // listed, with -o json
		stderr  string // must appear on stderr
		nothing bool   // nothing on stdout
	}{
		{"no driver", []string{"ps"}, true, nil, ctl.ExitNoDriver, nil, "NVIDIA driver not found", true},
		{"no driver json", []string{"-o", "json", "ps"}, true, nil, ctl.ExitNoDriver, nil, "NVIDIA driver not found", true},
		{"no driver escape source", []string{"--source", "escape", "ps"}, true, nil, ctl.ExitNoDriver, nil, "NVIDIA driver not found", true},
		{"root sees all", []string{"-o", "json", "ps"}, false, nil, ctl.ExitOK, []int{4242, 4343}, "", false},
		{"non-root, some readable", []string{"-o", "json", "ps"}, false, []int{4343}, ctl.ExitOK, []int{4242},
			"note: insufficient rights: 1 processes not examined (run as root or with CAP_SYS_PTRACE to see them)", false},
		{"non-root, none readable", []string{"-o", "json", "ps"}, false, []int{4242, 4343, 5000}, ctl.ExitPermission, nil,
			"no process could be examined: insufficient rights: 3 processes not examined", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, env, stdout, stderr := world(t)
			if tt.noDrv {
				env.Host = noDriver{env.Host}
			}
			for _, pid := range tt.deny {
				if p := d.Proc(pid); p != nil {
					p.Deny = true
				}
			}
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q does not say %q", stderr, tt.stderr)
			}
			if tt.nothing {
				if stdout.Len() != 0 {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				return
			}
			if tt.args[1] != "json" {
				return
			}
			var got []struct {
				PID int `json:"pid"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not JSON: %v\n%s", err, stdout)
			}
			var pids []int
			for _, p := range got {
				pids = append(pids, p.PID)
			}
			if !slices.Equal(pids, tt.pids) {
				t.Errorf("listed %v, want %v", pids, tt.pids)
			}
		})
	}
}

// TestPsSourcesAgree: the listing and ps --pid show the same groups, with
// the escape source as with the attach source (issue 14).
func TestPsSourcesAgree(t *testing.T) {
	for _, source := range []string{"attach", "escape"} {
		t.Run(source, func(t *testing.T) {
			run := func(args ...string) []tsg.Group {
				d, env, stdout, stderr := world(t)
				d.EnableGpreemptEscapes(rmfake.EscapeConfig{CallerPrivileged: true})
				code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl", "--source", source, "-o", "json"}, args...))
				if code != ctl.ExitOK {
					t.Fatalf("%v: exit %d; stderr %s", args, code, stderr)
				}
				var procs []struct {
					Groups []tsg.Group `json:"groups"`
				}
				if err := json.Unmarshal(stdout.Bytes(), &procs); err != nil {
					t.Fatalf("%v: %v", args, err)
				}
				var gs []tsg.Group
				for _, p := range procs {
					gs = append(gs, p.Groups...)
				}
				return gs
			}
			var all []tsg.Group
			for _, g := range run("ps") {
				if g.PID == 4242 {
					all = append(all, g)
				}
			}
			one := run("ps", "--pid", "4242")
			if len(all) != 4 || len(all) != len(one) {
				t.Fatalf("ps lists %d groups of 4242, ps --pid %d", len(all), len(one))
			}
			for i := range all {
				if all[i] != one[i] {
					t.Errorf("group %d: ps %+v, ps --pid %+v", i, all[i], one[i])
				}
			}
		})
	}
}

// TestUnsupportedDriverNamesTheFlag: the library's refusal is typed and
// names no flag; gpreemptctl says which flag overrides it, once.
func TestUnsupportedDriverNamesTheFlag(t *testing.T) {
	for _, args := range [][]string{{"ps", "--pid", "4242"}, {"--source", "attach", "ps"}} {
		_, env, _, stderr := world(t, rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 1}))
		code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, args...))
		if code != ctl.ExitUnsupported {
			t.Fatalf("%v: exit %d; stderr %s", args, code, stderr)
		}
		if n := strings.Count(stderr.String(), "--allow-unsupported-driver"); n != 1 {
			t.Errorf("%v: stderr names the flag %d times: %s", args, n, stderr)
		}
		_, env, _, stderr = world(t, rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 1}))
		if code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl", "--allow-unsupported-driver"}, args...)); code != ctl.ExitOK {
			t.Errorf("%v with --allow-unsupported-driver: exit %d; stderr %s", args, code, stderr)
		}
	}
}

// TestTargetExitsDuringChange: with the escape source, a target that exits
// in the middle of a class change is reported gone, with the no-such-process
// exit code; it used to be "restoring also failed: NV_ERR_INVALID_CLIENT"
// and exit 1 (issue 14, defect 10).
func TestTargetExitsDuringChange(t *testing.T) {
	d, env, _, stderr := world(t)
	d.EnableGpreemptEscapes(rmfake.EscapeConfig{CallerPrivileged: true})
	env.Host = d.ExitAfterSet(env.Host, 4242, 2)
	code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "--source", "escape", "class", "--pid", "4242", "be"})
	if code != ctl.ExitNoProcess {
		t.Fatalf("exit %d, want %d; stderr %s", code, ctl.ExitNoProcess, stderr)
	}
	for _, bad := range []string{"also failed", "NV_ERR_INVALID_CLIENT"} {
		if strings.Contains(stderr.String(), bad) {
			t.Errorf("stderr says %q: %s", bad, stderr)
		}
	}
	if !strings.Contains(stderr.String(), "pid 4242 exited") {
		t.Errorf("stderr does not say the process exited: %s", stderr)
	}
}

// TestPsPidErrorsAgree: both sources give the same exit code for a pid that
// does not exist and for one without a GPU context.
func TestPsPidErrorsAgree(t *testing.T) {
	for _, source := range []string{"attach", "escape"} {
		for _, tt := range []struct {
			pid  string
			code int
		}{{"99999", ctl.ExitNoProcess}, {"5000", ctl.ExitNoGPUContext}} {
			d, env, _, stderr := world(t)
			d.EnableGpreemptEscapes(rmfake.EscapeConfig{CallerPrivileged: true})
			if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "--source", source, "ps", "--pid", tt.pid}); code != tt.code {
				t.Errorf("--source %s ps --pid %s: exit %d, want %d; stderr %s", source, tt.pid, code, tt.code, stderr)
			}
		}
	}
}
