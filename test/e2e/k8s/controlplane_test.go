package k8se2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// assetsEnv names the directory holding kube-apiserver and etcd; make
// e2e-k8s builds them (hack/k8s/build.sh) and sets it.
const assetsEnv = "GPREEMPT_K8S_ASSETS"

// startDeadline bounds the control plane's start: seconds on an idle
// machine, much longer on a loaded CI runner.
const startDeadline = 3 * time.Minute

// startControlPlane starts etcd and kube-apiserver as plain processes
// bound to 127.0.0.1, with RBAC on, and returns an admin client config.
// Both are stopped (apiserver first) when the test ends.
func startControlPlane(t *testing.T) *rest.Config {
	t.Helper()
	assets := os.Getenv(assetsEnv)
	if assets == "" {
		t.Skipf("%s not set: `make e2e-k8s` builds kube-apiserver and etcd (hack/k8s/build.sh) and runs this test", assetsEnv)
	}
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			t.Fatalf("%s=%s: %v", assetsEnv, assets, err)
		}
	}
	dir := t.TempDir()
	ports := freePorts(t, 3)
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])

	startProcess(t, dir, "etcd", filepath.Join(assets, "etcd"),
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--log-level=warn")
	waitHTTP(t, "etcd", etcdURL+"/health", "", nil)

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	writeFile(t, filepath.Join(dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	token := rand.Text()
	writeFile(t, filepath.Join(dir, "tokens.csv"), []byte(token+`,e2e-admin,e2e-admin,"system:masters"`+"\n"))

	apiURL := fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	startProcess(t, dir, "kube-apiserver", filepath.Join(assets, "kube-apiserver"),
		"--etcd-servers="+etcdURL,
		"--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", "--secure-port="+strconv.Itoa(ports[2]),
		"--cert-dir="+filepath.Join(dir, "certs"),
		"--service-account-key-file="+filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(dir, "sa.key"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--token-auth-file="+filepath.Join(dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		// No controller-manager runs, so no namespace gets its default
		// service account: pods could not be created with this plugin on.
		"--disable-admission-plugins=ServiceAccount",
		"--endpoint-reconciler-type=none",
		"--service-cluster-ip-range=10.0.0.0/24",
		"--v=0")
	waitHTTP(t, "kube-apiserver", apiURL+"/readyz", token, &tls.Config{InsecureSkipVerify: true})

	return &rest.Config{
		Host:            apiURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             100,
		Burst:           200,
	}
}

func writeFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// freePorts returns n ports free on 127.0.0.1 now.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// startProcess runs a control-plane binary with its output in dir/name.log
// (printed when the test fails) and stops it with SIGTERM at cleanup,
// waiting for it to exit (kube-apiserver takes seconds).
func startProcess(t *testing.T, dir, name, bin string, args ...string) {
	t.Helper()
	logPath := filepath.Join(dir, name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
		logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			if len(b) > 8000 {
				b = b[len(b)-8000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
}

// waitHTTP polls url until it answers 200.
func waitHTTP(t *testing.T, name, url, token string, tlsConfig *tls.Config) {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	ctx, cancel := context.WithTimeout(context.Background(), startDeadline)
	defer cancel()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			err = fmt.Errorf("%s: %s", resp.Status, body.String())
		}
		last = err
		select {
		case <-ctx.Done():
			t.Fatalf("%s not ready at %s after %v: %v", name, url, startDeadline, errors.Join(last, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
