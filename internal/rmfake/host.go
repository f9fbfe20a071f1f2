package rmfake

import (
	"fmt"
	"slices"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Host returns the fake as a tsg.Host: the processes created with NewProc
// and a control file of the caller's own.
func (d *Driver) Host() tsg.Host { return host{d} }

type host struct{ d *Driver }

func (h host) ControlFDs(pid int) ([]int, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	p := h.d.procs[pid]
	if p == nil {
		return nil, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	}
	if p.Deny {
		return nil, fmt.Errorf("pid %d: list fds: %w", pid, ioctl.ErrPermission)
	}
	var fds []int
	for fd, f := range p.fds {
		if f.ctl {
			fds = append(fds, fd)
		}
	}
	slices.Sort(fds)
	return fds, nil
}

func (h host) Attach(pid, fd int) (tsg.Device, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	p := h.d.procs[pid]
	switch {
	case p == nil:
		return nil, fmt.Errorf("pidfd_open %d: %w", pid, ioctl.ErrNoSuchProcess)
	case p.Deny:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: %w", pid, fd, ioctl.ErrPermission)
	case p.fds[fd] == nil:
		return nil, fmt.Errorf("pidfd_getfd pid %d fd %d: bad file descriptor", pid, fd)
	}
	// A duplicate is one more reference to the same file (pidfd_getfd).
	f := p.fds[fd]
	f.refs++
	return &FD{d: h.d, f: f, counted: true}, nil
}

func (h host) OpenControl() (tsg.Device, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	return &FD{d: h.d, f: h.d.newFile(true), counted: true}, nil
}

func (h host) Processes() ([]int, error) {
	h.d.mu.Lock()
	defer h.d.mu.Unlock()
	var pids []int
	for pid, p := range h.d.procs {
		for _, f := range p.fds {
			if f.ctl {
				pids = append(pids, pid)
				break
			}
		}
	}
	slices.Sort(pids)
	return pids, nil
}
