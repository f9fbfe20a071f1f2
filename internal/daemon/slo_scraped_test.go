package daemon

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/scrape"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

// TestSLOLoopScraped: an LC whose rule names its server's metrics is
// judged by what its histograms grew by each window, with no push and no
// trace; a push wins over it; the source is its pod's where it has one.
func TestSLOLoopScraped(t *testing.T) {
	reg := prometheus.NewRegistry()
	e2e := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "vllm:e2e_request_latency_seconds", Help: "e2e",
		Buckets: []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0}}, []string{"model_name"})
	reg.MustRegister(e2e)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	t.Cleanup(srv.Close)
	pol := strings.Replace(sloPolicy, `{name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}`,
		`{name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true, objective: "p50<=2s", latency: {metrics: "`+srv.URL+`/metrics", preset: vllm}}`, 1)
	s := newSLORig(t, pol)
	var podAsked []int
	s.loop.Scraped = &scrape.Scraped{Resolve: latencyEndpoints(s.Rec, func(pid int) (endpoint.Spec, bool) {
		podAsked = append(podAsked, pid)
		return endpoint.Spec{}, false // in no pod: the rule's
	}), Fetch: scrape.Fetcher{Timeout: time.Minute}, Log: testlog.New(t)}
	status := func() api.SLOLC {
		t.Helper()
		st := s.loop.Status()
		if len(st.LC) != 1 {
			t.Fatalf("LC status %+v", st.LC)
		}
		return st.LC[0]
	}
	s.window(slo.EagerPyTorchH100, true) // the controller starts; the first fetch starts a window
	for i := range 3 {
		for range 40 {
			e2e.WithLabelValues("m").Observe(0.7)
		}
		s.window(slo.EagerPyTorchH100, true)
		lc := status()
		if lc.Signal != "scraped" || lc.Requests != 40 || lc.LatencyUs < 500e3 || lc.LatencyUs > 800e3 {
			t.Fatalf("window %d: %+v, want scraped, 40 requests, p50 in (500, 800] ms", i, lc)
		}
	}
	if len(podAsked) == 0 || podAsked[0] != 100 {
		t.Errorf("the pod's endpoint asked for %v, want the LC (pid 100) first", podAsked)
	}
	// A push wins.
	for range 40 {
		e2e.WithLabelValues("m").Observe(0.7)
	}
	s.window(slo.EagerPyTorchH100, false)
	if lc := status(); lc.Signal != "pushed" {
		t.Fatalf("with a push: %+v", lc)
	}
	// The server restarts (its counts from 0): no window, and then again.
	reg.Unregister(e2e)
	e2e.Reset()
	reg.MustRegister(e2e)
	e2e.WithLabelValues("m").Observe(0.7)
	s.window(slo.EagerPyTorchH100, true)
	if lc := status(); lc.Signal != "stale" { // the push's, used
		t.Fatalf("a window across a restart: %+v", lc)
	}
	s.window(slo.EagerPyTorchH100, true)
	if lc := status(); lc.Signal != "stale" { // a push two windows old still stands
		t.Fatalf("a push two windows old: %+v", lc)
	}
	s.window(slo.EagerPyTorchH100, true)
	if lc := status(); lc.Signal != "scraped without p50" || lc.Requests != 0 {
		t.Fatalf("a window without requests: %+v", lc)
	}
}
