package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"golang.org/x/sys/unix"
)

// Pauser stops BE processes' CPU side (SIGSTOP) while SLO mode learns an
// LC process alone, and resumes them (SIGCONT). With its CPU side stopped
// a BE process queues no more GPU work; what it had queued drains (a
// training step or three, ~100 ms for resnet50 training on an H100) and
// the LC then has the GPU to itself. The driver sees nothing: its channel
// groups stay as they were (unlike disabling their scheduling, which left
// a BE unable to finish on this driver; docs/SLO.md).
//
// Processes are held through pidfds, so a reused pid is never signalled,
// and a process that was already stopped (by its owner's shell, a
// debugger) is left alone, neither stopped nor resumed. Each stop starts a
// watchdog process (this binary, WatchdogArg) that holds the same pidfds
// and resumes them at a deadline, or as soon as the daemon goes away
// without saying it resumed them itself (its end of a pipe closes): a
// daemon that crashes, or is killed, never leaves BE stopped for longer
// than the deadline.
type Pauser struct {
	// Exe is the binary started as the watchdog (default: this one).
	Exe string
	// Proc is the proc file system (default /proc).
	Proc string

	mu   sync.Mutex
	held map[int]heldProc
	dogs []*watchdog
}

type heldProc struct {
	start uint64
	fd    int
}

type watchdog struct {
	cmd *exec.Cmd
	in  *os.File
	// procs are the processes it resumes at deadline.
	procs []policy.ProcRef
	// owed are those of procs whose SIGCONT from the daemon failed, by
	// pid: it resumes them itself when released (it tries itself), and
	// their pidfds stay open here until then, for a watchdog that
	// replaces it.
	owed     map[int]heldProc
	deadline time.Time
	// reaped is closed once a released watchdog has exited.
	reaped chan struct{}
}

// WatchdogArg, as a binary's first argument, makes it the watchdog of a
// pause (RunWatchdog). gpreemptd's main and the daemon package's tests
// dispatch on it.
const WatchdogArg = "__gpreemptd-pause-watchdog"

// ErrPause is the error class of stopping and resuming BE processes.
var ErrPause = errors.New("pausing BE processes")

func (p *Pauser) proc() string {
	if p.Proc == "" {
		return "/proc"
	}
	return p.Proc
}

// Stop stops procs that are not held yet, and starts a watchdog that
// resumes them after max. It returns how many it stopped now. A process
// that has exited, is not the one named (its start time differs), or was
// already stopped is skipped; an error stops nothing (what it had stopped
// of this call is resumed).
func (p *Pauser) Stop(procs []policy.ProcRef, max time.Duration) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[int]heldProc{}
	}
	var fds []int
	var refs []policy.ProcRef
	closeAll := func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}
	for _, r := range procs {
		if h, ok := p.held[r.PID]; ok {
			if h.start == r.Start {
				continue
			}
			// The held one exited and its pid was reused.
			unix.Close(h.fd)
			delete(p.held, r.PID)
		}
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			continue // gone
		}
		// The pidfd names the process that had this pid when it was
		// opened: check it is the one we were given, and running.
		start, state, err := p.stat(r.PID)
		if err != nil || start != r.Start || state == 'T' || state == 't' || state == 'Z' || state == 'X' {
			unix.Close(fd)
			continue
		}
		fds, refs = append(fds, fd), append(refs, r)
	}
	if len(fds) == 0 {
		return 0, nil
	}
	// The watchdog first: from the first SIGSTOP on, something outside
	// this process will resume them.
	dog, err := p.startWatchdog(refs, fds, time.Now().Add(max))
	if err != nil {
		closeAll()
		return 0, fmt.Errorf("%w: starting the watchdog: %v", ErrPause, err)
	}
	for i, fd := range fds {
		if err := unix.PidfdSendSignal(fd, unix.SIGSTOP, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			for _, done := range fds[:i] {
				unix.PidfdSendSignal(done, unix.SIGCONT, nil, 0)
			}
			dog.release(true)
			closeAll()
			return 0, fmt.Errorf("%w: SIGSTOP to pid %d: %v", ErrPause, refs[i].PID, err)
		}
	}
	for i, fd := range fds {
		p.held[refs[i].PID] = heldProc{start: refs[i].Start, fd: fd}
	}
	p.dogs = append(p.dogs, dog)
	return len(fds), nil
}

