package daemon

import (
	"bufio"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"golang.org/x/sys/unix"
)

// testStopAndWaitArg makes the test binary a daemon that stops one process
// (pid, start time), says "stopped", and waits to be killed: the watchdog
// must resume the process when it is.
const testStopAndWaitArg = "__test-pause-stop-and-wait"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case WatchdogArg:
			os.Exit(RunWatchdog(os.Args[2:], os.Stdin, os.Stderr))
		case testStopAndWaitArg:
			pid, _ := strconv.Atoi(os.Args[2])
			start, _ := strconv.ParseUint(os.Args[3], 10, 64)
			n, err := (&Pauser{}).Stop([]policy.ProcRef{{PID: pid, Start: start}}, time.Hour)
			if err != nil || n != 1 {
				os.Stderr.WriteString("stop: " + strconv.Itoa(n) + " " + errString(err) + "\n")
				os.Exit(1)
			}
			os.Stdout.WriteString("stopped\n")
			// Until killed (stdin is the test's pipe, never written).
			os.Stdin.Read(make([]byte, 1))
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}

// sleeper starts a process that sleeps for a minute, killed at the test's end.
func sleeper(t *testing.T) policy.ProcRef {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	b, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	start, err := StartTime(b)
	if err != nil {
		t.Fatal(err)
	}
	return policy.ProcRef{PID: cmd.Process.Pid, Start: start, Comm: "sleep"}
}

// state is a process's state letter ('S' sleeping, 'T' stopped).
func state(t *testing.T, pid int) byte {
	t.Helper()
	_, st, err := (&Pauser{}).stat(pid)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// waitState waits (without a bound that a slow machine could miss: a
// minute) until pid is stopped (want 'T') or not.
func waitState(t *testing.T, pid int, stopped bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if (state(t, pid) == 'T') == stopped {
			return
		}
	}
	t.Fatalf("pid %d: state %c, want stopped=%v", pid, state(t, pid), stopped)
}

func TestPauserStopsAndResumes(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	var p Pauser
	n, err := p.Stop([]policy.ProcRef{a, b}, time.Hour)
	if err != nil || n != 2 {
		t.Fatalf("Stop = %d, %v; want 2, nil", n, err)
	}
	waitState(t, a.PID, true)
	waitState(t, b.PID, true)
	if !p.Holding() || !p.Holds(a) || !p.Still(a) {
		t.Fatal("not holding what it stopped")
	}
	// Stopping again stops nothing new.
	if n, err := p.Stop([]policy.ProcRef{a, b}, time.Hour); n != 0 || err != nil {
		t.Fatalf("second Stop = %d, %v; want 0, nil", n, err)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.PID, false)
	waitState(t, b.PID, false)
	if p.Holding() || p.Holds(a) || p.Still(a) {
		t.Fatal("still holding after Resume")
	}
}

// TestPauserResumesSome: ResumeExcept resumes the held processes but
// those kept. A watchdog that held only resumed ones is dismissed; one
// that held both is replaced by one for those still stopped, so it never
// resumes at its deadline a process stopped again since, and a daemon
// gone now (its end of the pipe closed unsaid) still has them resumed.
func TestPauserResumesSome(t *testing.T) {
	a, b, c := sleeper(t), sleeper(t), sleeper(t)
	var p Pauser
	stopAll(t, &p, time.Hour, a, b) // one watchdog for both
	deadline := p.dogs[0].deadline
	stopAll(t, &p, 2*time.Hour, c)
	if n, err := p.ResumeExcept([]policy.ProcRef{b}); n != 2 || err != nil {
		t.Fatalf("ResumeExcept = %d, %v; want 2, nil", n, err)
	}
	waitState(t, a.PID, false)
	waitState(t, c.PID, false)
	if !p.Holds(b) || p.Holds(a) || p.Holds(c) || state(t, b.PID) != 'T' || !p.Holding() {
		t.Fatalf("after ResumeExcept(b): holds a %v, b %v, c %v; b's state %c", p.Holds(a), p.Holds(b), p.Holds(c), state(t, b.PID))
	}
	if len(p.dogs) != 1 || len(p.dogs[0].procs) != 1 || p.dogs[0].procs[0].Key() != b.Key() {
		t.Fatalf("watchdogs %+v, want one for b alone", p.dogs)
	}
	// b's new watchdog resumes it when a and b's would have: what was left
	// of that deadline, not a new one.
	if !p.dogs[0].deadline.Equal(deadline) {
		t.Errorf("b's watchdog deadline %v, want the one it was stopped under, %v", p.dogs[0].deadline, deadline)
	}
	p.dogs[0].release(false)
	waitState(t, b.PID, false)
}

