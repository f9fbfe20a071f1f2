package ctl_test

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/golden"
	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
)

var tracePath = filepath.Join("..", "..", "testdata", "h100-580.159.04-alloc-sequence.txt")

// world is a fake machine: the real libcuda trace replayed as pid 4242
// (python3) and pid 4343 (a second copy), and an H100 in NVML.
func world(tb testing.TB, opts ...rmfake.Option) (*rmfake.Driver, ctl.Env, *bytes.Buffer, *bytes.Buffer) {
	tb.Helper()
	d := rmfake.New(opts...)
	for _, pid := range []int{4242, 4343} {
		if _, _, err := d.ReplayFile(pid, tracePath); err != nil {
			tb.Fatal(err)
		}
	}
	// nvidia-smi: control file open, no client with a context.
	d.OpenControlAt(d.NewProc(5000), 3)
	var stdout, stderr bytes.Buffer
	env := ctl.Env{
		Host: d.Host(),
		GPU: func(*slog.Logger) (gpu.Info, error) {
			return &gpu.Mock{
				DriverInfo: gpu.DriverInfo{Version: "580.159.04", CUDADriverVersion: 13000},
				DeviceList: []gpu.Device{{
					Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-6b4d0c5e-0000-0000-0000-000000000000",
					PCIBusID: "00000000:00:06.0", MemoryTotal: 81559 << 20, MemoryUsed: 1024 << 20,
					Processes: []gpu.Process{{PID: 4242, UsedMemory: 512 << 20, Name: "python3"}},
				}},
			}, nil
		},
		Comm:   func(pid int) string { return map[int]string{4242: "python3", 4343: "lc-server"}[pid] },
		Stdout: &stdout,
		Stderr: &stderr,
	}
	return d, env, &stdout, &stderr
}

