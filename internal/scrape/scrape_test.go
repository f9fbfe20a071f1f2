package scrape

import (
	"context"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// vLLM's bucket boundaries (vllm/v1/metrics: request latency, time to
// first token, inter-token latency).
var (
	vllmRequestBuckets = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	vllmTTFTBuckets    = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	vllmITLBuckets     = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
)

// server is an LLM server's metrics as a real Prometheus client library
// exposes them: histograms in a registry, served by promhttp.
type server struct {
	mu   sync.Mutex
	reg  *prometheus.Registry
	hist map[string]*prometheus.HistogramVec
	srv  *httptest.Server
	// openMetrics: the handler answers in OpenMetrics text whatever the
	// request asks for.
	openMetrics bool
}

type histDef struct {
	name    string
	buckets []float64
}

func newServer(t *testing.T, label string, defs ...histDef) *server {
	t.Helper()
	s := &server{}
	s.reset(label, defs...)
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		reg, om := s.reg, s.openMetrics
		s.mu.Unlock()
		if om {
			r.Header.Set("Accept", "application/openmetrics-text;version=1.0.0")
		}
		promhttp.HandlerFor(reg, promhttp.HandlerOpts{EnableOpenMetrics: true}).ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// reset replaces the registry: the server restarted, its counts from 0.
func (s *server) reset(label string, defs ...histDef) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reg, s.hist = prometheus.NewRegistry(), map[string]*prometheus.HistogramVec{}
	var labels []string
	if label != "" {
		labels = []string{label}
	}
	for _, d := range defs {
		h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: d.name, Help: d.name, Buckets: d.buckets}, labels)
		s.reg.MustRegister(h)
		s.hist[d.name] = h
	}
}

func (s *server) observe(name string, model string, vs ...float64) {
	s.mu.Lock()
	h := s.hist[name]
	s.mu.Unlock()
	var lv []string
	if model != "" {
		lv = []string{model}
	}
	for _, v := range vs {
		if model == "exemplar" {
			h.WithLabelValues(lv...).(prometheus.ExemplarObserver).ObserveWithExemplar(v, prometheus.Labels{"trace_id": "a b#{}"})
			continue
		}
		h.WithLabelValues(lv...).Observe(v)
	}
}

