package kube

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// podInfo is a join metric, as kube-state-metrics' *_info series are:
// gpreemptd's per-process series carry a process label, and
//
//	gpreemptd_hint_request_latency_seconds * on(process) group_left(namespace, pod, container) gpreemptd_pod_process_info
//
// gives them the pod's.
var podInfo = prometheus.NewDesc("gpreemptd_pod_process_info",
	"A GPU process of a Kubernetes pod on this node (always 1): join on process for namespace, pod and container.",
	[]string{"process", "namespace", "pod", "container"}, nil)

type podInfoCollector struct {
	agent *Agent
	pids  func() []int
	label func(pid int) string
}

// NewPodInfoCollector returns a collector of gpreemptd_pod_process_info
// for the processes pids lists (the daemon's known GPU processes) that are
// in pods of this node, each labelled as the daemon's per-process series
// label it (label: its pid, or an opaque name; nil: the pid).
func NewPodInfoCollector(a *Agent, pids func() []int, label func(pid int) string) prometheus.Collector {
	if label == nil {
		label = strconv.Itoa
	}
	return podInfoCollector{a, pids, label}
}

func (c podInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- podInfo }

func (c podInfoCollector) Collect(ch chan<- prometheus.Metric) {
	for _, pid := range c.pids() {
		ref, err := c.agent.PodOfPID(pid)
		if err != nil {
			continue // in no pod, or exited since
		}
		ch <- prometheus.MustNewConstMetric(podInfo, prometheus.GaugeValue, 1,
			c.label(pid), ref.Namespace, ref.Name, ref.Container)
	}
}
