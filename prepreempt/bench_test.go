package prepreempt

import (
	"context"
	"slices"
	"testing"
	"time"
)

// instantGPU completes every spinner at once: the benchmark measures the
// engine's own CPU cost, without the driver's launch calls (two
// cuLaunchKernel and one cuEventRecord per request, measured on the GPU
// machine separately).
type instantGPU struct{}

func (instantGPU) launch(*slot) error           { return nil }
func (instantGPU) finished(*slot) (bool, error) { return true, nil }
func (instantGPU) stamps(*slot) (int64, int64)  { return 0, 0 }
func (instantGPU) clearStamps(*slot)            {}
func (instantGPU) close() error                 { return nil }

// BenchmarkHintReady is the CPU cost of Hint + Ready for a request whose
// spinner launches at once (the common case when preparation is short), with
// its p99 reported as a metric.
func BenchmarkHintReady(b *testing.B) {
	e := newEngine(Options{}.withDefaults(), newMonoClock(), &fakeFlags{}, instantGPU{})
	defer e.Close()
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		r, err := e.Hint(ctx, "bench", 0)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Ready(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
		// Let the reaper return the slot, as the period between requests
		// would.
		for len(e.free) < e.opts.Slots {
			time.Sleep(20 * time.Microsecond)
		}
	}
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
	}
}
