package daemon

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestMain makes the test binary the pauser's watchdog, or a process that
// maps a file (testMapArg), when the tests start it as one.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case pause.WatchdogArg:
			os.Exit(pause.RunWatchdog(os.Args[2:], os.Stdin, os.Stderr))
		case testMapArg:
			os.Exit(runMapper(os.Args[2:]))
		}
	}
	rc := m.Run()
	cleanupTestExe()
	os.Exit(rc)
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

// state is a process's state letter ('S' sleeping, 'T' stopped).
func state(t *testing.T, pid int) byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	st, ok := procfs.StatState(b)
	if !ok {
		t.Fatalf("pid %d: no state in %q", pid, b)
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

// sleeperRef is r as it is (its real start time), for a test that bent it.
func sleeperRef(t *testing.T, r policy.ProcRef) policy.ProcRef {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(r.PID) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	start, err := tsg.StartTime(b)
	if err != nil {
		t.Fatal(err)
	}
	r.Start = start
	return r
}

// testExe is a copy of the test binary that other users may run (the
// build directory is the building user's alone).
var testExe struct {
	once sync.Once
	dir  string
	path string
	err  error
}

func otherUsersExe(t *testing.T) string {
	t.Helper()
	testExe.once.Do(func() {
		if testExe.dir, testExe.err = os.MkdirTemp("", "gpreempt-test-exe-"); testExe.err != nil {
			return
		}
		os.Chmod(testExe.dir, 0o755)
		b, err := os.ReadFile(os.Args[0])
		if err != nil {
			testExe.err = err
			return
		}
		testExe.path = filepath.Join(testExe.dir, "daemon.test")
		testExe.err = os.WriteFile(testExe.path, b, 0o755)
	})
	if testExe.err != nil {
		t.Fatal(testExe.err)
	}
	return testExe.path
}

func cleanupTestExe() {
	if testExe.dir != "" {
		os.RemoveAll(testExe.dir)
	}
}
