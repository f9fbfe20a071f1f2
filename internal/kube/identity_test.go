package kube

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/proctest"
)

// TestPodIdentityNeedsThePodsContainer: a process is a pod's only when its
// cgroup names one of the containers the pod's status lists
// (status.containerStatuses[].containerID): the pod's cgroup, or another
// pod's container, or a container the pod does not have, is not enough.
func TestPodIdentityNeedsThePodsContainer(t *testing.T) {
	const cidX = "c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0c0"
	podCgroup := strings.TrimSuffix(sdCgroup(uidA, cidA), "/cri-containerd-"+cidA+".scope")
	tests := []struct {
		name   string
		cgroup string
		want   error // nil: pod A
	}{
		{"its own container", sdCgroup(uidA, cidA), nil},
		{"another pod's container under its pod", podCgroup + "/cri-containerd-" + cidB + ".scope", ErrUnknownPod},
		{"a container the pod does not have", sdCgroup(uidA, cidX), ErrUnknownPod},
		{"the pod's cgroup, in no container", podCgroup, ErrUnknownPod},
		{"named like the pod elsewhere", "/user.slice/user-1000.slice/user@1000.service/app.slice" + podCgroup, ErrNotInPod},
	}
	proc := fakeProc{t, t.TempDir()}
	proc.put(10, sdCgroup(uidA, cidA))
	for i, tt := range tests {
		proc.put(100+i, tt.cgroup)
	}
	podA := newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc"}, cidA)
	podB := newPod("inference", "other", uidB, map[string]string{AnnotationClass: "be"}, cidB)
	client := fake.NewClientset(podA, podB)
	a := startAgent(t, client, proc.root, nil)
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pid := 100 + i
			ref, err := a.PodOfPID(pid)
			if !errors.Is(err, tt.want) || (tt.want == nil && ref.UID != uidA) {
				t.Fatalf("PodOfPID = %+v, %v; want pod A or %v", ref, err, tt.want)
			}
			if _, err := a.AuthorizePeer(pid, 10, class.LC); !errors.Is(err, tt.want) {
				t.Errorf("AuthorizePeer(%d asks lc for pod A's pid 10) = %v, want %v", pid, err, tt.want)
			}
			if _, _, ok := a.Classify(pid); ok != (tt.want == nil) {
				t.Errorf("Classify: ok %v, want %v", ok, tt.want == nil)
			}
			pids, err := a.ProcessesOf(PodRef{UID: uidA})
			if err != nil || slices.Contains(pids, pid) != (tt.want == nil) {
				t.Errorf("ProcessesOf(pod A) = %v, %v: pid %d in it, want %v", pids, err, pid, tt.want == nil)
			}
		})
	}

	// A container that starts later is the pod's once the status names
	// it, and the pod is delivered as changed, so its processes are
	// classed again.
	for seen := map[types.UID]bool{}; !seen[uidA] || !seen[uidB]; { // the pods' first decisions
		select {
		case ch := <-a.Changes():
			seen[ch.Pod.UID] = true
		case <-time.After(30 * time.Second):
			t.Fatalf("the pods' first decisions not delivered (%v)", seen)
		}
	}
	p := podA.DeepCopy()
	p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: "sidecar", ContainerID: "containerd://" + cidX})
	if _, err := client.CoreV1().Pods(p.Namespace).UpdateStatus(context.Background(), p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-a.Changes():
		if ch.Pod.UID != uidA {
			t.Errorf("change of %v, want pod A", ch.Pod)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no change delivered for the new container")
	}
	if ref, err := a.PodOfPID(102); err != nil || ref.UID != uidA || ref.Container != "sidecar" {
		t.Errorf("after the status names it: %+v, %v", ref, err)
	}
}

// TestDelegatedSubtreeIsNotAPod: with real cgroups (root, cgroup v2), a
// user given a cgroup subtree of their own (as systemd delegates
// user@UID.service) names cgroups in it as kubelet and containerd would
// name a pod's: a process placed there is not that pod's, although its
// /proc/PID/cgroup holds the pod's and the container's names. Only the
// same tree where the kubelet's cgroup root is makes it the pod's.
func TestDelegatedSubtreeIsNotAPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making cgroups needs root")
	}
	mount, err := cgroup2Mount()
	if err != nil {
		t.Skipf("no cgroup v2 hierarchy: %v", err)
	}
	uid, gid := proctest.NewUser(t)
	name := fmt.Sprintf("gpreempt-delegated-%d-%d", os.Getpid(), testSeq.Add(1))
	parent := filepath.Join(mount, name)
	if err := os.Mkdir(parent, 0o755); err != nil {
		if errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			t.Skipf("cannot make cgroups here: %v", err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(t, parent) })
	// Delegation: the directory and its interface files are the user's.
	for _, f := range []string{"", "cgroup.procs", "cgroup.subtree_control", "cgroup.threads"} {
		if err := os.Chown(filepath.Join(parent, f), int(uid), int(gid)); err != nil {
			t.Fatal(err)
		}
	}
	rel := strings.TrimPrefix(sdCgroup(uidA, cidA), "/")
	mkdir := exec.Command("mkdir", "-p", filepath.Join(parent, rel))
	mkdir.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	if out, err := mkdir.CombinedOutput(); err != nil {
		t.Fatalf("the user's mkdir: %v: %s", err, out)
	}
	sleep := exec.Command("sleep", "3600")
	sleep.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}, Pdeathsig: syscall.SIGKILL}
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sleep.Process.Kill(); _ = sleep.Wait() })
	pid := sleep.Process.Pid
	if err := os.WriteFile(filepath.Join(parent, rel, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err != nil || !strings.Contains(string(b), rel) {
		t.Fatalf("/proc/%d/cgroup = %q, %v: want it to name %s", pid, b, err, rel)
	}

	tests := []struct {
		name       string
		cgroupRoot string
		want       error // nil: pod A
	}{
		{"kubelet's root is /", "", ErrNotInPod},
		{"kubelet's root is the delegated subtree", "/" + name, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc"}, cidA))
			a, err := NewAgent(client, Options{NodeName: "node-a", CgroupRoot: tt.cgroupRoot})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- a.Run(ctx) }()
			defer func() { cancel(); <-done }()
			if err := a.WaitForSync(ctx); err != nil {
				t.Fatal(err)
			}
			ref, err := a.PodOfPID(pid)
			if !errors.Is(err, tt.want) || (tt.want == nil && ref.UID != uidA) {
				t.Fatalf("PodOfPID(%d) = %+v, %v; want pod A or %v", pid, ref, err, tt.want)
			}
			if _, _, ok := a.Classify(pid); ok != (tt.want == nil) {
				t.Errorf("Classify(%d): ok %v, want %v", pid, ok, tt.want == nil)
			}
		})
	}
}

var testSeq atomic.Int32

func cgroup2Mount() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if fields := strings.Fields(pre); len(fields) >= 5 {
			return fields[4], nil
		}
	}
	return "", errors.New("no cgroup2 mount in /proc/self/mountinfo")
}

// removeTree removes a cgroup tree deepest first; a cgroup goes once its
// processes have exited, which the kernel reports shortly after the kill.
func removeTree(t *testing.T, root string) {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("remove cgroup %s: %v", d, err)
				break
			}
		}
	}
}
