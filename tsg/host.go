package tsg

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"

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

// Host is the operating system as the sources see it: processes, a handle
// on one of them, and a control file of our own.
type Host interface {
	// Open takes a handle on process pid before anything is read about
	// it, so that nothing learned through the Target can belong to a
	// later process given the same number. ioctl.ErrNoSuchProcess if pid
	// does not exist.
	Open(pid int) (Target, error)
	// OpenControl opens a /dev/nvidiactl file of our own
	// (ioctl.ErrNoDriver without one).
	OpenControl() (Device, error)
	// Processes lists every pid that has /dev/nvidiactl open, in
	// ascending order, and counts the processes whose open files the
	// caller may not read: they may hold it too.
	Processes() (pids []int, denied int, err error)
}

// Target is one process, held by a handle that cannot come to name
// another (a pidfd).
type Target interface {
	PID() int
	// ControlFDs lists the process's descriptors that refer to
	// /dev/nvidiactl, in ascending order: ioctl.ErrNoSuchProcess if the
	// process exited (its pid may be another's by now),
	// ioctl.ErrPermission if its fds cannot be inspected.
	ControlFDs() ([]int, error)
	// Attach duplicates the process's descriptor fd and checks it still is
	// the control node.
	Attach(fd int) (Device, error)
	Close() error
}

// ProcHost is the real Host: procfs for listing, pidfd_getfd for attaching.
type ProcHost struct {
	// Root is the procfs mount, "/proc" unless set.
	Root string
	// FDs, when set, remembers what each process's descriptors were
	// found to be, so that a process with many open files is not walked
	// whole on each call (a daemon's, shared with its other readers of
	// descriptors). Without it each call walks them all.
	FDs *FDCache
}

func (h ProcHost) root() string {
	if h.Root == "" {
		return "/proc"
	}
	return h.Root
}

// Open opens a pidfd on pid: from then on, what ControlFDs lists and what
// Attach duplicates are checked to be that process's.
func (h ProcHost) Open(pid int) (Target, error) {
	if pid <= 0 {
		return nil, fmt.Errorf("%w: pid %d", ErrInvalidArgument, pid)
	}
	p, err := ioctl.OpenPidfd(pid)
	if err != nil {
		return nil, err
	}
	return procTarget{root: h.root(), fds: h.FDs, pidfd: p}, nil
}

type procTarget struct {
	root  string
	fds   *FDCache
	pidfd *ioctl.Pidfd
}

func (t procTarget) PID() int     { return t.pidfd.PID() }
func (t procTarget) Close() error { return t.pidfd.Close() }

// ControlFDs stats /proc/PID/fd/N (which follows the link to the open
// file, wherever it was opened from, so a container's bind-mounted node
// counts too) and keeps the character devices 195:255; with an FDCache,
// only the descriptors found before and, when one is due, a bounded walk
// of the others (see FDWalkBatch). The listing counts only if the
// process the pidfd holds is still alive afterwards: then /proc/PID was
// its directory throughout.
func (t procTarget) ControlFDs() ([]int, error) {
	fds, err := controlFDs(t.fds, t.root, t.PID())
	if err != nil {
		return nil, err
	}
	if err := t.pidfd.Alive(); err != nil {
		return nil, err
	}
	return fds, nil
}

// Attach duplicates the descriptor and checks that it still is the control
// node: between listing and attaching, the target may have closed and
// reused the number.
func (t procTarget) Attach(fd int) (Device, error) {
	f, err := t.pidfd.Getfd(fd)
	if err != nil {
		return nil, err
	}
	ok, err := f.IsControlDevice()
	if err == nil && !ok {
		err = fmt.Errorf("pid %d fd %d is no longer %s", t.PID(), fd, ioctl.ControlDevicePath)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func controlFDs(c *FDCache, root string, pid int) ([]int, error) {
	devs, err := c.Lookup(root, pid)
	if err != nil {
		return nil, err
	}
	var fds []int
	for _, d := range devs {
		if d.File.IsControl() {
			fds = append(fds, d.FD)
		}
	}
	return fds, nil
}

func (h ProcHost) OpenControl() (Device, error) {
	f, err := ioctl.OpenControl()
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Processes walks /proc and keeps the pids with a control file open. A
// process whose fds the caller may not list is counted in denied, not
// guessed at: as non-root that is every other user's process.
func (h ProcHost) Processes() ([]int, int, error) {
	entries, err := os.ReadDir(h.root())
	if err != nil {
		return nil, 0, fmt.Errorf("list processes: %w", err)
	}
	var pids []int
	denied := 0
	seen := map[int]bool{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		seen[pid] = true
		fds, err := controlFDs(h.FDs, h.root(), pid)
		switch {
		case errors.Is(err, ioctl.ErrPermission):
			denied++
		case err == nil && len(fds) > 0:
			pids = append(pids, pid)
		}
	}
	if h.FDs != nil {
		h.FDs.Retain(seen)
	}
	sort.Ints(pids)
	return pids, denied, nil
}
