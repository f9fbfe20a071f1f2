package trace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Options says what to trace.
type Options struct {
	// RM attaches the programs on the ioctl syscall tracepoints (and on
	// process exit): RM allocations, frees and controls.
	RM bool
	// Probes are user-space functions to trace (see ResolveProbes). Sync
	// and hint functions are traced at entry and return, the others at
	// entry.
	Probes []Probe
	// PID limits tracing to one process; 0 traces every process.
	PID int
	// PerProcess attaches Probes to no process at Open: each process is
	// attached by AttachProcess, to the library it has mapped, and only
	// its calls reach the programs (the breakpoints are in its memory
	// alone). The probes' Library is not read.
	PerProcess bool
	// IgnorePID, when not 0, is a process whose RM ioctls are never
	// recorded (the caller's own, so that its probes do not fill the
	// ring buffer). Process exits are still reported.
	IgnorePID int
	// MountTracefs lets Open mount tracefs at /sys/kernel/tracing when it
	// is not mounted; without it that is ErrNoTracefs.
	MountTracefs bool
	// Buffer is the capacity of the Events channel (default 4096).
	Buffer int
	// Poll is how often the ring buffers are read (default 10 ms). The
	// programs do not wake the reader (that would cost every traced call
	// more than the rest of the tracing), so an event is delivered up to
	// Poll after it happened.
	Poll time.Duration
	// Logger receives what the tracer did on the way (default: discarded).
	Logger *slog.Logger

	// perFunction attaches processes (PerProcess) one uprobe per
	// function even where uprobe_multi links work: the fallback, for its
	// tests.
	perFunction bool
}

// Tracer holds the loaded programs, their attachments and the ring-buffer
// readers. Events arrive on Events until tracing stops.
type Tracer struct {
	log     *slog.Logger
	poll    time.Duration
	start   uint64
	stopAt  atomic.Uint64 // when Stop began detaching (0: not yet)
	rm      *rmObjects
	calls   *callsObjects
	links   []link.Link
	readers []*ringbuf.Reader
	probes  []Probe
	skipped []Skipped

	// Per process (Options.PerProcess): the functions to trace, what is
	// attached for each process, the libraries opened, and the table the
	// cookies index (grown as processes bring symbols; read by the
	// readers without the lock).
	perProcess []Probe
	pmu        sync.Mutex
	procLinks  map[int]counted            // by pid: its links and the library they are in
	exes       map[string]*counterLibrary // by file (device and inode), while a process is attached through it
	table      atomic.Pointer[[]Probe]
	// multi: a process's functions are attached as one uprobe_multi link
	// per program, not one perf-event uprobe per function (chosen at
	// Open; dropped for good if the kernel then refuses such a link).
	// Detaching then waits for the kernel's grace periods once per link
	// instead of once per function (docs/TRACING.md).
	multi bool
	// uprobeMulti makes a uprobe_multi link (the library's; tests
	// replace it).
	uprobeMulti func(ex *link.Executable, ret bool, symbols []string, prog *ebpf.Program, opts *link.UprobeMultiOptions) (link.Link, error)

	events    chan Event
	done      chan struct{}
	wg        sync.WaitGroup
	stopOnce  sync.Once
	closeOnce sync.Once
	badRecs   atomic.Uint64
	errMu     sync.Mutex
	err       error
}

