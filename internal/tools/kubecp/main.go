// Command kubecp runs a local Kubernetes control plane (etcd and
// kube-apiserver on 127.0.0.1, internal/kube/controlplane, as the e2e test
// starts it) with the pods of scripts/gpu-run-kube.sh, until SIGTERM.
//
// Into -dir it writes kubeconfig, token and url (the admin's), then
// pods.env: for each pod, shell assignments of its namespace, name, UID,
// container ID and the container's cgroup as kubelet (systemd driver) and
// containerd name it, relative to a kubepods tree; and last "ready". The
// pods are on -node (lc and be, in the burstable QoS class) and one on
// -other-node; their status names the container as kubelet reports it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gpreempt/gpreempt/internal/kube"
	"github.com/gpreempt/gpreempt/internal/kube/controlplane"
)

type pod struct {
	key, ns, name, node, class string
}

func main() {
	assets := flag.String("assets", "", "directory holding etcd and kube-apiserver")
	dir := flag.String("dir", "", "state directory (made if missing)")
	node := flag.String("node", "gpu-node-a", "this node's name")
	other := flag.String("other-node", "gpu-node-b", "another node's name")
	timeout := flag.Duration("start-timeout", 2*time.Minute, "longest wait for the API server")
	flag.Parse()
	if *assets == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: kubecp -assets DIR -dir DIR [-node NAME] [-other-node NAME]")
		os.Exit(2)
	}
	if err := run(*assets, *dir, *node, *other, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "kubecp: %v\n", err)
		os.Exit(1)
	}
}

func run(assets, dir, node, other string, timeout time.Duration) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(ctx, timeout)
	p, err := controlplane.Start(startCtx, assets, dir)
	cancel()
	if err != nil {
		return err
	}
	defer p.Stop()
	for name, s := range map[string]string{"kubeconfig": p.Kubeconfig(), "token": p.Token, "url": p.URL} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			return err
		}
	}
	env, err := createPods(ctx, kubernetes.NewForConfigOrDie(p.Config()), []pod{
		{key: "LC", ns: "inference", name: "lc-server", node: node, class: "lc"},
		{key: "BE", ns: "training", name: "be-trainer", node: node, class: "be"},
		{key: "OTHER", ns: "training", name: "elsewhere", node: other, class: "be"},
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "pods.env"), []byte(env), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ready"), nil, 0o644); err != nil {
		return err
	}
	fmt.Printf("kubecp: API server at %s, pods in %s\n", p.URL, filepath.Join(dir, "pods.env"))
	<-ctx.Done()
	return nil
}

func createPods(ctx context.Context, c kubernetes.Interface, pods []pod) (string, error) {
	var env strings.Builder
	for _, ns := range []string{"inference", "training"} {
		if _, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return "", err
		}
	}
	for i, p := range pods {
		created, err := c.CoreV1().Pods(p.ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: p.name, Annotations: map[string]string{kube.AnnotationClass: p.class}},
			Spec:       corev1.PodSpec{NodeName: p.node, Containers: []corev1.Container{{Name: "main", Image: "cuda-app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		cid := fmt.Sprintf("%064x", 0xc0da0000+i)
		created.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "main", ContainerID: "containerd://" + cid, Image: "cuda-app", ImageID: "cuda-app"}}
		if _, err := c.CoreV1().Pods(p.ns).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return "", err
		}
		u := strings.ReplaceAll(string(created.UID), "-", "_")
		cg := fmt.Sprintf("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%s.slice/cri-containerd-%s.scope", u, cid)
		fmt.Fprintf(&env, "%[1]s_NS=%[2]s\n%[1]s_POD=%[3]s\n%[1]s_UID=%[4]s\n%[1]s_CID=%[5]s\n%[1]s_CGROUP=%[6]s\n",
			p.key, p.ns, p.name, created.UID, cid, cg)
	}
	return env.String(), nil
}
