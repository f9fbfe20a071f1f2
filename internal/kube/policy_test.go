package kube

import (
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gpreempt/gpreempt/class"
)

func mustPolicy(t testing.TB, y string) *Policy {
	t.Helper()
	p, err := ParsePolicy([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func testPod(ns, priorityClass string, ann map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Annotations: ann},
		Spec:       corev1.PodSpec{PriorityClassName: priorityClass},
	}
}

const sitePolicy = `
default: burstable
priorityClasses:
  inference-critical: lc
  batch-low: be:2
namespaces:
  training: be
maxClass:
  default: burstable
  namespaces:
    inference: lc
`

func TestDecide(t *testing.T) {
	site := mustPolicy(t, sitePolicy)
	empty := mustPolicy(t, "")
	spec := func(n class.Name, w int) class.Spec { return class.Spec{Name: n, Weight: w} }
	tests := []struct {
		name   string
		policy *Policy
		pod    *corev1.Pod
		want   class.Spec
		source Source
		max    class.Name
		lo     time.Duration
		// refused holds a word each refusal must contain.
		refused []string
	}{
		{"empty policy, no annotation: not managed", empty, testPod("default", "", nil),
			class.Spec{}, SourceNone, class.LC, 0, nil},
		{"empty policy allows lc", empty, testPod("default", "", map[string]string{AnnotationClass: "lc"}),
			spec(class.LC, 1), SourceAnnotation, class.LC, 0, nil},
		{"annotation any case", empty, testPod("default", "", map[string]string{AnnotationClass: " BE "}),
			spec(class.BE, 1), SourceAnnotation, class.LC, 0, nil},
		{"annotation with weight", site, testPod("default", "", map[string]string{AnnotationClass: "be", AnnotationWeight: "3"}),
			spec(class.BE, 3), SourceAnnotation, class.Burstable, 0, nil},
		{"lc allowed in inference", site, testPod("inference", "", map[string]string{AnnotationClass: "lc", AnnotationLatencyObjective: "500us"}),
			spec(class.LC, 1), SourceAnnotation, class.LC, 500 * time.Microsecond, nil},
		{"lc refused elsewhere, falls back to the default", site, testPod("default", "", map[string]string{AnnotationClass: "lc"}),
			spec(class.Burstable, 1), SourceDefault, class.Burstable, 0, []string{"at most burstable"}},
		{"lc refused in training, falls back to the namespace's class", site, testPod("training", "", map[string]string{AnnotationClass: "lc"}),
			spec(class.BE, 1), SourceNamespace, class.Burstable, 0, []string{"namespace training"}},
		{"unknown class refused", site, testPod("default", "", map[string]string{AnnotationClass: "gold"}),
			spec(class.Burstable, 1), SourceDefault, class.Burstable, 0, []string{`"gold"`}},
		{"priority class before namespace", site, testPod("training", "inference-critical", nil),
			spec(class.LC, 1), SourcePriorityClass, class.Burstable, 0, nil},
		{"priority class with weight", site, testPod("default", "batch-low", nil),
			spec(class.BE, 2), SourcePriorityClass, class.Burstable, 0, nil},
		{"unmapped priority class: namespace", site, testPod("training", "other", nil),
			spec(class.BE, 1), SourceNamespace, class.Burstable, 0, nil},
		{"annotation over priority class", site, testPod("default", "inference-critical", map[string]string{AnnotationClass: "be"}),
			spec(class.BE, 1), SourceAnnotation, class.Burstable, 0, nil},
		{"weight weighs the mapped class", site, testPod("training", "", map[string]string{AnnotationWeight: "4"}),
			spec(class.BE, 4), SourceNamespace, class.Burstable, 0, nil},
		{"weight out of range", site, testPod("training", "", map[string]string{AnnotationWeight: "0"}),
			spec(class.BE, 1), SourceNamespace, class.Burstable, 0, []string{"out of range"}},
		{"weight not a number", site, testPod("training", "", map[string]string{AnnotationWeight: "heavy"}),
			spec(class.BE, 1), SourceNamespace, class.Burstable, 0, []string{"whole number"}},
		{"weight without a class", empty, testPod("default", "", map[string]string{AnnotationWeight: "2"}),
			class.Spec{}, SourceNone, class.LC, 0, []string{"no class to weigh"}},
		{"latency objective malformed", empty, testPod("default", "", map[string]string{AnnotationClass: "lc", AnnotationLatencyObjective: "fast"}),
			spec(class.LC, 1), SourceAnnotation, class.LC, 0, []string{"duration"}},
		{"latency objective out of range", empty, testPod("default", "", map[string]string{AnnotationClass: "lc", AnnotationLatencyObjective: "2h"}),
			spec(class.LC, 1), SourceAnnotation, class.LC, 0, []string{"out of range"}},
		{"two refusals", site, testPod("default", "", map[string]string{AnnotationClass: "lc", AnnotationWeight: "1001"}),
			spec(class.Burstable, 1), SourceDefault, class.Burstable, 0, []string{"at most", "out of range"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := tt.policy.Decide(tt.pod)
			if d.Spec != tt.want || d.Source != tt.source || d.Max != tt.max || d.LatencyObjective != tt.lo {
				t.Errorf("got %+v\nwant spec %v source %q max %s latency %v", d, tt.want, tt.source, tt.max, tt.lo)
			}
			if len(d.Refused) != len(tt.refused) {
				t.Fatalf("refused %q, want %d refusals containing %q", d.Refused, len(tt.refused), tt.refused)
			}
			for i, w := range tt.refused {
				if !strings.Contains(d.Refused[i], w) {
					t.Errorf("refusal %q does not say %q", d.Refused[i], w)
				}
			}
		})
	}
}

func TestDecisionLimit(t *testing.T) {
	p := mustPolicy(t, sitePolicy)
	for _, tt := range []struct {
		pod  *corev1.Pod
		want class.Name
	}{
		{testPod("inference", "", map[string]string{AnnotationClass: "lc"}), class.LC},
		{testPod("inference", "", map[string]string{AnnotationClass: "be"}), class.BE},
		{testPod("training", "", nil), class.BE},
		{testPod("default", "", nil), class.Burstable},
	} {
		if got := p.Decide(tt.pod).Limit(); got != tt.want {
			t.Errorf("%s %v: limit %s, want %s", tt.pod.Namespace, tt.pod.Annotations, got, tt.want)
		}
	}
	if got := mustPolicy(t, "maxClass: {default: be}").Decide(testPod("x", "", nil)).Limit(); got != class.BE {
		t.Errorf("unmanaged pod: limit %s, want the namespace bound be", got)
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		name, yaml string
		wants      []string
	}{
		{"unknown field", "defualt: be", []string{"defualt"}},
		{"bad default", "default: gold", []string{"default", `"gold"`}},
		{"bad weight", "namespaces: {training: 'be:0'}", []string{"namespaces.training", "weight"}},
		{"bad priority class", "priorityClasses: {a: lc, b: fast}", []string{"priorityClasses.b", `"fast"`}},
		{"bad max", "maxClass: {default: high, namespaces: {x: lc:2}}", []string{"maxClass.default", "maxClass.namespaces.x"}},
		{"wrong type", "namespaces: [be]", []string{"namespaces"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParsePolicy([]byte(tt.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
		})
	}
}

// FuzzParsePolicy: the policy comes from a ConfigMap any cluster admin
// writes.
func FuzzParsePolicy(f *testing.F) {
	f.Add([]byte(sitePolicy))
	f.Add([]byte(`{"default":"be:1000","maxClass":{"namespaces":{"a":"LC"}}}`))
	f.Add([]byte("namespaces: {a: 'be:'}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParsePolicy(data)
		if err != nil {
			return
		}
		d := p.Decide(testPod("a", "b", nil))
		if d.Managed() && (d.Spec.Name.Rank() < 0 || class.CheckWeight(d.Spec.Weight) != nil) {
			t.Fatalf("accepted policy decides %+v", d)
		}
		if d.Max.Rank() < 0 {
			t.Fatalf("max class %q", d.Max)
		}
	})
}

// FuzzDecide: annotations are written by anyone who can create a pod.
func FuzzDecide(f *testing.F) {
	f.Add("lc", "3", "500us", "inference")
	f.Add("BE", "0", "-1s", "training")
	f.Add("", "", "", "")
	p := mustPolicy(f, sitePolicy)
	f.Fuzz(func(t *testing.T, cls, weight, lo, ns string) {
		ann := map[string]string{AnnotationClass: cls, AnnotationWeight: weight, AnnotationLatencyObjective: lo}
		d := p.Decide(testPod(ns, "", ann))
		if d.Managed() {
			if !d.Spec.Name.AtMost(class.LC) || class.CheckWeight(d.Spec.Weight) != nil {
				t.Fatalf("decided %+v", d)
			}
			if d.Source == SourceAnnotation && !d.Spec.Name.AtMost(d.Max) {
				t.Fatalf("annotation above the namespace bound: %+v", d)
			}
		}
		if d.LatencyObjective < 0 || d.LatencyObjective > MaxLatencyObjective {
			t.Fatalf("latency objective %v", d.LatencyObjective)
		}
		if n, err := class.ParseName(cls); err == nil && n.AtMost(d.Max) != (d.Source == SourceAnnotation) {
			t.Fatalf("class %q allowed=%v but source %q (refused %q)", cls, n.AtMost(d.Max), d.Source, d.Refused)
		}
		if slices.Contains(d.Refused, "") {
			t.Fatal("an empty refusal")
		}
	})
}
