package tsg_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestAttachDiscoverAll: every process holding the control node is
// examined; one without a context counts as examined, one the caller may
// not inspect as denied, and each process with groups is listed in pid
// order.
func TestAttachDiscoverAll(t *testing.T) {
	tests := []struct {
		name     string
		deny     []int
		pids     []int
		examined int
		denied   int
	}{
		{"root", nil, []int{100, 200}, 3, 0},
		{"one denied", []int{200}, []int{100}, 2, 1},
		{"all denied", []int{100, 200, 300}, nil, 0, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTraced(t, 100)
			if _, _, err := d.ReplayFile(200, tracePath); err != nil {
				t.Fatal(err)
			}
			d.OpenControlAt(d.NewProc(300), 3) // nvidia-smi: no context
			for _, pid := range tt.deny {
				d.Proc(pid).Deny = true
			}
			l, err := tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}).DiscoverAll(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			var pids []int
			for _, p := range l.Processes {
				pids = append(pids, p.PID)
				if len(p.Groups) != 4 {
					t.Errorf("pid %d: %d groups", p.PID, len(p.Groups))
				}
			}
			if !slices.Equal(pids, tt.pids) || l.Examined != tt.examined || l.Denied != tt.denied || len(l.Failed) != 0 {
				t.Errorf("listed %v, examined %d, denied %d, failed %v; want %v, %d, %d",
					pids, l.Examined, l.Denied, l.Failed, tt.pids, tt.examined, tt.denied)
			}
		})
	}
}

// exitOnOpen is a host whose process exits as soon as it is opened: it
// was listed, and is gone before its files are.
type exitOnOpen struct {
	tsg.Host
	d   *rmfake.Driver
	pid int
}

func (h exitOnOpen) Open(pid int) (tsg.Target, error) {
	t, err := h.Host.Open(pid)
	if pid == h.pid {
		h.d.Exit(pid)
	}
	return t, err
}

func TestAttachDiscoverAllSkipsExited(t *testing.T) {
	d := newTraced(t, 100)
	if _, _, err := d.ReplayFile(200, tracePath); err != nil {
		t.Fatal(err)
	}
	l, err := tsg.NewAttachSource(exitOnOpen{d.Host(), d, 100}, tsg.ScanOptions{}).DiscoverAll(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if len(l.Processes) != 1 || l.Processes[0].PID != 200 || l.Examined != 1 || len(l.Failed) != 0 {
		t.Errorf("listing %+v: want pid 200 alone", l)
	}
}

// TestAttachTargetHeldAcrossPIDReuse: the target is opened (a pidfd)
// before its files are listed. If the process exits and its pid is given
// to another process in between, the listing is refused as the exited
// process's, not read from the new one (issue 14, defect 10).
func TestAttachTargetHeldAcrossPIDReuse(t *testing.T) {
	d := newTraced(t, 100)
	target, err := d.Host().Open(100)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	d.Exit(100)
	if _, _, err := d.ReplayFile(100, tracePath); err != nil { // pid reused
		t.Fatal(err)
	}
	if _, err := target.ControlFDs(); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("ControlFDs after pid reuse = %v, want ErrNoSuchProcess", err)
	}
	if _, err := target.Attach(8); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("Attach after pid reuse = %v, want ErrNoSuchProcess", err)
	}
}

// TestUnsupportedDriverIsTyped: the library refuses an unknown driver with
// a typed error that names no CLI flag; the CLI says which one overrides.
func TestUnsupportedDriverIsTyped(t *testing.T) {
	d := newTraced(t, 100, rmfake.WithVersion(ioctl.DriverVersion{Major: 610, Minor: 1}))
	d.EnableGpreemptEscapes(root)
	sources := []tsg.Source{
		tsg.NewAttachSource(d.Host(), tsg.ScanOptions{}),
		escapeSource(t, d, tsg.EscapeOptions{}),
	}
	for _, s := range sources {
		_, err := s.Discover(context.Background(), 100)
		var unsupported *ioctl.UnsupportedDriverError
		if !errors.As(err, &unsupported) || !errors.Is(err, ioctl.ErrUnsupportedDriver) {
			t.Errorf("%s: %v, want an *ioctl.UnsupportedDriverError", s.Name(), err)
			continue
		}
		if unsupported.Version.Major != 610 || unsupported.Nearest != "575" {
			t.Errorf("%s: %+v", s.Name(), unsupported)
		}
		if strings.Contains(err.Error(), "--") {
			t.Errorf("%s: library error names a flag: %v", s.Name(), err)
		}
	}
}

// TestAttachGPUIDBestEffort: the GPU a group runs on is read from its
// device's subdevice; where RM refuses that control, discovery still
// succeeds with the GPU unknown (0).
func TestAttachGPUIDBestEffort(t *testing.T) {
	tests := []struct {
		name  string
		fault *rmfake.Fault
		want  uint32
	}{
		{"answered", nil, rmfake.GPUID},
		{"refused", &rmfake.Fault{Cmd: ioctl.NV2080_CTRL_CMD_GPU_GET_ID, Status: ioctl.NV_ERR_NOT_SUPPORTED}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newTraced(t, 100)
			if tt.fault != nil {
				d.AddFault(tt.fault)
			}
			p := discover(t, d, 100, tsg.ScanOptions{})
			for _, g := range p.Groups {
				if g.GPUID != tt.want {
					t.Errorf("group %v: GPU %#x, want %#x", g.Handle, g.GPUID, tt.want)
				}
			}
			// One subdevice lookup per device, not per group.
			if n := d.Controls(ioctl.NV2080_CTRL_CMD_GPU_GET_ID); n != 1 {
				t.Errorf("GPU_GET_ID issued %d times for one device", n)
			}
		})
	}
}
