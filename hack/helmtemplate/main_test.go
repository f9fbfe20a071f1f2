package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gpreempt/gpreempt/internal/kube"
)

var update = flag.Bool("update", false, "rewrite deploy/kubernetes/gpreempt.yaml from the chart")

var (
	chartDir = filepath.Join("..", "..", "deploy", "helm", "gpreempt")
	rendered = filepath.Join("..", "..", "deploy", "kubernetes", "gpreempt.yaml")
)

// RenderedArgs are the settings deploy/kubernetes/gpreempt.yaml is
// rendered with (make k8s-manifests).
var renderedArgs = []string{"createNamespace=true"}

// tracingRendered is the chart with request tracing on a host file (its
// mount and flags; by default there is neither), which the
// end-to-end test gives the API server as well (test/e2e/k8s).
var (
	tracingRendered = filepath.Join("..", "..", "test", "e2e", "k8s", "testdata", "gpreempt-request-tracing.yaml")
	tracingArgs     = []string{"requestTracing.enabled=true", "requestTracing.libcuda=/usr/lib/x86_64-linux-gnu/libcuda.so.1"}
)

// TestRenderedManifestsUpToDate fails when the chart changed and the plain
// manifests were not rendered again (go test ./hack/helmtemplate -update).
func TestRenderedManifestsUpToDate(t *testing.T) {
	for _, r := range []struct {
		path string
		args []string
	}{{rendered, renderedArgs}, {tracingRendered, tracingArgs}} {
		got, err := Render(chartDir, "gpreempt", "gpreempt", r.args)
		if err != nil {
			t.Fatal(err)
		}
		if *update {
			if err := os.WriteFile(r.path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(r.path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is not the chart rendered with %v: run `go test ./hack/helmtemplate -update`", r.path, r.args)
		}
	}
}

func TestRenderOptions(t *testing.T) {
	for _, tt := range []struct {
		sets []string
		want []string
		not  []string
	}{
		{nil, []string{"kind: DaemonSet", "hostPID: true", "kind: Service"}, []string{"kind: Namespace", "kind: ServiceMonitor", "privileged: true"}},
		{[]string{"metrics.serviceMonitor.enabled=true", "metrics.service.enabled=false"}, []string{"kind: ServiceMonitor"}, []string{"kind: Service\n"}},
		{[]string{"runtimeClassName=nvidia", "image.tag=v9"}, []string{"runtimeClassName: nvidia", "gpreemptd:v9"}, nil},
		{nil, nil, []string{"--trace-requests", "libcuda"}},
		// Per process by default: no host file, no mount.
		{[]string{"requestTracing.enabled=true"}, []string{"- --trace-requests\n"}, []string{"libcuda"}},
		{[]string{"requestTracing.enabled=true", "requestTracing.libcuda=/usr/lib/x86_64-linux-gnu/libcuda.so.1"}, []string{"- --trace-requests\n", "- --libcuda=/host/libcuda/libcuda.so.1\n",
			"mountPath: /host/libcuda/libcuda.so.1\n              readOnly: true", "path: /usr/lib/x86_64-linux-gnu/libcuda.so.1\n            type: File"}, nil},
		{[]string{"requestTracing.libcuda=/usr/lib/x86_64-linux-gnu/libcuda.so.1"}, nil, []string{"--trace-requests", "libcuda"}},
		{[]string{"requestTracing.enabled=true", "requestTracing.libcuda=/run/nvidia/driver/usr/lib64/libcuda.so.580.159.04"},
			[]string{"- --libcuda=/host/libcuda/libcuda.so.580.159.04\n", "path: /run/nvidia/driver/usr/lib64/libcuda.so.580.159.04\n"}, nil},
		// The metrics server binds one address, never every interface
		// (issue 40, finding 6): the pod's, or with hostNetwork the node's.
		{nil, []string{"- --metrics-addr=[$(METRICS_IP)]:9477\n", "fieldPath: status.podIP\n"}, []string{"--metrics-addr=0.0.0.0", "hostNetwork: true", "kind: NetworkPolicy"}},
		{[]string{"hostNetwork=true"}, []string{"hostNetwork: true\n", "fieldPath: status.hostIP\n"}, []string{"--metrics-addr=0.0.0.0", "status.podIP"}},
		{[]string{"metrics.networkPolicy.enabled=true"}, []string{"kind: NetworkPolicy\n", "policyTypes:\n    - Ingress\n", "kubernetes.io/metadata.name: monitoring\n", "- port: metrics\n"}, nil},
	} {
		out, err := Render(chartDir, "gpreempt", "gpreempt", tt.sets)
		if err != nil {
			t.Fatalf("%v: %v", tt.sets, err)
		}
		for _, w := range tt.want {
			if !bytes.Contains(out, []byte(w)) {
				t.Errorf("%v: output lacks %q", tt.sets, w)
			}
		}
		for _, n := range tt.not {
			if bytes.Contains(out, []byte(n)) {
				t.Errorf("%v: output has %q", tt.sets, n)
			}
		}
	}
}

// TestRenderedPolicyParses: the chart's default Kubernetes policy is one
// the agent accepts.
func TestRenderedPolicyParses(t *testing.T) {
	var values struct {
		KubernetesPolicy map[string]any `json:"kubernetesPolicy"`
	}
	if err := readYAML(filepath.Join(chartDir, "values.yaml"), &values); err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(values.KubernetesPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.ParsePolicy(b); err != nil {
		t.Errorf("values.yaml kubernetesPolicy: %v", err)
	}
}

// TestRenderRefusesARelativeLibrary: the host file request tracing
// mounts is an absolute path; another does not render.
func TestRenderRefusesARelativeLibrary(t *testing.T) {
	_, err := Render(chartDir, "gpreempt", "gpreempt", []string{"requestTracing.enabled=true", "requestTracing.libcuda=lib/libcuda.so.1"})
	if err == nil || !strings.Contains(err.Error(), "requestTracing.libcuda") || !strings.Contains(err.Error(), "absolute") {
		t.Fatalf("rendered with a relative libcuda: err %v; want one naming requestTracing.libcuda", err)
	}
}