// Open loads and attaches the programs Options ask for. Tracing stops when
// ctx is done (or Stop is called): Events then delivers what was already
// recorded and is closed. Close releases everything.
//
// Errors: ErrNotRoot, ErrNoTracefs, ErrBPFUnavailable, ErrNoLibrary (a
// probe's library cannot be read), ErrNoSymbols (no requested function
// exists; those that do not are listed by Skipped).
func Open(ctx context.Context, opts Options) (_ *Tracer, err error) {
	if !opts.RM && len(opts.Probes) == 0 {
		return nil, errors.New("trace: nothing to trace")
	}
	t := &Tracer{log: opts.Logger, poll: opts.Poll, done: make(chan struct{})}
	if t.poll <= 0 {
		t.poll = 10 * time.Millisecond
	}
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	if err := checkPrivileges(); err != nil {
		return nil, err
	}
	// Kernels before 5.11 charge BPF maps to RLIMIT_MEMLOCK.
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, fmt.Errorf("%w: remove memlock limit: %w", ErrBPFUnavailable, err)
	}
	defer func() {
		if err != nil {
			t.release()
		}
	}()
	if opts.RM {
		if err := ensureTracefs(opts.MountTracefs, t.log); err != nil {
			return nil, err
		}
		if err := t.openRM(uint32(opts.PID), uint32(opts.IgnorePID)); err != nil {
			return nil, err
		}
	}
	switch {
	case opts.PerProcess:
		if err := t.openPerProcess(opts.Probes, opts.perFunction); err != nil {
			return nil, err
		}
	case len(opts.Probes) > 0:
		if err := t.openCalls(ctx, opts.Probes, opts.PID); err != nil {
			return nil, err
		}
	}
	// Once every probe is attached: before, a trace sees some functions and not others.
	t.start = Now()
	buffer := opts.Buffer
	if buffer <= 0 {
		buffer = 4096
	}
	t.events = make(chan Event, buffer)
	for _, rd := range t.readers {
		t.wg.Add(1)
		go t.read(rd)
	}
	go func() {
		t.wg.Wait()
		close(t.events)
	}()
	go func() {
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.done:
		}
	}()
	return t, nil
}

// loadError names the kernel's refusal of a BPF object. A verifier
// refusal counts as BPF unavailable: the programs load on the kernels this
// project supports (tests load them), so a refusal means an older or
// restricted kernel; the verifier's log stays in the chain.
func loadError(what string, err error) error {
	var verr *ebpf.VerifierError
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: load %s: %w", ErrNotRoot, what, err)
	case errors.Is(err, ebpf.ErrNotSupported), errors.Is(err, unix.ENOSYS), errors.As(err, &verr):
		return fmt.Errorf("%w: load %s: %w", ErrBPFUnavailable, what, err)
	}
	return fmt.Errorf("load %s: %w", what, err)
}

// loadCallPrograms loads the uprobe programs and their maps: with multi,
// the uprobe_multi programs too; without, those are left out, so that a
// kernel that would refuse them still loads the others.
func loadCallPrograms(spec *ebpf.CollectionSpec, multi bool) (*callsObjects, error) {
	objs := &callsObjects{}
	if multi {
		if err := spec.LoadAndAssign(objs, nil); err != nil {
			return nil, err
		}
		return objs, nil
	}
	// LoadAndAssign loads only what the struct names.
	var single struct {
		callsMaps
		CallEnter     *ebpf.Program `ebpf:"call_enter"`
		CallEnterHint *ebpf.Program `ebpf:"call_enter_hint"`
		CallReturn    *ebpf.Program `ebpf:"call_return"`
	}
	if err := spec.LoadAndAssign(&single, nil); err != nil {
		return nil, err
	}
	objs.callsMaps = single.callsMaps
	objs.CallEnter, objs.CallEnterHint, objs.CallReturn = single.CallEnter, single.CallEnterHint, single.CallReturn
	return objs, nil
}

// attachError names the kernel's refusal of an attachment.
func attachError(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		return fmt.Errorf("%w: attach %s: %w", ErrNotRoot, what, err)
	case errors.Is(err, os.ErrNotExist), errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%w: attach %s: %w", ErrBPFUnavailable, what, err)
	}
	return fmt.Errorf("attach %s: %w", what, err)
}

