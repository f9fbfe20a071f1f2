// Package controlplane starts etcd and kube-apiserver as plain processes
// bound to 127.0.0.1, with token auth and RBAC: the API server of the
// Kubernetes e2e test (test/e2e/k8s) and of scripts/gpu-run-kube.sh
// (through internal/tools/kubecp).
package controlplane

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
	"time"

	"k8s.io/client-go/rest"
)

// Plane is a running etcd + kube-apiserver.
type Plane struct {
	// URL is the API server's https address; Token an admin bearer
	// token (group system:masters). The serving certificate is
	// self-signed: clients skip its verification.
	URL, Token string
	// Dir holds the data, keys and each process's log (NAME.log).
	Dir   string
	procs []*proc // in start order; stopped in reverse
}

type proc struct {
	name   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan error
}

// Start starts etcd and kube-apiserver from the binaries in assets, with
// their state under dir, and waits (at most until ctx ends) until the API
// server is ready. On error, whatever was started is stopped.
func Start(ctx context.Context, assets, dir string) (_ *Plane, err error) {
	for _, bin := range []string{"etcd", "kube-apiserver"} {
		if _, err := os.Stat(filepath.Join(assets, bin)); err != nil {
			return nil, err
		}
	}
	p := &Plane{Dir: dir}
	defer func() {
		if err != nil {
			p.Stop()
		}
	}()
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := p.start("etcd", filepath.Join(assets, "etcd"),
		"--name=e2e", "--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+etcdURL, "--advertise-client-urls="+etcdURL,
		"--listen-peer-urls="+peerURL, "--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=e2e="+peerURL, "--unsafe-no-fsync", "--log-level=warn"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "etcd", etcdURL+"/health", "", nil); err != nil {
		return nil, err
	}

	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	p.Token = rand.Text()
	for name, b := range map[string][]byte{
		"sa.key":     pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		"sa.pub":     pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}),
		"tokens.csv": []byte(p.Token + `,e2e-admin,e2e-admin,"system:masters"` + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return nil, err
		}
	}

	p.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])
	if err := p.start("kube-apiserver", filepath.Join(assets, "kube-apiserver"),
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
		"--v=0"); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "kube-apiserver", p.URL+"/readyz", p.Token, &tls.Config{InsecureSkipVerify: true}); err != nil {
		return nil, err
	}
	return p, nil
}

// Config is an admin client config for the API server.
func (p *Plane) Config() *rest.Config {
	return &rest.Config{
		Host:            p.URL,
		BearerToken:     p.Token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             100,
		Burst:           200,
	}
}

// Kubeconfig is a kubeconfig file's text for the admin token.
func (p *Plane) Kubeconfig() string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: local
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: admin
  user: {token: %q}
contexts:
- name: local
  context: {cluster: local, user: admin}
current-context: local
`, p.URL, p.Token)
}

// Logs are the log files of the processes, by name.
func (p *Plane) Logs() map[string]string {
	m := map[string]string{}
	for _, pr := range p.procs {
		m[pr.name] = pr.log.Name()
	}
	return m
}

// Stop stops the API server, then etcd (SIGTERM, waiting up to a minute
// each: kube-apiserver takes seconds to exit).
func (p *Plane) Stop() {
	for i := len(p.procs) - 1; i >= 0; i-- {
		pr := p.procs[i]
		_ = pr.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-pr.exited:
		case <-time.After(time.Minute):
			_ = pr.cmd.Process.Kill()
			<-pr.exited
		}
		pr.log.Close()
	}
	p.procs = nil
}

func (p *Plane) start(name, bin string, args ...string) error {
	logFile, err := os.Create(filepath.Join(p.Dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	pr := &proc{name: name, cmd: cmd, log: logFile, exited: make(chan error, 1)}
	go func() { pr.exited <- cmd.Wait() }()
	p.procs = append(p.procs, pr)
	return nil
}

// freePorts returns n ports free on 127.0.0.1 now.
func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitHTTP polls url until it answers 200 or ctx ends.
func waitHTTP(ctx context.Context, name, url, token string, tlsConfig *tls.Config) error {
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
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
				return nil
			}
			err = fmt.Errorf("%s: %s", resp.Status, body.String())
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w", name, url, errors.Join(last, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
