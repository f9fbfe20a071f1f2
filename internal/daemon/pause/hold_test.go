package pause

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// testStandInArg makes the test binary a stand-in daemon: args are the
// watchdog's cgroup, the state directory, the longest hold, and the
// processes to stop (PID:START). It waits for a line on stdin (the test
// moves it into a cgroup meanwhile), stops them as the gate would, says
// "stopped", and waits to be killed.
const testStandInArg = "__test-pause-stand-in"

func runStandIn(args []string) int {
	in := bufio.NewReader(os.Stdin)
	in.ReadString('\n')
	max, _ := time.ParseDuration(args[2])
	var refs []policy.ProcRef
	for _, a := range args[3:] {
		pid, start, _ := strings.Cut(a, ":")
		r := policy.ProcRef{}
		r.PID, _ = strconv.Atoi(pid)
		r.Start, _ = strconv.ParseUint(start, 10, 64)
		refs = append(refs, r)
	}
	p := &Pauser{WatchdogCgroup: args[0], StateDir: args[1]}
	if n, err := p.Holder("gate").Stop(refs, max); err != nil || n != len(refs) {
		fmt.Fprintf(os.Stderr, "stop: %d %v\n", n, err)
		return 1
	}
	os.Stdout.WriteString("stopped\n")
	in.ReadString('\n') // until killed
	return 1
}

// standIn starts a stand-in daemon, in cgroup dir if not "", that stops
// procs for max; it returns once they are stopped.
func standIn(t *testing.T, cgroup, watchdogCgroup, stateDir string, max time.Duration, procs ...policy.ProcRef) *exec.Cmd {
	t.Helper()
	args := []string{testStandInArg, watchdogCgroup, stateDir, max.String()}
	for _, r := range procs {
		args = append(args, fmt.Sprintf("%d:%d", r.PID, r.Start))
	}
	d := exec.Command(os.Args[0], args...)
	d.Stderr = os.Stderr
	out, err := d.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in, err := d.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); d.Process.Kill(); d.Wait() })
	if cgroup != "" {
		if err := os.WriteFile(filepath.Join(cgroup, "cgroup.procs"), []byte(strconv.Itoa(d.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	io.WriteString(in, "go\n")
	if line, _ := bufio.NewReader(out).ReadString('\n'); strings.TrimSpace(line) != "stopped" {
		t.Fatalf("stand-in daemon said %q", line)
	}
	for _, r := range procs {
		waitState(t, r.PID, true)
	}
	return d
}

// testCgroup makes a cgroup v2 directory of the test's own at the
// hierarchy's root, removed at the end (once empty). It skips where the
// kernel has no cgroup v2 hierarchy or no cgroup.kill (before 5.14).
func testCgroup(t *testing.T, name string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	root, err := cgroup2Root()
	if err != nil {
		t.Skipf("cgroup v2: %v", err)
	}
	dir := filepath.Join(root, fmt.Sprintf("gpreempt-test-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cgroup v2 at %s: %v", root, err)
	}
	t.Cleanup(func() {
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if err := os.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
				return
			}
		}
		t.Errorf("cgroup %s not removed", dir)
	})
	if _, err := os.Stat(filepath.Join(dir, "cgroup.kill")); err != nil {
		t.Skipf("this kernel has no cgroup.kill: %v", err)
	}
	return dir
}

// killCgroup kills every process of cgroup dir at once, as an OOM kill
// with memory.oom.group, systemctl kill or a container runtime does.
func killCgroup(t *testing.T, dir string, d *exec.Cmd) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err != nil {
		t.Fatal(err)
	}
	d.Wait()
}

// TestPauseHoldersShareAStop (one owner of a BE's stop): a BE the gate
// and calibration both stopped stays stopped until both released it;
// neither resumes what the other holds (before, each had a Pauser of its
// own, and the gate's resume ran a BE calibration held).
func TestPauseHoldersShareAStop(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	p := &Pauser{}
	defer p.Close()
	gate, slo := p.Holder("gate"), p.Holder("slo")
	if n, err := gate.Stop([]policy.ProcRef{a}, time.Hour); n != 1 || err != nil {
		t.Fatalf("gate Stop = %d, %v", n, err)
	}
	if n, err := slo.Stop([]policy.ProcRef{a, b}, time.Hour); n != 2 || err != nil {
		t.Fatalf("slo Stop = %d, %v; want both held by slo", n, err)
	}
	waitState(t, a.PID, true)
	waitState(t, b.PID, true)
	// The gate's request ends: a stays stopped, calibration holds it.
	if n, err := gate.ResumeExcept(nil); n != 1 || err != nil {
		t.Fatalf("gate ResumeExcept = %d, %v", n, err)
	}
	if state(t, a.PID) != 'T' || !slo.Holds(a) || gate.Holds(a) || gate.Holding() {
		t.Fatalf("after the gate's release: a's state %c, slo holds %v, gate holds %v", state(t, a.PID), slo.Holds(a), gate.Holds(a))
	}
	// The gate holds a again; calibration ends: a stays stopped.
	gate.Stop([]policy.ProcRef{a}, time.Hour)
	if err := slo.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, b.PID, false)
	if state(t, a.PID) != 'T' || !gate.Holds(a) || slo.Holding() {
		t.Fatalf("after calibration's release: a's state %c, gate holds %v", state(t, a.PID), gate.Holds(a))
	}
	if err := gate.Resume(); err != nil {
		t.Fatal(err)
	}
	waitState(t, a.PID, false)
}

