// Package pause stops and resumes BE processes' CPU side for gpreemptd:
// one Pauser per daemon, whose holders (the request gate, SLO mode's
// calibration) each release only their own stops, with a watchdog process
// outside the daemon's cgroup that resumes them if the daemon dies.
package pause

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// Pauser stops BE processes' CPU side (SIGSTOP) while an LC request runs
// (the request gate) or while SLO mode learns an LC process alone, and
// resumes them (SIGCONT). With its CPU side stopped a BE process queues
// no more GPU work; what it had queued drains (a training step or three,
// ~100 ms for resnet50 training on an H100) and the LC then has the GPU
// to itself. The driver sees nothing: its channel groups stay as they
// were (unlike disabling their scheduling, which left a BE unable to
// finish on this driver; docs/SLO.md).
//
// One Pauser serves the daemon; each user is a holder (Holder: the gate,
// SLO mode's calibration). A BE stays stopped until every holder that
// stopped it has released it: neither resumes what the other holds.
//
// Processes are held through pidfds, so a reused pid is never signalled,
// and a process that was already stopped (by its owner's shell, a
// debugger) is left alone, neither stopped nor resumed. A hold is checked
// against the process's real state (/proc/PID/stat) before it is
// trusted: a BE its owner resumed (SIGCONT) is counted, stopped again and
// reported not held for that check.
//
// Stops outlive the daemon in two ways. A watchdog process (this binary,
// WatchdogArg), started once and moved out of the daemon's cgroup
// (WatchdogCgroup), holds a copy of each pidfd with its deadline (an
// absolute CLOCK_MONOTONIC time) and resumes each process at it, or all
// of them as soon as the daemon is gone (its end of the socket closes):
// a daemon that crashes, is killed, or has its whole cgroup killed never
// leaves BE stopped past the deadline. And every process held is
// recorded (pid and start time) in StateDir before it is stopped, so that
// the next daemon resumes what no watchdog did (ResumeRecorded).
type Pauser struct {
	// Exe is the binary started as the watchdog (default: this one).
	Exe string
	// Proc is where processes' start times are read (default /proc; the
	// tests' rigs give processes start times of their own). Their states
	// are always the kernel's, from /proc.
	Proc string
	// StateDir is the daemon's private directory, where the processes
	// held are recorded ("": not recorded).
	StateDir string
	// WatchdogCgroup is the cgroup v2 directory the watchdog is moved
	// into, outside the daemon's ("": gpreempt-watchdog at the root of
	// the cgroup v2 hierarchy, made if missing; "none": left where it
	// starts, in the daemon's).
	WatchdogCgroup string
	Log            *slog.Logger

	mu   sync.Mutex
	held map[int]*heldProc
	dog  *watchdog
	// selfResumed counts held processes found running (their owner
	// resumed them).
	selfResumed atomic.Uint64
	warned      bool // the watchdog could not leave the daemon's cgroup (said once)
}

// heldProc is one process held stopped, and by whom.
type heldProc struct {
	ref policy.ProcRef
	fd  int
	// by holds each holder's deadline (CLOCK_MONOTONIC, monotonic()):
	// past it, the holder no longer counts on the stop (the watchdog
	// resumes at the latest).
	by map[string]time.Duration
	// told is the deadline the watchdog has for it (0: none).
	told time.Duration
}

func (h *heldProc) deadline() time.Duration {
	var d time.Duration
	for _, t := range h.by {
		d = max(d, t)
	}
	return d
}

// WatchdogArg, as a binary's first argument, makes it the pause watchdog
// (RunWatchdog). gpreemptd's main and the daemon package's tests
// dispatch on it.
const WatchdogArg = "__gpreemptd-pause-watchdog"

// ErrPause is the error class of stopping and resuming BE processes.
var ErrPause = errors.New("pausing BE processes")

// anonymous is the holder of the Pauser's own methods.
const anonymous = ""