// Holding reports whether processes are held stopped, before the earliest
// watchdog's deadline (past it they may have been resumed).
func (p *Pauser) Holding() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.held) == 0 {
		return false
	}
	now := time.Now()
	return !slices.ContainsFunc(p.dogs, func(d *watchdog) bool { return !now.Before(d.deadline) })
}

// Holds reports whether r is held stopped.
func (p *Pauser) Holds(r policy.ProcRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.held[r.PID]
	return ok && h.start == r.Start
}

// Still reports whether r makes no progress now: held stopped, or stopped
// by someone else, or exited.
func (p *Pauser) Still(r policy.ProcRef) bool {
	if p.Holds(r) {
		return true
	}
	start, state, err := p.stat(r.PID)
	return err != nil || start != r.Start || state == 'T' || state == 't' || state == 'Z' || state == 'X'
}

// Resume resumes every held process and dismisses the watchdogs. A
// process that exited meanwhile is no error.
func (p *Pauser) Resume() error {
	_, err := p.ResumeExcept(nil)
	return err
}

// ResumeExcept resumes every held process but those in keep (one search
// of the SLO mode ends its calibration while another goes on), and
// dismisses the watchdogs of the ones resumed. A watchdog that held both
// is replaced by one for those still stopped, with what was left of its
// deadline, so that it never resumes at its deadline a process stopped
// again since. A process that exited meanwhile is no error. It returns
// how many it resumed.
func (p *Pauser) ResumeExcept(keep []policy.ProcRef) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	n := 0
	// Where a SIGCONT failed, the process's watchdog is left in charge of
	// it (it tries itself when released): failed keeps its pidfd open
	// for the watchdog's owed.
	failed := map[int]heldProc{}
	for pid, h := range p.held {
		if slices.ContainsFunc(keep, func(r policy.ProcRef) bool { return r.PID == pid && r.Start == h.start }) {
			continue
		}
		if err := unix.PidfdSendSignal(h.fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("%w: SIGCONT to pid %d: %v", ErrPause, pid, err))
			failed[pid] = h
		} else {
			unix.Close(h.fd)
		}
		delete(p.held, pid)
		n++
	}
	of := func(set map[int]heldProc, r policy.ProcRef) (heldProc, bool) {
		h, ok := set[r.PID]
		return h, ok && h.start == r.Start
	}
	var dogs []*watchdog
	for _, d := range p.dogs {
		var still, retry []policy.ProcRef
		var fds []int
		owed := map[int]heldProc{}
		for _, r := range d.procs {
			if h, ok := of(d.owed, r); ok { // since an earlier call
				if _, ok := of(p.held, r); ok {
					// Stopped again since, by a later Stop, whose
					// watchdog has it: no longer this one's.
					unix.Close(h.fd)
				} else {
					retry, owed[r.PID] = append(retry, r), h
				}
				continue
			}
			if h, ok := of(p.held, r); ok {
				still, fds = append(still, r), append(fds, h.fd)
			} else if h, ok := of(failed, r); ok {
				delete(failed, r.PID)
				retry, owed[r.PID] = append(retry, r), h
			}
		}
		switch {
		case len(still) == len(d.procs):
			dogs = append(dogs, d)
			continue
		case len(still) == 0:
			d.release(len(retry) == 0)
			closeFDs(owed)
			continue
		}
		// Its processes still stopped, and those it is to resume for a
		// failed SIGCONT, go to a new watchdog; the old one is told they
		// are resumed, so it never resumes the kept ones.
		for _, r := range retry {
			fds = append(fds, owed[r.PID].fd)
		}
		nd, err := p.startWatchdog(slices.Concat(still, retry), fds, d.deadline)
		if err != nil {
			// None in charge of them: resume them now, and let the old
			// watchdog try too (every process it holds is resumed in
			// this call, owed, or gone).
			for _, r := range still {
				h := p.held[r.PID]
				if err := unix.PidfdSendSignal(h.fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
					errs = append(errs, fmt.Errorf("%w: SIGCONT to pid %d: %v", ErrPause, r.PID, err))
				}
				unix.Close(h.fd)
				delete(p.held, r.PID)
				n++
			}
			errs = append(errs, fmt.Errorf("%w: replacing a watchdog: %v; resumed what it held", ErrPause, err))
			d.release(false)
			closeFDs(owed)
			continue
		}
		d.release(true)
		nd.owed = owed
		dogs = append(dogs, nd)
	}
	closeFDs(failed) // none: every held process has a watchdog
	p.dogs = dogs
	return n, errors.Join(errs...)
}

