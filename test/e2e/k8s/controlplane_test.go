package k8se2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gpreempt/gpreempt/internal/kube/controlplane"
)

// assetsEnv names the directory holding kube-apiserver and etcd; make
// e2e-k8s builds them (hack/k8s/build.sh) and sets it.
const assetsEnv = "GPREEMPT_K8S_ASSETS"

// startDeadline bounds the control plane's start: seconds on an idle
// machine, much longer on a loaded CI runner.
const startDeadline = 3 * time.Minute

// startControlPlane starts etcd and kube-apiserver as plain processes
// bound to 127.0.0.1, with RBAC on (internal/kube/controlplane, which
// scripts/gpu-run-kube.sh uses too), and returns an admin client config.
// Both are stopped (apiserver first) when the test ends; their logs are
// printed if it failed.
func startControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv(assetsEnv)
	if assets == "" {
		t.Skipf("%s not set: `make e2e-k8s` builds kube-apiserver and etcd (hack/k8s/build.sh) and runs this test", assetsEnv)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	p, err := controlplane.Start(ctx, assets, dir)
	if err != nil {
		printLogs(t, dir)
		t.Fatalf("%s=%s: %v", assetsEnv, assets, err)
	}
	t.Cleanup(func() {
		p.Stop()
		if t.Failed() {
			printLogs(t, dir)
		}
	})
	return p.Config()
}

func printLogs(t *testing.T, dir string) {
	for _, name := range []string{"etcd", "kube-apiserver"} {
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		if len(b) > 8000 {
			b = b[len(b)-8000:]
		}
		t.Logf("%s log (tail):\n%s", name, b)
	}
}