func (p *Pauser) proc() string {
	if p.Proc == "" {
		return "/proc"
	}
	return p.Proc
}

func (p *Pauser) log() *slog.Logger {
	if p.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return p.Log
}

// Holder is one holder's view of a Pauser: what it stops, it alone
// releases; a process another holder holds too stays stopped.
// It satisfies slomode.Pauser and the gate's gatePauser.
type Holder struct {
	p    *Pauser
	name string
}

// Holder returns the holder named name.
func (p *Pauser) Holder(name string) *Holder { return &Holder{p: p, name: name} }

// Stop holds procs stopped for h until max at the latest.
func (h *Holder) Stop(procs []policy.ProcRef, max time.Duration) (int, error) {
	return h.p.stop(h.name, procs, max)
}

// ResumeExcept releases h's holds but keep's; a process no holder holds
// any more is resumed.
func (h *Holder) ResumeExcept(keep []policy.ProcRef) (int, error) {
	return h.p.release(h.name, keep)
}

// Resume releases every hold of h.
func (h *Holder) Resume() error { _, err := h.p.release(h.name, nil); return err }

// Holding reports whether h holds processes, none past its deadline.
func (h *Holder) Holding() bool { return h.p.holding(h.name) }

// Holds reports whether h holds r and r is stopped.
func (h *Holder) Holds(r policy.ProcRef) bool { return h.p.holds(h.name, r) }

// Still reports whether r makes no progress now (Pauser.Still).
func (h *Holder) Still(r policy.ProcRef) bool { return h.p.Still(r) }

// Enforce stops again the processes h holds that run (Pauser.Enforce).
func (h *Holder) Enforce() int { return h.p.Enforce() }

// Stop stops procs that are not held yet, and holds them until max at the
// latest (the Pauser's own holder). It returns how many it took. A
// process that has exited, is not the one named (its start time
// differs), or was already stopped by someone else is skipped; an error
// stops nothing (what it had stopped of this call is resumed).
func (p *Pauser) Stop(procs []policy.ProcRef, max time.Duration) (int, error) {
	return p.stop(anonymous, procs, max)
}

// ResumeExcept releases the Pauser's own holds but those in keep; a
// process no holder holds any more is resumed. It returns how many holds
// it released.
func (p *Pauser) ResumeExcept(keep []policy.ProcRef) (int, error) {
	return p.release(anonymous, keep)
}

// Resume releases every hold of the Pauser's own.
func (p *Pauser) Resume() error { _, err := p.release(anonymous, nil); return err }

// Holding reports whether the Pauser's own holder holds processes.
func (p *Pauser) Holding() bool { return p.holding(anonymous) }

// Holds reports whether the Pauser's own holder holds r, stopped.
func (p *Pauser) Holds(r policy.ProcRef) bool { return p.holds(anonymous, r) }

// Held counts the processes held stopped, by any holder.
func (p *Pauser) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.held)
}

// SelfResumed counts the held processes found running since the start:
// resumed by their owner, and stopped again.
func (p *Pauser) SelfResumed() uint64 { return p.selfResumed.Load() }

