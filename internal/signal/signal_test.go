package signal

import "testing"

func TestQuantileName(t *testing.T) {
	for _, tc := range []struct {
		q    float64
		want string
	}{{0.5, "p50"}, {0.3, "p50"}, {0.9, "p90"}, {0.95, "p99"}, {0.99, "p99"}, {0.999, "p999"}, {0.9999, "max"}} {
		if got := QuantileName(tc.q); got != tc.want {
			t.Errorf("QuantileName(%v) = %q, want %q", tc.q, got, tc.want)
		}
	}
}
