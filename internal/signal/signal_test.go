package signal

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
)

func TestQuantileName(t *testing.T) {
	for _, tc := range []struct {
		q    float64
		want string
	}{{0.5, "p50"}, {0.3, "p50"}, {0.9, "p90"}, {0.95, "p99"}, {0.99, "p99"}, {0.999, "p999"}, {0.9999, "max"}} {
		if got := QuantileName(tc.q); got != tc.want {
			t.Errorf("QuantileName(%v) = %q, want %q", tc.q, got, tc.want)
		}
	}
}

// TestFromPush: a pushed window's metric names become the Samples' metrics, its values microseconds,
// each metric held to MaxSamples, counts past an int32 clamped.
func TestFromPush(t *testing.T) {
	many := make([]float64, MaxSamples+5)
	for i := range many {
		many[i] = 1
	}
	w := &api.Window{DurationMs: 1000, Requests: 1 << 40, Tokens: 48, LatencyUs: map[string]float64{"p50": 250.5, "tpot_p50": 20},
		SamplesUs: map[string][]float64{"request": {700, 300}, "tpot": many, "ttft": {40}}}
	s := FromPush(w)
	if s.Source != Pushed || s.Window != time.Second || s.Requests != math.MaxInt32 || s.Tokens != 48 {
		t.Errorf("window %v, %d requests, %d tokens from %s; want 1s, MaxInt32, 48, pushed", s.Window, s.Requests, s.Tokens, s.Source)
	}
	if s.Quantiles["p50"] != 250500*time.Nanosecond || s.Quantiles["tpot_p50"] != 20*time.Microsecond {
		t.Errorf("quantiles %v", s.Quantiles)
	}
	if got := s.Samples[MetricRequest]; len(got) != 2 || got[0] != 700*time.Microsecond {
		t.Errorf("request samples %v, want 700µs and 300µs", got)
	}
	if len(s.Samples[MetricTPOT]) != MaxSamples || len(s.Samples[MetricTTFT]) != 1 {
		t.Errorf("%d tpot samples (want %d), %d ttft (want 1)", len(s.Samples[MetricTPOT]), MaxSamples, len(s.Samples[MetricTTFT]))
	}
}

// FuzzPoints: any window against any objective gives points of positive weight with a reason
// only where it gives none, from the objective's own metric where the window has its values (else
// one quantile over a positive count), and refuses only a histogram's window.
func FuzzPoints(f *testing.F) {
	f.Add("p50<=1.10x", "scraped", []byte{100, 200, 150}, uint16(3), uint16(0), int64(0), true)
	f.Add("tpot_p50<=12ms", "pushed", []byte{}, uint16(2), uint16(30), int64(12e6), false)
	f.Add("p99<=50ms", "traced-step", []byte{9, 9}, uint16(0), uint16(5), int64(-1), false)
	f.Fuzz(func(t *testing.T, obj, source string, vals []byte, requests, tokens uint16, quantile int64, buckets bool) {
		o, err := objective.Parse(obj)
		if err != nil {
			return
		}
		l := Latency{Source: source, Requests: int(requests), Tokens: int(tokens), Samples: map[string][]time.Duration{},
			Quantiles: map[string]time.Duration{o.Metric + map[bool]string{true: "_"}[o.Metric != ""] + QuantileName(o.Quantile): time.Duration(quantile)}}
		for _, v := range vals {
			l.Samples[o.Metric] = append(l.Samples[o.Metric], time.Duration(v)*time.Millisecond)
		}
		if buckets {
			l.Buckets = map[string][]time.Duration{o.Metric: {50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond}}
		}
		pts, n, _, why := l.Points(o)
		switch {
		case why != "" && len(pts) > 0, why != "" && !buckets && len(vals) > 0:
			t.Fatalf("%q: points %v and why %q", obj, pts, why)
		case len(vals) > 0 && why == "" && len(pts) != len(vals):
			t.Fatalf("%q: %d points of %d values", obj, len(pts), len(vals))
		case len(vals) == 0 && len(pts) > 1, n < 0:
			t.Fatalf("%q: points %v from %d requests", obj, pts, n)
		}
		for _, p := range pts {
			if p.W <= 0 {
				t.Fatalf("%q: a point of weight %d", obj, p.W)
			}
		}
	})
}

// TestPointsPerCPU: a relative objective is judged on the samples at one CPU speed where every sample has one; an
// absolute one, and a window missing some, on what the app sees; the p50 shown is always what the app sees.
func TestPointsPerCPU(t *testing.T) {
	ms := func(v ...int) (out []time.Duration) {
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	for _, tc := range []struct {
		name, objective string
		perCPU          []time.Duration
		want            []time.Duration
	}{
		{"relative: per CPU", "p50<=1.10x", ms(100, 101, 99), ms(100, 101, 99)},
		{"absolute: as seen", "p50<=200ms", ms(100, 101, 99), ms(100, 160, 130)},
		{"one without: as seen", "p50<=1.10x", ms(100, 101), ms(100, 160, 130)},
		{"none: as seen", "p50<=1.10x", nil, ms(100, 160, 130)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := objective.Parse(tc.objective)
			if err != nil {
				t.Fatal(err)
			}
			l := Latency{Source: TracedRequest, Requests: 3, Samples: map[string][]time.Duration{MetricRequest: ms(100, 160, 130)},
				PerCPU: map[string][]time.Duration{MetricRequest: tc.perCPU}}
			pts, _, p50, why := l.Points(o)
			var got []time.Duration
			for _, p := range pts {
				got = append(got, p.V)
			}
			if why != "" || p50 != 130*time.Millisecond || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("points %v, p50 %v (%q), want %v and p50 130ms", got, p50, why, tc.want)
			}
		})
	}
}
