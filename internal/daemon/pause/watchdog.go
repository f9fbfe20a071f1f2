package pause

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// watchdogMsg is one message from the daemon, with the descriptors it
// carried.
type watchdogMsg struct {
	text string
	fds  []int
}

// runWatchdog serves the daemon's socket sock until the daemon is gone
// (RunWatchdog).
func runWatchdog(sock int, stderr io.Writer) int {
	type entry struct {
		fd       int
		start    uint64
		deadline time.Duration // CLOCK_MONOTONIC
	}
	held := map[int]entry{}
	failed := 0
	resume := func(pid int, e entry) {
		if err := unix.PidfdSendSignal(e.fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			fmt.Fprintf(stderr, "gpreemptd pause watchdog: SIGCONT to pid %d: %v\n", pid, err)
			failed++
		}
		unix.Close(e.fd)
		delete(held, pid)
	}
	resumeAll := func() int {
		for pid, e := range held {
			resume(pid, e)
		}
		if failed > 0 {
			return 1
		}
		return 0
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, unix.SIGTERM, unix.SIGINT, unix.SIGHUP)
	msgs := make(chan watchdogMsg)
	go func() {
		defer close(msgs)
		buf, oob := make([]byte, 256), make([]byte, unix.CmsgSpace(4*4))
		for {
			n, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n == 0 && oobn == 0 {
				return // the daemon is gone
			}
			var fds []int
			if cmsgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, c := range cmsgs {
					if r, err := unix.ParseUnixRights(&c); err == nil {
						fds = append(fds, r...)
					}
				}
			}
			msgs <- watchdogMsg{text: string(buf[:n]), fds: fds}
		}
	}()
	for {
		var due <-chan time.Time
		var timer *time.Timer
		if len(held) > 0 {
			first := time.Duration(math.MaxInt64)
			for _, e := range held {
				first = min(first, e.deadline)
			}
			timer = time.NewTimer(max(0, first-monotonic()))
			due = timer.C
		}
		select {
		case m, ok := <-msgs:
			if !ok {
				return resumeAll()
			}
			c, err := parseWatchdogMsg(m.text, len(m.fds))
			switch {
			case err != nil:
				// Only the daemon holds the other end: a message it
				// cannot have meant is a bug, said and not acted on.
				fmt.Fprintf(stderr, "gpreemptd pause watchdog: refused: %v\n", err)
			case c.hold:
				if old, ok := held[c.pid]; ok {
					unix.Close(old.fd)
				}
				held[c.pid] = entry{fd: m.fds[0], start: c.start, deadline: c.deadline}
				m.fds = nil
			default:
				if e, ok := held[c.pid]; ok && e.start == c.start {
					unix.Close(e.fd)
					delete(held, c.pid)
				}
			}
			for _, fd := range m.fds {
				unix.Close(fd)
			}
		case <-due:
			now := monotonic()
			for pid, e := range held {
				if e.deadline <= now {
					resume(pid, e)
				}
			}
		case <-sigs:
			return resumeAll()
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// WatchdogCgroupName is the cgroup the watchdog is moved into, at the
// root of the cgroup v2 hierarchy, by default.
const WatchdogCgroupName = "gpreempt-watchdog"

// moveWatchdog moves the watchdog pid out of the daemon's cgroup, into
// WatchdogCgroup: a kill of the daemon's whole cgroup (an OOM kill with
// memory.oom.group, systemctl kill, a container runtime's) leaves it, and
// it resumes BE.
func (p *Pauser) moveWatchdog(pid int) error {
	dir := p.WatchdogCgroup
	switch dir {
	case "none":
		return errors.New("no watchdog cgroup (none)")
	case "":
		root, err := cgroup2Root()
		if err != nil {
			return err
		}
		dir = filepath.Join(root, WatchdogCgroupName)
	}
	if err := unix.Mkdir(dir, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("moving the watchdog into %s: %w", dir, err)
	}
	return nil
}

// cgroup2Root is where the root of the cgroup v2 hierarchy is mounted
// (the mount whose root is the hierarchy's own). In a cgroup namespace
// that root is the namespace's: a container's, which dies with it.
func cgroup2Root() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		// id parent major:minor root mountpoint opts... - fstype source super
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if ok && len(f) >= 5 && len(g) >= 1 && g[0] == "cgroup2" && f[3] == "/" {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup v2 hierarchy mounted")
}

// pausedFile, in the Pauser's StateDir, records the processes held.
const pausedFile = "paused.json"

type pausedProc struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// recordLocked writes the processes held to StateDir, atomically (a new
// file renamed over the old): a daemon that dies at any point leaves the
// last whole record.
func (p *Pauser) recordLocked() error {
	if p.StateDir == "" {
		return nil
	}
	path := filepath.Join(p.StateDir, pausedFile)
	if len(p.held) == 0 {
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: record: %w", ErrPause, err)
		}
		return nil
	}
	var rec []pausedProc
	for _, h := range p.held {
		rec = append(rec, pausedProc{PID: h.ref.PID, Start: h.ref.Start})
	}
	b, _ := json.Marshal(rec)
	f, err := os.CreateTemp(p.StateDir, "."+pausedFile+"-*")
	if err != nil {
		return fmt.Errorf("%w: record: %w", ErrPause, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("%w: record: %w", ErrPause, err)
	}
	return nil
}

// ResumeRecorded resumes the processes a previous daemon recorded held
// (StateDir) that are still stopped: each matched by pid and start time,
// so no other process is resumed. The daemon calls it first, holding its
// lock (no other daemon runs). It returns how many it resumed.
func (p *Pauser) ResumeRecorded() (int, error) {
	if p.StateDir == "" {
		return 0, nil
	}
	path := filepath.Join(p.StateDir, pausedFile)
	b, err := readBounded(path, 1<<20)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: record: %w", ErrPause, err)
	}
	var rec []pausedProc
	if err := json.Unmarshal(b, &rec); err != nil {
		os.Remove(path)
		return 0, fmt.Errorf("%w: record %s: %w", ErrPause, path, err)
	}
	n := 0
	var errs []error
	for _, r := range rec {
		fd, err := unix.PidfdOpen(r.PID, 0)
		if err != nil {
			continue // gone
		}
		if start, state, err := p.stat(r.PID); err == nil && start == r.Start && (state == 'T' || state == 't') {
			if err := unix.PidfdSendSignal(fd, unix.SIGCONT, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
				errs = append(errs, fmt.Errorf("%w: SIGCONT to pid %d: %v", ErrPause, r.PID, err))
			} else {
				n++
			}
		}
		unix.Close(fd)
	}
	if err := os.Remove(path); err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}

// readBounded reads at most limit bytes of path.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// watchdog is the running watchdog process and the daemon's end of its
// socket.
type watchdog struct {
	cmd    *exec.Cmd
	sock   int
	exited chan struct{}
}

func (d *watchdog) close() {
	unix.Close(d.sock)
	go func() { d.cmd.Wait(); close(d.exited) }()
}

// tellLocked hands the watchdog h's pidfd and its deadline (CLOCK_MONOTONIC),
// starting a watchdog (and handing it every held process) if none runs.
func (p *Pauser) tellLocked(h *heldProc, deadline time.Duration) error {
	for attempt := 0; ; attempt++ {
		if p.dog == nil {
			if err := p.startWatchdogLocked(); err != nil {
				return fmt.Errorf("starting the watchdog: %w", err)
			}
			// A new watchdog knows nothing: every held process but h.
			for _, o := range p.held {
				if o != h {
					if err := p.sendHold(o, o.deadline()); err != nil {
						break
					}
				}
			}
		}
		err := p.sendHold(h, deadline)
		if err == nil {
			h.told = deadline
			return nil
		}
		p.dog.close()
		p.dog = nil
		if attempt > 0 {
			return fmt.Errorf("telling the watchdog: %w", err)
		}
	}
}

// dropLocked tells the watchdog h is no longer its to resume.
func (p *Pauser) dropLocked(h *heldProc) {
	if p.dog == nil || h.told == 0 {
		return
	}
	msg := watchdogCmd{pid: h.ref.PID, start: h.ref.Start}.String()
	if err := unix.Sendmsg(p.dog.sock, []byte(msg), nil, nil, unix.MSG_NOSIGNAL); err != nil {
		p.dog.close()
		p.dog = nil
	}
}

func (p *Pauser) sendHold(h *heldProc, deadline time.Duration) error {
	msg := watchdogCmd{hold: true, pid: h.ref.PID, start: h.ref.Start, deadline: deadline}.String()
	return unix.Sendmsg(p.dog.sock, []byte(msg), unix.UnixRights(h.fd), nil, unix.MSG_NOSIGNAL)
}

// monotonic reads CLOCK_MONOTONIC: the one clock of the Pauser's
// deadlines and its watchdog's, the same in every process of the machine,
// which no one can set (the gate's and the reconciler's clock too).
func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}

