package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// ProcInspector reads processes from procfs.
type ProcInspector struct {
	// Root is the procfs mount ("/proc" unless set).
	Root string
	// GPU, when set, maps pids to GPUs through NVML's process lists;
	// otherwise (and for a process NVML does not list yet) the
	// /dev/nvidiaN files the process holds name its GPUs.
	GPU gpu.Info

	// FDs finds the device files among a process's descriptors, by
	// process identity and bounded (see tsg.FDWalkBatch): a process with
	// thousands of open files must not make each of its requests a walk
	// of them all. The daemon shares it with its tsg.ProcHost, so one
	// walk serves both; a private one is made when nil.
	FDs *tsg.FDCache

	mu       sync.Mutex
	users    map[uint32]string
	nvml     map[int][]policy.GPU
	nvmlAt   time.Time
	nvmlOK   bool // the last reading succeeded
	uuidByIx map[int]string

	fdsOnce sync.Once
}

// maxEnviron bounds how much of a process's environment is read.
const (
	maxEnviron = 256 << 10
	maxCmdline = 64 << 10
)

func (pi *ProcInspector) root() string {
	if pi.Root == "" {
		return "/proc"
	}
	return pi.Root
}

func (pi *ProcInspector) path(pid int, name string) string {
	return filepath.Join(pi.root(), strconv.Itoa(pid), name)
}

// Process implements Inspector.
func (pi *ProcInspector) Process(pid int) (policy.Process, uint64, error) {
	stat, err := os.ReadFile(pi.path(pid, "stat"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, unix.ESRCH) {
			return policy.Process{}, 0, fmt.Errorf("pid %d: %w", pid, ErrGone)
		}
		return policy.Process{}, 0, err
	}
	start, err := tsg.StartTime(stat)
	if err != nil {
		return policy.Process{}, 0, fmt.Errorf("pid %d: %w", pid, err)
	}
	p := policy.Process{PID: pid}
	if b, err := os.ReadFile(pi.path(pid, "comm")); err == nil {
		p.Comm = strings.TrimSpace(string(b))
	}
	p.Exe, _ = os.Readlink(pi.path(pid, "exe"))
	if f, err := os.Open(pi.path(pid, "cmdline")); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, maxCmdline))
		f.Close()
		p.Cmdline = strings.Join(strings.FieldsFunc(string(b), func(r rune) bool { return r == 0 }), " ")
	}
	if b, err := os.ReadFile(pi.path(pid, "status")); err == nil {
		p.UID, _, _ = procfs.StatusIDs(b)
	}
	p.User = pi.userName(p.UID)
	if b, err := os.ReadFile(pi.path(pid, "cgroup")); err == nil {
		p.Cgroup = procfs.CgroupPath(b)
	}
	if f, err := os.Open(pi.path(pid, "environ")); err == nil {
		b, _ := io.ReadAll(io.LimitReader(f, maxEnviron))
		f.Close()
		p.Env = procfs.Environ(b)
	}
	p.GPUs = pi.gpus(pid)
	return p, start, nil
}

// Alive implements Inspector: a pid is alive while its stat file can be
// read (as Process needs it to), without the environ, cmdline and NVML
// reads of a full Process.
func (pi *ProcInspector) Alive(pid int) bool {
	_, err := os.Stat(pi.path(pid, "stat"))
	return err == nil
}

func (pi *ProcInspector) userName(uid uint32) string {
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if n, ok := pi.users[uid]; ok {
		return n
	}
	if pi.users == nil {
		pi.users = map[uint32]string{}
	}
	n := ""
	if u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10)); err == nil {
		n = u.Username
	}
	pi.users[uid] = n
	return n
}

// NVML's process lists are re-read at most every nvmlMaxAge, and at most
// every nvmlMissAge for a pid they do not hold yet: a context classed
// ~25 ms after its setup is newer than any periodic reading.
const (
	nvmlMaxAge  = 500 * time.Millisecond
	nvmlMissAge = 10 * time.Millisecond
)

// gpus: NVML's process lists where NVML answers (nil for a process it
// does not list yet), else the /dev/nvidiaN files held. The files are only
// for a machine without NVML: libcuda opens the device files of GPUs a
// process does not use (measured on a two-GPU H200 host: a process with
// CUDA_VISIBLE_DEVICES=1 held /dev/nvidia0 too).
func (pi *ProcInspector) gpus(pid int) []policy.GPU {
	if gs, _, ok := pi.nvmlFor(pid); ok {
		// NVML answers: a process it does not list yet has no
		// known GPU (nil), never a guess from device files.
		return gs
	}
	return pi.fdGPUs(pid)
}

// GPUs implements Inspector.
func (pi *ProcInspector) GPUs(pid int) []policy.GPU {
	if !pi.Alive(pid) {
		return nil
	}
	return pi.gpus(pid)
}

// Listed implements Inspector: whether NVML lists pid among the GPUs'
// compute processes. RM answers that from the pid each client was
// allocated by, so a process that holds a GPU app's file (a fork of it, or
// one handed a duplicate) is not listed for the app's context.
func (pi *ProcInspector) Listed(pid int) (listed, known bool) {
	_, listed, known = pi.nvmlFor(pid)
	return listed, known
}

// nvmlFor reads pid from NVML's process lists, re-read when older than
// nvmlMaxAge, or than nvmlMissAge where pid is not in them; ok is false
// without NVML or when its last reading failed.
func (pi *ProcInspector) nvmlFor(pid int) (gs []policy.GPU, listed, ok bool) {
	if pi.GPU == nil {
		return nil, false, false
	}
	pi.mu.Lock()
	defer pi.mu.Unlock()
	if time.Since(pi.nvmlAt) > nvmlMaxAge {
		pi.refreshNVML()
	}
	if _, in := pi.nvml[pid]; !in && time.Since(pi.nvmlAt) > nvmlMissAge {
		pi.refreshNVML()
	}
	gs, listed = pi.nvml[pid]
	return gs, listed, pi.nvmlOK
}

func (pi *ProcInspector) refreshNVML() {
	pi.nvmlAt = time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	devs, err := pi.GPU.Devices(ctx)
	pi.nvmlOK = err == nil
	if err != nil {
		return
	}
	pi.nvml, pi.uuidByIx = map[int][]policy.GPU{}, map[int]string{}
	for _, d := range devs {
		pi.uuidByIx[d.Index] = d.UUID
		for _, p := range d.Processes {
			pi.nvml[p.PID] = append(pi.nvml[p.PID], policy.GPU{Index: d.Index, UUID: d.UUID})
		}
	}
}

// WarmDescriptors brings the cache of pid's descriptors up to date (a
// walk if one is due), before the reconciler's lock is taken.
func (pi *ProcInspector) WarmDescriptors(pid int) {
	_, _ = pi.fds().Lookup(pi.root(), pid)
}

func (pi *ProcInspector) fds() *tsg.FDCache {
	pi.fdsOnce.Do(func() {
		if pi.FDs == nil {
			pi.FDs = &tsg.FDCache{}
		}
	})
	return pi.FDs
}

// fdGPUs lists the /dev/nvidiaN (char 195:N, N < 255) files pid holds;
// the minor number stands for the index.
func (pi *ProcInspector) fdGPUs(pid int) []policy.GPU {
	devs, err := pi.fds().Lookup(pi.root(), pid)
	if err != nil {
		return nil
	}
	seen := map[int]bool{}
	var out []policy.GPU
	for _, d := range devs {
		minor, ok := d.File.GPUMinor()
		if !ok || seen[minor] {
			continue
		}
		seen[minor] = true
		out = append(out, policy.GPU{Index: minor})
	}
	return out
}
