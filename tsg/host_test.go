package tsg_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

func TestProcHost(t *testing.T) {
	h := tsg.ProcHost{}
	self, err := h.Open(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	defer self.Close()
	fds, err := self.ControlFDs()
	if err != nil {
		t.Fatal(err)
	}
	if _, statErr := os.Stat(ioctl.ControlDevicePath); statErr != nil && len(fds) != 0 {
		t.Errorf("this process has no %s open, ControlFDs says %v", ioctl.ControlDevicePath, fds)
	}
	if _, err := h.Open(1<<22 + 12345); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("Open of a pid that cannot exist = %v, want ErrNoSuchProcess", err)
	}
	if pids, denied, err := (tsg.ProcHost{Root: t.TempDir()}).Processes(); err != nil || len(pids) != 0 || denied != 0 {
		t.Errorf("Processes on an empty procfs: %v, %d denied, %v", pids, denied, err)
	}
}

// TestProcHostTargetOutlivesPID: the target is held by a pidfd taken
// before anything is listed. Once the process has exited (and been
// reaped, so its pid is free for reuse), listing and attaching through the
// target say the process is gone instead of reading whatever process has
// the number now (issue 14, defect 10).
func TestProcHostTargetOutlivesPID(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Skipf("cannot start a child process: %v", err)
	}
	target, err := tsg.ProcHost{}.Open(cmd.Process.Pid)
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	defer target.Close()
	if _, err := target.ControlFDs(); err != nil {
		t.Errorf("ControlFDs of a live child: %v", err)
	}
	cmd.Process.Kill()
	cmd.Wait()
	if _, err := target.ControlFDs(); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("ControlFDs after the child was reaped = %v, want ErrNoSuchProcess", err)
	}
	if _, err := target.Attach(0); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("Attach after the child was reaped = %v, want ErrNoSuchProcess", err)
	}
}
