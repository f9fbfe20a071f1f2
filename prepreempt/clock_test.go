package prepreempt

import (
	"context"
	"testing"
	"time"
)

// TestCalibrateClock: the offset found by calibration is within a few
// hundred microseconds of the fake GPU's clock offset, also when every
// spinner waits long to be scheduled (a BE load). The midpoint of a
// launch-to-completion window, the previous method, is off by half the wait
// (1 ms here).
func TestCalibrateClock(t *testing.T) {
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
			e, g := testEngine(t, Options{}, c.switchIn)
			g.clock, g.busyPoll = c.clock, true
			if err := e.calibrateClock(); err != nil {
				t.Fatal(err)
			}
			if d := time.Duration(e.clock.get() - c.clock).Abs(); d > 300*time.Microsecond {
				t.Errorf("offset %d ns, want %d ± 300 us (off by %v)", e.clock.get(), c.clock, d)
			}
		})
	}
}

// TestCalibrateClockSpinnerNeverStarts: a spinner that never runs is an
// error naming the wait, not a hang.
func TestCalibrateClockSpinnerNeverStarts(t *testing.T) {
	e, _ := testEngine(t, Options{}, 2*calibrateStartTimeout)
	err := e.calibrateClock()
	if err == nil {
		t.Fatal("calibration succeeded without a spinner start")
	}
	t.Log(err)
}

// TestSwitchInMeasuredWithClockOffset: with the clock calibrated, the
// engine measures the fake's switch-in time through the stamps.
func TestSwitchInMeasuredWithClockOffset(t *testing.T) {
	const switchIn = 600 * time.Microsecond
	e, g := testEngine(t, Options{InitialSwitch: 100 * time.Microsecond}, switchIn)
	g.clock = 5_000e9
	if err := e.calibrateClock(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 5 {
		r, err := e.Hint(ctx, "x", 0)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(switchIn + 500*time.Microsecond)
		if err := r.Ready(); err != nil {
			t.Fatal(err)
		}
	}
	s := waitStats(t, e, func(s Stats) bool { return len(s.SwitchInSamples) == 5 })
	for _, v := range s.SwitchInSamples {
		// The fake sleeps switchIn (oversleeping on a loaded machine).
		if d := time.Duration(v); d < switchIn-300*time.Microsecond || d > switchIn+2*time.Millisecond {
			t.Errorf("switch-in %v, want about %v", d, switchIn)
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
