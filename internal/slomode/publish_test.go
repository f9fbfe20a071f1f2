package slomode

import (
	"cmp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

type fixedLatency map[int]signal.Latency

func (f fixedLatency) Latest(pid int) (signal.Latency, bool) { s, ok := f[pid]; return s, ok }

// TestSampleOfTheMetric: an objective is judged on its own metric's values
// where the source gives them, else on the quantile it names over its
// count (tokens for tpot_, from the window's requests); a traced-step LC
// refuses a request objective.
func TestSampleOfTheMetric(t *testing.T) {
	ms := func(xs ...int) []time.Duration {
		var out []time.Duration
		for _, x := range xs {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	scraped := func(requests []time.Duration) signal.Latency {
		return signal.Latency{Source: signal.Scraped, Requests: len(requests), Samples: map[string][]time.Duration{signal.MetricRequest: requests},
			Buckets: map[string][]time.Duration{signal.MetricRequest: ms(300, 500, 800, 1000)}}
	}
	for _, tc := range []struct {
		name, objective string
		sample          signal.Latency
		values          []time.Duration
		latency         time.Duration
		count           int
		requests        int // the requests the points come from (0: each weight is one)
		refused         bool
	}{
		{"request values", "p50<=1.10x", signal.Latency{Source: signal.TracedRequest, Requests: 3, Samples: map[string][]time.Duration{signal.MetricRequest: ms(700, 710, 690)}},
			ms(700, 710, 690), 0, 0, 0, false},
		{"tpot values, not the requests'", "tpot_p50<=12ms", signal.Latency{Source: signal.Scraped, Requests: 1,
			Samples: map[string][]time.Duration{signal.MetricRequest: ms(400), signal.MetricTPOT: ms(9, 10, 11)}}, ms(9, 10, 11), 0, 0, 1, false},
		{"tpot values of no finished request", "tpot_p50<=12ms", signal.Latency{Source: signal.Scraped,
			Samples: map[string][]time.Duration{signal.MetricTPOT: ms(9, 10, 11)}}, ms(9, 10, 11), 0, 0, 1, false},
		{"pushed quantile over tokens", "tpot_p99<=15ms", signal.Latency{Requests: 2, Tokens: 30,
			Quantiles: map[string]time.Duration{"p50": 400 * time.Millisecond, "tpot_p99": 12 * time.Millisecond}}, nil, 12 * time.Millisecond, 30, 2, false},
		{"pushed quantile over requests", "p99<=50ms", signal.Latency{Requests: 60,
			Quantiles: map[string]time.Duration{"p99": 40 * time.Millisecond}}, nil, 40 * time.Millisecond, 60, 0, false},
		{"steps refuse a request objective", "p50<=1.10x", signal.Latency{Source: signal.TracedStep, Tokens: 50,
			Samples: map[string][]time.Duration{signal.MetricTPOT: ms(10, 11)}}, nil, 0, 0, 0, true},
		{"steps serve a tpot objective", "tpot_p50<=1.10x", signal.Latency{Source: signal.TracedStep, Tokens: 2,
			Samples: map[string][]time.Duration{signal.MetricTPOT: ms(10, 11)}}, ms(10, 11), 0, 0, 0, false},
		// vLLM's request buckets (docs/SLO.md, "Scraped latency"): a value is known only within its bucket.
		{"scraped: a relative objective narrower than its bucket", "p50<=1.10x", scraped(ms(100, 150, 200)), nil, 0, 0, 0, true},
		{"scraped: a relative objective wider than its bucket", "p50<=1.70x", scraped(ms(350, 400, 450)), ms(350, 400, 450), 0, 0, 0, false},
		{"scraped: a relative objective narrower than its bucket's top over its bottom", "p50<=1.50x", scraped(ms(350, 400, 450)), nil, 0, 0, 0, true},
		{"scraped: no relative objective in the first bucket", "p50<=3x", scraped(ms(100, 150, 200)), nil, 0, 0, 0, true},
		{"scraped: an absolute bound at a bucket's edge", "p50<=300ms", scraped(ms(100, 150, 200)), ms(100, 150, 200), 0, 0, 0, false},
		{"scraped: an absolute bound below the bucket", "p50<=250ms", scraped(ms(350, 400, 450)), ms(350, 400, 450), 0, 0, 0, false},
		{"scraped: an absolute bound inside the bucket", "p50<=250ms", scraped(ms(100, 150, 200)), nil, 0, 0, 0, true},
		// Values in the +Inf bucket are placed at the last finite bound (as histogram_quantile does).
		{"scraped: in the +Inf bucket, a relative objective", "p50<=2x", scraped(ms(1000, 1000, 1000)), nil, 0, 0, 0, true},
		{"scraped: in the +Inf bucket, the last bound", "p50<=1s", scraped(ms(1000, 1000, 1000)), nil, 0, 0, 0, true},
		{"scraped: in the +Inf bucket, a bound below it", "p50<=900ms", scraped(ms(1000, 1000, 1000)), ms(1000, 1000, 1000), 0, 0, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pol, err := policy.Parse([]byte(strings.Replace(sloPolicy, `lc: {objective: "p50<=1.05x"}`, `lc: {objective: "`+tc.objective+`"}`, 1)))
			if err != nil {
				t.Fatal(err)
			}
			lc := policy.ProcRef{PID: 100, Start: 1, Comm: "lc-server"}
			lc.Decision = pol.Decide(policy.Process{PID: 100, Comm: "lc-server"})
			tc.sample.At, tc.sample.Window, tc.sample.Seq = time.Second, time.Second, 1
			l := &Loop{log: testlog.New(t), used: map[sampleSource]uint64{}, tracing: map[string]*traceWant{}, Latency: fixedLatency{100: tc.sample}}
			w := l.lcSamples(pol, []policy.ProcRef{lc}, time.Second)[100]
			if tc.refused {
				if len(w.samples) != 0 || !strings.HasPrefix(w.rows[0].Signal, "refused") {
					t.Fatalf("samples %+v, signal %q: want it refused", w.samples, w.rows[0].Signal)
				}
				return
			}
			if len(w.samples) != 1 {
				t.Fatalf("samples %+v, rows %+v", w.samples, w.rows)
			}
			want := []stats.Weighted{{V: tc.latency, W: tc.count}}
			if tc.values != nil {
				want = nil
				for _, v := range tc.values {
					want = append(want, stats.Weighted{V: v, W: 1})
				}
			}
			if s := w.samples[0]; !slices.Equal(s.Points, want) || s.Requests != tc.requests {
				t.Errorf("points %v from %d requests, want %v from %d", s.Points, s.Requests, want, tc.requests)
			}
			if want := cmp.Or(tc.sample.Source, signal.Pushed); w.rows[0].Source != want {
				t.Errorf("source %q, want %q", w.rows[0].Source, want)
			}
		})
	}
}

// TestSamplePerCPUSaysSo: a relative objective judged per the LC's CPU speed says so in its status row, with the
// p50 the app sees; an absolute one, judged as measured, does not.
func TestSamplePerCPUSaysSo(t *testing.T) {
	s := signal.Latency{Source: signal.TracedRequest, Requests: 2, Samples: map[string][]time.Duration{signal.MetricRequest: {100 * time.Millisecond, 160 * time.Millisecond}},
		PerCPU: map[string][]time.Duration{signal.MetricRequest: {120 * time.Millisecond, 121 * time.Millisecond}}}
	for _, tc := range []struct{ objective, signal string }{
		{"p50<=1.10x", "traced-request, per its CPU's speed"},
		{"p50<=200ms", "traced-request"},
	} {
		o, err := objective.Parse(tc.objective)
		if err != nil {
			t.Fatal(err)
		}
		var row api.SLOLC
		if lcSample(s, o, policy.ProcRef{PID: 1}, "1/1", &row) == nil || row.Signal != tc.signal || row.P50Us != 100e3 {
			t.Errorf("%s: signal %q, p50 %vus; want %q and 100000us", tc.objective, row.Signal, row.P50Us, tc.signal)
		}
	}
}