func TestGolden(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
	}{
		{"ps", []string{"ps"}, 0},
		{"ps-json", []string{"-o", "json", "ps", "--pid", "4242", "--stats"}, 0},
		{"devices", []string{"devices"}, 0},
		{"devices-json", []string{"-o", "json", "devices"}, 0},
		{"get-timeslice-compute", []string{"get-timeslice", "--pid", "4242", "--compute-only"}, 0},
		{"set-timeslice-tsg", []string{"set-timeslice", "--pid", "4242", "--tsg", "0x5c00003e", "200us"}, 0},
		{"set-interleave", []string{"set-interleave", "--pid", "4242", "high"}, 0},
		{"class-be", []string{"class", "--pid", "4242", "be"}, 0},
		{"class-be-1us-json", []string{"-o", "json", "class", "--pid", "4242", "--be-timeslice", "1us", "be"}, 0},
		{"class-lc", []string{"class", "--pid", "4343", "lc"}, 0},
		{"class-burstable", []string{"class", "--pid", "4242", "burstable"}, 0},
		{"class-be-weight-3", []string{"class", "--pid", "4242", "--weight", "3", "be"}, 0},
		{"class-be-weight-3-no-overhead", []string{"class", "--pid", "4242", "--weight", "3", "--slice-overhead", "0", "be"}, 0},
		{"preempt", []string{"preempt", "--pid", "4242", "--compute-only"}, 0},
		{"suspend", []string{"suspend", "--pid", "4242"}, 0},
		{"resume-json", []string{"-o", "json", "resume", "--pid", "4242", "--tsg", "0x5c000015"}, 0},
		// Help only when asked for, on stdout.
		{"help-set-timeslice", []string{"set-timeslice", "--help"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env, stdout, stderr := world(t)
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr)
			}
			golden.Check(t, tt.name, stdout.Bytes())
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		opts []rmfake.Option
		code int
	}{
		{"no such pid", []string{"ps", "--pid", "99999"}, nil, ctl.ExitNoProcess},
		{"no gpu context", []string{"get-timeslice", "--pid", "5000"}, nil, ctl.ExitNoGPUContext},
		{"missing pid", []string{"get-timeslice"}, nil, ctl.ExitUsage},
		{"bad pid", []string{"get-timeslice", "--pid", "-3"}, nil, ctl.ExitUsage},
		{"bare number", []string{"set-timeslice", "--pid", "4242", "200"}, nil, ctl.ExitUsage},
		{"too long", []string{"set-timeslice", "--pid", "4242", "10s"}, nil, ctl.ExitUsage},
		{"too short", []string{"set-timeslice", "--pid", "4242", "100ns"}, nil, ctl.ExitUsage},
		{"no duration", []string{"set-timeslice", "--pid", "4242"}, nil, ctl.ExitUsage},
		{"bad tsg", []string{"get-timeslice", "--pid", "4242", "--tsg", "zz"}, nil, ctl.ExitUsage},
		{"unknown tsg", []string{"get-timeslice", "--pid", "4242", "--tsg", "0x1234"}, nil, ctl.ExitUsage},
		{"tsg and compute-only", []string{"get-timeslice", "--pid", "4242", "--tsg", "0x5c000015", "--compute-only"}, nil, ctl.ExitUsage},
		{"bad class", []string{"class", "--pid", "4242", "urgent"}, nil, ctl.ExitUsage},
		{"bad be timeslice", []string{"class", "--pid", "4242", "--be-timeslice", "0us", "be"}, nil, ctl.ExitUsage},
		{"bad be timeslice with lc", []string{"class", "--pid", "4242", "--be-timeslice", "0us", "lc"}, nil, ctl.ExitUsage},
		{"bad weight", []string{"class", "--pid", "4242", "--weight", "0", "be"}, nil, ctl.ExitUsage},
		{"bad slice overhead", []string{"class", "--pid", "4242", "--slice-overhead", "5ms", "be"}, nil, ctl.ExitUsage},
		{"slice overhead without a unit", []string{"class", "--pid", "4242", "--slice-overhead", "20", "be"}, nil, ctl.ExitUsage},
		{"weight beyond the timeslice range", []string{"class", "--pid", "4242", "--weight", "2", "lc"}, nil, ctl.ExitUsage},
		{"bad level", []string{"set-interleave", "--pid", "4242", "max"}, nil, ctl.ExitUsage},
		{"bad output", []string{"-o", "yaml", "ps"}, nil, ctl.ExitUsage},
		{"preempt timeout", []string{"preempt", "--pid", "4242", "--timeout", "3s"}, nil, ctl.ExitUsage},
		// Checked before the target is looked at: the pid does not exist.
		{"preempt timeout before attaching", []string{"preempt", "--pid", "99999", "--timeout", "-1ms"}, nil, ctl.ExitUsage},
		{"unknown flag", []string{"get-timeslice", "--pid", "4242", "--bogus"}, nil, ctl.ExitUsage},
		{"bad flag value", []string{"ps", "--pid", "x"}, nil, ctl.ExitUsage},
		{"unknown global flag", []string{"--bogus", "ps"}, nil, ctl.ExitUsage},
		{"unknown command", []string{"nosuch"}, nil, ctl.ExitUsage},
		{"unknown help topic", []string{"help", "nosuch"}, nil, ctl.ExitUsage},
		{"unknown trace subcommand", []string{"trace", "nosuch"}, nil, ctl.ExitUsage},
		{"trace without subcommand", []string{"trace"}, nil, ctl.ExitUsage},
		{"unknown trace flag", []string{"trace", "rpc", "--bogus"}, nil, ctl.ExitUsage},
		{"extra argument", []string{"ps", "extra"}, nil, ctl.ExitUsage},
		{"extra argument to a group command", []string{"suspend", "--pid", "4242", "now"}, nil, ctl.ExitUsage},
		{"extra argument to a trace command", []string{"trace", "tsg", "extra"}, nil, ctl.ExitUsage},
		{"two durations", []string{"set-timeslice", "--pid", "4242", "1ms", "2ms"}, nil, ctl.ExitUsage},
		{"zero handle gap", []string{"--handle-gap", "0", "ps"}, nil, ctl.ExitUsage},
		{"negative handle gap", []string{"--handle-gap", "-5", "ps"}, nil, ctl.ExitUsage},
		{"bad log level", []string{"--log-level", "bogus", "ps"}, nil, ctl.ExitUsage},
		{"unsupported driver", []string{"ps", "--pid", "4242"}, []rmfake.Option{rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 2})}, ctl.ExitUnsupported},
		{"unsupported driver allowed", []string{"--allow-unsupported-driver", "ps", "--pid", "4242"}, []rmfake.Option{rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 2})}, ctl.ExitOK},
		{"interleave needs privilege", []string{"class", "--pid", "4242", "be"}, []rmfake.Option{rmfake.WithUnprivilegedCaller()}, ctl.ExitPermission},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, env, stdout, stderr := world(t, tt.opts...)
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, stderr)
			}
			if code != 0 && !bytes.HasPrefix(stderr.Bytes(), []byte("gpreemptctl: ")) {
				t.Errorf("stderr %q does not start with 'gpreemptctl: '", stderr)
			}
			// A usage error is one line naming the problem, and no help on
			// stdout, where it would break a -o json pipeline.
			if code == ctl.ExitUsage && (stdout.Len() != 0 || bytes.Count(stderr.Bytes(), []byte("\n")) != 1) {
				t.Errorf("usage error printed stdout %q, stderr %q", stdout, stderr)
			}
		})
	}
}