// TestPauserSeesABEResumedByItsOwner (issue 52, finding 6): a BE's owner
// SIGCONTs its own process while it is held. The pauser no longer says
// it holds it, nor that it is still (SLO mode would learn a reference
// "alone" beside it), counts it, and stops it again.
func TestPauserSeesABEResumedByItsOwner(t *testing.T) {
	uid, gid := newTestUser(t)
	cred := &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	cmd := exec.Command("sleep", "60")
	cmd.SysProcAttr = cred
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	be := sleeperRef(t, policy.ProcRef{PID: cmd.Process.Pid, Comm: "sleep"})
	p := &Pauser{}
	defer p.Close()
	slo := p.Holder("slo")
	if n, err := slo.Stop([]policy.ProcRef{be}, time.Hour); n != 1 || err != nil {
		t.Fatalf("Stop = %d, %v", n, err)
	}
	waitState(t, be.PID, true)
	// Its owner resumes it.
	owner := exec.Command("sh", "-c", "kill -CONT "+strconv.Itoa(be.PID))
	owner.SysProcAttr = cred
	if out, err := owner.CombinedOutput(); err != nil {
		t.Fatalf("the owner's SIGCONT: %v: %s", err, out)
	}
	waitState(t, be.PID, false)
	if slo.Holds(be) {
		t.Error("Holds: held, while it ran")
	}
	waitState(t, be.PID, true) // stopped again
	if p.SelfResumed() != 1 {
		t.Errorf("SelfResumed = %d, want 1", p.SelfResumed())
	}
	// Again, seen by Still this time.
	owner = exec.Command("sh", "-c", "kill -CONT "+strconv.Itoa(be.PID))
	owner.SysProcAttr = cred
	owner.Run()
	waitState(t, be.PID, false)
	if slo.Still(be) {
		t.Error("Still: still, while it ran")
	}
	waitState(t, be.PID, true)
	if !slo.Holds(be) || !slo.Still(be) {
		t.Error("stopped again, not held")
	}
}

// TestWatchdogOutlivesTheDaemonsCgroup (issue 52, finding 2): a kill of
// the daemon's whole cgroup (cgroup.kill: what an OOM kill with
// memory.oom.group, systemctl kill -s KILL or a container runtime does)
// took the watchdog with it, and three BE stayed stopped for good. The
// watchdog now runs in a cgroup of its own: every BE runs again within
// max_hold + 1 s.
func TestWatchdogOutlivesTheDaemonsCgroup(t *testing.T) {
	daemonCg, dogCg := testCgroup(t, "daemon"), testCgroup(t, "watchdog")
	bes := []policy.ProcRef{sleeper(t), sleeper(t), sleeper(t)}
	const maxHold = 3 * time.Second
	d := standIn(t, daemonCg, dogCg, t.TempDir(), maxHold, bes...)
	killed := time.Now()
	killCgroup(t, daemonCg, d)
	for _, b := range bes {
		waitState(t, b.PID, false)
	}
	if took := time.Since(killed); took > maxHold+time.Second {
		t.Errorf("BE ran again %v after the kill; want within max_hold + 1 s (%v)", took, maxHold+time.Second)
	}
}

// TestRestartResumesWhatWasLeftStopped (issue 52, finding 2): where the
// watchdog died with the daemon (here left in its cgroup), the next
// daemon resumes from its record every BE left stopped, matched by pid
// and start time, and no other stopped process.
func TestRestartResumesWhatWasLeftStopped(t *testing.T) {
	daemonCg := testCgroup(t, "daemon")
	state := t.TempDir()
	bes := []policy.ProcRef{sleeper(t), sleeper(t)}
	other := sleeper(t)
	d := standIn(t, daemonCg, "none", state, time.Hour, bes...)
	killCgroup(t, daemonCg, d)
	if err := syscall.Kill(other.PID, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(other.PID, syscall.SIGCONT)
	waitState(t, other.PID, true)
	for _, b := range bes {
		if st := stateOf(t, b.PID); st != 'T' {
			t.Fatalf("BE %d state %c after the kill; the watchdog was to die with the daemon", b.PID, st)
		}
	}
	n, err := (&Pauser{StateDir: state}).ResumeRecorded()
	if n != len(bes) || err != nil {
		t.Fatalf("ResumeRecorded = %d, %v; want %d", n, err, len(bes))
	}
	for _, b := range bes {
		waitState(t, b.PID, false)
	}
	if st := stateOf(t, other.PID); st != 'T' {
		t.Errorf("a process stopped by someone else was resumed (state %c)", st)
	}
	if _, err := os.Stat(filepath.Join(state, pausedFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the record is left: %v", err)
	}
}

func stateOf(t *testing.T, pid int) byte { return state(t, pid) }

// TestWatchdogResumesAtItsDeadline: a process the daemon cannot resume
// (its SIGCONT fails) is resumed by the watchdog at the deadline it was
// handed (an absolute CLOCK_MONOTONIC time).
func TestWatchdogResumesAtItsDeadline(t *testing.T) {
	a, b := sleeper(t), sleeper(t)
	p := &Pauser{}
	defer p.Close()
	stopAll(t, p, 200*time.Millisecond, a, b)
	failSIGCONT(t, p, a)
	if err := p.Resume(); err == nil || !strings.Contains(err.Error(), "SIGCONT to pid "+strconv.Itoa(a.PID)) {
		t.Fatalf("Resume = %v; want a's SIGCONT failed", err)
	}
	waitState(t, b.PID, false)
	waitState(t, a.PID, false) // by the watchdog, at the deadline
	if p.Holding() {
		t.Error("holding after Resume")
	}
}

func TestRunWatchdogRefusesBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"1s", "1"}, {"x"}, {"1"}} {
		var errb strings.Builder
		if rc := RunWatchdog(args, strings.NewReader(""), &errb); rc != 2 || !strings.Contains(errb.String(), "watchdog") {
			t.Errorf("RunWatchdog(%q) = %d, %q; want 2 and a message", args, rc, errb.String())
		}
	}
}
