package ioctl

import "errors"

// Sentinel errors for the ways reaching the driver can fail before RM says
// anything. RM's own refusals are NvStatus values (see nvstatus.go); errno
// failures of the ioctl itself are wrapped syscall.Errno values. The three
// kinds are kept apart so callers can tell "the driver said no" from "the
// kernel said no".
var (
	// ErrNoDriver: /dev/nvidiactl does not exist or cannot be opened.
	ErrNoDriver = errors.New("NVIDIA driver not found (no /dev/nvidiactl)")
	// ErrNoSuchProcess: the target pid does not exist (or has exited).
	ErrNoSuchProcess = errors.New("no such process")
	// ErrPermission: the caller lacks the rights the operation needs
	// (ptrace-level access to another process, or the device node's mode).
	ErrPermission = errors.New("insufficient rights")
	// ErrUnsupportedDriver: the running driver's version has no known ABI.
	ErrUnsupportedDriver = errors.New("driver version without a known ABI")
)
