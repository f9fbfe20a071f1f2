package scrape

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/signal"
)

func vllmMetrics(t testing.TB) endpoint.Metrics {
	p, err := endpoint.LookupPreset("vllm")
	if err != nil {
		t.Fatal(err)
	}
	return p.Metrics
}

func TestDecode(t *testing.T) {
	const text = `# HELP vllm:e2e_request_latency_seconds e2e
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="a"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="a"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="a"} 4.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="a"} 4.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="a"} 3.1
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.5",model_name="b"} 0.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="1.0",model_name="b"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="b"} 2.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="b"} 2.0
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="b"} 1.5
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{le="0.01",model_name="a"} 5.0
vllm:time_per_output_token_seconds_bucket{le="+Inf",model_name="a"} 5.0
vllm:time_per_output_token_seconds_count{model_name="a"} 5.0
vllm:time_per_output_token_seconds_sum{model_name="a"} 0.02
# TYPE vllm:inter_token_latency_seconds histogram
vllm:inter_token_latency_seconds_bucket{le="0.01",model_name="a"} 7.0
vllm:inter_token_latency_seconds_bucket{le="+Inf",model_name="a"} 7.0
vllm:inter_token_latency_seconds_count{model_name="a"} 7.0
vllm:inter_token_latency_seconds_sum{model_name="a"} 0.03
`
	inf := math.Inf(1)
	cases := []struct {
		name, model string
		om          bool
		body        string
		want        map[string]Hist
		err         string
	}{
		{name: "every model, summed", body: text, want: map[string]Hist{
			signal.MetricRequest: {Name: "vllm:e2e_request_latency_seconds", Bounds: []float64{0.5, 1, inf}, Counts: []float64{1, 5, 6}},
			// The newer name first: the older one is the same values.
			signal.MetricTPOT: {Name: "vllm:inter_token_latency_seconds", Bounds: []float64{0.01, inf}, Counts: []float64{7, 7}}}},
		{name: "one model", model: "b", body: text, want: map[string]Hist{
			signal.MetricRequest: {Name: "vllm:e2e_request_latency_seconds", Bounds: []float64{0.5, 1, inf}, Counts: []float64{0, 2, 2}}}},
		{name: "a model not served", model: "c", body: text, want: map[string]Hist{}},
		{name: "no +Inf bucket: the count is", body: "# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 2\nvllm:e2e_request_latency_seconds_count 3\n",
			want: map[string]Hist{signal.MetricRequest: {Name: "vllm:e2e_request_latency_seconds", Bounds: []float64{1, inf}, Counts: []float64{2, 3}}}},
		{name: "OpenMetrics", om: true, body: "# TYPE vllm:e2e_request_latency_seconds histogram\n# UNIT vllm:e2e_request_latency_seconds seconds\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"1.0\",model_name=\"x # {y}\"} 2 # {trace_id=\"q r\"} 0.5 1.7e9\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"+Inf\",model_name=\"x # {y}\"} 3 1.7e9\nvllm:e2e_request_latency_seconds_count{model_name=\"x # {y}\"} 3\n" +
			"vllm:e2e_request_latency_seconds_created{model_name=\"x # {y}\"} 1.7e9\n# TYPE info_thing info\ninfo_thing_info{a=\"b\"} 1\n# EOF\n",
			want: map[string]Hist{signal.MetricRequest: {Name: "vllm:e2e_request_latency_seconds", Bounds: []float64{1, inf}, Counts: []float64{2, 3}}}},
		{name: "not a histogram", body: "# TYPE vllm:e2e_request_latency_seconds counter\nvllm:e2e_request_latency_seconds 3\n", err: "not a histogram"},
		{name: "different buckets across series", body: "# TYPE vllm:e2e_request_latency_seconds histogram\n" +
			"vllm:e2e_request_latency_seconds_bucket{a=\"1\",le=\"1\"} 1\nvllm:e2e_request_latency_seconds_count{a=\"1\"} 1\n" +
			"vllm:e2e_request_latency_seconds_bucket{a=\"2\",le=\"2\"} 1\nvllm:e2e_request_latency_seconds_count{a=\"2\"} 1\n", err: "different buckets"},
		{name: "buckets not cumulative", body: "# TYPE vllm:e2e_request_latency_seconds histogram\n" +
			"vllm:e2e_request_latency_seconds_bucket{le=\"1\"} 3\nvllm:e2e_request_latency_seconds_bucket{le=\"2\"} 1\nvllm:e2e_request_latency_seconds_count 3\n", err: "not cumulative"},
		{name: "not an exposition", body: "{\"a\": 1}\n", err: "exposition"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Decode([]byte(tc.body), tc.om, vllmMetrics(t), tc.model)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("%v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("%v, want %v", got, tc.want)
			}
			for k, w := range tc.want {
				g := got[k]
				if g.Name != w.Name || !slices.Equal(g.Bounds, w.Bounds) || !slices.Equal(g.Counts, w.Counts) {
					t.Errorf("%q: %+v, want %+v", k, g, w)
				}
			}
		})
	}
}

// FuzzDecode: an endpoint's body is from outside. Whatever it holds,
// Decode returns histograms a window can be taken from, or an error.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("# TYPE vllm:e2e_request_latency_seconds histogram\nvllm:e2e_request_latency_seconds_bucket{le=\"1\"} 2\nvllm:e2e_request_latency_seconds_count 3\n"), false)
	f.Add([]byte("vllm:e2e_request_latency_seconds_bucket{le=\"1.0\",m=\"x # {y}\"} 2 # {t=\"q\"} 0.5 1.7e9\n# EOF\n"), true)
	f.Add([]byte("# TYPE a gaugehistogram\n# TYPE vllm:inter_token_latency_seconds histogram\nvllm:inter_token_latency_seconds_bucket{le=\"NaN\"} 1\n"), true)
	m := vllmMetrics(f)
	f.Fuzz(func(t *testing.T, body []byte, om bool) {
		hs, err := Decode(body, om, m, "")
		if err != nil {
			return
		}
		for k, h := range hs {
			if len(h.Bounds) < 2 || len(h.Bounds) != len(h.Counts) || !math.IsInf(h.Bounds[len(h.Bounds)-1], 1) {
				t.Fatalf("%q: %+v", k, h)
			}
			for i := 1; i < len(h.Bounds); i++ {
				if !(h.Bounds[i] > h.Bounds[i-1]) || h.Counts[i] < h.Counts[i-1] {
					t.Fatalf("%q: not ascending and cumulative: %+v", k, h)
				}
			}
			d, ok := Delta(Hist{Name: h.Name, Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}, h)
			if !ok {
				t.Fatalf("%q: no window from zero to %+v", k, h)
			}
			vs := d.Values(1, 64)
			if len(vs) > 64 || !slices.IsSorted(vs) {
				t.Fatalf("%q: values %v", k, vs)
			}
			for _, q := range signal.Quantiles {
				if v := d.Quantile(q.Q); d.Count() > 0 && math.IsNaN(v) {
					t.Fatalf("%q: q%v NaN of %+v", k, q.Q, d)
				}
			}
		}
	})
}