func (t *Tracer) openRM(pid, ignore uint32) error {
	spec, err := loadRm()
	if err != nil {
		return fmt.Errorf("rm programs: %w", err)
	}
	if err := spec.Variables["filter_tgid"].Set(pid); err != nil {
		return fmt.Errorf("rm programs: set filter_tgid: %w", err)
	}
	if err := spec.Variables["ignore_tgid"].Set(ignore); err != nil {
		return fmt.Errorf("rm programs: set ignore_tgid: %w", err)
	}
	t.rm = &rmObjects{}
	if err := spec.LoadAndAssign(t.rm, nil); err != nil {
		t.rm = nil
		return loadError("rm programs", err)
	}
	for _, tp := range []struct {
		group, name string
		prog        *ebpf.Program
	}{
		{"syscalls", "sys_enter_ioctl", t.rm.RmIoctlEnter},
		{"syscalls", "sys_exit_ioctl", t.rm.RmIoctlExit},
		{"sched", "sched_process_exit", t.rm.RmTaskExit},
	} {
		l, err := link.Tracepoint(tp.group, tp.name, tp.prog, nil)
		if err != nil {
			return attachError(tp.group+":"+tp.name, err)
		}
		t.links = append(t.links, l)
	}
	rd, err := ringbuf.NewReader(t.rm.RmEvents)
	if err != nil {
		return fmt.Errorf("rm ring buffer: %w", err)
	}
	t.readers = append(t.readers, rd)
	t.log.Info("attached", "programs", "rm ioctl tracepoints", "pid", pid, "ignore_pid", ignore)
	return nil
}

func (t *Tracer) openCalls(ctx context.Context, probes []Probe, pid int) error {
	keep, skipped, libs, err := resolveOpen(probes)
	// Attached through the files read; the uprobes outlive them.
	defer func() {
		for _, l := range libs {
			l.Close()
		}
	}()
	if err != nil {
		return err
	}
	t.skipped = skipped
	for _, s := range skipped {
		t.log.Info("uprobe skipped", "symbol", s.Probe.Symbol, "library", s.Probe.Library, "reason", s.Reason)
	}
	if len(keep) == 0 {
		return fmt.Errorf("%w: none of %d functions found (%s)", ErrNoSymbols, len(probes), probeLibraries(probes))
	}
	spec, err := loadCalls()
	if err != nil {
		return fmt.Errorf("uprobe programs: %w", err)
	}
	if err := spec.Variables["filter_tgid"].Set(uint32(pid)); err != nil {
		return fmt.Errorf("uprobe programs: set filter_tgid: %w", err)
	}
	if t.calls, err = loadCallPrograms(spec, false); err != nil {
		return loadError("uprobe programs", err)
	}
	exes := map[string]*link.Executable{}
	for i, p := range keep {
		if err := ctx.Err(); err != nil {
			return err
		}
		ex := exes[p.Library]
		if ex == nil {
			if ex, err = libs[p.Library].Executable(); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrNoLibrary, p.Library, err)
			}
			exes[p.Library] = ex
		}
		uo := &link.UprobeOptions{PID: pid, Cookie: cookie(p.Role, i), Address: p.Offset}
		enter := t.calls.CallEnter
		if p.Role == RoleHint {
			enter = t.calls.CallEnterHint
		}
		l, err := ex.Uprobe(p.Symbol, enter, uo)
		if err != nil {
			return attachError("uprobe "+p.Symbol, err)
		}
		t.links = append(t.links, l)
		if hasReturn(p.Role) {
			l, err := ex.Uretprobe(p.Symbol, t.calls.CallReturn, uo)
			if err != nil {
				return attachError("uretprobe "+p.Symbol, err)
			}
			t.links = append(t.links, l)
		}
	}
	t.probes = keep
	rd, err := ringbuf.NewReader(t.calls.CallEvents)
	if err != nil {
		return fmt.Errorf("uprobe ring buffer: %w", err)
	}
	t.readers = append(t.readers, rd)
	t.log.Info("attached", "uprobes", len(keep), "skipped", len(skipped), "pid", pid)
	return nil
}

func probeLibraries(probes []Probe) string {
	seen := map[string]bool{}
	var s string
	for _, p := range probes {
		if !seen[p.Library] {
			if s != "" {
				s += ", "
			}
			s += p.Library
			seen[p.Library] = true
		}
	}
	return s
}

