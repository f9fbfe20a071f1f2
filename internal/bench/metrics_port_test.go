package bench

import (
	"slices"
	"testing"
	"time"
)

// TestLCArgvMetricsPort: --llm-metrics-port reaches lc_decode.py, which
// then serves its latency as vLLM's histograms for gpreemptd to scrape.
func TestLCArgvMetricsPort(t *testing.T) {
	o := testOptions(t, "llm-defaults", "")
	o.LLMPeriod = 800 * time.Millisecond
	r := &runner{o: o, scripts: "/s"}
	if lc, _ := r.lcArgv(o.Scenarios[0], "/tmp/lc.json"); slices.Contains(lc, "--metrics-port") {
		t.Errorf("no --llm-metrics-port: %v", lc)
	}
	r.o.LLMMetricsPort = 8000
	lc, _ := r.lcArgv(o.Scenarios[0], "/tmp/lc.json")
	if i := slices.Index(lc, "--metrics-port"); i < 0 || i+1 >= len(lc) || lc[i+1] != "8000" {
		t.Errorf("--llm-metrics-port 8000: %v", lc)
	}
	for _, p := range []int{-1, 65536} {
		o := testOptions(t, "llm-defaults", "")
		o.LLMMetricsPort = p
		if err := o.validate(); err == nil {
			t.Errorf("--llm-metrics-port %d: valid", p)
		}
	}
}