// watchdogCmd is one message from the daemon to its watchdog: hold pid
// (started at start; its pidfd comes with the message) until deadline,
// or drop it (the daemon resumed it itself).
type watchdogCmd struct {
	hold     bool
	pid      int
	start    uint64
	deadline time.Duration // CLOCK_MONOTONIC; hold only
}

// String is the message as the daemon sends it: "hold PID START DEADLINE"
// (DEADLINE: CLOCK_MONOTONIC nanoseconds) or "drop PID START".
func (c watchdogCmd) String() string {
	if c.hold {
		return fmt.Sprintf("hold %d %d %d", c.pid, c.start, int64(c.deadline))
	}
	return fmt.Sprintf("drop %d %d", c.pid, c.start)
}

// parseWatchdogMsg reads a message String wrote, which came with fds
// descriptors: a hold carries exactly one (the pidfd), a drop none. A
// deadline is an absolute CLOCK_MONOTONIC time in nanoseconds, a
// positive integer: a duration ("2s") or a wall-clock time is refused.
func parseWatchdogMsg(text string, fds int) (watchdogCmd, error) {
	f := strings.Split(text, " ")
	var c watchdogCmd
	switch {
	case len(f) == 4 && f[0] == "hold":
		c.hold = true
		d, err := strconv.ParseInt(f[3], 10, 64)
		if err != nil || d <= 0 {
			return c, fmt.Errorf("message %.80q: deadline %.32q: want CLOCK_MONOTONIC nanoseconds, a positive integer", text, f[3])
		}
		c.deadline = time.Duration(d)
		if fds != 1 {
			return c, fmt.Errorf("message %.80q: a hold carries one pidfd, got %d descriptors", text, fds)
		}
	case len(f) == 3 && f[0] == "drop":
		if fds != 0 {
			return c, fmt.Errorf("message %.80q: a drop carries no descriptor, got %d", text, fds)
		}
	default:
		return c, fmt.Errorf("message %.80q: want \"hold PID START DEADLINE\" or \"drop PID START\"", text)
	}
	pid, err := strconv.Atoi(f[1])
	if err != nil || pid <= 0 || strconv.Itoa(pid) != f[1] {
		return c, fmt.Errorf("message %.80q: pid %.32q: want a positive integer", text, f[1])
	}
	start, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return c, fmt.Errorf("message %.80q: start time %.32q: want clock ticks, a whole number", text, f[2])
	}
	c.pid, c.start = pid, start
	return c, nil
}

