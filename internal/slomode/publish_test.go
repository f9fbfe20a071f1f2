package slomode

import (
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

type fixedLatency map[int]LatencySample

func (f fixedLatency) Latest(pid int) (LatencySample, bool) { s, ok := f[pid]; return s, ok }

// TestSamplesMedianOfTheMetric: workload changes are read from a sample's
// median; for an objective on an LLM server's time per output token (or
// to first token) that is the same metric's median, not the request
// latency's, which a server may not even push.
func TestSamplesMedianOfTheMetric(t *testing.T) {
	for _, tc := range []struct {
		objective  string
		quantiles  map[string]time.Duration
		latency    time.Duration
		wantMedian time.Duration
	}{
		{"p99<=50ms", map[string]time.Duration{"p50": 20 * time.Millisecond, "p99": 40 * time.Millisecond}, 40 * time.Millisecond, 20 * time.Millisecond},
		{"tpot_p99<=15ms", map[string]time.Duration{"p50": 400 * time.Millisecond, "tpot_p50": 9 * time.Millisecond, "tpot_p99": 12 * time.Millisecond},
			12 * time.Millisecond, 9 * time.Millisecond},
		{"ttft_p50<=80ms", map[string]time.Duration{"ttft_p50": 60 * time.Millisecond}, 60 * time.Millisecond, 60 * time.Millisecond},
	} {
		pol, err := policy.Parse([]byte(strings.Replace(sloPolicy, `lc: {objective: "p50<=1.05x"}`, `lc: {objective: "`+tc.objective+`"}`, 1)))
		if err != nil {
			t.Fatalf("%s: %v", tc.objective, err)
		}
		lc := policy.ProcRef{PID: 100, Start: 1, Comm: "lc-server"}
		lc.Decision = pol.Decide(policy.Process{PID: 100, Comm: "lc-server"})
		l := &Loop{log: testLog(t), used: map[sampleSource]uint64{}, tracing: map[string]*traceWant{},
			Latency: fixedLatency{100: {At: time.Second, Window: time.Second, Requests: 60, Quantiles: tc.quantiles, Seq: 1}}}
		w := l.lcSamples(pol, []policy.ProcRef{lc}, time.Second)[100]
		if len(w.samples) != 1 {
			t.Fatalf("%s: samples %+v, rows %+v", tc.objective, w.samples, w.rows)
		}
		if s := w.samples[0]; s.Latency != tc.latency || s.Median != tc.wantMedian {
			t.Errorf("%s: latency %v median %v, want %v and %v", tc.objective, s.Latency, s.Median, tc.latency, tc.wantMedian)
		}
	}
}
