package kube

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// podInfo is a join metric, as kube-state-metrics' *_info series are:
// gpreemptd's per-process series carry a pid label, and
//
//	gpreemptd_hint_request_latency_seconds * on(pid) group_left(namespace, pod, container) gpreemptd_pod_process_info
//
// gives them the pod's.
var podInfo = prometheus.NewDesc("gpreemptd_pod_process_info",
	"A GPU process of a Kubernetes pod on this node (always 1): join on pid for namespace, pod and container.",
	[]string{"pid", "namespace", "pod", "container"}, nil)

type podInfoCollector struct {
	agent *Agent
	pids  func() []int
}

// NewPodInfoCollector returns a collector of gpreemptd_pod_process_info
// for the processes pids lists (the daemon's known GPU processes) that are
// in pods of this node.
func NewPodInfoCollector(a *Agent, pids func() []int) prometheus.Collector {
	return podInfoCollector{a, pids}
}

func (c podInfoCollector) Describe(ch chan<- *prometheus.Desc) { ch <- podInfo }

func (c podInfoCollector) Collect(ch chan<- prometheus.Metric) {
	for _, pid := range c.pids() {
		ref, err := c.agent.PodOfPID(pid)
		if err != nil {
			continue // in no pod, or exited since
		}
		ch <- prometheus.MustNewConstMetric(podInfo, prometheus.GaugeValue, 1,
			strconv.Itoa(pid), ref.Namespace, ref.Name, ref.Container)
	}
}
