package trace

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"

	"github.com/gpreempt/gpreempt/internal/libfile"
)

// LaunchCounter counts the kernel launches of chosen processes in the
// kernel: uprobes on their libcuda's launch functions
// (DefaultLaunchSymbols), attached to each process alone, add one to that
// process's count. No event crosses to user space; a count is read when
// wanted. The breakpoints are installed in the attached processes only,
// so no other process pays for them. Safe for concurrent use.
// One uprobe_multi link a process where the kernel has them: with perf uprobes, other processes'
// hits of its functions wait out each attach and detach there (docs/TRACING.md).
type LaunchCounter struct {
	log   *slog.Logger
	objs  *launchesObjects
	multi bool // one uprobe_multi link per process, not a perf uprobe per function

	mu    sync.Mutex
	procs map[int]counted
	// libs are the libraries attached processes use, by file (device
	// and inode): dropped with the last.
	libs map[string]*counterLibrary
}

// counted is one attached process.
type counted struct {
	links []link.Link
	lib   string
}

// counterLibrary is what one library file's launch functions resolved to.
type counterLibrary struct {
	ex *link.Executable
	// file is what ex reads through (libfile.File.Executable), open while
	// a process is attached through it.
	file    *libfile.File
	symbols []Probe // the launch functions it has, one name per address
	users   int
}

func (l *counterLibrary) close() {
	if l.file != nil {
		l.file.Close()
	}
}

// maxCounted is the table's capacity (launches.c).
const maxCounted = 4096

// OpenLaunchCounter loads the counting program. Errors: ErrNotRoot,
// ErrBPFUnavailable.
func OpenLaunchCounter(log *slog.Logger) (*LaunchCounter, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: remove memlock limit: %w", ErrBPFUnavailable, err)
	}
	objs, multi, err := loadLaunchPrograms(log)
	if err != nil {
		return nil, loadError("launch counter", err)
	}
	return &LaunchCounter{log: log, objs: objs, multi: multi, procs: map[int]counted{}, libs: map[string]*counterLibrary{}}, nil
}

// loadLaunchPrograms loads the counting programs: both where uprobe_multi links serve (multi), else the perf uprobe's alone.
func loadLaunchPrograms(log *slog.Logger) (*launchesObjects, bool, error) {
	spec, err := loadLaunches()
	if err != nil {
		return nil, false, err
	}
	objs, why := &launchesObjects{}, uprobeMultiSupport()
	if why == nil {
		if why = spec.LoadAndAssign(objs, nil); why == nil {
			return objs, true, nil
		}
	}
	log.Info("launch counter: a perf-event uprobe a function; other processes' launches may wait out their detaches (docs/TRACING.md)", "reason", why)
	var single struct { // LoadAndAssign loads only what the struct names
		launchesMaps
		CountLaunch *ebpf.Program `ebpf:"count_launch"`
	}
	err = spec.LoadAndAssign(&single, nil)
	return &launchesObjects{launchesMaps: single.launchesMaps, launchesPrograms: launchesPrograms{CountLaunch: single.CountLaunch}}, false, err
}

// Attach starts counting pid's launches through library, the libcuda
// file that process has mapped (FindLibrary with its pid), from zero.
// Attaching a process already counted starts it again from zero. On error
// nothing of pid is left attached. Errors: ErrNoLibrary, ErrNoSymbols,
// ErrBPFUnavailable (the kernel refused a uprobe), and a full table.
func (c *LaunchCounter) Attach(pid int, library string) error {
	if pid <= 0 {
		return fmt.Errorf("launch counter: pid %d", pid)
	}
	// The file is opened and read before the lock: a library that takes
	// long to open (a FUSE file) holds up no count and no other attach.
	opened, keep, err := resolveLaunches(library)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detach(pid)
	key := opened.Key()
	lib := c.libs[key]
	if lib == nil {
		ex, err := opened.Executable()
		if err != nil {
			opened.Close()
			return fmt.Errorf("%w: %s: %w", ErrNoLibrary, library, err)
		}
		lib = &counterLibrary{ex: ex, file: opened, symbols: keep}
		c.libs[key] = lib
	} else {
		opened.Close()
	}
	// fail drops a library opened for pid alone.
	fail := func(err error) error {
		if lib.users == 0 {
			delete(c.libs, key)
			lib.close()
		}
		return err
	}
	if len(c.procs) >= maxCounted {
		return fail(fmt.Errorf("launch counter: %d processes counted already", len(c.procs)))
	}
	k, zero := uint32(pid), uint64(0)
	if err := c.objs.LaunchCounts.Update(k, zero, ebpf.UpdateAny); err != nil {
		return fail(fmt.Errorf("launch counter: %w", err))
	}
	links, err := c.attachProbes(lib, pid)
	if err != nil {
		c.objs.LaunchCounts.Delete(k)
		return fail(err)
	}
	c.procs[pid] = counted{links: links, lib: key}
	lib.users++
	c.log.Debug("counting launches", "pid", pid, "library", library, "functions", len(lib.symbols), "links", len(links), "uprobe_multi", c.multi)
	return nil
}

