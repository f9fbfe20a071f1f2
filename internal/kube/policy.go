package kube

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpreempt/gpreempt/class"
)

// The pod annotations gpreempt reads.
const (
	// AnnotationClass asks for a class: lc, burstable or be.
	AnnotationClass = "gpreempt.io/class"
	// AnnotationWeight is the pod's weight within its class (1-1000): its
	// groups get the class's slice overhead plus the weight times the rest
	// of its timeslice (class.Class.TimesliceFor).
	AnnotationWeight = "gpreempt.io/weight"
	// AnnotationLatencyObjective is the latency an LC pod aims for (a Go
	// duration, "500us", "2ms"), carried to the daemon's hint engine and
	// metrics.
	AnnotationLatencyObjective = "gpreempt.io/latency-objective"

	// annotationMirror is the config hash kubelet names a static pod's
	// cgroup after; the API's mirror pod carries it here under another UID.
	annotationMirror = "kubernetes.io/config.mirror"
)

// MaxLatencyObjective bounds gpreempt.io/latency-objective: anything
// longer is not a GPU latency objective but a typo.
const MaxLatencyObjective = time.Minute

// Policy is the Kubernetes part of the node policy: which class a pod gets
// when it carries no gpreempt.io/class annotation, and the highest class
// each namespace's pods may ask for. The zero Policy allows every class
// and classes only annotated pods.
//
// In YAML (the daemon's policy file, under "kubernetes:"):
//
//	default: burstable          # pods with no annotation and no mapping below
//	priorityClasses:            # by spec.priorityClassName, before namespaces
//	  inference-critical: lc
//	  batch-low: be:2           # class:weight
//	namespaces:
//	  training: be
//	maxClass:                   # the highest class an annotation may ask for
//	  default: burstable        # namespaces not listed
//	  namespaces:
//	    inference: lc
type Policy struct {
	Default         string            `json:"default,omitempty"`
	PriorityClasses map[string]string `json:"priorityClasses,omitempty"`
	Namespaces      map[string]string `json:"namespaces,omitempty"`
	MaxClass        MaxClass          `json:"maxClass,omitempty"`

	// The parsed forms, filled by Check.
	def             *class.Spec
	priorityClasses map[string]class.Spec
	namespaces      map[string]class.Spec
}

// MaxClass bounds the class a pod may ask for, by namespace. An empty
// Default allows lc.
type MaxClass struct {
	Default    string            `json:"default,omitempty"`
	Namespaces map[string]string `json:"namespaces,omitempty"`
}

// ParsePolicy parses and checks a policy in YAML or JSON. Unknown fields
// are refused; errors name the field.
func ParsePolicy(data []byte) (*Policy, error) {
	var p Policy
	if err := yaml.UnmarshalStrict(data, &p); err != nil {
		return nil, fmt.Errorf("kubernetes policy: %w", err)
	}
	if err := p.Check(); err != nil {
		return nil, err
	}
	return &p, nil
}