// stopAll stops procs, each of them, under one watchdog.
func stopAll(t *testing.T, p *Pauser, max time.Duration, procs ...policy.ProcRef) {
	t.Helper()
	if n, err := p.Stop(procs, max); n != len(procs) || err != nil {
		t.Fatalf("Stop = %d, %v; want %d, nil", n, err, len(procs))
	}
}

// failSIGCONT makes the daemon's SIGCONT to r fail (EBADF): its held
// pidfd, and every watchdog's copy of it from now on, is /dev/null. It
// returns that descriptor.
func failSIGCONT(t *testing.T, p *Pauser, r policy.ProcRef) int {
	t.Helper()
	bad, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	h := p.held[r.PID]
	unix.Close(h.fd)
	h.fd = bad
	p.held[r.PID] = h
	return bad
}

// TestPauserRetriesFailedResume: a process whose SIGCONT from the daemon
// fails is left to a watchdog, which tries itself when released, however
// many calls later and through however many watchdogs replacing it (one
// did not: the next Resume told the watchdog holding it "resumed", and
// nothing resumed it).
func TestPauserRetriesFailedResume(t *testing.T) {
	for _, c := range []struct {
		name string
		// keeps: b is kept by this many ResumeExcept calls before the
		// last Resume (0: Resume alone, which fails a's SIGCONT).
		keeps int
	}{
		{"resumed at once", 0},
		{"kept once", 1},
		{"kept twice", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := sleeper(t), sleeper(t)
			var p Pauser
			stopAll(t, &p, time.Hour, a, b)
			failSIGCONT(t, &p, a)
			for i := range c.keeps {
				_, err := p.ResumeExcept([]policy.ProcRef{b})
				if (i == 0) != (err != nil) {
					t.Fatalf("ResumeExcept %d: %v", i, err)
				}
				if len(p.dogs) != 1 || len(p.dogs[0].procs) != 2 || p.dogs[0].owed[a.PID].fd == 0 {
					t.Fatalf("after ResumeExcept %d: watchdogs %+v, want one for b and a, a owed", i, p.dogs)
				}
			}
			dog := p.dogs[0]
			if err := p.Resume(); (c.keeps == 0) != (err != nil) {
				t.Fatalf("Resume: %v", err)
			}
			waitState(t, b.PID, false)
			if c.keeps == 0 {
				// The watchdog Stop started holds a's own pidfd: it
				// resumes a.
				waitState(t, a.PID, false)
			} else if <-dog.reaped; dog.cmd.ProcessState.ExitCode() != 1 {
				code := dog.cmd.ProcessState.ExitCode()
				// Told "resumed", a watchdog exits 0; one left in charge
				// of a tries a's SIGCONT itself, fails on /dev/null and
				// exits 1.
				t.Errorf("the watchdog in charge of a exited %d, want 1 (it tried a's SIGCONT)", code)
			}
			if len(p.dogs) != 0 || len(p.held) != 0 {
				t.Errorf("after Resume: %d watchdogs, %d held", len(p.dogs), len(p.held))
			}
		})
	}
}

// TestPauserOwedStoppedAgain: a process its watchdog owes a resume (the
// daemon's SIGCONT failed) that someone else resumed, and that a later
// Stop stopped again, is the later watchdog's alone: the first, when
// replaced, neither carries it (it would resume it at its own, earlier,
// deadline) nor keeps its old pidfd open.
func TestPauserOwedStoppedAgain(t *testing.T) {
	a, b, c := sleeper(t), sleeper(t), sleeper(t)
	var p Pauser
	stopAll(t, &p, time.Hour, a, b, c)
	bad := failSIGCONT(t, &p, a)
	if _, err := p.ResumeExcept([]policy.ProcRef{b, c}); err == nil {
		t.Fatal("ResumeExcept: no error for a's failed SIGCONT")
	}
	if len(p.dogs) != 1 || p.dogs[0].owed[a.PID].fd != bad {
		t.Fatalf("watchdogs %+v: want one owing a", p.dogs)
	}
	// Resumed by someone else, stopped again by the daemon.
	if err := syscall.Kill(a.PID, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.PID, false)
	stopAll(t, &p, 2*time.Hour, a)
	if _, err := p.ResumeExcept([]policy.ProcRef{b, a}); err != nil {
		t.Fatal(err)
	}
	waitState(t, c.PID, false)
	for _, d := range p.dogs {
		if len(d.owed) > 0 || (d.deadline.Before(time.Now().Add(90*time.Minute)) && slices.ContainsFunc(d.procs, func(r policy.ProcRef) bool { return r.Key() == a.Key() })) {
			t.Errorf("watchdog (deadline in %v) holds a %v, owes %v: a is the later Stop's watchdog's alone", time.Until(d.deadline).Round(time.Minute), d.procs, d.owed)
		}
	}
	if l, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(bad)); l == "/dev/null" {
		t.Errorf("a's old pidfd (fd %d) still open", bad)
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.PID, false)
	waitState(t, b.PID, false)
}