// TestFailedClassRestores: a class change that fails part way restores
// what the driver reported before and says exactly what it could not
// restore. On GSP-RM (the fake's default, like the H100) the previous
// interleave level is not reported: those groups stay at the new level and
// stderr says so instead of claiming a restore (issue 14, defect 5).
func TestFailedClassRestores(t *testing.T) {
	tests := []struct {
		name       string
		opts       []rmfake.Option
		levelsKept bool // levels back to what they were
		say        string
	}{
		{"GSP: level not readable", nil, false,
			"timeslice of 4 groups restored; interleave level of 3 groups left at low: the driver does not report the previous level"},
		{"level readable", []rmfake.Option{rmfake.WithReadableInterleave()}, true,
			"timeslice of 4 groups restored; interleave level of 3 groups restored"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, env, _, stderr := world(t, tt.opts...)
			before := d.Groups(4242, 8)
			d.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, Object: 0x5c00005a, Status: ioctl.NV_ERR_INVALID_STATE})
			code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "class", "--pid", "4242", "be"})
			if code != ctl.ExitFailure {
				t.Fatalf("exit %d, stderr %s", code, stderr)
			}
			if !bytes.Contains(stderr.Bytes(), []byte(tt.say)) {
				t.Errorf("stderr does not say %q:\n%s", tt.say, stderr)
			}
			after := d.Groups(4242, 8)
			for i := range before {
				if before[i].Timeslice != after[i].Timeslice {
					t.Errorf("group %v: timeslice %v -> %v", before[i].Handle, before[i].Timeslice, after[i].Timeslice)
				}
				// The last group's SET failed: its level never changed.
				wantKept := tt.levelsKept || before[i].Handle == 0x5c00005a
				if kept := before[i].Interleave == after[i].Interleave; kept != wantKept {
					t.Errorf("group %v: level %v -> %v", before[i].Handle, before[i].Interleave, after[i].Interleave)
				}
			}
		})
	}
}

func TestNoDriver(t *testing.T) {
	_, env, _, stderr := world(t)
	env.GPU = func(*slog.Logger) (gpu.Info, error) { return nil, gpu.ErrNoDriver }
	if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "devices"}); code != ctl.ExitNoDriver {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
}

func TestSourceFlag(t *testing.T) {
	tests := []struct {
		name    string
		patched bool
		args    []string
		code    int
		escapes bool // the SET escape must have been used
	}{
		{"auto on a stock driver attaches", false, []string{"--source", "auto", "class", "--pid", "4242", "be"}, ctl.ExitOK, false},
		{"escape on a stock driver", false, []string{"--source", "escape", "ps", "--pid", "4242"}, ctl.ExitUnsupported, false},
		{"auto on a patched driver uses the escapes", true, []string{"class", "--pid", "4242", "--be-timeslice", "1us", "be"}, ctl.ExitOK, true},
		{"attach on a patched driver", true, []string{"--source", "attach", "class", "--pid", "4242", "be"}, ctl.ExitOK, false},
		{"bad source", false, []string{"--source", "magic", "ps"}, ctl.ExitUsage, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, env, _, stderr := world(t)
			if tt.patched {
				d.EnableGpreemptEscapes(rmfake.EscapeConfig{CallerPrivileged: true}) // root
			}
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr %s", code, tt.code, stderr)
			}
			if used := d.Escapes(ioctl.NV_ESC_RM_GPREEMPT_SET_TSG) > 0; used != tt.escapes {
				t.Errorf("SET escape used = %v, want %v", used, tt.escapes)
			}
			if code == ctl.ExitOK && tt.args[len(tt.args)-1] == "be" {
				for _, g := range d.Groups(4242, 8) {
					if g.Timeslice != 200 && g.Timeslice != 1 {
						t.Errorf("group %v left at %v", g.Handle, g.Timeslice)
					}
				}
			}
		})
	}
}
