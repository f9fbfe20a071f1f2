package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gpreempt/gpreempt/internal/endpoint"
)

// The pod annotations that name an LC pod's latency endpoint: its server's
// own Prometheus histograms, which gpreemptd scrapes in SLO mode. The
// address is always the pod's own (status.podIP): a pod names a port, a
// path and a preset, never a host.
const (
	// AnnotationMetricsPort is the port of the pod's metrics (1-65535).
	AnnotationMetricsPort = "gpreempt.io/metrics-port"
	// AnnotationMetricsPreset names the server: vllm, sglang, tgi, triton.
	AnnotationMetricsPreset = "gpreempt.io/metrics-preset"
	// AnnotationMetricsPath is the metrics path (default /metrics).
	AnnotationMetricsPath = "gpreempt.io/metrics-path"
	// AnnotationMetricsModel keeps one model's series, where the server
	// serves several.
	AnnotationMetricsModel = "gpreempt.io/metrics-model"
)

// podMetrics reads pod's latency endpoint from its annotations and its
// own address. ok is false where it names none or it cannot be used yet
// (no pod IP); refused says why an annotation is not used.
func podMetrics(pod *corev1.Pod) (spec endpoint.Spec, ok bool, refused []string) {
	ann := pod.Annotations
	portS, hasPort := ann[AnnotationMetricsPort]
	_, hasPreset := ann[AnnotationMetricsPreset]
	if !hasPort && !hasPreset {
		for _, k := range []string{AnnotationMetricsPath, AnnotationMetricsModel} {
			if v, set := ann[k]; set {
				refused = append(refused, fmt.Sprintf("%s=%q: without %s and %s", k, v, AnnotationMetricsPort, AnnotationMetricsPreset))
			}
		}
		return spec, false, refused
	}
	refuse := func(format string, args ...any) (endpoint.Spec, bool, []string) {
		return endpoint.Spec{}, false, append(refused, fmt.Sprintf(format, args...))
	}
	if !hasPort || !hasPreset {
		return refuse("%s and %s go together", AnnotationMetricsPort, AnnotationMetricsPreset)
	}
	port, err := endpoint.ParsePort(portS)
	if err != nil {
		return refuse("%s=%q: %v", AnnotationMetricsPort, portS, err)
	}
	preset, err := endpoint.LookupPreset(ann[AnnotationMetricsPreset])
	if err != nil {
		return refuse("%s=%q: %v", AnnotationMetricsPreset, ann[AnnotationMetricsPreset], err)
	}
	spec.Preset, spec.Metrics = preset.Name, preset.Metrics
	path, err := endpoint.ParsePath(ann[AnnotationMetricsPath])
	if err != nil {
		return refuse("%s=%q: %v", AnnotationMetricsPath, ann[AnnotationMetricsPath], err)
	}
	if m, set := ann[AnnotationMetricsModel]; set {
		if preset.ModelLabel == "" {
			return refuse("%s=%q: preset %s names no model label", AnnotationMetricsModel, m, preset.Name)
		}
		spec.Model = m
	}
	if pod.Spec.HostNetwork {
		// The pod's address is the node's: a port there could be any
		// host process's.
		return refuse("%s: the pod uses the host's network, whose address is not the pod's own", AnnotationMetricsPort)
	}
	if pod.Status.PodIP == "" {
		return spec, false, refused // not yet: the pod has no address
	}
	if spec.Addr, spec.Path, err = endpoint.Pod(pod.Status.PodIP, port, path); err != nil {
		return refuse("%s: %v", AnnotationMetricsPort, err)
	}
	return spec, true, refused
}

// MetricsEndpoint is the latency endpoint of process pid's pod, from its
// annotations, at the pod's own address; false for a process in no pod of
// this node or a pod that names none.
func (a *Agent) MetricsEndpoint(pid int) (endpoint.Spec, bool) {
	ref, err := a.PodOfPID(pid)
	if err != nil {
		return endpoint.Spec{}, false
	}
	pod, err := a.podByAPIUID(ref.UID)
	if err != nil {
		return endpoint.Spec{}, false
	}
	spec, ok, _ := podMetrics(pod)
	return spec, ok
}
