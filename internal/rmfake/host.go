package rmfake

import (
	"fmt"
	"slices"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Host returns the fake as a tsg.Host: the processes created with NewProc
// and a control file of the caller's own. A process with Deny set is one
// the caller may not inspect (another user's, seen by a non-root caller):
// Processes counts it as denied, and listing or duplicating its files
// fails with ioctl.ErrPermission.
func (d *Driver) Host() tsg.Host { return host{d} }

type host struct{ d *Driver }

// Open holds the process as a pidfd does: if it exits, the target keeps
// naming the dead process, even after NewProc reuses its pid.
func (h host) Open(pid int) (tsg.Target, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	p := h.d.procs[pid]
	if p == nil {
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, ioctl.ErrNoSuchProcess)
	}
	return &target{d: h.d, p: p}, nil
}

type target struct {
	d *Driver
	p *Proc
}

func (t *target) PID() int     { return t.p.PID }
func (t *target) Close() error { return nil }

// live checks that the held process is still the one its pid names; d.mu
// must be held.
func (t *target) live() error {
	if t.d.procs[t.p.PID] != t.p {
		return fmt.Errorf("pid %d: %w", t.p.PID, ioctl.ErrNoSuchProcess)
	}
	return nil
}

func (t *target) ControlFDs() ([]int, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	if err := t.live(); err != nil {
		return nil, err
	}
	if t.p.Deny {
		return nil, fmt.Errorf("pid %d: list fds: %w", t.p.PID, ioctl.ErrPermission)
	}
	var fds []int
	for fd, f := range t.p.fds {
		if f.ctl {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

func (t *target) Attach(fd int) (tsg.Device, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	switch {
	case t.live() != nil:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", t.p.PID, fd, ioctl.ErrNoSuchProcess)
	case t.p.Deny:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", t.p.PID, fd, ioctl.ErrPermission)
	case t.p.fds[fd] == nil:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: bad file descriptor", t.p.PID, fd)
	case !t.p.fds[fd].ctl:
		return nil, fmt.Errorf("pid %d fd %d is no longer %s", t.p.PID, fd, ioctl.ControlDevicePath)
	}
	// A duplicate is one more reference to the same file (pidfd_getfd).
	f := t.p.fds[fd]
	f.refs++
	return &FD{d: t.d, f: f, counted: true}, nil
}

func (h host) OpenControl() (tsg.Device, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	return &FD{d: h.d, f: h.d.newFile(true), counted: true}, nil
}

func (h host) Processes() ([]int, int, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	var pids []int
	denied := 0
	for pid, p := range h.d.procs {
		if p.Deny {
			denied++
			continue
		}
		for _, f := range p.fds {
			if f.ctl {
				pids = append(pids, pid)
				break
			}
		}
	}
	slices.Sort(pids)
	return pids, denied, nil
}
