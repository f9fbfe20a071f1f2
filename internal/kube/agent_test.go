package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/proctest"
)

// The tests here use client-go's fake clientset (which ignores field
// selectors) and a fake /proc; test/e2e/k8s runs the same agent against a
// real API server and real cgroups.

type fakeProc struct {
	t    *testing.T
	root string
}

func (p fakeProc) put(pid int, cgroup string) {
	p.t.Helper()
	dir := filepath.Join(p.root, strconv.Itoa(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup"), []byte("0::"+cgroup+"\n"), 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func sdCgroup(uid types.UID, cid string) string {
	u := strings.ReplaceAll(string(uid), "-", "_")
	return "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u + ".slice/cri-containerd-" + cid + ".scope"
}

func newPod(ns, name string, uid types.UID, ann map[string]string, containerID string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, Annotations: ann},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{
			{Name: "main", ContainerID: "containerd://" + containerID},
		}},
	}
}

const (
	uidA = types.UID("aaaaaaaa-0000-4000-8000-000000000001")
	uidB = types.UID("bbbbbbbb-0000-4000-8000-000000000002")
	cidA = "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0"
	cidB = "b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0"
)

func startAgent(t *testing.T, client *fake.Clientset, procRoot string, policy *Policy) *Agent {
	t.Helper()
	a, err := NewAgent(client, Options{NodeName: "node-a", ProcRoot: procRoot, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	if err := a.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestAgentFake(t *testing.T) {
	proc := fakeProc{t, t.TempDir()}
	proc.put(10, sdCgroup(uidA, cidA))
	proc.put(11, sdCgroup(uidA, cidA))
	proc.put(20, sdCgroup(uidB, cidB))
	proc.put(30, "/system.slice/sshd.service")
	proc.put(40, sdCgroup("cccccccc-0000-4000-8000-000000000003", cidB))

	client := fake.NewClientset(
		newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc"}, cidA),
		newPod("training", "trainer", uidB, map[string]string{AnnotationClass: "lc"}, cidB),
	)
	a := startAgent(t, client, proc.root, mustPolicy(t, "maxClass: {default: burstable, namespaces: {inference: lc}}"))

	d, ref, err := a.ClassForPID(10)
	if err != nil || d.Spec.Name != class.LC || ref.Name != "server" || ref.Container != "main" || ref.ContainerID != cidA {
		t.Errorf("pid 10: %+v %+v %v", d, ref, err)
	}
	d, _, err = a.ClassForPID(20)
	if err != nil || d.Managed() || len(d.Refused) != 1 {
		t.Errorf("pid 20 (lc refused in training): %+v %v", d, err)
	}
	if _, _, err := a.ClassForPID(30); !errors.Is(err, ErrNotInPod) {
		t.Errorf("pid 30 (host): %v, want ErrNotInPod", err)
	}
	if _, _, err := a.ClassForPID(40); !errors.Is(err, ErrUnknownPod) {
		t.Errorf("pid 40 (pod not on this node): %v, want ErrUnknownPod", err)
	}
	if _, _, err := a.ClassForPID(50); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid 50 (gone): %v, want ErrNotExist", err)
	}
	if pids, err := a.ProcessesOf(ref); err != nil || len(pids) != 2 {
		t.Errorf("ProcessesOf(server) = %v, %v; want pids 10 and 11", pids, err)
	}

	// The refusal is an Event on the trainer pod.
	proctest.WaitFor(t, "the refusal Event", func() bool {
		evs, _ := client.CoreV1().Events("training").List(context.Background(), metav1.ListOptions{})
		for _, e := range evs.Items {
			if e.Reason == ReasonClassRefused && e.InvolvedObject.Name == "trainer" && strings.Contains(e.Message, "at most burstable") {
				return true
			}
		}
		return false
	})

	// Socket requests.
	for _, tt := range []struct {
		name         string
		peer, target int
		want         class.Name
		err          error
	}{
		{"own process, own class", 10, 11, class.LC, nil},
		{"own process, lower class", 10, 10, class.BE, nil},
		{"another pod's process", 10, 20, class.BE, ErrForbidden},
		{"a host process", 10, 30, class.BE, ErrForbidden},
		{"above the pod's limit", 20, 20, class.LC, ErrForbidden},
		{"peer on the host: the daemon's own rules", 30, 10, class.BE, ErrNotInPod},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := a.AuthorizePeer(tt.peer, tt.target, tt.want)
			if !errors.Is(err, tt.err) {
				t.Errorf("AuthorizePeer(%d, %d, %s) = %v, want %v", tt.peer, tt.target, tt.want, err, tt.err)
			}
		})
	}

	// An annotation change is delivered on Changes with the new decision.
	go func() {
		pod, _ := client.CoreV1().Pods("inference").Get(context.Background(), "server", metav1.GetOptions{})
		pod.Annotations[AnnotationClass] = "be"
		if _, err := client.CoreV1().Pods("inference").Update(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
			t.Error(err)
		}
	}()
	deadline := time.After(30 * time.Second)
	for {
		select {
		case c := <-a.Changes():
			if c.Pod.UID == uidA && c.Decision.Spec.Name == class.BE {
				return
			}
		case <-deadline:
			t.Fatal("no change delivered for the annotation update")
		}
	}
}

func TestNewAgentErrors(t *testing.T) {
	if _, err := NewAgent(fake.NewClientset(), Options{}); err == nil || !strings.Contains(err.Error(), "node name") {
		t.Errorf("no node name: %v", err)
	}
	if _, err := NewAgent(fake.NewClientset(), Options{NodeName: "n", Policy: &Policy{Default: "gold"}}); err == nil || !strings.Contains(err.Error(), "default") {
		t.Errorf("bad policy: %v", err)
	}
}

func TestNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	if n, _ := NodeName("from-flag"); n != "from-flag" {
		t.Errorf("flag: %q", n)
	}
	if n, _ := NodeName(""); n != "from-env" {
		t.Errorf("env: %q", n)
	}
	t.Setenv("NODE_NAME", "")
	if _, err := NodeName(""); err == nil {
		t.Error("no node name accepted")
	}
}

func TestPodInfoCollector(t *testing.T) {
	proc := fakeProc{t, t.TempDir()}
	proc.put(10, sdCgroup(uidA, cidA))
	proc.put(30, "/system.slice/sshd.service")
	client := fake.NewClientset(newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc"}, cidA))
	a := startAgent(t, client, proc.root, nil)
	c := NewPodInfoCollector(a, func() []int { return []int{10, 30, 99} }, func(pid int) string { return "p" + strconv.Itoa(pid) })
	want := `
# HELP gpreemptd_pod_process_info A GPU process of a Kubernetes pod on this node (always 1): join on process for namespace, pod and container.
# TYPE gpreemptd_pod_process_info gauge
gpreemptd_pod_process_info{container="main",namespace="inference",pod="server",process="p10"} 1
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