// attachProbes puts the counting program on lib's launch functions in pid's memory: one uprobe_multi link, else a perf
// uprobe each. On error nothing is left attached.
func (c *LaunchCounter) attachProbes(lib *counterLibrary, pid int) ([]link.Link, error) {
	if c.multi {
		symbols, offsets := []string{}, []uint64{}
		for _, p := range lib.symbols {
			symbols, offsets = append(symbols, p.Symbol), append(offsets, p.Offset)
		}
		l, err := lib.ex.UprobeMulti(symbols, c.objs.CountLaunchMulti, &link.UprobeMultiOptions{PID: uint32(pid), Addresses: offsets})
		if err == nil {
			return []link.Link{l}, nil
		}
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return nil, attachError(fmt.Sprintf("uprobe_multi %v for process %d", symbols, pid), err)
		}
		c.multi = false // as the tracer: a kernel that refuses the links gets perf-event uprobes from now on
		c.log.Debug("launch counter: uprobes per function from now on", "reason", err)
	}
	var links []link.Link
	for _, p := range lib.symbols {
		l, err := lib.ex.Uprobe(p.Symbol, c.objs.CountLaunch, &link.UprobeOptions{PID: pid, Address: p.Offset})
		if err != nil {
			closeLinks(links)
			return nil, attachError(fmt.Sprintf("uprobe %s for process %d", p.Symbol, pid), err)
		}
		links = append(links, l)
	}
	return links, nil
}

// resolveLaunches opens path and resolves its launch functions, one name
// per address (aliases would count a launch twice).
func resolveLaunches(path string) (*libfile.File, []Probe, error) {
	keep, _, libs, err := resolveOpen(ProbesOf(path, RoleLaunch, DefaultLaunchSymbols))
	opened := libs[path]
	if err != nil || len(keep) == 0 {
		if opened != nil {
			opened.Close()
		}
		if err == nil {
			err = fmt.Errorf("%w: none of %v in %s", ErrNoSymbols, DefaultLaunchSymbols, path)
		}
		return nil, nil, err
	}
	return opened, keep, nil
}

// Count is pid's launches since it was attached.
func (c *LaunchCounter) Count(pid int) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.procs[pid]; !ok {
		return 0, false
	}
	var n uint64
	if err := c.objs.LaunchCounts.Lookup(uint32(pid), &n); err != nil {
		return 0, false
	}
	return n, true
}

// libraries is how many library files are held open for attached
// processes.
func (c *LaunchCounter) libraries() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.libs)
}

// Counting reports whether pid is attached.
func (c *LaunchCounter) Counting(pid int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.procs[pid]
	return ok
}

// Detach stops counting pid (a no-op for one not attached).
func (c *LaunchCounter) Detach(pid int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.detach(pid)
}

func (c *LaunchCounter) detach(pid int) {
	p, ok := c.procs[pid]
	if !ok {
		return
	}
	c.objs.LaunchCounts.Delete(uint32(pid))
	delete(c.procs, pid)
	p.release(c.libs)
}

// release closes p's uprobes and drops its library from libs when p was
// its last user.
func (p counted) release(libs map[string]*counterLibrary) {
	closeLinks(p.links)
	if l := libs[p.lib]; l != nil {
		if l.users--; l.users <= 0 {
			delete(libs, p.lib)
			l.close()
		}
	}
}

// Close detaches every process and unloads the program.
func (c *LaunchCounter) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.procs {
		c.detach(pid)
	}
	for _, l := range c.libs {
		l.close()
	}
	c.libs = map[string]*counterLibrary{}
	return c.objs.Close()
}
