package bench

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// goodLC returns a plausible LC result: n requests, 40 us latency, 20 us
// kernels, stamps increasing request after request.
func goodLC(n int) *LCResult {
	r := &LCResult{Schema: SchemaVersion, GPUStamps: true, Requested: n, MeasureStartMonoNs: 1_000, MeasureEndMonoNs: 1_000 + int64(n)*3_500_000}
	for i := range n {
		start := uint64(1e15) + uint64(i)*3_500_000
		r.Samples = append(r.Samples, LCSample{LatencyNs: 40_000, GPUStartNs: start, GPUEndNs: start + 20_000, GPUNs: 20_000})
	}
	return r
}

func TestCheckLC(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*LCResult)
		want    int
		wantErr string
	}{
		{"plausible", func(*LCResult) {}, 10, ""},
		{"latency equal to kernel within tolerance", func(r *LCResult) { r.Samples[3].LatencyNs = 20_000 - int64(stampTolerance) + 1 }, 10, ""},
		{"fewer samples than requested", func(r *LCResult) { r.Samples = r.Samples[:7] }, 10, "7 samples, 10 requested"},
		{"latency below kernel duration", func(r *LCResult) { r.Samples[4].LatencyNs = 15_000 }, 10, "host latency 15µs below the GPU-measured kernel duration 20µs"},
		{"zero latency", func(r *LCResult) { r.Samples[0].LatencyNs = 0 }, 10, "latency 0ns"},
		{"stamps not written", func(r *LCResult) { r.Samples[2].GPUStartNs, r.Samples[2].GPUEndNs, r.Samples[2].GPUNs = 0, 0, 0 }, 10, "did not stamp"},
		{"stale stamps", func(r *LCResult) {
			r.Samples[5].GPUStartNs, r.Samples[5].GPUEndNs = r.Samples[4].GPUStartNs, r.Samples[4].GPUEndNs
		}, 10, "stale stamps"},
		{"empty window", func(r *LCResult) { r.MeasureEndMonoNs = r.MeasureStartMonoNs }, 10, "empty measurement window"},
		{"many bad samples are counted, not listed", func(r *LCResult) {
			for i := range r.Samples {
				r.Samples[i].LatencyNs = 1
			}
		}, 10, "5 more bad requests"},
		{"no stamps: only latency vs GPU time", func(r *LCResult) {
			r.GPUStamps = false
			for i := range r.Samples {
				r.Samples[i].GPUStartNs, r.Samples[i].GPUEndNs = 0, 0
			}
		}, 10, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := goodLC(10)
			tt.edit(r)
			err := checkLC(r, tt.want)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrImplausible) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("checkLC = %v, want ErrImplausible containing %q", err, tt.wantErr)
			}
		})
	}
	if err := checkLC(nil, 1); !errors.Is(err, ErrImplausible) {
		t.Errorf("checkLC(nil) = %v", err)
	}
}

func TestCheckBE(t *testing.T) {
	good := func() *BEResult {
		return &BEResult{Unit: "kernels", Kernels: 3, DurationS: 1, CompletionsMonoNs: []int64{10, 20, 30}}
	}
	tests := []struct {
		name    string
		edit    func(*BEResult)
		wantErr string
	}{
		{"plausible", func(*BEResult) {}, ""},
		{"zero kernels", func(r *BEResult) { r.Kernels, r.CompletionsMonoNs = 0, nil }, "completed no kernels"},
		{"count mismatch", func(r *BEResult) { r.Kernels = 4 }, "3 completion times for 4 kernels"},
		{"time goes backwards", func(r *BEResult) { r.CompletionsMonoNs[2] = 5 }, "go backwards"},
		{"no duration", func(r *BEResult) { r.DurationS = 0 }, "duration 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := good()
			tt.edit(r)
			err := checkBE("be", r)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("unexpected: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrImplausible) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("checkBE = %v, want ErrImplausible containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestCheckShareAndCount(t *testing.T) {
	r := &BEResult{Unit: "kernels", CompletionsMonoNs: []int64{5, 10, 15, 20, 25}}
	if got := r.CountIn(10, 20); got != 2 {
		t.Errorf("CountIn(10, 20] = %d, want 2 (15, 20)", got)
	}
	if err := checkShare(BEShare{Label: "be", WindowKernels: 2, Result: r}, time.Second); err != nil {
		t.Errorf("checkShare: %v", err)
	}
	// Starved: none in the window, some outside it. A result, with a
	// warning.
	r.Kernels = 5
	starved := BEShare{Label: "be2", WindowKernels: 0, Result: r}
	if err := checkShare(starved, 20*time.Second); err != nil {
		t.Errorf("checkShare(starved) = %v, want a result", err)
	}
	if w := scenarioWarnings(&ScenarioResult{BE: []BEShare{starved}}, nil); len(w) != 1 || !strings.Contains(w[0], "be2 starved: no kernels completed in the measurement window (5 outside it)") {
		t.Errorf("warnings %q", w)
	}
	// Nothing at all: the worker did not run.
	err := checkShare(BEShare{Label: "be2", WindowKernels: 0, Result: &BEResult{Unit: "kernels"}}, 20*time.Second)
	if !errors.Is(err, ErrImplausible) || !strings.Contains(err.Error(), "be2: no kernels completed in the 20s measurement window, nor outside it") {
		t.Errorf("checkShare(0) = %v", err)
	}
}

func TestScenarioWarnings(t *testing.T) {
	sr := &ScenarioResult{LC: goodLC(200), BEVsBEOnly: 1.2, LCP50VsStandalone: 0.5}
	sr.LC.Late = 10
	w := scenarioWarnings(sr, nil)
	if len(w) != 3 {
		t.Fatalf("warnings %q, want late, BE above baseline, LC faster than alone", w)
	}
	if w := scenarioWarnings(&ScenarioResult{LC: goodLC(200), BEVsBEOnly: 0.9, LCP50VsStandalone: 6}, nil); len(w) != 0 {
		t.Fatalf("unexpected warnings %q", w)
	}
}
