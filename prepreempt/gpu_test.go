package prepreempt

import (
	"context"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/cuda"
)

// TestGPUEngine runs the engine on a real GPU: calibration, a few requests
// through the real spinner, stats from its %globaltimer stamps. It skips
// without a GPU.
func TestGPUEngine(t *testing.T) {
	cctx, err := cuda.Open(0, cuda.SchedSpin)
	if err != nil {
		t.Skipf("needs a GPU: %v", err)
	}
	defer cctx.Release()
	ctx := context.Background()
	e, err := New(ctx, cctx, Options{SkipLCClass: true, Backend: "auto"})
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
	t.Logf("backend %s: %d hints, %d early, %d late, %d cancelled, %d expired; switch estimate %v; offset %d ns",
		s.Backend, s.Hints, s.Early, s.Late, s.Cancelled, s.Expired, time.Duration(s.SwitchEstimateNs), e.offset)
	if s.Hints != 50 || s.Early+s.Late+s.Cancelled != 50 || s.Expired != 0 {
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