func (p *Pauser) stop(holder string, procs []policy.ProcRef, max time.Duration) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.held == nil {
		p.held = map[int]*heldProc{}
	}
	now := monotonic()
	deadline := now + min(max, math.MaxInt64-now)
	n := 0
	var fresh []*heldProc
	for _, r := range procs {
		if h, ok := p.held[r.PID]; ok {
			if h.ref.Start == r.Start {
				if _, mine := h.by[holder]; !mine {
					n++
				}
				if h.by[holder] < deadline {
					h.by[holder] = deadline
				}
				p.checkLocked(h) // stopped again if its owner resumed it
				continue
			}
			// The held one exited and its pid was reused.
			p.forgetLocked(h)
		}
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			continue // gone
		}
		// The pidfd names the process that had this pid when it was
		// opened: check it is the one we were given, and running.
		start, state, err := p.stat(r.PID)
		if err != nil || start != r.Start || stoppedOrGone(state) {
			unix.Close(fd)
			continue
		}
		fresh = append(fresh, &heldProc{ref: r, fd: fd, by: map[string]time.Duration{holder: deadline}})
	}
	var errs []error
	// Deadlines that grew go to the watchdog.
	for _, h := range p.held {
		if d := h.deadline(); d > h.told {
			if err := p.tellLocked(h, d); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if len(fresh) == 0 {
		return n, errors.Join(errs...)
	}
	// Recorded, and the watchdog told, before the first SIGSTOP: from it
	// on, something outside this process resumes them.
	for _, h := range fresh {
		p.held[h.ref.PID] = h
	}
	fail := func(err error) (int, error) {
		for _, h := range fresh {
			delete(p.held, h.ref.PID)
			p.dropLocked(h)
			unix.Close(h.fd)
		}
		p.recordLocked()
		return n, fmt.Errorf("%w: %w", ErrPause, err)
	}
	if err := p.recordLocked(); err != nil {
		return fail(err)
	}
	for _, h := range fresh {
		if err := p.tellLocked(h, deadline); err != nil {
			return fail(err)
		}
	}
	for i, h := range fresh {
		if err := unix.PidfdSendSignal(h.fd, unix.SIGSTOP, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			for _, done := range fresh[:i] {
				unix.PidfdSendSignal(done.fd, unix.SIGCONT, nil, 0)
			}
			return fail(fmt.Errorf("SIGSTOP to pid %d: %v", h.ref.PID, err))
		}
	}
	return n + len(fresh), errors.Join(errs...)
}

func stoppedOrGone(state byte) bool {
	return state == 'T' || state == 't' || state == 'Z' || state == 'X'
}

// release ends holder's holds but keep's, and resumes the processes no
// holder holds any more. It returns how many holds it ended.
func (p *Pauser) release(holder string, keep []policy.ProcRef) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	n := 0
	changed := false
	for pid, h := range p.held {
		if _, mine := h.by[holder]; !mine {
			continue
		}
		if slices.ContainsFunc(keep, func(r policy.ProcRef) bool { return r.PID == pid && r.Start == h.ref.Start }) {
			continue
		}
		delete(h.by, holder)
		n++
		if len(h.by) > 0 {
			continue // another holder holds it
		}
		if err := unix.PidfdSendSignal(h.fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			// The watchdog, not told, resumes it at its deadline.
			errs = append(errs, fmt.Errorf("%w: SIGCONT to pid %d: %v; its watchdog resumes it", ErrPause, pid, err))
		} else {
			p.dropLocked(h)
		}
		unix.Close(h.fd)
		delete(p.held, pid)
		changed = true
	}
	if changed {
		if err := p.recordLocked(); err != nil {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// ResumeAll releases every holder's holds and resumes what they held: the
// daemon's way out, whatever its loops are doing.
func (p *Pauser) ResumeAll() error {
	p.mu.Lock()
	holders := map[string]bool{}
	for _, h := range p.held {
		for name := range h.by {
			holders[name] = true
		}
	}
	p.mu.Unlock()
	var errs []error
	for name := range holders {
		_, err := p.release(name, nil)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Close resumes everything held and lets the watchdog go (it exits once
// it sees the daemon's end close).
func (p *Pauser) Close() error {
	err := p.ResumeAll()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dog != nil {
		p.dog.close()
		p.dog = nil
	}
	return err
}

func (p *Pauser) holding(holder string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now, any := monotonic(), false
	for _, h := range p.held {
		if d, mine := h.by[holder]; mine {
			if now >= d {
				return false
			}
			any = true
		}
	}
	return any
}

func (p *Pauser) holds(holder string, r policy.ProcRef) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	h, ok := p.held[r.PID]
	if !ok || h.ref.Start != r.Start {
		return false
	}
	d, mine := h.by[holder]
	return mine && monotonic() < d && p.checkLocked(h)
}

// Still reports whether r makes no progress now, from its real state:
// stopped (held, or by someone else), or exited. A held process found
// running is stopped again, and is not still now.
func (p *Pauser) Still(r policy.ProcRef) bool {
	p.mu.Lock()
	if h, ok := p.held[r.PID]; ok && h.ref.Start == r.Start {
		defer p.mu.Unlock()
		if p.checkLocked(h) {
			return true
		}
		start, state, err := p.stat(r.PID)
		return err != nil || start != r.Start || state == 'Z' || state == 'X'
	}
	p.mu.Unlock()
	start, state, err := p.stat(r.PID)
	return err != nil || start != r.Start || stoppedOrGone(state)
}

// Enforce checks every held process's real state and stops again those
// that run (their owner resumed them); it returns how many.
func (p *Pauser) Enforce() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, h := range p.held {
		if !p.checkLocked(h) {
			n++
		}
	}
	return n
}

// checkLocked reports whether h is stopped now. One that runs while a
// holder's deadline is ahead was resumed by its owner: it is counted,
// logged and stopped again (it ran until now: not held). Past every
// deadline the watchdog may have resumed it: it is left running.
func (p *Pauser) checkLocked(h *heldProc) bool {
	start, state, err := p.stat(h.ref.PID)
	if err != nil || start != h.ref.Start {
		return false // gone
	}
	if state == 'T' || state == 't' {
		return true
	}
	if stoppedOrGone(state) || monotonic() >= h.deadline() {
		return false
	}
	// A SIGSTOP sent but not yet acted on (the process is not on a CPU
	// yet) is pending: a SIGCONT would have discarded it. One taken off
	// the queue is neither pending nor shown stopped until the process
	// stops: looked at again a few times before it counts as resumed.
	for i := 0; i < stopSettle; i++ {
		if stopPending(h.ref.PID) {
			return true
		}
		time.Sleep(time.Millisecond)
		if _, st, err := p.stat(h.ref.PID); err == nil && (st == 'T' || st == 't') {
			return true
		}
	}
	p.selfResumed.Add(1)
	p.log().Warn("pause: a held BE process runs (resumed by its owner); stopped again", "pid", h.ref.PID, "comm", h.ref.Comm)
	unix.PidfdSendSignal(h.fd, unix.SIGSTOP, nil, 0)
	return false
}

// stopSettle is how many times, a millisecond apart, a held process not
// shown stopped is looked at again before it counts as resumed by its
// owner (between taking SIGSTOP off its queue and stopping, it is
// neither pending nor stopped).
const stopSettle = 20

// stopPending reports whether a SIGSTOP waits to be acted on by pid
// (/proc/PID/status: ShdPnd for the process, SigPnd for a thread).
func stopPending(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || k != "ShdPnd" && k != "SigPnd" {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64); err == nil && mask&(1<<(unix.SIGSTOP-1)) != 0 {
			return true
		}
	}
	return false
}

// forgetLocked drops h (its process is gone) without signalling it.
func (p *Pauser) forgetLocked(h *heldProc) {
	p.dropLocked(h)
	unix.Close(h.fd)
	delete(p.held, h.ref.PID)
}

// stat reads a process's start time (from Proc) and state (the
// kernel's).
func (p *Pauser) stat(pid int) (start uint64, state byte, err error) {
	b, err := os.ReadFile(p.proc() + "/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	if start, err = tsg.StartTime(b); err != nil {
		return 0, 0, err
	}
	if p.proc() != "/proc" {
		if b, err = os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err != nil {
			return 0, 0, err
		}
	}
	state, ok := procfs.StatState(b)
	if !ok {
		return 0, 0, errors.New("stat: no state")
	}
	return start, state, nil
}
