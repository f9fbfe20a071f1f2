package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
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

// TestRenderedManifestsUpToDate fails when the chart changed and the plain
// manifests were not rendered again (go test ./hack/helmtemplate -update).
func TestRenderedManifestsUpToDate(t *testing.T) {
	got, err := Render(chartDir, "gpreempt", "gpreempt", renderedArgs)
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(rendered, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(rendered)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is not the chart rendered with %v: run `go test ./hack/helmtemplate -update`", rendered, renderedArgs)
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
