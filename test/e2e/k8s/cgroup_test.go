package k8se2e

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// cgroupTree is a private subtree of the host's cgroup v2 hierarchy
// standing in for a node's kubepods tree: the "containers" of the test are
// real processes placed in cgroups named the way kubelet and the runtimes
// name them, under it.
type cgroupTree struct {
	t    *testing.T
	root string
	dirs []string
}

// newCgroupTree makes the subtree under the cgroup2 mount (/sys/fs/cgroup
// on a cgroup v2 host, /sys/fs/cgroup/unified on a hybrid one). It needs
// root; everything it made is removed at cleanup, after its processes are
// killed.
func newCgroupTree(t *testing.T) *cgroupTree {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("placing processes in cgroups needs root")
	}
	mount, err := cgroup2Mount()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy to place processes in: %v", err)
	}
	ct := &cgroupTree{t: t, root: filepath.Join(mount, fmt.Sprintf("gpreempt-e2e-%d", os.Getpid()))}
	t.Cleanup(ct.cleanup)
	if err := os.Mkdir(ct.root, 0o755); err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			t.Skipf("cannot make cgroups here (a container with a read-only cgroup mount?): %v", err)
		}
		t.Fatal(err)
	}
	ct.dirs = append(ct.dirs, ct.root)
	return ct
}

// kubeletRoot is the tree's root as /proc/PID/cgroup names it: the
// kubelet cgroup root the agent is given, since it recognises pods only
// under the kubelet's.
func (ct *cgroupTree) kubeletRoot() string { return "/" + filepath.Base(ct.root) }

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ... mount-point ... - fstype source options
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		fields := strings.Fields(pre)
		if len(fields) >= 5 {
			return fields[4], nil
		}
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
}

// start runs a "container" process (sleep) and places it in the cgroup
// rel (a path under the tree such as
// kubepods.slice/.../cri-containerd-ID.scope). It returns the pid.
func (ct *cgroupTree) start(rel string) int {
	ct.t.Helper()
	cmd := exec.Command("sleep", "3600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		ct.t.Fatal(err)
	}
	ct.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid
	ct.place(pid, rel)
	return pid
}

// place moves pid into the cgroup rel under the tree, making it, and
// checks that /proc/PID/cgroup names it.
func (ct *cgroupTree) place(pid int, rel string) {
	ct.t.Helper()
	dir := filepath.Join(ct.root, rel)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		ct.t.Fatal(err)
	}
	for d := dir; d != filepath.Dir(ct.root); d = filepath.Dir(d) {
		if !slices.Contains(ct.dirs, d) {
			ct.dirs = append(ct.dirs, d)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		ct.t.Fatalf("place pid %d in %s: %v", pid, dir, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil || !strings.Contains(string(b), rel) {
		ct.t.Fatalf("pid %d: /proc/%d/cgroup = %q (%v), want it to name %s", pid, pid, b, err, rel)
	}
}

// cleanup removes the tree, deepest first. A cgroup can be removed once
// its processes have exited, which the kernel reports shortly after the
// kill: retry for a while.
func (ct *cgroupTree) cleanup() {
	slices.SortFunc(ct.dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range ct.dirs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				ct.t.Errorf("remove cgroup %s: %v", d, err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
