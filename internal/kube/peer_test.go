package kube

import (
	"context"
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/proctest"
)

// TestRecheckFollowsThePod: a class a pod's process was granted over the
// socket is re-checked against the pod's decision now (the daemon asks at
// each reload and pod change): an annotation lowered takes it back.
func TestRecheckFollowsThePod(t *testing.T) {
	proc := fakeProc{t, t.TempDir()}
	proc.put(10, sdCgroup(uidA, cidA))
	proc.put(30, "/system.slice/sshd.service")
	pod := newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc"}, cidA)
	client := fake.NewClientset(pod)
	a := startAgent(t, client, proc.root, nil)
	tests := []struct {
		name       string
		annotation string
		want       class.Name
		err        error
	}{
		{"lc pod keeps lc", "lc", class.LC, nil},
		{"lowered to be: lc taken back", "be", class.LC, ErrForbidden},
		{"lowered to be: be kept", "be", class.BE, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pod.DeepCopy()
			p.Annotations[AnnotationClass] = tt.annotation
			if _, err := client.CoreV1().Pods(p.Namespace).Update(context.Background(), p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			proctest.WaitFor(t, "the annotation", func() bool {
				d, ok := a.Decision(uidA)
				return ok && string(d.Spec.Name) == tt.annotation
			})
			if err := a.Recheck(10, tt.want); !errors.Is(err, tt.err) {
				t.Errorf("Recheck(10, %s) = %v, want %v", tt.want, err, tt.err)
			}
		})
	}
	if err := a.Recheck(30, class.LC); !errors.Is(err, ErrNotInPod) {
		t.Errorf("Recheck of a host process = %v, want ErrNotInPod", err)
	}
}
