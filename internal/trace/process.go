package trace

// Per-process uprobes: programs loaded once, attached to one process at a
// time (AttachProcess, DetachProcess), as one uprobe_multi link per
// program where the kernel has working ones, else one uprobe per function.

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
)

// openPerProcess loads the uprobe programs for every process (filter_tgid
// 0: each uprobe is attached to one process) and attaches nothing yet.
// Where the kernel has working uprobe_multi links, their programs are
// loaded too and processes are attached through them.
func (t *Tracer) openPerProcess(probes []Probe, perFunction bool) error {
	if len(probes) == 0 {
		return errors.New("trace: per process, with no functions to trace")
	}
	spec, err := loadCalls()
	if err != nil {
		return fmt.Errorf("uprobe programs: %w", err)
	}
	multi := errors.New("per-function uprobes asked for")
	if !perFunction {
		multi = uprobeMultiSupport()
	}
	if multi == nil {
		if t.calls, err = loadCallPrograms(spec, true); err != nil {
			multi = fmt.Errorf("%w: %w", ebpf.ErrNotSupported, loadError("uprobe_multi programs", err))
		}
	}
	if multi != nil {
		if t.calls, err = loadCallPrograms(spec, false); err != nil {
			return loadError("uprobe programs", err)
		}
		t.log.Debug("uprobes attached per function", "reason", multi)
	}
	t.multi = multi == nil
	t.uprobeMulti = func(ex *link.Executable, ret bool, symbols []string, prog *ebpf.Program, opts *link.UprobeMultiOptions) (link.Link, error) {
		if ret {
			return ex.UretprobeMulti(symbols, prog, opts)
		}
		return ex.UprobeMulti(symbols, prog, opts)
	}
	rd, err := ringbuf.NewReader(t.calls.CallEvents)
	if err != nil {
		return fmt.Errorf("uprobe ring buffer: %w", err)
	}
	t.readers = append(t.readers, rd)
	t.perProcess = probes
	t.procLinks, t.exes = map[int]counted{}, map[string]*counterLibrary{}
	t.table.Store(&[]Probe{})
	t.log.Info("loaded", "uprobes", "per process", "functions", len(probes), "uprobe_multi", t.multi)
	return nil
}

// AttachProcess traces pid's calls to the functions Options.Probes name,
// in library, the file pid has mapped (FindLibrary with its pid). Only
// with Options.PerProcess. Attaching a process again replaces what it had;
// on error nothing of pid is left attached. Errors: ErrNoLibrary,
// ErrNoSymbols, ErrBPFUnavailable.
func (t *Tracer) AttachProcess(pid int, library string) error {
	if t.perProcess == nil {
		return errors.New("trace: AttachProcess without Options.PerProcess")
	}
	if pid <= 0 {
		return fmt.Errorf("trace: attach process %d", pid)
	}
	var probes []Probe
	for _, p := range t.perProcess {
		p.Library = library
		probes = append(probes, p)
	}
	// The file is opened and read before the lock: a library that takes
	// long to open (a FUSE file) holds up no other process's attach.
	keep, _, libs, err := resolveOpen(probes)
	defer func() {
		for _, l := range libs {
			l.Close()
		}
	}()
	if err != nil {
		return err
	}
	if len(keep) == 0 {
		return fmt.Errorf("%w: none of %d functions in %s", ErrNoSymbols, len(probes), library)
	}
	opened := libs[library]
	t.pmu.Lock()
	defer t.pmu.Unlock()
	if t.procLinks == nil {
		return errors.New("trace: AttachProcess on a stopped tracer")
	}
	t.detachLocked(pid)
	// One Executable per file (by device and inode), open while a process
	// is attached through it, dropped with its last process.
	key := opened.Key()
	lib := t.exes[key]
	if lib == nil {
		ex, err := opened.Executable()
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrNoLibrary, library, err)
		}
		lib = &counterLibrary{ex: ex, file: opened}
		delete(libs, library) // lib owns it now
		t.exes[key] = lib
	}
	var links []link.Link
	if t.multi {
		links, err = t.attachMulti(lib.ex, pid, keep)
		if errors.Is(err, ebpf.ErrNotSupported) {
			t.multi = false
			t.log.Debug("uprobes attached per function from now on", "reason", err)
		}
	}
	if !t.multi {
		links, err = t.attachPerFunction(lib.ex, pid, keep)
	}
	if err != nil {
		if lib.users == 0 {
			delete(t.exes, key)
			lib.close()
		}
		return err
	}
	lib.users++
	t.procLinks[pid] = counted{links: links, lib: key}
	t.log.Debug("attached", "pid", pid, "library", library, "uprobes", len(keep), "links", len(links))
	return nil
}

