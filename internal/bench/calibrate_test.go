package bench

import (
	"errors"
	"testing"
	"time"
)

func TestCalibrate(t *testing.T) {
	// An affine kernel: fixed launch/ramp cost plus work, like be_fma.
	affine := func(fixed time.Duration, nsPerIter float64) func(uint64) (time.Duration, error) {
		return func(iters uint64) (time.Duration, error) {
			return fixed + time.Duration(float64(iters)*nsPerIter), nil
		}
	}
	tests := []struct {
		name    string
		target  time.Duration
		initial uint64
		timeIt  func(uint64) (time.Duration, error)
	}{
		{"be_fma on H100", 2350 * time.Microsecond, 10000, affine(8*time.Microsecond, 12.757)},
		{"lc_work on H100", 20 * time.Microsecond, 1000, affine(5*time.Microsecond, 7.5)},
		{"start far too high", time.Millisecond, 1 << 40, affine(0, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			iters, d, err := calibrate(tt.target, tt.initial, tt.timeIt)
			if err != nil {
				t.Fatal(err)
			}
			if off := float64(d-tt.target) / float64(tt.target); off > 0.01 || off < -0.01 {
				t.Fatalf("calibrated to %d iters, %v; want within 1%% of %v", iters, d, tt.target)
			}
		})
	}

	boom := errors.New("launch failed")
	if _, _, err := calibrate(time.Millisecond, 1, func(uint64) (time.Duration, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Errorf("timer error not returned: %v", err)
	}
	if _, _, err := calibrate(time.Millisecond, 1, func(uint64) (time.Duration, error) { return 0, nil }); err == nil {
		t.Error("zero kernel time accepted")
	}
	if _, _, err := calibrate(0, 1, affine(0, 1)); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("zero target: %v", err)
	}
}