func (s *server) spec(t *testing.T, preset, model string) endpoint.Spec {
	t.Helper()
	addr, path, err := endpoint.ParseLocal(s.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	p, err := endpoint.LookupPreset(preset)
	if err != nil {
		t.Fatal(err)
	}
	return endpoint.Spec{Addr: addr, Path: path, Preset: preset, Metrics: p.Metrics, Model: model}
}

func vllmServer(t *testing.T) *server {
	return newServer(t, "model_name",
		histDef{"vllm:e2e_request_latency_seconds", vllmRequestBuckets},
		histDef{"vllm:time_to_first_token_seconds", vllmTTFTBuckets},
		histDef{"vllm:inter_token_latency_seconds", vllmITLBuckets})
}

// scraped is a source over one LC process (pid 7) with spec.
func scraped(spec endpoint.Spec) (*Scraped, []policy.ProcRef) {
	// A fetch's bound is far past what a loaded test machine takes: these
	// tests do not depend on the clock.
	s := &Scraped{Resolve: func(p policy.ProcRef) (endpoint.Spec, bool) { return spec, p.PID == 7 }, Fetch: Fetcher{Timeout: time.Minute}}
	return s, []policy.ProcRef{{PID: 7, Start: 1}, {PID: 8, Start: 1}}
}

// bucketOf is the (lower, upper] bounds of the bucket v falls in.
func bucketOf(bounds []float64, v float64) (float64, float64) {
	lo := 0.0
	for _, b := range bounds {
		if v <= b {
			return lo, b
		}
		lo = b
	}
	return lo, lo
}

// trueQuantile is the q-quantile of vs as histogram_quantile ranks it:
// the value of rank ceil(q*n).
func trueQuantile(vs []float64, q float64) float64 {
	s := slices.Sorted(slices.Values(vs))
	r := int(math.Ceil(q*float64(len(s)))) - 1
	return s[max(r, 0)]
}

func TestScrapedWindows(t *testing.T) {
	// Each window's observations, and what the window must show.
	type window struct {
		e2e, ttft, itl []float64
	}
	spread := func(n int, lo, hi float64) []float64 {
		out := make([]float64, n)
		for i := range out {
			out[i] = lo + (hi-lo)*float64(i)/float64(max(n-1, 1))
		}
		return out
	}
	cases := []struct {
		name    string
		model   string // the rule's model ("": every series)
		windows []window
	}{
		{"one request a window", "", []window{
			{e2e: []float64{0.7}, ttft: []float64{0.03}, itl: spread(15, 0.02, 0.03)},
			{e2e: []float64{0.75}, ttft: []float64{0.035}, itl: spread(15, 0.021, 0.04)},
		}},
		{"many requests", "", []window{
			{e2e: spread(40, 0.4, 2.2), ttft: spread(40, 0.01, 0.3), itl: spread(600, 0.012, 0.09)},
			{e2e: spread(25, 1.2, 4.0), ttft: spread(25, 0.05, 0.9), itl: spread(375, 0.03, 0.4)},
		}},
		{"an idle window", "", []window{{}, {e2e: []float64{0.9, 1.1}, ttft: []float64{0.05, 0.06}, itl: []float64{0.02, 0.03}}}},
		{"the rule's model", "m", []window{{e2e: spread(30, 0.3, 0.9), ttft: spread(30, 0.002, 0.02), itl: spread(100, 0.011, 0.02)}}},
		{"past MaxSamples", "", []window{{e2e: spread(10, 1, 2), ttft: spread(10, 0.1, 0.2), itl: spread(2*signal.MaxSamples+3, 0.01, 0.5)}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			srv := vllmServer(t)
			src, lcs := scraped(srv.spec(t, "vllm", tc.model))
			now := time.Second
			src.Roll(now, lcs)
			if _, ok := src.Latest(7); ok {
				t.Fatal("a window from the first fetch: it only starts one")
			}
			for i, w := range tc.windows {
				srv.observe("vllm:e2e_request_latency_seconds", "m", w.e2e...)
				srv.observe("vllm:time_to_first_token_seconds", "m", w.ttft...)
				srv.observe("vllm:inter_token_latency_seconds", "m", w.itl...)
				// Another model's series: summed in unless the rule names one.
				srv.observe("vllm:e2e_request_latency_seconds", "other", 100)
				now += time.Second
				src.Roll(now, lcs)
				s, ok := src.Latest(7)
				if !ok {
					t.Fatalf("window %d: none", i)
				}
				if _, ok := src.Latest(8); ok {
					t.Fatal("pid 8 has no endpoint, yet a window")
				}
				wantReq := len(w.e2e)
				if tc.model == "" {
					wantReq++
				}
				if s.Source != signal.Scraped || s.Window != time.Second || s.At != now || s.Seq != uint64(i+1) {
					t.Errorf("window %d: source %q window %v at %v seq %d", i, s.Source, s.Window, s.At, s.Seq)
				}
				if s.Requests != wantReq || s.Tokens != len(w.itl) {
					t.Errorf("window %d: %d requests %d tokens, want %d and %d", i, s.Requests, s.Tokens, wantReq, len(w.itl))
				}
				check := func(metric string, vs []float64, bounds []float64) {
					t.Helper()
					got := s.Samples[metric]
					if len(vs) == 0 {
						if len(got) != 0 {
							t.Errorf("window %d %q: %d values from no observation", i, metric, len(got))
						}
						return
					}
					if len(got) != min(len(vs), signal.MaxSamples) {
						t.Errorf("window %d %q: %d values, want %d", i, metric, len(got), min(len(vs), signal.MaxSamples))
					}
					prefix := ""
					if metric != signal.MetricRequest {
						prefix = metric + "_"
					}
					for _, q := range []struct {
						name string
						q    float64
					}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}} {
						want := trueQuantile(vs, q.q)
						lo, hi := bucketOf(bounds, want)
						gotQ := s.Quantiles[prefix+q.name].Seconds()
						if gotQ < lo-1e-9 || gotQ > hi+1e-9 {
							t.Errorf("window %d %s%s: %v s, want in (%v, %v] (the bucket of %v)", i, prefix, q.name, gotQ, lo, hi, want)
						}
					}
					// The values keep the distribution: their median is in the bucket of the true one.
					med := got[(len(got)-1)/2].Seconds()
					if lo, hi := bucketOf(bounds, trueQuantile(vs, 0.5)); med < lo-1e-9 || med > hi+1e-9 {
						t.Errorf("window %d %q: median value %v s outside (%v, %v]", i, metric, med, lo, hi)
					}
					if !slices.IsSorted(got) {
						t.Errorf("window %d %q: values not in rank order", i, metric)
					}
					// The bounds come with the values: a value is known only within its bucket.
					var want []time.Duration
					for _, b := range bounds {
						want = append(want, time.Duration(b*float64(time.Second)))
					}
					if !slices.Equal(s.Buckets[metric], want) {
						t.Errorf("window %d %q: buckets %v, want %v", i, metric, s.Buckets[metric], want)
					}
				}
				e2e := w.e2e
				if tc.model == "" {
					e2e = append(slices.Clone(e2e), 100)
				}
				check(signal.MetricRequest, e2e, vllmRequestBuckets)
				check(signal.MetricTTFT, w.ttft, vllmTTFTBuckets)
				check(signal.MetricTPOT, w.itl, vllmITLBuckets)
			}
			src.Roll(now+time.Second, nil)
			if _, ok := src.Latest(7); ok {
				t.Error("a window after Roll with no LC")
			}
		})
	}
}

