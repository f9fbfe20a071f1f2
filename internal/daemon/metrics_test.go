package daemon

import (
	"math"
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

// TestSLOMetricsFromStatus: the SLO series are the status's figures, a
// search's change is counted from its last decision, and the mode off
// leaves no series of a search or LC.
func TestSLOMetricsFromStatus(t *testing.T) {
	m := NewMetrics(nil)
	worst, ratio := 1.25, 0.9
	st := api.SLO{Enabled: true, BEStopped: []int{9},
		Searches: []api.SLOSearch{
			{GPUs: []int{0, 1}, BETimeslice: "500µs", WorstLC: &worst, Last: &api.SLODecision{Changed: true, Cause: "explore"}},
			{BETimeslice: "1µs", Last: &api.SLODecision{Cause: "within"}},
		},
		LC: []api.SLOLC{
			{PID: 5, Objective: "p99<=10ms", Source: "pushed", Ratio: &ratio, Samples: 40, P50Us: 2500, GPUs: []int{0, 1}},
			{PID: 6, Objective: "p50<=1.1x", Source: "scraped", Signal: "stale"},
			{PID: 7, Signal: "no objective"},
		}}
	m.SetSLO(st)
	lc := func(pid int, obj string) float64 {
		return testutil.ToFloat64(m.sloLC.WithLabelValues("0,1", m.ProcessLabel(pid), obj))
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"timeslice 0,1", testutil.ToFloat64(m.sloTimeslice.WithLabelValues("0,1")), 500e-6},
		{"timeslice all", testutil.ToFloat64(m.sloTimeslice.WithLabelValues("all")), 1e-6},
		{"worst 0,1", testutil.ToFloat64(m.sloWorst.WithLabelValues("0,1")), 1.25},
		{"changes explore", testutil.ToFloat64(m.sloChanges.WithLabelValues("0,1", "explore")), 1},
		{"lc 5", lc(5, "p99<=10ms"), 0.9},
		{"samples 5", testutil.ToFloat64(m.sloSamples.WithLabelValues("0,1", m.ProcessLabel(5), "p99<=10ms", "pushed")), 40},
		{"p50 5", testutil.ToFloat64(m.sloP50.WithLabelValues("0,1", m.ProcessLabel(5), "p99<=10ms", "pushed")), 2.5e-3},
		{"stopped", testutil.ToFloat64(m.sloStopped), 1},
		{"lc series", float64(testutil.CollectAndCount(m.sloLC)), 2}, // 5, and the stale 6; 7 has no source
		{"changes series", float64(testutil.CollectAndCount(m.sloChanges)), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if v := testutil.ToFloat64(m.sloLC.WithLabelValues("all", m.ProcessLabel(6), "p50<=1.1x")); !math.IsNaN(v) {
		t.Errorf("stale LC: %v, want NaN", v)
	}
	m.SetSLO(api.SLO{})
	for _, v := range []prometheus.Collector{m.sloTimeslice, m.sloWorst, m.sloShare, m.sloLC, m.sloSamples, m.sloP50} {
		if n := testutil.CollectAndCount(v); n != 0 {
			t.Errorf("mode off: %d series left", n)
		}
	}
	if testutil.ToFloat64(m.sloEnabled) != 0 || testutil.ToFloat64(m.sloStopped) != 0 {
		t.Error("mode off: enabled or stopped left set")
	}
}
