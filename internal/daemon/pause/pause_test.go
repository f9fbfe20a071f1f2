package pause

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
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
		case testStandInArg:
			os.Exit(runStandIn(os.Args[2:]))
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

// The process helpers under the names these tests call them by.
var (
	sleeper     = proctest.Sleeper
	sleeperRef  = proctest.Current
	state       = proctest.State
	waitState   = proctest.WaitState
	newTestUser = proctest.NewUser
)

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
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.held[r.PID]
	unix.Close(h.fd)
	h.fd = bad
	return bad
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
