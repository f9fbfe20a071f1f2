package daemon

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/reconcile"
)

// Metrics are gpreemptd's Prometheus metrics, on a registry of their own
// (nothing global, so tests make as many as they like).
type Metrics struct {
	Registry *prometheus.Registry
	// Reconcile are the reconciler's, on the same registry.
	Reconcile *reconcile.Metrics

	requests        *prometheus.CounterVec
	refusedConns    *prometheus.CounterVec
	refusedRequests *prometheus.CounterVec
	reloads         *prometheus.CounterVec
	hintLatency     *prometheus.GaugeVec
	hintHold        *prometheus.GaugeVec
	hintExpired     *prometheus.GaugeVec
	hintRequests    *prometheus.GaugeVec
	groupsByClass   func() map[[2]string]int
	mode            *prometheus.GaugeVec
	sloEnabled      prometheus.Gauge
	sloTimeslice    *prometheus.GaugeVec
	sloWorst        *prometheus.GaugeVec
	sloShare        *prometheus.GaugeVec
	sloArmLC        *prometheus.GaugeVec
	sloArmShare     *prometheus.GaugeVec
	sloLC           *prometheus.GaugeVec
	sloSamples      *prometheus.GaugeVec
	sloP50          *prometheus.GaugeVec
	sloChanges      *prometheus.CounterVec
	sloStopped      prometheus.Gauge

	mu     sync.Mutex
	pushed map[int]string // pid: the comm its series carry

	// pidLabels: the process label is the pid (--metrics-pids); else an
	// opaque name keyed by idKey, a secret of this daemon's run.
	pidLabels bool
	idKey     [32]byte
}

// SetPIDLabels makes the process label of the per-process series the pid
// (gpreemptd --metrics-pids), for a scraper that joins them with its own
// per-pid data. Off, the label is an opaque name, the same for a pid in
// every series of one run of the daemon: a scrape does not tell which
// host pid runs in which pod, nor which pids are GPU processes.
func (m *Metrics) SetPIDLabels(on bool) { m.pidLabels = on }

// ProcessLabel is the process label of pid's series.
func (m *Metrics) ProcessLabel(pid int) string {
	if m.pidLabels {
		return strconv.Itoa(pid)
	}
	return m.opaque(strconv.Itoa(pid))
}

// opaque is a keyed hash of s, short enough to read and long enough not
// to collide among a node's processes.
func (m *Metrics) opaque(s string) string {
	h := hmac.New(sha256.New, m.idKey[:])
	h.Write([]byte(s))
	return "p" + hex.EncodeToString(h.Sum(nil)[:6])
}

// SetGroups sets what reports the live groups at scrape time.
func (m *Metrics) SetGroups(f func() map[[2]string]int) { m.groupsByClass = f }