func TestScrapedCounterReset(t *testing.T) {
	srv := vllmServer(t)
	src, lcs := scraped(srv.spec(t, "vllm", ""))
	obs := func(n int) {
		for range n {
			srv.observe("vllm:e2e_request_latency_seconds", "m", 0.6)
		}
	}
	obs(10)
	src.Roll(1*time.Second, lcs)
	obs(10)
	src.Roll(2*time.Second, lcs)
	if s, ok := src.Latest(7); !ok || s.Requests != 10 {
		t.Fatalf("before the restart: %+v %v", s, ok)
	}
	srv.reset("model_name", histDef{"vllm:e2e_request_latency_seconds", vllmRequestBuckets})
	obs(3) // fewer than before: the count went down
	src.Roll(3*time.Second, lcs)
	if s, ok := src.Latest(7); ok {
		t.Fatalf("a window across a restart: %+v", s)
	}
	obs(4)
	src.Roll(4*time.Second, lcs)
	if s, ok := src.Latest(7); !ok || s.Requests != 4 || s.Window != time.Second {
		t.Fatalf("after the restart: %+v %v", s, ok)
	}
}

func TestScrapedPresets(t *testing.T) {
	cases := []struct {
		preset string
		label  string
		defs   []histDef
		// observations by name, in the histogram's unit
		obs           map[string][]float64
		requests      int
		tokens        int
		quantile      string
		within        [2]time.Duration
		missingMetric string
	}{
		{preset: "vllm", label: "model_name", defs: []histDef{{"vllm:e2e_request_latency_seconds", vllmRequestBuckets}, {"vllm:time_per_output_token_seconds", vllmITLBuckets}},
			obs:      map[string][]float64{"vllm:e2e_request_latency_seconds": {0.9, 0.9}, "vllm:time_per_output_token_seconds": {0.03, 0.03, 0.03}},
			requests: 2, tokens: 3, quantile: "tpot_p50", within: [2]time.Duration{25 * time.Millisecond, 50 * time.Millisecond}, missingMetric: signal.MetricTTFT},
		{preset: "sglang", label: "model_name", defs: []histDef{{"sglang:e2e_request_latency_seconds", []float64{0.1, 0.5, 1, 2}}, {"sglang:time_to_first_token_seconds", []float64{0.1, 0.2, 0.4}}, {"sglang:inter_token_latency_seconds", []float64{0.01, 0.02, 0.04}}},
			obs:      map[string][]float64{"sglang:e2e_request_latency_seconds": {0.7}, "sglang:time_to_first_token_seconds": {0.15}, "sglang:inter_token_latency_seconds": {0.015, 0.015}},
			requests: 1, tokens: 2, quantile: "ttft_p50", within: [2]time.Duration{100 * time.Millisecond, 200 * time.Millisecond}},
		{preset: "tgi", defs: []histDef{{"tgi_request_duration", prometheus.ExponentialBuckets(0.00015, 1.5, 35)}, {"tgi_request_mean_time_per_token_duration", prometheus.ExponentialBuckets(0.00015, 1.5, 35)}},
			obs:      map[string][]float64{"tgi_request_duration": {0.5, 0.6, 0.7}, "tgi_request_mean_time_per_token_duration": {0.02, 0.02, 0.02}},
			requests: 3, tokens: 3, quantile: "p50", within: [2]time.Duration{400 * time.Millisecond, 700 * time.Millisecond}, missingMetric: signal.MetricTTFT},
		{preset: "triton", label: "model", defs: []histDef{{"nv_inference_first_response_histogram_ms", []float64{10, 50, 100, 500}}},
			obs:      map[string][]float64{"nv_inference_first_response_histogram_ms": {20, 30, 40, 45}},
			requests: 4, quantile: "ttft_p50", within: [2]time.Duration{10 * time.Millisecond, 50 * time.Millisecond}, missingMetric: signal.MetricRequest},
	}
	for _, tc := range cases {
		t.Run(tc.preset, func(t *testing.T) {
			srv := newServer(t, tc.label, tc.defs...)
			model := ""
			if tc.label != "" {
				model = "m"
			}
			src, lcs := scraped(srv.spec(t, tc.preset, model))
			src.Roll(time.Second, lcs)
			for name, vs := range tc.obs {
				srv.observe(name, model, vs...)
			}
			src.Roll(2*time.Second, lcs)
			s, ok := src.Latest(7)
			if !ok {
				t.Fatal("no window")
			}
			if s.Requests != tc.requests || s.Tokens != tc.tokens {
				t.Errorf("%d requests %d tokens, want %d and %d", s.Requests, s.Tokens, tc.requests, tc.tokens)
			}
			if q := s.Quantiles[tc.quantile]; q <= tc.within[0] || q > tc.within[1] {
				t.Errorf("%s %v, want in (%v, %v]", tc.quantile, q, tc.within[0], tc.within[1])
			}
			if tc.missingMetric != "" {
				if _, ok := s.Samples[tc.missingMetric]; ok {
					t.Errorf("values for %q, which the server does not export", tc.missingMetric)
				}
			}
		})
	}
}