// Check validates every class named in p and readies p for Decide. Errors
// name the field and the value.
func (p *Policy) Check() error {
	var errs []error
	spec := func(field, s string) (class.Spec, bool) {
		sp, err := class.ParseSpec(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("kubernetes policy: %s: %w", field, err))
			return class.Spec{}, false
		}
		return sp, true
	}
	name := func(field, s string) {
		if _, err := class.ParseName(s); err != nil {
			errs = append(errs, fmt.Errorf("kubernetes policy: %s: %w", field, err))
		}
	}
	p.def = nil
	if p.Default != "" {
		if sp, ok := spec("default", p.Default); ok {
			p.def = &sp
		}
	}
	p.priorityClasses = map[string]class.Spec{}
	for _, k := range sortedKeys(p.PriorityClasses) {
		if sp, ok := spec("priorityClasses."+k, p.PriorityClasses[k]); ok {
			p.priorityClasses[k] = sp
		}
	}
	p.namespaces = map[string]class.Spec{}
	for _, k := range sortedKeys(p.Namespaces) {
		if sp, ok := spec("namespaces."+k, p.Namespaces[k]); ok {
			p.namespaces[k] = sp
		}
	}
	if p.MaxClass.Default != "" {
		name("maxClass.default", p.MaxClass.Default)
	}
	for _, k := range sortedKeys(p.MaxClass.Namespaces) {
		name("maxClass.namespaces."+k, p.MaxClass.Namespaces[k])
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Max is the highest class pods of namespace ns may ask for.
func (p *Policy) Max(ns string) class.Name {
	s, ok := p.MaxClass.Namespaces[ns]
	if !ok {
		s = p.MaxClass.Default
	}
	if n, err := class.ParseName(s); err == nil {
		return n
	}
	return class.LC
}

// Source says where a pod's class came from.
type Source string

const (
	SourceAnnotation    Source = "annotation"
	SourcePriorityClass Source = "priorityClass"
	SourceNamespace     Source = "namespace"
	SourceDefault       Source = "default"
	// SourceNone: neither the pod nor the Kubernetes policy names a class;
	// the daemon's own rules decide.
	SourceNone Source = ""
)

// Decision is what the policy makes of one pod.
type Decision struct {
	Spec   class.Spec `json:"spec"`
	Source Source     `json:"source"`
	// Max is the highest class the pod's namespace may ask for.
	Max class.Name `json:"max"`
	// LatencyObjective is the pod's gpreempt.io/latency-objective, 0 if
	// none.
	LatencyObjective time.Duration `json:"latencyObjective,omitempty"`
	// Refused lists each annotation the policy refused or could not
	// parse, and why. The pod is then classed as if it had not carried
	// it, and each reason is recorded as an Event on the pod.
	Refused []string `json:"refused,omitempty"`
}

// Managed reports whether the Kubernetes policy names a class for the pod.
func (d Decision) Managed() bool { return d.Source != SourceNone }

// Limit is the highest class the pod's own processes may ask for over the
// daemon's socket: the class the pod is given, or, where the policy gives
// it none, the namespace's bound.
func (d Decision) Limit() class.Name {
	if d.Managed() {
		return d.Spec.Name
	}
	return d.Max
}

func (d Decision) equal(o Decision) bool {
	return d.Spec == o.Spec && d.Source == o.Source && d.Max == o.Max &&
		d.LatencyObjective == o.LatencyObjective && slices.Equal(d.Refused, o.Refused)
}

func (d Decision) String() string {
	if !d.Managed() {
		return "not classed by Kubernetes policy"
	}
	s := fmt.Sprintf("%s (from %s)", d.Spec, d.Source)
	if d.LatencyObjective > 0 {
		s += fmt.Sprintf(", latency objective %v", d.LatencyObjective)
	}
	return s
}

// Decide returns pod's class under p. p must have passed Check.
func (p *Policy) Decide(pod *corev1.Pod) Decision {
	d := Decision{Max: p.Max(pod.Namespace)}
	ann := pod.Annotations

	// The fallbacks, in order: priority class, namespace, default.
	if sp, ok := p.priorityClasses[pod.Spec.PriorityClassName]; ok && pod.Spec.PriorityClassName != "" {
		d.Spec, d.Source = sp, SourcePriorityClass
	} else if sp, ok := p.namespaces[pod.Namespace]; ok {
		d.Spec, d.Source = sp, SourceNamespace
	} else if p.def != nil {
		d.Spec, d.Source = *p.def, SourceDefault
	}

	if v, ok := ann[AnnotationClass]; ok {
		n, err := class.ParseName(v)
		switch {
		case err != nil:
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: %v", AnnotationClass, v, err))
		case !n.AtMost(d.Max):
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: namespace %s may ask for at most %s", AnnotationClass, v, pod.Namespace, d.Max))
		default:
			d.Spec, d.Source = class.Spec{Name: n, Weight: class.DefaultWeight}, SourceAnnotation
		}
	}
	if v, ok := ann[AnnotationWeight]; ok {
		w, err := strconv.Atoi(strings.TrimSpace(v))
		if err == nil {
			err = class.CheckWeight(w)
		} else {
			err = fmt.Errorf("not a whole number")
		}
		switch {
		case err != nil:
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: %v", AnnotationWeight, v, err))
		case d.Managed():
			d.Spec.Weight = w
		default:
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: the pod has no class to weigh (no %s annotation and no policy mapping)", AnnotationWeight, v, AnnotationClass))
		}
	}
	if v, ok := ann[AnnotationLatencyObjective]; ok {
		lo, err := time.ParseDuration(strings.TrimSpace(v))
		switch {
		case err != nil:
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: want a duration such as 500us or 2ms", AnnotationLatencyObjective, v))
		case lo <= 0 || lo > MaxLatencyObjective:
			d.Refused = append(d.Refused, fmt.Sprintf("%s=%q: out of range (0, %v]", AnnotationLatencyObjective, v, MaxLatencyObjective))
		default:
			d.LatencyObjective = lo
		}
	}
	// The latency endpoint's annotations: what is refused becomes an
	// Event, as the class's annotations do (MetricsEndpoint reads them).
	_, _, refused := podMetrics(pod)
	d.Refused = append(d.Refused, refused...)
	return d
}
