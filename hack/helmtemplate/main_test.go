package main

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
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

// rbacRule is one rule of a rendered Role or ClusterRole.
type rbacRule struct {
	APIGroups []string `json:"apiGroups"`
	Resources []string `json:"resources"`
	Verbs     []string `json:"verbs"`
}

// TestRBACIsNarrow: the agent lists and watches its node's pods and
// creates and patches Events; its service account may do that and
// nothing more: no get of a pod, no update or delete of Events, no
// events.k8s.io. Events are cluster-wide by default, or a Role in each of
// rbac.eventNamespaces.
func TestRBACIsNarrow(t *testing.T) {
	pods := rbacRule{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}
	events := rbacRule{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}}
	tests := []struct {
		name string
		sets []string
		want map[string][]rbacRule // "ClusterRole", "Role/NAMESPACE"
	}{
		{"default: Events in any namespace", nil,
			map[string][]rbacRule{"ClusterRole": {pods, events}}},
		{"Events in the namespaces listed", []string{"rbac.eventNamespaces={inference,training}"},
			map[string][]rbacRule{"ClusterRole": {pods}, "Role/inference": {events}, "Role/training": {events}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Render(chartDir, "gpreempt", "gpreempt", tt.sets)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][]rbacRule{}
			bindings := map[string]bool{}
			for _, doc := range strings.Split(string(out), "\n---\n") {
				var obj struct {
					Kind     string
					Metadata struct{ Name, Namespace string }
					Rules    []rbacRule
					RoleRef  struct{ Kind, Name string } `json:"roleRef"`
				}
				if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
					t.Fatal(err)
				}
				switch obj.Kind {
				case "ClusterRole":
					got["ClusterRole"] = obj.Rules
				case "Role":
					got["Role/"+obj.Metadata.Namespace] = obj.Rules
				case "ClusterRoleBinding":
					bindings["ClusterRole"] = obj.RoleRef.Name == obj.Metadata.Name
				case "RoleBinding":
					bindings["Role/"+obj.Metadata.Namespace] = obj.RoleRef.Kind == "Role" && obj.RoleRef.Name == obj.Metadata.Name
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rules\n got %+v\nwant %+v", got, tt.want)
			}
			for role := range tt.want {
				if !bindings[role] {
					t.Errorf("%s: not bound", role)
				}
			}
		})
	}
}

// TestDocsPodMountsTheSocketReadOnly: the pod example of
// docs/KUBERNETES.md mounts the socket's directory read-only (connecting
// to a unix socket needs no write to its file system); read-write, a pod
// could plant files beside the socket on the host.
func TestDocsPodMountsTheSocketReadOnly(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "KUBERNETES.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, block := range strings.Split(string(b), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		if !strings.Contains(block, "path: /run/gpreempt") {
			continue
		}
		var pod struct {
			Spec struct {
				Containers []struct {
					VolumeMounts []struct {
						Name      string `json:"name"`
						MountPath string `json:"mountPath"`
						ReadOnly  bool   `json:"readOnly"`
					} `json:"volumeMounts"`
				} `json:"containers"`
				Volumes []struct {
					Name     string                `json:"name"`
					HostPath struct{ Path string } `json:"hostPath"`
				} `json:"volumes"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(block), &pod); err != nil {
			t.Fatalf("docs/KUBERNETES.md: %v\n%s", err, block)
		}
		for _, v := range pod.Spec.Volumes {
			if v.HostPath.Path != "/run/gpreempt" {
				continue
			}
			for _, c := range pod.Spec.Containers {
				for _, m := range c.VolumeMounts {
					if m.Name == v.Name {
						found++
						if !m.ReadOnly {
							t.Errorf("docs/KUBERNETES.md: the pod example mounts %s (hostPath /run/gpreempt) read-write", m.MountPath)
						}
					}
				}
			}
		}
	}
	if found == 0 {
		t.Fatal("docs/KUBERNETES.md: no pod example mounting /run/gpreempt")
	}
}

// TestLivenessProbeOverTheSocket (issue 52, finding 7): the liveness probe
// scraped /metrics, whose server admits 4 connections per remote address:
// a local user holding loopback slots made 20 of 20 probes fail (a
// restart loop where probes come from the node's address). The probe now
// asks the daemon over its socket, as root in its own container, whose
// share of the socket no other user or pod can fill.
func TestLivenessProbeOverTheSocket(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "kubernetes", "gpreempt.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var ds struct {
			Kind string `json:"kind"`
			Spec struct {
				Template struct {
					Spec struct {
						Containers []struct {
							Name          string `json:"name"`
							LivenessProbe *struct {
								HTTPGet any `json:"httpGet"`
								Exec    *struct {
									Command []string `json:"command"`
								} `json:"exec"`
							} `json:"livenessProbe"`
						} `json:"containers"`
					} `json:"spec"`
				} `json:"template"`
			} `json:"spec"`
		}
		if err := yaml.Unmarshal([]byte(doc), &ds); err != nil || ds.Kind != "DaemonSet" {
			continue
		}
		for _, c := range ds.Spec.Template.Spec.Containers {
			p := c.LivenessProbe
			if p == nil {
				continue
			}
			found = true
			if p.HTTPGet != nil || p.Exec == nil || !slices.Contains(p.Exec.Command, "status") || !strings.Contains(strings.Join(p.Exec.Command, " "), "--socket=") {
				t.Errorf("container %s: liveness probe %+v; want gpreemptctl daemon status over the socket", c.Name, p)
			}
		}
	}
	if !found {
		t.Error("no liveness probe in the rendered DaemonSet")
	}
}