func TestScrapedOpenMetrics(t *testing.T) {
	srv := vllmServer(t)
	srv.openMetrics = true
	spec := srv.spec(t, "vllm", "")
	if _, om, err := (Fetcher{Timeout: time.Minute}).Fetch(context.Background(), spec); err != nil || !om {
		t.Fatalf("OpenMetrics %v, err %v", om, err)
	}
	src, lcs := scraped(spec)
	src.Roll(time.Second, lcs)
	// Exemplars (with a label value holding a space, '#' and braces) ride
	// on the buckets in OpenMetrics.
	srv.observe("vllm:e2e_request_latency_seconds", "exemplar", 0.6, 0.7, 1.2)
	srv.observe("vllm:inter_token_latency_seconds", "exemplar", 0.02)
	src.Roll(2*time.Second, lcs)
	s, ok := src.Latest(7)
	if !ok || s.Requests != 3 || s.Tokens != 1 {
		t.Fatalf("%+v %v", s, ok)
	}
	if p50 := s.Quantiles["p50"]; p50 <= 500*time.Millisecond || p50 > 800*time.Millisecond {
		t.Errorf("p50 %v", p50)
	}
}

// TestFetchRefuses: what a fetch never does, each refused with its reason.
func TestFetchRefuses(t *testing.T) {
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("x_bucket 1\n")) }))
	t.Cleanup(other.Close)
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	mux := http.NewServeMux()
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/metrics", http.StatusFound)
	})
	mux.HandleFunc("/redirect-same", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/metrics", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/big", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte(strings.Repeat("#\n", 1024))) })
	mux.HandleFunc("/big-chunked", func(w http.ResponseWriter, _ *http.Request) {
		for range 64 {
			w.Write([]byte(strings.Repeat("#\n", 32)))
			w.(http.Flusher).Flush()
		}
	})
	mux.HandleFunc("/hang", func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-hang:
		}
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "no", http.StatusServiceUnavailable) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	addr := netip.MustParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
	otherAddr := netip.MustParseAddrPort(strings.TrimPrefix(other.URL, "http://"))

	cases := []struct {
		name string
		spec endpoint.Spec
		f    Fetcher
		want error  // errors.Is
		text string // else in the message
	}{
		{"a redirect to another host", endpoint.Spec{Addr: addr, Path: "/redirect"}, Fetcher{Timeout: time.Minute}, ErrRedirect, ""},
		{"a redirect to the same host", endpoint.Spec{Addr: addr, Path: "/redirect-same"}, Fetcher{Timeout: time.Minute}, ErrRedirect, ""},
		{"a body past the bound", endpoint.Spec{Addr: addr, Path: "/big"}, Fetcher{MaxBody: 1000, Timeout: time.Minute}, ErrTooLarge, ""},
		{"a chunked body past the bound", endpoint.Spec{Addr: addr, Path: "/big-chunked"}, Fetcher{MaxBody: 1000, Timeout: time.Minute}, ErrTooLarge, ""},
		{"a server that does not answer", endpoint.Spec{Addr: addr, Path: "/hang"}, Fetcher{Timeout: 50 * time.Millisecond}, context.DeadlineExceeded, ""},
		{"a status other than 200", endpoint.Spec{Addr: addr, Path: "/status"}, Fetcher{Timeout: time.Minute}, nil, "503"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tc.f.Fetch(context.Background(), tc.spec)
			switch {
			case err == nil:
				t.Fatal("fetched")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("%v, want %v", err, tc.want)
			case tc.text != "" && !strings.Contains(err.Error(), tc.text):
				t.Fatalf("%v, want %q in it", err, tc.text)
			}
		})
	}
	// The dialer refuses any address but the endpoint's, whatever the URL
	// says: the connection to other's address is never made.
	req, _ := http.NewRequest(http.MethodGet, other.URL+"/metrics", nil)
	if _, err := client(addr, time.Minute).Do(req); !errors.Is(err, ErrAddress) {
		t.Fatalf("a request for %s through %s's client: %v, want %v", otherAddr, addr, err, ErrAddress)
	}
	// And a body at the bound is fine.
	if b, _, err := (Fetcher{MaxBody: 2048, Timeout: time.Minute}).Fetch(context.Background(), endpoint.Spec{Addr: addr, Path: "/big"}); err != nil || len(b) != 2048 {
		t.Fatalf("%d bytes, %v", len(b), err)
	}
}

