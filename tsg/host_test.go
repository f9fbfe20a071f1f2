package tsg_test

import (
	"errors"
	"os"
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

func TestProcHost(t *testing.T) {
	h := tsg.ProcHost{}
	fds, err := h.ControlFDs(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if _, statErr := os.Stat(ioctl.ControlDevicePath); statErr != nil && len(fds) != 0 {
		t.Errorf("this process has no %s open, ControlFDs says %v", ioctl.ControlDevicePath, fds)
	}
	if _, err := h.ControlFDs(1<<22 + 12345); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("ControlFDs of a pid that cannot exist = %v, want ErrNoSuchProcess", err)
	}
	if _, err := (tsg.ProcHost{Root: t.TempDir()}).Processes(); err != nil {
		t.Errorf("Processes on an empty procfs: %v", err)
	}
}