func (p *Pauser) startWatchdogLocked() error {
	exe := p.Exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	theirs := os.NewFile(uintptr(fds[1]), "watchdog")
	defer theirs.Close()
	cmd := exec.Command(exe, WatchdogArg, "3")
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stderr = os.Stderr
	// Its own session: a terminal's ^C to the daemon's process group does
	// not take it down before it has resumed BE.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		unix.Close(fds[0])
		return err
	}
	p.dog = &watchdog{cmd: cmd, sock: fds[0], exited: make(chan struct{})}
	if err := p.moveWatchdog(cmd.Process.Pid); err != nil && !p.warned {
		p.warned = true
		p.log().Warn("pause: the watchdog stays in gpreemptd's cgroup: a kill of that whole cgroup leaves BE stopped until the next gpreemptd starts",
			"err", err)
	}
	return nil
}

// RunWatchdog is the pause watchdog: args name the descriptor of its
// socket to the daemon. The daemon sends "hold PID START DEADLINE" with
// the process's pidfd (DEADLINE: an absolute CLOCK_MONOTONIC time in
// nanoseconds, the clock the watchdog compares it with) and "drop PID
// START" once it resumed it itself; a message of another form is
// refused, said on stderr, and its descriptors closed. The watchdog resumes each process
// at its deadline, and every one it holds when the daemon's end closes or
// on SIGTERM, SIGINT or SIGHUP. It returns the exit code.
func RunWatchdog(args []string, _ io.Reader, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "gpreemptd pause watchdog: want the socket's descriptor")
		return 2
	}
	sock, err := strconv.Atoi(args[0])
	if err != nil || sock < 3 {
		fmt.Fprintf(stderr, "gpreemptd pause watchdog: bad arguments %q\n", args)
		return 2
	}
	return runWatchdog(sock, stderr)
}
