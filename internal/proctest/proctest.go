// Package proctest is what the tests of gpreemptd's parts do with real
// processes: start one to act on (a sleeper), read and wait for its
// state, add a user to run one as, run the test binary itself in another
// role or as another user, connect to itself as a socket peer, and wait
// for anything else to hold. Only tests import it.
//
// Waits are bounded only against a hang, never against a slow machine:
// a minute, polling.
package proctest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// hang is the bound of every wait: only a hang reaches it.
const hang = time.Minute

// Main is a TestMain: it runs the role named by the test binary's first
// argument, when a test started the binary as one, with the arguments
// after it, and exits with what the role returns; otherwise it runs the
// tests. Either way it removes what OtherUsersExe made.
func Main(m *testing.M, roles map[string]func(args []string) int) {
	rc := 0
	if role, ok := roles[arg1()]; ok {
		rc = role(os.Args[2:])
	} else {
		rc = m.Run()
	}
	if testExe.dir != "" {
		os.RemoveAll(testExe.dir)
	}
	os.Exit(rc)
}

func arg1() string {
	if len(os.Args) > 1 {
		return os.Args[1]
	}
	return ""
}

// Sleeper starts a process that sleeps for a minute, killed at the
// test's end.
func Sleeper(t *testing.T) policy.ProcRef {
	t.Helper()
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return Current(t, policy.ProcRef{PID: cmd.Process.Pid, Comm: "sleep"})
}

// Current is r with its process's real start time, for a test that bent
// it.
func Current(t *testing.T, r policy.ProcRef) policy.ProcRef {
	t.Helper()
	start, err := tsg.ProcessStart("/proc", r.PID)
	if err != nil {
		t.Fatal(err)
	}
	r.Start = start
	return r
}

func stat(t *testing.T, pid int) []byte {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// State is a process's state letter ('S' sleeping, 'T' stopped).
func State(t *testing.T, pid int) byte {
	t.Helper()
	b := stat(t, pid)
	st, ok := procfs.StatState(b)
	if !ok {
		t.Fatalf("pid %d: no state in %q", pid, b)
	}
	return st
}

// WaitState waits until pid is stopped (state 'T') or not.
func WaitState(t *testing.T, pid int, stopped bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if (State(t, pid) == 'T') == stopped {
			return
		}
	}
	t.Fatalf("pid %d: state %c, want stopped=%v", pid, State(t, pid), stopped)
}

// WaitFor polls cond until it holds.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(hang); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

var users atomic.Int32

// NewUser adds a system user without a home for the test and removes it
// at cleanup. It needs root and useradd.
func NewUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("adding a user needs root")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skipf("adding a user needs useradd: %v", err)
	}
	name := fmt.Sprintf("gpt%dx%d", os.Getpid(), users.Add(1))
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.ParseUint(u.Uid, 10, 32)
	g, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(id), uint32(g)
}

// ReachableDir is a temporary directory every user may reach (as
// /run/gpreempt is): t.TempDir and its parent are 0700.
func ReachableDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// testExe is a copy of the test binary that other users may run (the
// build directory is the building user's alone); Main removes it.
var testExe struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// OtherUsersExe is the path of a copy of the test binary that any user
// may run, for a role of Main's run as another user.
func OtherUsersExe(t *testing.T) string {
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
		testExe.path = filepath.Join(testExe.dir, filepath.Base(os.Args[0]))
		testExe.err = os.WriteFile(testExe.path, b, 0o755)
	})
	if testExe.err != nil {
		t.Fatal(testExe.err)
	}
	return testExe.path
}

// SelfPeer is the accepted end of a unix socket this process connected to:
// a connection whose peer (SO_PEERCRED) is the test itself. Both ends
// close at the test's end.
func SelfPeer(t *testing.T) net.Conn {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "peer.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// BuildLCLoop builds, in dir, a library exporting libcuda's names (libcuda.so.1, from
// internal/trace/testdata/fakecuda.c) and lcloop (internal/daemon/signals/testdata/lcloop.c), a
// program linked against it that waits for a line on stdin, makes the requests its argument says
// and prints its pid. internal is the path to internal/ from the test's package.
func BuildLCLoop(t *testing.T, dir, internal string) (lib, app string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed for the uprobe tests (README: Set up): %v", err)
	}
	lib, app = filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "lcloop")
	td := filepath.Join(internal, "trace", "testdata")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", lib, filepath.Join(td, "fakecuda.c")},
		{"-O2", "-I" + td, "-o", app, filepath.Join(internal, "daemon", "signals", "testdata", "lcloop.c"), lib, "-Wl,-rpath," + dir},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return lib, app
}
