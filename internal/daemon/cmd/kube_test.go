package cmd

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/kube"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/reconcile"
)

func TestClassedMessage(t *testing.T) {
	be := policy.Decision{Spec: class.Spec{Name: class.BE, Weight: 1}}
	gs := func(gpus ...string) []reconcile.GroupState {
		var out []reconcile.GroupState
		for _, g := range gpus {
			out = append(out, reconcile.GroupState{GPU: g})
		}
		return out
	}
	for _, tt := range []struct {
		d      policy.Decision
		groups []reconcile.GroupState
		want   string
	}{
		{be, gs("0", "0", "0", "0"), "classed be: 4 channel groups on GPU 0"},
		{be, gs("", "", "", ""), "classed be: 4 channel groups"},
		{policy.Decision{Spec: class.Spec{Name: class.Burstable, Weight: 2}}, gs("1", "0"), "classed burstable:2: 2 channel groups on GPUs 0, 1"},
	} {
		if got := classedMessage(tt.d, tt.groups); got != tt.want {
			t.Errorf("classedMessage(%v, %d groups) = %q, want %q", tt.d, len(tt.groups), got, tt.want)
		}
	}
}

func TestWatchKubePolicy(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "training", Name: "trainer", UID: "u1"}, Spec: corev1.PodSpec{NodeName: "n"}}
	agent, err := kube.NewAgent(fake.NewClientset(pod), kube.Options{NodeName: "n"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go agent.Run(ctx)
	go func() { // the changes are not read here
		for range agent.Changes() {
		}
	}()
	if err := agent.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "kubernetes.yaml")
	write := func(s string) {
		if err := os.WriteFile(file, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("")
	log := slog.New(slog.DiscardHandler)
	go watchKubePolicy(ctx, agent, file, []byte(""), 5*time.Millisecond, log)
	wait := func(want string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			d, _ := agent.Decision("u1")
			if d.Spec.String() == want && d.Managed() {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("decision %v, want %s", d, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	write("namespaces: {training: be}\n")
	wait("be")
	write("namespaces: {training: gold}\n") // if seen: refused, logged, the running policy kept
	write("namespaces: {training: 'burstable:3'}\n")
	wait("burstable:3")
}

// TestPodPeerKey: with --kubernetes a socket connection counts against its
// pod's share where its peer is in a pod (a node's pods may all run as
// root), else against its uid's.
func TestPodPeerKey(t *testing.T) {
	s := proctest.SelfPeer(t)
	for _, tc := range []struct {
		name  string
		podOf func(int) (kube.PodRef, error)
		want  string
	}{
		{"in a pod", func(pid int) (kube.PodRef, error) {
			if pid != os.Getpid() {
				return kube.PodRef{}, fmt.Errorf("pid %d: %w", pid, kube.ErrNotInPod)
			}
			return kube.PodRef{Namespace: "inference", Name: "server"}, nil
		}, "pod inference/server"},
		{"in no pod", func(int) (kube.PodRef, error) { return kube.PodRef{}, kube.ErrNotInPod }, "uid " + strconv.Itoa(os.Geteuid())},
	} {
		got, err := podPeerKey(tc.podOf)(s)
		if err != nil || got != tc.want {
			t.Errorf("%s: %q, %v; want %q", tc.name, got, err, tc.want)
		}
	}
}
