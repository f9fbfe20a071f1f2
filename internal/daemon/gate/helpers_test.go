package gate

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestMain makes the test binary the pauser's watchdog when the real
// pauser starts it as one.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == pause.WatchdogArg {
		os.Exit(pause.RunWatchdog(os.Args[2:], os.Stdin, os.Stderr))
	}
	os.Exit(m.Run())
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
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
	start, err := tsg.StartTime(b)
	if err != nil {
		t.Fatal(err)
	}
	return policy.ProcRef{PID: cmd.Process.Pid, Start: start, Comm: "sleep"}
}

// waitState waits (a minute at most) until pid is stopped (state 'T') or
// not.
func waitState(t *testing.T, pid int, stopped bool) {
	t.Helper()
	state := func() byte {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			t.Fatal(err)
		}
		st, _ := procfs.StatState(b)
		return st
	}
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if (state() == 'T') == stopped {
			return
		}
	}
	t.Fatalf("pid %d: state %c, want stopped=%v", pid, state(), stopped)
}
