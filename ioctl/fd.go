package ioctl

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// ControlDevicePath is the RM control node every client is created on.
const ControlDevicePath = "/dev/nvidiactl"

// Controller issues RM controls. *FD implements it over a real file; tests
// use internal/rmfake.
type Controller interface {
	ControlBytes(client, object Handle, cmd uint32, params []byte) error
}

// FD is an open /dev/nvidiactl file: ours, or a duplicate of another
// process's. RM binds every client to the open file that allocated it, so
// a duplicate made with pidfd_getfd (same open file) may control the
// target's clients while a fresh open may not.
type FD struct {
	fd   int
	name string
}

// OpenControl opens /dev/nvidiactl for our own use.
func OpenControl() (*FD, error) {
	fd, err := unix.Open(ControlDevicePath, unix.O_RDWR|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENXIO), errors.Is(err, unix.ENODEV):
		return nil, fmt.Errorf("open %s: %w", ControlDevicePath, ErrNoDriver)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return nil, fmt.Errorf("open %s: %w: %w", ControlDevicePath, ErrPermission, err)
	case err != nil:
		return nil, &os.PathError{Op: "open", Path: ControlDevicePath, Err: err}
	}
	return &FD{fd: fd, name: ControlDevicePath}, nil
}

// Attach duplicates file descriptor targetFD of process pid into this
// process with pidfd_open + pidfd_getfd. The kernel requires
// PTRACE_MODE_ATTACH_REALCREDS over the target (root, CAP_SYS_PTRACE, or
// same uid under a permissive Yama scope); a refusal is ErrPermission. The
// caller should check that the result is an NVIDIA control node before
// using it (see IsControlDevice).
func Attach(pid, targetFD int) (*FD, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ESRCH) {
			return nil, fmt.Errorf("pidfd_open %d: %w", pid, ErrNoSuchProcess)
		}
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	defer unix.Close(pidfd)
	fd, err := unix.PidfdGetfd(pidfd, targetFD, 0)
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w (needs root or CAP_SYS_PTRACE over the target): %w", pid, targetFD, ErrPermission, err)
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", pid, targetFD, ErrNoSuchProcess)
	case err != nil:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", pid, targetFD, err)
	}
	return &FD{fd: fd, name: fmt.Sprintf("pid %d fd %d", pid, targetFD)}, nil
}

// Fd returns the descriptor number in this process.
func (f *FD) Fd() int { return f.fd }

func (f *FD) String() string { return f.name }

// Close closes our descriptor; a duplicated target file stays open in its
// owner.
func (f *FD) Close() error {
	if f == nil || f.fd < 0 {
		return nil
	}
	err := unix.Close(f.fd)
	f.fd = -1
	return err
}

// IsControlDevice reports whether the file is /dev/nvidiactl (character
// device 195:255), whatever path it was opened through.
func (f *FD) IsControlDevice() (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(f.fd, &st); err != nil {
		return false, fmt.Errorf("fstat %s: %w", f.name, err)
	}
	return IsControlDeviceRdev(st.Mode, st.Rdev), nil
}

// NVIDIA's character devices: major 195; minor 255 is nvidiactl, minors
// 0..254 the GPUs (/dev/nvidiaN).
const (
	NV_MAJOR_DEVICE_NUMBER = 195
	NV_CONTROL_MINOR       = 255
)

// IsControlDeviceRdev reports whether a stat result (mode, rdev) is
// /dev/nvidiactl.
func IsControlDeviceRdev(mode uint32, rdev uint64) bool {
	return mode&unix.S_IFMT == unix.S_IFCHR &&
		unix.Major(rdev) == NV_MAJOR_DEVICE_NUMBER && unix.Minor(rdev) == NV_CONTROL_MINOR
}

// Alloc allocates an object with NV_ESC_RM_ALLOC (NVOS64 form). object 0
// lets RM choose the handle (that is how clients are allocated). It returns
// the new handle.
func (f *FD) Alloc(client, parent, object Handle, class uint32, params []byte) (Handle, error) {
	p := NVOS64_PARAMETERS{HRoot: client, HObjectParent: parent, HObjectNew: object, HClass: class}
	if err := f.rmAlloc(&p, params); err != nil {
		return 0, fmt.Errorf("alloc class %#x under %v/%v: %w", class, client, parent, err)
	}
	if err := NvStatus(p.Status).Err(fmt.Sprintf("alloc class %#x", class)); err != nil {
		return 0, err
	}
	return p.HObjectNew, nil
}

// Free frees an object (or a whole client: object == client) with
// NV_ESC_RM_FREE.
func (f *FD) Free(client, parent, object Handle) error {
	p := NVOS00_PARAMETERS{HRoot: client, HObjectParent: parent, HObjectOld: object}
	if err := f.ioctl(NV_ESC_RM_FREE, ptrOf(&p), sizeOf(&p)); err != nil {
		return fmt.Errorf("free %v/%v: %w", client, object, err)
	}
	return NvStatus(p.Status).Err(fmt.Sprintf("free %v", object))
}

// ControlBytes issues NV_ESC_RM_CONTROL with params as the parameter block.
// An errno failure and an RM status other than NV_OK are reported apart:
// the first wraps a syscall.Errno, the second is a *StatusError.
func (f *FD) ControlBytes(client, object Handle, cmd uint32, params []byte) error {
	p := NVOS54_PARAMETERS{HClient: client, HObject: object, Cmd: cmd, ParamsSize: uint32(len(params))}
	if err := f.rmControl(&p, params); err != nil {
		return fmt.Errorf("control %#x on %v/%v: %w", cmd, client, object, err)
	}
	return NvStatus(p.Status).Err(fmt.Sprintf("control %#x on %v/%v", cmd, client, object))
}

// DriverVersion asks the driver its version (NV_ESC_CHECK_VERSION_STR with
// NV_RM_API_VERSION_CMD_QUERY): the version of the module actually loaded,
// not of whatever user-space library is installed.
func (f *FD) DriverVersion() (DriverVersion, error) {
	p := NV_IOCTL_RM_API_VERSION{Cmd: NV_RM_API_VERSION_CMD_QUERY}
	if err := f.ioctl(NV_ESC_CHECK_VERSION_STR, ptrOf(&p), sizeOf(&p)); err != nil {
		return DriverVersion{}, fmt.Errorf("query driver version: %w", err)
	}
	if p.Reply != NV_RM_API_VERSION_REPLY_RECOGNIZED {
		return DriverVersion{}, fmt.Errorf("query driver version: driver did not recognise the request (reply %d)", p.Reply)
	}
	return ParseDriverVersion(cString(p.VersionString[:]))
}

func cString(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}
