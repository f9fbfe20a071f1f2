package daemon

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// The lock that keeps a second gpreemptd from starting lives in a
// directory of its own beside the socket. The socket's directory must let
// every local user (and pods, which mount it) reach the socket; the lock's
// must not: a user who can open the lock file can flock it and keep the
// next daemon from starting.
const (
	lockDirName  = "private"
	lockFileName = "gpreemptd.lock"
)

// LockDir is the root-only directory beside the socket that holds the
// lock file.
func LockDir(socket string) string { return filepath.Join(filepath.Dir(socket), lockDirName) }

// LockPath is the lock file.
func LockPath(socket string) string { return filepath.Join(LockDir(socket), lockFileName) }

// takeLock opens the lock file (created 0600 in a directory created
// 0700) and takes an exclusive flock on it, writing our pid into it. A
// symbolic link at the directory or the file is refused, never followed,
// and so is a directory another user owns or that others may write:
// whoever could write there could replace the file.
func takeLock(socket string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(socket), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	dir := LockDir(socket)
	if err := unix.Mkdir(dir, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return nil, fmt.Errorf("lock directory %s: %w", dir, err)
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
			return nil, fmt.Errorf("lock directory %s: not a directory (a symbolic link?): refused: %w", dir, err)
		}
		return nil, fmt.Errorf("lock directory %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return nil, fmt.Errorf("lock directory %s: %w", dir, err)
	}
	if euid := os.Geteuid(); int(st.Uid) != euid {
		return nil, fmt.Errorf("lock directory %s: owned by uid %d, not %d: refused", dir, st.Uid, euid)
	}
	if st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("lock directory %s: mode %#o lets others write in it: refused", dir, st.Mode&0o7777)
	}
	fd, err := unix.Openat(dfd, lockFileName, unix.O_RDWR|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	path := filepath.Join(dir, lockFileName)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("lock %s: a symbolic link: refused: %w", path, err)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return nil, fmt.Errorf("lock %s: not a regular file: refused", path)
	}
	if st.Mode&0o7777 != 0o600 {
		if err := unix.Fchmod(fd, 0o600); err != nil {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is held by pid %s", ErrAlreadyRunning, path, strings.TrimSpace(string(b[:n])))
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	return f, nil
}
