package prepreempt

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda/cudatest"
)

// TestGPUEngine runs the engine on a real GPU: calibration, a few requests
// through the real spinner, stats from its %globaltimer stamps. It skips
// without a GPU.
func TestGPUEngine(t *testing.T) {
	cctx := cudatest.Open(t)
	ctx := context.Background()
	// NoBenefitLead -1: every request gets a spinner (sleeps on the VM
	// overshoot by up to a millisecond, which would read as launch-bound).
	e, err := New(ctx, cctx.Device().Ordinal(), Options{SkipLCClass: true, Backend: "auto", NoBenefitLead: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	}()
	for i := range 50 {
		r, err := e.Hint(ctx, "gpu-test", 300*time.Microsecond)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(400 * time.Microsecond)
		if i%10 == 9 {
			err = r.Cancel()
		} else {
			err = r.Ready()
		}
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Microsecond)
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(e.free) < e.opts.Slots && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	s := e.Stats()
	t.Logf("backend %s: %d hints, %d early, %d late, %d cancelled, %d expired, %d skipped for no benefit; switch estimate %v; offset %d ns",
		s.Backend, s.Hints, s.Early, s.Late, s.Cancelled, s.Expired, s.SkippedNoBenefit, time.Duration(s.SwitchEstimateNs), e.clock.get())
	// A hold that ran long may have the class skipped for no benefit
	// (the machine's timing decides): an outcome like the others.
	if s.Hints != 50 || s.Early+s.Late+s.Cancelled+s.SkippedNoBenefit != 50 || s.Expired != 0 {
		t.Errorf("stats %+v", s)
	}
	if len(s.HeldSamples) == 0 {
		t.Fatal("no spinner stamps were read back")
	}
	for _, h := range s.HeldSamples {
		if time.Duration(h) > e.opts.MaxHold {
			t.Errorf("a spinner held the GPU %v, beyond MaxHold", time.Duration(h))
		}
	}
}

// BenchmarkGPUHintReady is the CPU cost of Hint + Ready with the real
// spinner on a GPU, p50 and p99 reported. "inline": the predicted moment
// has come at Hint, which launches the spinner itself (two launches and an
// event record on the caller's thread); "scheduled": Hint only schedules the
// launch (the request ends first, so none happens): the engine's bookkeeping and
// the launcher's hand-off. It skips without a GPU.
func BenchmarkGPUHintReady(b *testing.B) {
	cctx := cudatest.Open(b)
	for _, launcher := range Launchers {
		for _, c := range []struct {
			name string
			prep time.Duration
		}{{"inline", 0}, {"scheduled", 50 * time.Millisecond}} {
			b.Run(string(launcher)+"/"+c.name, func(b *testing.B) {
				ctx := context.Background()
				e, err := New(ctx, cctx.Device().Ordinal(), Options{SkipLCClass: true, Launcher: launcher})
				if err != nil {
					b.Fatal(err)
				}
				defer e.Close()
				lat := make([]time.Duration, 0, b.N)
				for b.Loop() {
					t0 := time.Now()
					r, err := e.Hint(ctx, c.name, c.prep)
					if err != nil {
						b.Fatal(err)
					}
					end := r.Ready
					if c.prep > 0 {
						end = r.Cancel
					}
					if err := end(); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(t0))
					b.StopTimer()
					for len(e.free) < e.opts.Slots {
						time.Sleep(20 * time.Microsecond)
					}
					b.StartTimer()
				}
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
				b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
			})
		}
	}
}