// NewMetrics registers the metrics; groups reports the live groups per
// (class, gpu) at scrape time.
func NewMetrics(groups func() map[[2]string]int) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_socket_requests_total",
			Help: "Socket API requests by endpoint (the route: other for none) and status code."}, []string{"endpoint", "code"}),
		refusedConns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_refused_connections_total",
			Help: "Connections closed as accepted, by server (socket, metrics) and the cap they were past (total, peer; unknown peer: no SO_PEERCRED)."}, []string{"server", "cap"}),
		refusedRequests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_socket_refused_total",
			Help: "Socket API requests refused (403) by the request: class, stats, reload, or the route."}, []string{"request"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_reloads_total",
			Help: "Policy reloads by outcome."}, []string{"outcome"}),
		hintLatency: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_hint_request_latency_seconds",
			Help: "LC request latency pushed by the process's hint engine."}, []string{"process", "comm", "quantile"}),
		hintHold: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_hint_spinner_hold_seconds",
			Help: "Spinner hold time pushed by the process's hint engine."}, []string{"process", "comm", "quantile"}),
		hintExpired: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_hint_expired_holds",
			Help: "Spinner holds that expired before the LC work came, as pushed."}, []string{"process", "comm"}),
		hintRequests: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_hint_requests",
			Help: "LC requests the process's hint engine saw, as pushed."}, []string{"process", "comm"}),
		mode: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_mode",
			Help: "1 for the event source in use: bpf or scan."}, []string{"mode"}),
		sloEnabled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpreemptd_slo_enabled",
			Help: "1 while the SLO mode chooses the BE timeslice."}),
		sloTimeslice: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_be_timeslice_seconds",
			Help: "BE timeslice (of one unit of weight) the SLO mode chose for the BE beside the LCs on a GPU."}, []string{"gpu"}),
		sloWorst: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_worst_lc_vs_objective",
			Help: "Highest latency / objective of the LCs on a GPU over the last window (1 = at the objective; NaN: no LC latency)."}, []string{"gpu"}),
		sloShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_be_share",
			Help: "Progress of the BE beside the LCs on a GPU relative to BE alone over the last window (NaN: not measured)."}, []string{"gpu"}),
		sloArmLC: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_arm_lc_vs_objective",
			Help: "The frontier: the worst LC objective's latency / target under each arm a GPU's search holds or has measured, the mean of its measurements (NaN: not known)."}, []string{"gpu", "arm"}),
		sloArmShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_arm_be_share",
			Help: "The frontier: BE's share measured under each arm a GPU's search holds or has measured (NaN: not measured)."}, []string{"gpu", "arm"}),
		sloLC: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_lc_vs_objective",
			Help: "Each LC process's latency / objective over the last window, per GPU and objective (NaN: not measured yet)."}, []string{"gpu", "process", "objective"}),
		sloSamples: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_lc_samples",
			Help: "Each LC process's samples over the last window (requests, or tokens for a tpot_ objective), per GPU, objective and latency source (pushed, traced-request, traced-step, scraped)."}, []string{"gpu", "process", "objective", "source"}),
		sloP50: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "gpreemptd_slo_lc_p50_seconds",
			Help: "The median of each LC process's samples over the last window as the daemon sees them, per GPU, objective and latency source."}, []string{"gpu", "process", "objective", "source"}),
		sloStopped: prometheus.NewGauge(prometheus.GaugeOpts{Name: "gpreemptd_slo_be_stopped",
			Help: "BE processes stopped (SIGSTOP) while SLO mode learns an LC alone (slo.calibrate: pause)."}),
		sloChanges: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_slo_changes_total",
			Help: "BE timeslice changes by the SLO mode, by GPU and cause (violation, explore, known_better, no_signal)."}, []string{"gpu", "cause"}),
		groupsByClass: groups,
	}
	rand.Read(m.idKey[:])
	m.Reconcile = reconcile.NewMetrics(m.Registry)
	m.Reconcile.Forget = m.forget
	m.Registry.MustRegister(m.requests, m.refusedConns, m.refusedRequests, m.reloads,
		m.hintLatency, m.hintHold, m.hintExpired, m.hintRequests, m.mode, groupsCollector{m},
		m.sloEnabled, m.sloTimeslice, m.sloWorst, m.sloShare, m.sloArmLC, m.sloArmShare, m.sloLC, m.sloSamples, m.sloP50, m.sloChanges, m.sloStopped,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

var groupsDesc = prometheus.NewDesc("gpreemptd_groups", "Live channel groups by class and GPU.", []string{"class", "gpu"}, nil)

type groupsCollector struct{ m *Metrics }

func (c groupsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- groupsDesc }

func (c groupsCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.groupsByClass == nil {
		return
	}
	for k, n := range c.m.groupsByClass() {
		ch <- prometheus.MustNewConstMetric(groupsDesc, prometheus.GaugeValue, float64(n), k[0], k[1])
	}
}

// The pushed window, engine state and reply are the client's wire types:
// the daemon decodes what api.PushStats encodes.
type (
	LatencyWindow = api.Window
	EngineState   = api.Engine
	StatsReply    = api.StatsReply
)

// The socket API's metrics (server.Metrics).
var _ server.Metrics = (*Metrics)(nil)

// Request counts a socket API request by route and status code.
func (m *Metrics) Request(route, code string) { m.requests.WithLabelValues(route, code).Inc() }

// Refused counts a socket API request refused (403), by what it asked.
func (m *Metrics) Refused(request string) { m.refusedRequests.WithLabelValues(request).Inc() }

// RefusedConn counts a connection closed as accepted, by server (socket,
// metrics) and the cap it was past.
func (m *Metrics) RefusedConn(server, cap string) { m.refusedConns.WithLabelValues(server, cap).Inc() }

// Pushed exports what a process's hint engine pushed, under its comm.
func (m *Metrics) Pushed(s api.HintStats, comm string) {
	// Under the lock, so that a forget of the same pid comes wholly
	// before or after.
	m.mu.Lock()
	defer m.mu.Unlock()
	pid := m.ProcessLabel(s.PID)
	// A process names itself (prctl PR_SET_NAME takes any bytes); a label
	// value must be UTF-8, or the Prometheus client panics.
	comm = strings.ToValidUTF8(comm, "\uFFFD")
	if m.pushed == nil {
		m.pushed = map[int]string{}
	}
	if old, ok := m.pushed[s.PID]; ok && old != comm {
		m.deleteSeries(pid) // renamed (exec, prctl): no series left under the old name
	}
	m.pushed[s.PID] = comm
	// A push replaces the process's quantiles: one that carries none (a
	// window with no request, or no spinner) leaves no stale figure.
	for _, g := range []struct {
		vec *prometheus.GaugeVec
		us  map[string]float64
	}{{m.hintLatency, s.RequestLatencyUs}, {m.hintHold, s.SpinnerHoldUs}} {
		for _, q := range api.Quantiles {
			if v, ok := g.us[q]; ok {
				g.vec.WithLabelValues(pid, comm, q).Set(v / 1e6)
			} else {
				g.vec.DeleteLabelValues(pid, comm, q)
			}
		}
	}
	m.hintExpired.WithLabelValues(pid, comm).Set(float64(s.ExpiredHolds))
	m.hintRequests.WithLabelValues(pid, comm).Set(float64(s.Requests))
}

// forget drops a process's pushed series when it exits.
func (m *Metrics) forget(pid int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.pushed, pid)
	m.deleteSeries(m.ProcessLabel(pid))
}