// TestScrapedFailure: an endpoint that fails gives no window (so the
// loop may trace the LC instead), and the window after it recovers starts
// at its first fetch back.
func TestScrapedFailure(t *testing.T) {
	srv := vllmServer(t)
	spec := srv.spec(t, "vllm", "")
	src, lcs := scraped(spec)
	src.Roll(time.Second, lcs)
	srv.observe("vllm:e2e_request_latency_seconds", "m", 0.5)
	src.Roll(2*time.Second, lcs)
	if _, ok := src.Latest(7); !ok {
		t.Fatal("no window")
	}
	// The endpoint gives a body that is not an exposition.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("{not metrics\n")) }))
	t.Cleanup(bad.Close)
	badSpec := spec
	badSpec.Addr = netip.MustParseAddrPort(strings.TrimPrefix(bad.URL, "http://"))
	src.Resolve = func(policy.ProcRef) (endpoint.Spec, bool) { return badSpec, true }
	src.Roll(3*time.Second, lcs)
	if s, ok := src.Latest(7); ok {
		t.Fatalf("a window from a bad body: %+v", s)
	}
	src.Resolve = func(policy.ProcRef) (endpoint.Spec, bool) { return spec, true }
	src.Roll(4*time.Second, lcs) // a new start
	srv.observe("vllm:e2e_request_latency_seconds", "m", 0.5, 0.5)
	src.Roll(5*time.Second, lcs)
	if s, ok := src.Latest(7); !ok || s.Requests != 2 || s.Window != time.Second {
		t.Fatalf("after recovering: %+v %v", s, ok)
	}
}

// TestScrapedShared: processes that share an endpoint share its fetch and
// its window.
func TestScrapedShared(t *testing.T) {
	var fetches int
	var mu sync.Mutex
	srv := vllmServer(t)
	inner := srv.srv.Config.Handler
	srv.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		fetches++
		mu.Unlock()
		inner.ServeHTTP(w, r)
	})
	spec := srv.spec(t, "vllm", "")
	src := &Scraped{Resolve: func(policy.ProcRef) (endpoint.Spec, bool) { return spec, true }, Fetch: Fetcher{Timeout: time.Minute}}
	lcs := []policy.ProcRef{{PID: 1}, {PID: 2}, {PID: 3}}
	src.Roll(time.Second, lcs)
	srv.observe("vllm:e2e_request_latency_seconds", "m", 0.5)
	src.Roll(2*time.Second, lcs)
	for _, p := range lcs {
		if s, ok := src.Latest(p.PID); !ok || s.Requests != 1 {
			t.Errorf("pid %d: %+v %v", p.PID, s, ok)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if fetches != 2 {
		t.Errorf("%d fetches for 3 processes over 2 windows, want 2", fetches)
	}
}
