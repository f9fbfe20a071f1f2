package tsg

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Device is an open /dev/nvidiactl file as discovery and control use it.
// *ioctl.FD implements it; internal/rmfake provides a faithful fake.
type Device interface {
	ioctl.Controller
	Alloc(client, parent, object ioctl.Handle, class uint32, params []byte) (ioctl.Handle, error)
	Free(client, parent, object ioctl.Handle) error
	DriverVersion() (ioctl.DriverVersion, error)
	Close() error
}

// Host is the operating system as the attach source sees it: the control
// files of a process, a way to duplicate one, and a file of our own.
type Host interface {
	// ControlFDs lists the descriptors of pid that refer to
	// /dev/nvidiactl, in ascending order. ioctl.ErrNoSuchProcess if pid
	// does not exist, ioctl.ErrPermission if its fds cannot be inspected.
	ControlFDs(pid int) ([]int, error)
	// Attach duplicates descriptor fd of pid.
	Attach(pid, fd int) (Device, error)
	// OpenControl opens a /dev/nvidiactl file of our own.
	OpenControl() (Device, error)
	// Processes lists every pid that has /dev/nvidiactl open.
	Processes() ([]int, error)
}

// ProcHost is the real Host: procfs for listing, pidfd_getfd for attaching.
type ProcHost struct {
	// Root is the procfs mount, "/proc" unless set.
	Root string
}

func (h ProcHost) root() string {
	if h.Root == "" {
		return "/proc"
	}
	return h.Root
}

// ControlFDs stats every /proc/PID/fd/N (which follows the link to the
// open file, wherever it was opened from, so a container's bind-mounted
// node counts too) and keeps the character devices 195:255.
func (h ProcHost) ControlFDs(pid int) ([]int, error) {
	dir := filepath.Join(h.root(), strconv.Itoa(pid), "fd")
	entries, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	case errors.Is(err, fs.ErrPermission):
		return nil, fmt.Errorf("pid %d: list fds: %w: %w", pid, ioctl.ErrPermission, err)
	case err != nil:
		return nil, fmt.Errorf("pid %d: list fds: %w", pid, err)
	}
	var fds []int
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(dir, e.Name()), &st); err != nil {
			// Closed since ReadDir, or a socket/anon inode we may not
			// stat: neither is the control node.
			continue
		}
		if ioctl.IsControlDeviceRdev(st.Mode, st.Rdev) {
			fds = append(fds, n)
		}
	}
	sort.Ints(fds)
	return fds, nil
}

// Attach duplicates the descriptor and checks that it still is the control
// node: between listing and attaching, the target may have closed and
// reused the number.
func (h ProcHost) Attach(pid, fd int) (Device, error) {
	f, err := ioctl.Attach(pid, fd)
	if err != nil {
		return nil, err
	}
	ok, err := f.IsControlDevice()
	if err == nil && !ok {
		err = fmt.Errorf("pid %d fd %d is no longer %s", pid, fd, ioctl.ControlDevicePath)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func (h ProcHost) OpenControl() (Device, error) {
	f, err := ioctl.OpenControl()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Processes walks /proc and keeps the pids with a control file open.
// Processes we may not inspect are skipped silently: ps shows what the
// caller can see, like ps(1).
func (h ProcHost) Processes() ([]int, error) {
	entries, err := os.ReadDir(h.root())
	if err != nil {
		return nil, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fds, err := h.ControlFDs(pid)
		if err == nil && len(fds) > 0 {
			pids = append(pids, pid)
		}
	}
	sort.Ints(pids)
	return pids, nil
}
