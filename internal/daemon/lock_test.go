package daemon

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/gpreempt/gpreempt/internal/proctest"
)

// TestLockNotTakenByAnotherUser: an unprivileged user who could open the
// lock file could flock it and keep the next gpreemptd from starting
// (exit 3). flock(1) is run as that user on the lock file the daemon made.
func TestLockNotTakenByAnotherUser(t *testing.T) {
	uid, gid := proctest.NewUser(t)
	flock, err := exec.LookPath("flock")
	if err != nil {
		t.Skipf("taking the lock as another user needs flock(1): %v", err)
	}
	socket := filepath.Join(proctest.ReachableDir(t), "run", "gpreemptd.sock")
	f, err := takeLock(socket)
	if err != nil {
		t.Fatal(err)
	}
	f.Close() // free: the next daemon, or the user, may take it
	for _, tt := range []struct {
		name string
		args []string
	}{
		{"exclusive", []string{"-n", "-x"}},
		{"shared", []string{"-n", "-s"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(flock, append(tt.args, LockPath(socket), "echo", "locked")...)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			err := cmd.Run()
			if bytes.Contains(out.Bytes(), []byte("locked")) || err == nil {
				t.Fatalf("uid %d took the lock %s: %v: %s", uid, LockPath(socket), err, out.Bytes())
			}
		})
	}
	st, err := os.Stat(LockPath(socket))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("lock file %v, %v: want mode 0600", st.Mode(), err)
	}
	if st, err := os.Stat(LockDir(socket)); err != nil || st.Mode().Perm() != 0o700 {
		t.Errorf("lock directory %v, %v: want mode 0700", st.Mode(), err)
	}
	f, err = takeLock(socket)
	if err != nil {
		t.Fatalf("the next daemon: %v", err)
	}
	f.Close()
}

// TestLockRefusesWhatOthersControl: the lock is never taken through a
// symbolic link (which would make the daemon create or truncate a file of
// the planter's choosing), nor in a directory another user owns or may
// write in.
func TestLockRefusesWhatOthersControl(t *testing.T) {
	uid, _ := proctest.NewUser(t)
	tests := []struct {
		name  string
		plant func(t *testing.T, socket, victim string)
	}{
		{"symlink at the lock file", func(t *testing.T, socket, victim string) {
			mkdir(t, LockDir(socket), 0o700)
			if err := os.Symlink(victim, LockPath(socket)); err != nil {
				t.Fatal(err)
			}
		}},
		{"symlink at the lock directory", func(t *testing.T, socket, victim string) {
			mkdir(t, filepath.Dir(socket), 0o755)
			if err := os.Symlink(filepath.Dir(victim), LockDir(socket)); err != nil {
				t.Fatal(err)
			}
		}},
		{"world-writable lock directory", func(t *testing.T, socket, _ string) {
			mkdir(t, LockDir(socket), 0o777)
		}},
		{"group-writable lock directory", func(t *testing.T, socket, _ string) {
			mkdir(t, LockDir(socket), 0o770)
		}},
		{"lock directory of another user", func(t *testing.T, socket, _ string) {
			mkdir(t, LockDir(socket), 0o700)
			if err := os.Chown(LockDir(socket), int(uid), -1); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := proctest.ReachableDir(t)
			socket := filepath.Join(dir, "run", "gpreemptd.sock")
			victim := filepath.Join(dir, "elsewhere", "victim")
			mkdir(t, filepath.Dir(victim), 0o755)
			if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			tt.plant(t, socket, victim)
			f, err := takeLock(socket)
			if err == nil {
				f.Close()
				t.Fatal("lock taken")
			}
			if errors.Is(err, ErrAlreadyRunning) {
				t.Fatalf("refused as if held: %v", err)
			}
			if b, err := os.ReadFile(victim); err != nil || string(b) != "keep" {
				t.Errorf("victim changed: %q, %v", b, err)
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(victim), lockFileName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("a lock file made through the link: %v", err)
			}
		})
	}
}

func mkdir(t *testing.T, dir string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, mode); err != nil {
		t.Fatal(err)
	}
}