// closeFDs closes the pidfds of hs.
func closeFDs(hs map[int]heldProc) {
	for _, h := range hs {
		unix.Close(h.fd)
	}
}

// stat reads a process's start time and state.
func (p *Pauser) stat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(p.proc() + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	start, err = StartTime(b)
	if err != nil {
		return 0, 0, err
	}
	state, ok := StatState(b)
	if !ok {
		return 0, 0, errors.New("stat: no state")
	}
	return start, state, nil
}

// startWatchdog starts the watchdog of procs, whose pidfds are fds: it
// resumes them at deadline unless released.
func (p *Pauser) startWatchdog(procs []policy.ProcRef, fds []int, deadline time.Time) (*watchdog, error) {
	exe := p.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		// Dup'd: the watchdog's copies close with its own files here.
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			w.Close()
			return nil, err
		}
		files[i] = os.NewFile(uintptr(d), "pidfd")
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	cmd := exec.Command(exe, WatchdogArg, time.Until(deadline).String(), strconv.Itoa(len(fds)))
	cmd.Stdin, cmd.ExtraFiles = r, files
	// Its own session: a terminal's ^C to the daemon's process group does
	// not take it down before it has resumed BE.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	// No handshake: the child holds the pidfds from its exec on, and a
	// daemon gone before it reads its stdin is an EOF there.
	return &watchdog{cmd: cmd, in: w, procs: procs, deadline: deadline}, nil
}

// release tells the watchdog BE was resumed (or, if not resumed, lets
// it resume BE itself), and reaps it in the background: a watchdog still
// starting up (tens of milliseconds for this binary) must not hold up its
// caller, the request gate's loop among them.
func (d *watchdog) release(resumed bool) {
	if resumed {
		io.WriteString(d.in, "resumed\n")
	}
	d.in.Close()
	d.reaped = make(chan struct{})
	go func() { d.cmd.Wait(); close(d.reaped) }()
}

// RunWatchdog is the watchdog of one pause: args are its deadline and the
// number of pidfds it was given (from fd 3 on). It resumes them when the
// deadline passes, when its stdin closes without "resumed" (the daemon is
// gone), or on SIGTERM, SIGINT or SIGHUP; on "resumed" it leaves them as
// they are. It returns the exit code.
func RunWatchdog(args []string, stdin io.Reader, stderr io.Writer) int {
	if len(args) != 2 {
		fmt.Fprintln(stderr, "gpreemptd pause watchdog: want DEADLINE N")
		return 2
	}
	max, err1 := time.ParseDuration(args[0])
	n, err2 := strconv.Atoi(args[1])
	if err1 != nil || err2 != nil || n <= 0 {
		fmt.Fprintf(stderr, "gpreemptd pause watchdog: bad arguments %q\n", args)
		return 2
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	told := make(chan bool, 1)
	go func() {
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		told <- strings.TrimSpace(line) == "resumed"
	}()
	t := time.NewTimer(max)
	select {
	case ok := <-told:
		if ok {
			return 0
		}
	case <-t.C:
	case <-sigs:
	}
	failed := 0
	for i := range n {
		if err := unix.PidfdSendSignal(3+i, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			fmt.Fprintf(stderr, "gpreemptd pause watchdog: SIGCONT: %v\n", err)
			failed++
		}
	}
	if failed > 0 {
		return 1
	}
	return 0
}
