package reconcile

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the reconciler's Prometheus metrics: its applies, their
// failures and time, the time from a context's setup to its classing, and
// the drift it met.
type Metrics struct {
	applies  *prometheus.CounterVec
	failures *prometheus.CounterVec
	drift    *prometheus.CounterVec
	classed  prometheus.Histogram
	control  *prometheus.HistogramVec

	// Forget, when set, is told of each process the reconciler drops (it
	// exited, or its pid was seen free), so that what other metrics hold
	// of it goes with it (the daemon's series of what it pushed).
	Forget func(pid int)
}

// latencyBuckets span a debounce (tens of ms) to a stuck second.
var latencyBuckets = []float64{.005, .01, .02, .03, .04, .05, .075, .1, .15, .2, .3, .5, 1, 2}

// NewMetrics makes the reconciler's metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		applies: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_applies_total",
			Help: "Groups given their class's settings (and read back), by class."}, []string{"class"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_apply_failures_total",
			Help: "Failed applies, by reason (control, readback, gone)."}, []string{"reason"}),
		drift: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_drift_total",
			Help: "Changes by others to classed groups: reapplied, or deferred by the per-group rate limit."}, []string{"outcome"}),
		classed: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "gpreemptd_classed_latency_seconds",
			Help: "Time from a context's last setup call to its groups classed.", Buckets: latencyBuckets}),
		control: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "gpreemptd_control_seconds",
			Help: "Time of one attach-apply-read-back operation on a process.", Buckets: prometheus.ExponentialBuckets(0.0001, 2, 14)}, []string{"op"}),
	}
	reg.MustRegister(m.applies, m.failures, m.drift, m.classed, m.control)
	return m
}