// TestPauserReplacingFails: when the watchdog for the processes kept
// stopped cannot be started, they are resumed at once; one whose SIGCONT
// then fails is resumed by the old watchdog, left in charge, and the
// error says so.
func TestPauserReplacingFails(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	var p Pauser
	stopAll(t, &p, time.Hour, a, b)
	failSIGCONT(t, &p, b)
	p.Exe = "/nonexistent/gpreemptd"
	_, err := p.ResumeExcept([]policy.ProcRef{b})
	if err == nil || !strings.Contains(err.Error(), "replacing a watchdog") || !strings.Contains(err.Error(), "SIGCONT to pid "+strconv.Itoa(b.PID)) {
		t.Fatalf("ResumeExcept = %v; want the watchdog's start and b's SIGCONT failed", err)
	}
	waitState(t, a.PID, false)
	waitState(t, b.PID, false) // by the old watchdog
	if len(p.dogs) != 0 || len(p.held) != 0 {
		t.Errorf("after: %d watchdogs, %d held", len(p.dogs), len(p.held))
	}
}

func TestPauserLeavesOthersAlone(t *testing.T) {
	stopped, reused, gone := sleeper(t), sleeper(t), sleeper(t)
	// Stopped by someone else: neither stopped nor resumed by us.
	if err := syscall.Kill(stopped.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitState(t, stopped.PID, true)
	// A pid whose process is not the one named (another start time).
	reused.Start++
	gone.PID = 1 << 22 // above pid_max's ceiling: no such process
	var p Pauser
	n, err := p.Stop([]policy.ProcRef{stopped, reused, gone}, time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("Stop = %d, %v; want 0, nil", n, err)
	}
	if p.Holding() {
		t.Fatal("holding nothing, says it holds")
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
	if st := state(t, stopped.PID); st != 'T' {
		t.Errorf("a process stopped by someone else was resumed (state %c)", st)
	}
	// Stopped by someone else, or gone: still; a running one is not.
	if !p.Still(stopped) || !p.Still(gone) || p.Still(sleeperRef(t, reused)) {
		t.Error("Still wrong for a process stopped by someone else, a gone one, or a running one")
	}
	if st := state(t, reused.PID); st == 'T' {
		t.Errorf("a process of another start time was stopped")
	}
	syscall.Kill(stopped.PID, syscall.SIGCONT)
}

func TestWatchdogResumesAtItsDeadline(t *testing.T) {
	a := sleeper(t)
	var p Pauser
	stopAll(t, &p, 50*time.Millisecond, a)
	// The watchdog, never told BE was resumed, exits at its deadline
	// having resumed it.
	if err := p.dogs[0].cmd.Wait(); err != nil {
		t.Fatalf("watchdog: %v", err)
	}
	waitState(t, a.PID, false)
	for p.Holding() {
		time.Sleep(time.Millisecond) // past the deadline Holding is false
	}
	if err := p.Resume(); err != nil {
		t.Fatal(err)
	}
}

func TestWatchdogResumesWhenTheDaemonDies(t *testing.T) {
	a := sleeper(t)
	d := exec.Command(os.Args[0], testStopAndWaitArg, strconv.Itoa(a.PID), strconv.FormatUint(a.Start, 10))
	out, err := d.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	d.Stderr = os.Stderr
	in, err := d.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })
	line, _ := bufio.NewReader(out).ReadString('\n')
	if strings.TrimSpace(line) != "stopped" {
		t.Fatalf("stand-in daemon said %q", line)
	}
	waitState(t, a.PID, true)
	// The daemon is killed with BE stopped and an hour left on the
	// watchdog's deadline: the watchdog resumes BE now.
	d.Process.Kill()
	d.Wait()
	waitState(t, a.PID, false)
}

func TestRunWatchdogRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"1s"}, {"soon", "1"}, {"1s", "0"}, {"1s", "x"}} {
		var errb strings.Builder
		if rc := RunWatchdog(args, strings.NewReader(""), &errb); rc != 2 || !strings.Contains(errb.String(), "watchdog") {
			t.Errorf("RunWatchdog(%q) = %d, %q; want 2 and a message", args, rc, errb.String())
		}
	}
}

// sleeperRef is r as it is (its real start time), for a test that bent it.
func sleeperRef(t *testing.T, r policy.ProcRef) policy.ProcRef {
	t.Helper()
	start, _, err := (&Pauser{}).stat(r.PID)
	if err != nil {
		t.Fatal(err)
	}
	r.Start = start
	return r
}