// deleteSeries drops every pushed series of a process (its label).
func (m *Metrics) deleteSeries(process string) {
	l := prometheus.Labels{"process": process}
	m.hintLatency.DeletePartialMatch(l)
	m.hintHold.DeletePartialMatch(l)
	m.hintExpired.DeletePartialMatch(l)
	m.hintRequests.DeletePartialMatch(l)
}

// Pushers lists the pids with pushed series (to drop those that exited).
func (m *Metrics) Pushers() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []int
	for pid := range m.pushed {
		out = append(out, pid)
	}
	return out
}

// SetBEStopped sets how many BE processes SLO mode holds stopped.
func (m *Metrics) SetBEStopped(n int) { m.sloStopped.Set(float64(n)) }

// SetSLO publishes the SLO mode's status after a window, each search by
// its gpu label (api.GPUList), each LC row with a latency source by its
// process; st.Enabled false: the mode is off. A search's Last is this
// window's decision (none in the window the mode comes on), so a change
// is counted once.
func (m *Metrics) SetSLO(st api.SLO) {
	for _, v := range []*prometheus.GaugeVec{m.sloTimeslice, m.sloWorst, m.sloShare, m.sloArmLC, m.sloArmShare, m.sloLC, m.sloSamples, m.sloP50} {
		v.Reset()
	}
	m.sloEnabled.Set(map[bool]float64{true: 1}[st.Enabled])
	m.SetBEStopped(len(st.BEStopped))
	nan := func(f *float64) float64 {
		if f == nil {
			return math.NaN()
		}
		return *f
	}
	for _, s := range st.Searches {
		gpu := api.GPUList(s.GPUs)
		ts, _ := time.ParseDuration(s.BETimeslice)
		m.sloTimeslice.WithLabelValues(gpu).Set(ts.Seconds())
		m.sloWorst.WithLabelValues(gpu).Set(nan(s.WorstLC))
		m.sloShare.WithLabelValues(gpu).Set(nan(s.BEShare))
		if s.Last != nil && s.Last.Changed {
			m.sloChanges.WithLabelValues(gpu, s.Last.Cause).Inc()
		}
		for _, a := range s.Arms {
			m.sloArmLC.WithLabelValues(gpu, a.Arm).Set(nan(a.LCVsObjective))
			m.sloArmShare.WithLabelValues(gpu, a.Arm).Set(nan(a.BEShare))
		}
	}
	for _, r := range st.LC {
		if r.Source == "" { // no latency of it at all
			continue
		}
		labels := []string{api.GPUList(r.GPUs), m.ProcessLabel(r.PID), r.Objective}
		m.sloLC.WithLabelValues(labels...).Set(nan(r.Ratio))
		m.sloSamples.WithLabelValues(append(labels, r.Source)...).Set(float64(r.Samples))
		if r.P50Us > 0 {
			m.sloP50.WithLabelValues(append(labels, r.Source)...).Set(r.P50Us / 1e6)
		}
	}
}

func (m *Metrics) setMode(mode string) {
	m.mode.Reset()
	m.mode.WithLabelValues(mode).Set(1)
}

// Bounds of the metrics server: a scraper makes one request every few
// seconds, over one keep-alive connection.
const (
	// MaxMetricsConns bounds the connections the metrics server holds,
	// and MaxMetricsConnsPerAddr those from one remote address; past
	// either, a connection is closed as accepted.
	MaxMetricsConns        = 32
	MaxMetricsConnsPerAddr = 4
)

// metricsServer serves the registry's /metrics with time bounds on every
// phase of a connection: a client that opens connections and sends
// nothing, sends slowly, reads slowly or idles holds them for seconds, not
// for ever.
func metricsServer(reg *prometheus.Registry, log *slog.Logger) *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Timeout: 5 * time.Second}))
	return &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    server.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// metricsListener caps the metrics server's connections
// (MaxMetricsConns, MaxMetricsConnsPerAddr by remote address).
func (m *Metrics) metricsListener(l net.Listener) *server.CapListener {
	return server.NewCapListener(l, MaxMetricsConns, MaxMetricsConnsPerAddr, remoteHost, func(_, why string) {
		m.RefusedConn("metrics", why)
	})
}

// remoteHost is a TCP connection's remote address without its port.
func remoteHost(c net.Conn) (string, error) {
	host, _, err := net.SplitHostPort(c.RemoteAddr().String())
	return host, err
}
