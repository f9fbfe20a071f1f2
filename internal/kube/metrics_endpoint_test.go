package kube

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
)

func TestPodMetrics(t *testing.T) {
	ann := func(kv ...string) map[string]string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	cases := []struct {
		name    string
		ann     map[string]string
		podIP   string
		hostNet bool
		want    string // the endpoint; "" none
		refused string // a word the refusal holds
	}{
		{"none", nil, "10.0.0.7", false, "", ""},
		{"vllm", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "vllm"), "10.0.0.7", false, "http://10.0.0.7:8000/metrics preset vllm", ""},
		{"path and model", ann(AnnotationMetricsPort, "9400", AnnotationMetricsPreset, "sglang", AnnotationMetricsPath, "/m?x=1", AnnotationMetricsModel, "llama"),
			"fd00::7", false, "http://[fd00::7]:9400/m?x=1 preset sglang model llama", ""},
		{"no pod IP yet", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "vllm"), "", false, "", ""},
		{"a path naming a host", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "vllm", AnnotationMetricsPath, "http://169.254.169.254/"), "10.0.0.7", false, "", AnnotationMetricsPath},
		{"a path naming a host, scheme-relative", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "vllm", AnnotationMetricsPath, "//evil/metrics"), "10.0.0.7", false, "", AnnotationMetricsPath},
		{"a bad port", ann(AnnotationMetricsPort, "80000", AnnotationMetricsPreset, "vllm"), "10.0.0.7", false, "", AnnotationMetricsPort},
		{"an unknown preset", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "ollama"), "10.0.0.7", false, "", "unknown preset"},
		{"a port without preset", ann(AnnotationMetricsPort, "8000"), "10.0.0.7", false, "", "go together"},
		{"a model without a model label", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "tgi", AnnotationMetricsModel, "x"), "10.0.0.7", false, "", "no model label"},
		{"the host's network", ann(AnnotationMetricsPort, "8000", AnnotationMetricsPreset, "vllm"), "192.168.1.5", true, "", "host's network"},
		{"a path alone", ann(AnnotationMetricsPath, "/x"), "10.0.0.7", false, "", "without"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pod := testPod("inference", "", tc.ann)
			pod.Status.PodIP, pod.Spec.HostNetwork = tc.podIP, tc.hostNet
			spec, ok, refused := podMetrics(pod)
			if got := map[bool]string{true: spec.String()}[ok]; got != tc.want {
				t.Errorf("endpoint %q, want %q", got, tc.want)
			}
			if (tc.refused == "") != (len(refused) == 0) || tc.refused != "" && !strings.Contains(strings.Join(refused, "; "), tc.refused) {
				t.Errorf("refused %q, want %q", refused, tc.refused)
			}
			// A refusal is an Event, as the class annotations' are.
			if d := (&Policy{}).Decide(pod); len(d.Refused) != len(refused) {
				t.Errorf("Decide refused %q, want %q", d.Refused, refused)
			}
		})
	}
}

// TestMetricsEndpoint: a process's endpoint is its own pod's, at the
// pod's address; a process in another pod gets that pod's or none.
func TestMetricsEndpoint(t *testing.T) {
	proc := fakeProc{t, t.TempDir()}
	proc.put(10, sdCgroup(uidA, cidA))
	proc.put(11, sdCgroup(uidB, cidB))
	proc.put(12, "/system.slice/vllm.service")
	podA := newPod("inference", "server", uidA, map[string]string{AnnotationClass: "lc", AnnotationMetricsPort: "8000", AnnotationMetricsPreset: "vllm"}, cidA)
	podA.Status.PodIP = "10.0.0.7"
	podB := newPod("inference", "other", uidB, map[string]string{AnnotationClass: "lc"}, cidB)
	podB.Status.PodIP = "10.0.0.8"
	a := startAgent(t, fake.NewClientset(podA, podB), proc.root, nil)
	if spec, ok := a.MetricsEndpoint(10); !ok || spec.URL() != "http://10.0.0.7:8000/metrics" {
		t.Errorf("pod A's process: %v %v", spec, ok)
	}
	for _, pid := range []int{11, 12, 13} {
		if spec, ok := a.MetricsEndpoint(pid); ok {
			t.Errorf("pid %d: %v", pid, spec)
		}
	}
}