// read decodes one ring buffer's records into Events until the reader is
// flushed (Stop) or closed (Close). The programs never wake it: each poll
// deadline makes it read what has accumulated.
func (t *Tracer) read(rd *ringbuf.Reader) {
	defer t.wg.Done()
	var rec ringbuf.Record
	for {
		rd.SetDeadline(time.Now().Add(t.poll))
		if err := rd.ReadInto(&rec); errors.Is(err, os.ErrDeadlineExceeded) {
			continue
		} else if err != nil {
			if !errors.Is(err, ringbuf.ErrClosed) && !errors.Is(err, ringbuf.ErrFlushed) {
				t.setErr(fmt.Errorf("read ring buffer: %w", err))
			}
			return
		}
		ev, err := Decode(rec.RawSample)
		if err != nil {
			t.badRecs.Add(1)
			t.log.Debug("bad record", "err", err)
			continue
		}
		if !t.within(ev) {
			continue
		}
		if c, ok := ev.(*Call); ok {
			if table := t.table.Load(); table != nil && int(c.Index) < len(*table) {
				c.Symbol = (*table)[c.Index].Symbol
			} else if int(c.Index) < len(t.probes) {
				c.Symbol = t.probes[c.Index].Symbol
			}
		}
		select {
		case t.events <- ev:
		case <-t.done:
			return
		}
	}
}

func (t *Tracer) setErr(err error) {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	if t.err == nil {
		t.err = err
	}
}

// Events delivers the decoded events, in order per ring buffer (RM calls
// in the order they returned; function calls in the order they happened).
// It is closed once tracing has stopped and the buffers are drained.
func (t *Tracer) Events() <-chan Event { return t.events }

// Start is when tracing began (all probes in), End when Stop began detaching (0: not yet).
func (t *Tracer) Start() uint64 { return t.start }
func (t *Tracer) End() uint64   { return t.stopAt.Load() }

// within reports whether ev lies inside the span every probe was attached for, from Start to
// when Stop began detaching: outside it some functions are seen and others not (a request's
// synchronizes without its launches), which would cut requests where none ended.
func (t *Tracer) within(ev Event) bool {
	first, stop := ev.Time(), t.End() // stop: one load an event
	if r, ok := ev.(*RMCall); ok {
		first = r.Enter
	}
	return first >= t.start && (stop == 0 || ev.Time() <= stop)
}

// Probes are the functions traced.
func (t *Tracer) Probes() []Probe { return t.probes }

// Skipped are the requested functions not traced, with the reason.
func (t *Tracer) Skipped() []Skipped { return t.skipped }

// Err is the error that ended reading, if any.
func (t *Tracer) Err() error {
	t.errMu.Lock()
	defer t.errMu.Unlock()
	return t.err
}

// Lost counts the events lost so far: records the programs could not
// reserve (ring buffer or in-flight table full) and records that did not
// decode.
func (t *Tracer) Lost() uint64 {
	n := t.badRecs.Load()
	for _, m := range []*ebpf.Map{t.rmDropped(), t.callDropped()} {
		if m == nil {
			continue
		}
		var perCPU []uint64
		if err := m.Lookup(uint32(0), &perCPU); err == nil {
			for _, v := range perCPU {
				n += v
			}
		}
	}
	return n
}

func (t *Tracer) rmDropped() *ebpf.Map {
	if t.rm == nil {
		return nil
	}
	return t.rm.RmDropped
}

func (t *Tracer) callDropped() *ebpf.Map {
	if t.calls == nil {
		return nil
	}
	return t.calls.CallDropped
}

// Stop detaches the programs; what they recorded before it began is
// still delivered, then Events is closed.
func (t *Tracer) Stop() {
	t.stopOnce.Do(func() {
		t.stopAt.Store(Now())
		closeLinks(t.links)
		t.links = nil
		t.detachAll()
		for _, rd := range t.readers {
			// Readers return the pending records, then ErrFlushed.
			if err := rd.Flush(); err != nil {
				rd.Close()
			}
		}
	})
}

// Close stops tracing and releases the programs and maps. Events not yet
// received are dropped.
func (t *Tracer) Close() error {
	t.Stop()
	t.closeOnce.Do(func() {
		close(t.done)
		t.wg.Wait()
		t.release()
	})
	return nil
}

func (t *Tracer) release() {
	closeLinks(t.links)
	t.links = nil
	t.detachAll()
	for _, rd := range t.readers {
		rd.Close()
	}
	if t.rm != nil {
		t.rm.Close()
	}
	if t.calls != nil {
		t.calls.Close()
	}
}
