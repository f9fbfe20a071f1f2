package registry

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/gpreempt/gpreempt/ioctl"
)

// ProcessID identifies a process across pid reuse. The kernel hands a pid
// out again once its process is reaped, so a pid alone may name another
// process by the time an operation runs; the start time of the process
// holding the pid tells them apart (two processes of one pid never share
// it: the second starts after the first is gone).
type ProcessID struct {
	PID int `json:"pid"`
	// Start is the process's start time in clock ticks after boot
	// (/proc/PID/stat field 22). 0: not known, the process was gone before
	// the registry could read it; no operation accepts such an identity.
	Start uint64 `json:"start"`
}

func (id ProcessID) String() string { return fmt.Sprintf("pid %d (start %d)", id.PID, id.Start) }

// ProcInfo is what the registry reads of a live process.
type ProcInfo struct {
	Start uint64
	Comm  string
}

// Procs reads processes' identities. ProcFS is the real one; tests give a
// fake that can reuse pids.
type Procs interface {
	// Stat returns pid's start time and name; an error wrapping
	// ioctl.ErrNoSuchProcess when no process holds pid.
	Stat(pid int) (ProcInfo, error)
}

// ProcFS reads /proc/PID/stat.
type ProcFS struct {
	// Root is the procfs mount, "/proc" unless set.
	Root string
}

func (p ProcFS) Stat(pid int) (ProcInfo, error) {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	switch {
	// ESRCH: the process exited between the open and the read.
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return ProcInfo{}, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	case err != nil:
		return ProcInfo{}, fmt.Errorf("pid %d: read stat: %w", pid, err)
	}
	info, err := parseStat(b)
	if err != nil {
		return ProcInfo{}, fmt.Errorf("pid %d: %w", pid, err)
	}
	return info, nil
}

// parseStat reads comm (field 2) and starttime (field 22) of a
// /proc/PID/stat line. comm is in parentheses and may itself hold spaces
// and parentheses, so the fields after it are counted from the last ')'.
func parseStat(b []byte) (ProcInfo, error) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return ProcInfo{}, fmt.Errorf("stat %.40q: no (comm)", b)
	}
	fields := bytes.Fields(b[end+1:])
	// fields[0] is field 3 (state), so field 22 is fields[19].
	const startField = 22 - 3
	if len(fields) <= startField {
		return ProcInfo{}, fmt.Errorf("stat %.40q: %d fields after comm, want at least %d", b, len(fields), startField+1)
	}
	start, err := strconv.ParseUint(string(fields[startField]), 10, 64)
	if err != nil {
		return ProcInfo{}, fmt.Errorf("stat field 22 (starttime) %q: %w", fields[startField], err)
	}
	return ProcInfo{Start: start, Comm: string(b[open+1 : end])}, nil
}
