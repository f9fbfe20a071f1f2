package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpreempt/gpreempt/internal/api"
)

// TestPushReplacesQuantiles: each push replaces the process's pushed
// quantiles, so a window with no spinner (or no request) leaves no stale
// figure in gpreemptd_hint_spinner_hold_seconds (or the latency gauge).
func TestPushReplacesQuantiles(t *testing.T) {
	m := NewMetrics(nil)
	push := func(lat, hold map[string]float64) {
		m.Pushed(api.HintStats{PID: 7, Stats: api.Stats{Requests: 1, RequestLatencyUs: lat, SpinnerHoldUs: hold}}, "infer")
	}
	for _, tc := range []struct {
		name      string
		lat, hold map[string]float64
		wantLat   int
		wantHold  int
		holdP50   float64 // seconds; 0: not checked
	}{
		{"both", map[string]float64{"p50": 40, "p99": 80}, map[string]float64{"p50": 150, "p99": 300, "max": 400}, 2, 3, 150e-6},
		{"fewer hold quantiles", map[string]float64{"p50": 41, "p99": 81}, map[string]float64{"p50": 120}, 2, 1, 120e-6},
		{"no spinner in the window", map[string]float64{"p50": 42, "p99": 82}, nil, 2, 0, 0},
		{"no request either", nil, nil, 0, 0, 0},
		{"spinners again", map[string]float64{"p50": 43}, map[string]float64{"p50": 90}, 1, 1, 90e-6},
	} {
		push(tc.lat, tc.hold)
		if n := testutil.CollectAndCount(m.hintLatency); n != tc.wantLat {
			t.Errorf("%s: %d latency series, want %d", tc.name, n, tc.wantLat)
		}
		if n := testutil.CollectAndCount(m.hintHold); n != tc.wantHold {
			t.Errorf("%s: %d hold series, want %d", tc.name, n, tc.wantHold)
		}
		if tc.holdP50 != 0 {
			if v := testutil.ToFloat64(m.hintHold.WithLabelValues(m.ProcessLabel(7), "infer", "p50")); v != tc.holdP50 {
				t.Errorf("%s: hold p50 %v s, want %v", tc.name, v, tc.holdP50)
			}
		}
	}
	// A process that renames itself (exec, prctl) keeps no series under
	// its old name.
	m.Pushed(api.HintStats{PID: 7, Stats: api.Stats{Requests: 2, RequestLatencyUs: map[string]float64{"p50": 44}}}, "infer-v2")
	for _, c := range []prometheus.Collector{m.hintLatency, m.hintHold, m.hintExpired, m.hintRequests} {
		if n := testutil.CollectAndCount(c); n > 1 {
			t.Errorf("after a rename: %d series of a collector, want at most the new one", n)
		}
	}
	m.forget(7)
	for _, c := range []prometheus.Collector{m.hintLatency, m.hintHold, m.hintExpired, m.hintRequests} {
		if n := testutil.CollectAndCount(c); n != 0 {
			t.Errorf("after the exit: %d series left", n)
		}
	}
}