// attachPerFunction attaches keep in pid's memory as one perf-event
// uprobe (and uretprobe) per function. With pmu held; on error nothing is
// left attached.
func (t *Tracer) attachPerFunction(ex *link.Executable, pid int, keep []Probe) ([]link.Link, error) {
	var links []link.Link
	fail := func(err error) ([]link.Link, error) {
		closeLinks(links)
		return nil, err
	}
	for _, p := range keep {
		uo := &link.UprobeOptions{PID: pid, Cookie: cookie(p.Role, t.index(p)), Address: p.Offset}
		enter := t.calls.CallEnter
		if p.Role == RoleHint {
			enter = t.calls.CallEnterHint
		}
		l, err := ex.Uprobe(p.Symbol, enter, uo)
		if err != nil {
			return fail(attachError(fmt.Sprintf("uprobe %s for process %d", p.Symbol, pid), err))
		}
		links = append(links, l)
		if hasReturn(p.Role) {
			l, err := ex.Uretprobe(p.Symbol, t.calls.CallReturn, uo)
			if err != nil {
				return fail(attachError(fmt.Sprintf("uretprobe %s for process %d", p.Symbol, pid), err))
			}
			links = append(links, l)
		}
	}
	return links, nil
}

// attachMulti attaches keep in pid's memory as one uprobe_multi link per
// program: entries, hint entries (sleepable), returns. The cookies are
// those of attachPerFunction. With pmu held; on error nothing is left
// attached, and an error that is ebpf.ErrNotSupported says the kernel has
// no such links (or refuses these programs on them).
func (t *Tracer) attachMulti(ex *link.Executable, pid int, keep []Probe) ([]link.Link, error) {
	groups := []struct {
		what    string
		prog    *ebpf.Program
		ret     bool
		symbols []string
		cookies []uint64
		offsets []uint64
	}{
		{what: "uprobe_multi", prog: t.calls.CallEnterMulti},
		{what: "uprobe_multi (hint)", prog: t.calls.CallEnterHintMulti},
		{what: "uretprobe_multi", prog: t.calls.CallReturnMulti, ret: true},
	}
	for _, p := range keep {
		c := cookie(p.Role, t.index(p))
		g := &groups[0]
		if p.Role == RoleHint {
			g = &groups[1]
		}
		g.symbols, g.cookies, g.offsets = append(g.symbols, p.Symbol), append(g.cookies, c), append(g.offsets, p.Offset)
		if hasReturn(p.Role) {
			r := &groups[2]
			r.symbols, r.cookies, r.offsets = append(r.symbols, p.Symbol), append(r.cookies, c), append(r.offsets, p.Offset)
		}
	}
	var links []link.Link
	for _, g := range groups {
		if len(g.symbols) == 0 {
			continue
		}
		l, err := t.uprobeMulti(ex, g.ret, g.symbols, g.prog, &link.UprobeMultiOptions{PID: uint32(pid), Cookies: g.cookies, Addresses: g.offsets})
		if err != nil {
			closeLinks(links)
			return nil, attachError(fmt.Sprintf("%s %v for process %d", g.what, g.symbols, pid), err)
		}
		links = append(links, l)
	}
	return links, nil
}

// hasReturn says whether a role's functions are traced at return too: a
// synchronization ends at its return; a hint returns the request's
// handle.
func hasReturn(r Role) bool { return r == RoleSync || r == RoleHint }

func closeLinks(links []link.Link) {
	for _, l := range links {
		l.Close()
	}
}

// index is p's place in the cookie table, by symbol and role (the library
// differs from process to process, the decoding does not). With pmu held.
func (t *Tracer) index(p Probe) int {
	table := *t.table.Load()
	for i, q := range table {
		if q.Symbol == p.Symbol && q.Role == p.Role {
			return i
		}
	}
	grown := append(slices.Clip(table), Probe{Symbol: p.Symbol, Role: p.Role})
	t.table.Store(&grown)
	return len(grown) - 1
}

// DetachProcess stops tracing pid's calls (nothing when it is not traced).
func (t *Tracer) DetachProcess(pid int) {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	t.detachLocked(pid)
}

// detachAll detaches every process; AttachProcess refuses from here.
func (t *Tracer) detachAll() {
	t.pmu.Lock()
	defer t.pmu.Unlock()
	for pid := range t.procLinks {
		t.detachLocked(pid)
	}
	t.procLinks, t.exes = nil, nil
}

func (t *Tracer) detachLocked(pid int) {
	if p, ok := t.procLinks[pid]; ok {
		delete(t.procLinks, pid)
		p.release(t.exes)
	}
}
