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
	fd, err := openFile(ControlDevicePath)
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
// using it (see IsControlDevice). A caller that also lists the target's
// files should open the Pidfd itself first (OpenPidfd): a pid may be reused
// between the listing and the attach, a pidfd may not.
func Attach(pid, targetFD int) (*FD, error) {
	p, err := OpenPidfd(pid)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	return p.Getfd(targetFD)
}

// Pidfd is a handle on one process (pidfd_open). Unlike its pid, it keeps
// naming that process after it exits, so what is learned about "pid N"
// between opening it and Alive belongs to the process it was opened on.
type Pidfd struct {
	fd, pid int
}

// OpenPidfd opens a handle on process pid: ErrNoSuchProcess if there is
// none.
func OpenPidfd(pid int) (*Pidfd, error) {
	fd, err := pidfdOpen(pid)
	switch {
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, ErrNoSuchProcess)
	case err != nil:
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, err)
	}
	return &Pidfd{fd: fd, pid: pid}, nil
}

// PID is the process's number in the caller's pid namespace.
func (p *Pidfd) PID() int { return p.pid }

// Alive reports ErrNoSuchProcess once the process has exited (its pid may
// name another process by then). It sends no signal (pidfd_send_signal 0)
// and needs no rights over the process.
func (p *Pidfd) Alive() error {
	err := pidfdSignal0(p.fd)
	switch {
	case err == nil, errors.Is(err, unix.EPERM):
		// EPERM: it exists, we just may not signal it.
		return nil
	case errors.Is(err, unix.ESRCH):
		return fmt.Errorf("pid %d: %w", p.pid, ErrNoSuchProcess)
	}
	return fmt.Errorf("pidfd_send_signal %d: %w", p.pid, err)
}

// Getfd duplicates the process's descriptor targetFD (pidfd_getfd); see
// Attach for the rights it needs.
func (p *Pidfd) Getfd(targetFD int) (*FD, error) {
	fd, err := pidfdGetfd(p.fd, targetFD)
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w (needs root or CAP_SYS_PTRACE over the target): %w", p.pid, targetFD, ErrPermission, err)
	case errors.Is(err, unix.ESRCH):
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", p.pid, targetFD, ErrNoSuchProcess)
	case err != nil:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", p.pid, targetFD, err)
	}
	return &FD{fd: fd, name: fmt.Sprintf("pid %d fd %d", p.pid, targetFD)}, nil
}

// Close releases the handle.
func (p *Pidfd) Close() error {
	if p == nil || p.fd < 0 {
		return nil
	}
	err := closeFile(p.fd)
	p.fd = -1
	return err
}

// IsControlDevicePath reports whether path (followed if a link, as
// /proc/PID/fd/N is) is /dev/nvidiactl, whatever it is named.
func IsControlDevicePath(path string) (bool, error) {
	mode, rdev, err := statRdev(path)
	if err != nil {
		return false, err
	}
	return IsControlDeviceRdev(mode, rdev), nil
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
	err := closeFile(f.fd)
	f.fd = -1
	return err
}

// IsControlDevice reports whether the file is /dev/nvidiactl (character
// device 195:255), whatever path it was opened through.
func (f *FD) IsControlDevice() (bool, error) {
	mode, rdev, err := fstatRdev(f.fd)
	if err != nil {
		return false, fmt.Errorf("fstat %s: %w", f.name, err)
	}
	return IsControlDeviceRdev(mode, rdev), nil
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

// DeviceFile is what stat says of a file a descriptor refers to: which
// device node (Rdev) and which inode of which filesystem (Dev, Ino), so
// that a descriptor seen once can later be checked to still refer to the
// same open node.
type DeviceFile struct {
	Mode           uint32
	Rdev, Dev, Ino uint64
}

// StatDeviceFile stats path (followed if a link, as /proc/PID/fd/N is).
func StatDeviceFile(path string) (DeviceFile, error) { return statDeviceFile(path) }

// IsNVIDIA reports whether the file is one of NVIDIA's character devices
// (major 195): the control node or a GPU's /dev/nvidiaN.
func (d DeviceFile) IsNVIDIA() bool {
	return d.Mode&unix.S_IFMT == unix.S_IFCHR && unix.Major(d.Rdev) == NV_MAJOR_DEVICE_NUMBER
}

// IsControl reports whether the file is /dev/nvidiactl (195:255).
func (d DeviceFile) IsControl() bool { return IsControlDeviceRdev(d.Mode, d.Rdev) }

// GPUMinor is N of a /dev/nvidiaN file (195:N, N < 255); ok is false for
// any other file.
func (d DeviceFile) GPUMinor() (n int, ok bool) {
	if !d.IsNVIDIA() || d.IsControl() {
		return 0, false
	}
	return int(unix.Minor(d.Rdev)), true
}
