package tsg

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Bounds of the descriptor walks behind FDCache (issue 40, finding 4): a
// process may hold tens of thousands of open files, and what finding its
// NVIDIA files costs must not grow with them.
//
// A walk stats at most FDWalkBatch of a process's descriptors, in
// descriptor order, and a process's next walk waits FDWalkInterval
// scaled by the share of a batch the last one stat'd: a few dozen
// descriptors can be walked again at once, a full batch once in 500 ms.
// A process's walks thus stat at most FDWalkBatch descriptors per
// FDWalkInterval (2048 a second) however many it holds, and one walk,
// wherever it runs (the daemon's discovery runs under its reconciler's
// lock), stats at most 1024. Between walks only the descriptors already
// found are checked, one stat each.
//
// A process holding more than FDWalkBatch descriptors is walked in
// batches, each resuming where the last stopped: an NVIDIA file at
// descriptor N is found within ceil((N+1)/FDWalkBatch) walks, 500 ms
// apart (17,500 files: 9 s), never missed; until then the process
// counts as not holding it (its groups are found by a later lookup or
// /proc scan). maxFDProcs bounds the cache.
const (
	FDWalkBatch    = 1024
	FDWalkInterval = 500 * time.Millisecond
	maxFDProcs     = 16384
)

// DeviceFD is one of a process's descriptors that refers to an NVIDIA
// device file, and what that file was when it was found.
type DeviceFD struct {
	FD   int
	File ioctl.DeviceFile
}

// FDCache finds the NVIDIA device files (the control node and the
// GPUs' /dev/nvidiaN) among processes' descriptors, remembered per
// process identity (pid and start time): what was found is re-checked on
// each lookup (a stat of each known descriptor, which must still be the
// same device node), and the full walk of the descriptors is bounded and
// rate-limited as FDWalkBatch says. One cache serves one procfs mount.
// The zero value is ready; it is safe for concurrent use, and no walk or
// stat runs under its lock.
type FDCache struct {
	// Now is the clock of the walks' rate limit; time.Now when nil.
	Now func() time.Time
	// OnWalk, when set, is told of each walk: the pid, the descriptor
	// it started from and how many descriptors it stat'd (tests count
	// walks with it).
	OnWalk func(pid, from, examined int)

	mu    sync.Mutex
	procs map[int]*fdProc
}

type fdProc struct {
	start   uint64     // with the pid, the process's identity
	fds     []DeviceFD // found and still verified, in descriptor order
	gen     uint64     // bumped whenever fds is replaced
	walked  bool       // a walk has completed
	cursor  int        // the descriptor the next walk starts from
	next    time.Time  // no walk before
	used    time.Time
	walking chan struct{} // closed when the walk under way ends
}

func (c *FDCache) now() time.Time {
	if c != nil && c.Now != nil {
		return c.Now()
	}
	return time.Now()
}

// Lookup lists the NVIDIA device files among pid's descriptors under
// procfs root, in descriptor order: ioctl.ErrNoSuchProcess if pid does
// not exist, ioctl.ErrPermission if its descriptors cannot be inspected.
// On a nil cache it walks all of them, unbounded (one-shot tools).
func (c *FDCache) Lookup(root string, pid int) ([]DeviceFD, error) {
	if c == nil {
		fds, _, _, err := walkFDs(root, pid, 0, -1)
		return fds, err
	}
	start, err := ProcessStart(root, pid)
	if err != nil {
		return nil, err
	}
	for {
		now := c.now()
		c.mu.Lock()
		e := c.procs[pid]
		if e == nil || e.start != start {
			e = &fdProc{start: start}
			c.insert(pid, e, now)
		}
		e.used = now
		if w := e.walking; w != nil && !e.walked {
			// The first walk is under way: its answer is the only one.
			c.mu.Unlock()
			<-w
			continue
		}
		known, gen := e.fds, e.gen
		if e.walking != nil || (e.walked && now.Before(e.next)) {
			c.mu.Unlock()
			kept, err := verifyFDs(root, pid, known)
			if err != nil {
				return nil, err
			}
			if len(kept) != len(known) {
				c.mu.Lock()
				if e.gen == gen {
					e.fds, e.gen = kept, e.gen+1
				}
				c.mu.Unlock()
			}
			return kept, nil
		}
		done := make(chan struct{})
		e.walking = done
		from := e.cursor
		c.mu.Unlock()

		kept, err := verifyFDs(root, pid, known)
		var found []DeviceFD
		var next, examined int
		if err == nil {
			found, next, examined, err = walkFDs(root, pid, from, FDWalkBatch)
		}
		if c.OnWalk != nil && err == nil {
			c.OnWalk(pid, from, examined)
		}
		c.mu.Lock()
		e.walking = nil
		close(done)
		if err != nil {
			c.mu.Unlock()
			return nil, err
		}
		fds := mergeFDs(kept, found)
		e.fds, e.gen, e.walked, e.cursor = fds, e.gen+1, true, next
		e.next = c.now().Add(FDWalkInterval * time.Duration(examined) / FDWalkBatch)
		c.mu.Unlock()
		return fds, nil
	}
}

// Retain forgets the processes not in pids (a listing of procfs): they
// have exited.
func (c *FDCache) Retain(pids map[int]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid, e := range c.procs {
		if !pids[pid] && e.walking == nil {
			delete(c.procs, pid)
		}
	}
}

