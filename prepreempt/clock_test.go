package prepreempt

import (
	"context"
	"testing"
	"time"
)

// TestCalibrateClock: the offset found by calibration is within a few
// clock steps of the simulated GPU's clock offset, also when every spinner
// waits long to be scheduled (a BE load). The midpoint of a
// launch-to-completion window, the previous method, is off by half the wait
// (1 ms here). The host clock is simulated: the result does not depend on
// how fast this machine runs.
func TestCalibrateClock(t *testing.T) {
	const step = time.Microsecond
	for _, c := range []struct {
		name     string
		switchIn time.Duration
		clock    int64
	}{
		{"idle, same clock", 0, 0},
		{"idle, GPU clock ahead", 20 * time.Microsecond, 3_600e9},
		{"loaded, GPU clock behind", 2 * time.Millisecond, -1_000e9},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _, _ := simEngine(t, Options{}, step, c.switchIn, c.clock)
			if err := e.calibrateClock(); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(e.clock.get() - c.clock).Abs(); d > 4*step {
				t.Errorf("offset %d ns, want %d ± %v (off by %v)", e.clock.get(), c.clock, 4*step, d)
			}
		})
	}
}

// TestCalibrateClockSpinnerNeverStarts: a spinner that never runs is an
// error naming the wait, not a hang.
func TestCalibrateClockSpinnerNeverStarts(t *testing.T) {
	e, _, _ := simEngine(t, Options{}, time.Millisecond, 2*calibrateStartTimeout, 0)
	err := e.calibrateClock()
	if err == nil {
		t.Fatal("calibration succeeded without a spinner start")
	}
	t.Log(err)
}

// TestSwitchInMeasuredWithClockOffset: with the clock calibrated, the
// engine measures the simulated switch-in time through the stamps, to
// within the calibration's error.
func TestSwitchInMeasuredWithClockOffset(t *testing.T) {
	const (
		switchIn = 600 * time.Microsecond
		step     = time.Microsecond
	)
	e, clk, _ := simEngine(t, Options{InitialSwitch: 100 * time.Microsecond}, step, switchIn, 5_000e9)
	if err := e.calibrateClock(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		r, err := e.Hint(ctx, "x", 0)
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(switchIn + 500*time.Microsecond)
		if err := r.Ready(); err != nil {
			t.Fatal(err)
		}
		// One request at a time: the next Hint must find this one's slot
		// back, so that the samples come from five distinct launches.
		waitStats(t, e, func(Stats) bool { return len(e.free) == e.opts.Slots })
	}
	s := waitStats(t, e, func(s Stats) bool { return len(s.SwitchInSamples) == 5 })
	for _, v := range s.SwitchInSamples {
		if d := time.Duration(v) - switchIn; d.Abs() > 8*step {
			t.Errorf("switch-in %v, want %v ± %v", time.Duration(v), switchIn, 8*step)
		}
	}
}

// TestGPUClockFollowsDrift: online upper bounds replace calibration's once
// a window of them has come, so the offset follows a drifting clock.
func TestGPUClockFollowsDrift(t *testing.T) {
	c := newGPUClock(4)
	c.calibrated(1000, 1010) // offset 1005, release-to-exit slack 5
	if c.get() != 1005 {
		t.Fatalf("calibrated offset %d, want 1005", c.get())
	}
	// The GPU clock runs 200 ns ahead now; exits come 7 ns after release.
	for i := range 4 {
		c.released(int64(i)*1e6, int64(i)*1e6+1200+7)
		if i < 3 && c.get() != 1005 {
			t.Fatalf("after %d samples offset %d, want the calibrated 1005 until the window is full", i+1, c.get())
		}
	}
	if c.get() != 1202 {
		t.Errorf("offset %d after a window of drifted samples, want 1202", c.get())
	}
	// A tighter bound (an exit seen sooner after its release) wins at once.
	c.released(9e6, 9e6+1200+5)
	if c.get() != 1200 {
		t.Errorf("offset %d, want 1200", c.get())
	}
}

// TestExpiryFollowsMonotonicClock: a spinner expires MaxHold after its
// launch by the engine's monotonic clock, and not before, whatever the
// wall clock does meanwhile (the engine never reads it).
func TestExpiryFollowsMonotonicClock(t *testing.T) {
	const maxHold = 8 * time.Millisecond
	e, clk, _ := simEngine(t, Options{MaxHold: maxHold}, 0, 0, 0)
	r, err := e.Hint(context.Background(), "x", 0)
	if err != nil {
		t.Fatal(err)
	}
	// Three janitor periods (MaxHold/4 each) are not MaxHold.
	for range 3 {
		waitTimers(t, clk)
		clk.advance(maxHold / 4)
	}
	waitTimers(t, clk)
	if s := e.Stats(); s.Expired != 0 {
		t.Fatalf("expired after 3/4 of MaxHold: %+v", s)
	}
	clk.advance(maxHold / 4)
	waitStats(t, e, func(s Stats) bool { return s.Expired == 1 })
	if err := r.Ready(); err != nil {
		t.Errorf("Ready after expiry = %v", err)
	}
}

// waitTimers waits until some goroutine waits on a timer of clk (the
// janitor, between two sweeps).
func waitTimers(t *testing.T, clk *fakeClock) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // a bound on scheduling, not a measurement
	for {
		clk.mu.Lock()
		n := len(clk.timers)
		clk.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("nothing ever waited on the clock")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
