package signal

import (
	"math"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
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