// insert adds e under c.mu, making room past maxFDProcs: first the
// processes not looked up for two intervals (exited, or no longer
// scanned), then all but the walks under way. Forgetting costs a walk,
// bounded as any other.
func (c *FDCache) insert(pid int, e *fdProc, now time.Time) {
	if c.procs == nil {
		c.procs = map[int]*fdProc{}
	}
	if _, ok := c.procs[pid]; !ok && len(c.procs) >= maxFDProcs {
		for k, old := range c.procs {
			if old.walking == nil && now.Sub(old.used) >= 2*FDWalkInterval {
				delete(c.procs, k)
			}
		}
		if len(c.procs) >= maxFDProcs {
			for k, old := range c.procs {
				if old.walking == nil {
					delete(c.procs, k)
				}
			}
		}
	}
	c.procs[pid] = e
}

// mergeFDs joins the verified known descriptors with a walk's finds (the
// walk's newer reading wins), in descriptor order.
func mergeFDs(kept, found []DeviceFD) []DeviceFD {
	out := make([]DeviceFD, 0, len(kept)+len(found))
	out = append(out, found...)
	for _, k := range kept {
		if !slices.ContainsFunc(found, func(f DeviceFD) bool { return f.FD == k.FD }) {
			out = append(out, k)
		}
	}
	slices.SortFunc(out, func(a, b DeviceFD) int { return a.FD - b.FD })
	return out
}

// verifyFDs keeps the known descriptors that still refer to the same
// device node (a descriptor closed, or reused for another file, is
// dropped): one stat each, whatever else the process holds.
func verifyFDs(root string, pid int, known []DeviceFD) ([]DeviceFD, error) {
	if len(known) == 0 {
		return known, nil
	}
	dir := filepath.Join(root, strconv.Itoa(pid), "fd")
	kept := make([]DeviceFD, 0, len(known))
	for _, k := range known {
		f, err := ioctl.StatDeviceFile(filepath.Join(dir, strconv.Itoa(k.FD)))
		switch {
		case errors.Is(err, fs.ErrPermission):
			return nil, fmt.Errorf("pid %d: stat fd %d: %w: %w", pid, k.FD, ioctl.ErrPermission, err)
		case err == nil && f == k.File:
			kept = append(kept, k)
		}
	}
	if len(kept) == len(known) {
		return known, nil
	}
	return kept, nil
}

// walkFDs stats pid's descriptors from descriptor from on, at most limit
// of them (all when limit < 0), and returns the NVIDIA device files among
// them and the descriptor the next walk starts from (0 when this one
// reached the last).
func walkFDs(root string, pid, from, limit int) (found []DeviceFD, next, examined int, err error) {
	dir := filepath.Join(root, strconv.Itoa(pid), "fd")
	d, err := os.Open(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return nil, 0, 0, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	case errors.Is(err, fs.ErrPermission):
		return nil, 0, 0, fmt.Errorf("pid %d: list fds: %w: %w", pid, ioctl.ErrPermission, err)
	case err != nil:
		return nil, 0, 0, fmt.Errorf("pid %d: list fds: %w", pid, err)
	}
	defer d.Close()
	if from > 0 {
		// procfs places descriptor N at directory offset N+2 (after
		// "." and ".."), so a later batch does not list the earlier
		// ones again; a kernel that did otherwise would cost names
		// read and skipped below, never a descriptor missed.
		if _, err := d.Seek(int64(from)+2, io.SeekStart); err != nil {
			return nil, 0, 0, fmt.Errorf("pid %d: seek fds: %w", pid, err)
		}
	}
	for {
		names, rerr := d.Readdirnames(256)
		for _, name := range names {
			n, err := strconv.Atoi(name)
			if err != nil || n < from {
				continue
			}
			if limit >= 0 && examined >= limit {
				return found, n, examined, nil
			}
			examined++
			f, err := ioctl.StatDeviceFile(filepath.Join(dir, name))
			if err != nil || !f.IsNVIDIA() {
				// Closed since listed, or a socket or anon inode:
				// not a device file of NVIDIA's.
				continue
			}
			found = append(found, DeviceFD{FD: n, File: f})
		}
		switch {
		case errors.Is(rerr, io.EOF) || (rerr == nil && len(names) == 0):
			return found, 0, examined, nil
		case errors.Is(rerr, fs.ErrNotExist) || errors.Is(rerr, syscall.ESRCH):
			return nil, 0, 0, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
		case rerr != nil:
			return nil, 0, 0, fmt.Errorf("pid %d: list fds: %w", pid, rerr)
		}
	}
}

// ProcessStart reads pid's start time (field 22 of /proc/PID/stat), which
// with the pid names one process: ioctl.ErrNoSuchProcess if there is
// none.
func ProcessStart(root string, pid int) (uint64, error) {
	b, err := os.ReadFile(filepath.Join(root, strconv.Itoa(pid), "stat"))
	switch {
	case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH):
		return 0, fmt.Errorf("pid %d: %w", pid, ioctl.ErrNoSuchProcess)
	case errors.Is(err, fs.ErrPermission):
		// procfs mounted hidepid: counted as denied, as an fd
		// directory we may not list is.
		return 0, fmt.Errorf("pid %d: read stat: %w: %w", pid, ioctl.ErrPermission, err)
	case err != nil:
		return 0, err
	}
	start, err := StartTime(b)
	if err != nil {
		return 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	return start, nil
}

// StartTime is field 22 of /proc/PID/stat (after the parenthesised comm,
// which may itself hold spaces and parentheses).
func StartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("stat: no comm")
	}
	f := strings.Fields(string(stat[i+1:]))
	// After comm: state is field 3, starttime field 22 -> index 19.
	if len(f) < 20 {
		return 0, errors.New("stat: too few fields")
	}
	return strconv.ParseUint(f[19], 10, 64)
}
