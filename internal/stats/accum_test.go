package stats

import (
	"math"
	"testing"
	"time"
)

func TestWeightedQuantile(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	tests := []struct {
		name  string
		ws    []Weighted
		count int
		p50   time.Duration
	}{
		{"empty", nil, 0, 0},
		{"samples", []Weighted{{ms(3), 1}, {ms(1), 1}, {ms(2), 1}}, 3, ms(2)},
		{"a quantile stands for its count", []Weighted{{ms(10), 19}, {ms(1), 1}, {ms(2), 1}}, 21, ms(10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if Weight(tt.ws) != tt.count || WeightedQuantile(tt.ws, 0.5) != tt.p50 {
				t.Fatalf("count %d p50 %v, want %d and %v", Weight(tt.ws), WeightedQuantile(tt.ws, 0.5), tt.count, tt.p50)
			}
		})
	}
}

func TestQuantileSE(t *testing.T) {
	tails := func() (ws []Weighted) {
		for i := range 80 {
			f := map[bool]float64{true: 0.5, false: 2}[i < 30]
			if i >= 30 && i < 50 {
				f = 1 + float64(i-30)/100
			}
			ws = append(ws, Weighted{V: time.Duration(f * 1e6), W: 1})
		}
		return ws
	}
	cycle := func(fs ...float64) (ws []Weighted) { // 4 requests at each
		for range 4 {
			for _, f := range fs {
				ws = append(ws, Weighted{V: time.Duration(f * 1e6), W: 1})
			}
		}
		return ws
	}
	tests := []struct {
		name string
		ws   []Weighted
		q    float64
		n    int
		want float64
	}{
		{"spread ±10%, 20 requests", cycle(0.9, 0.95, 1, 1.05, 1.1), 0.5, 20, 0.05},
		{"all alike: not known", cycle(1, 1, 1, 1, 1), 0.5, 20, math.NaN()},
		{"p99 of 20: not known past the extreme", cycle(0.9, 0.95, 1, 1.05, 1.1), 0.99, 20, math.NaN()},
		{"copies of one mean count once: the middle all copies, not known", append(cycle(0.9, 0.95, 1, 1.05, 1.1), cycle(1, 1, 1, 1, 1)...), 0.5, 40, math.NaN()},
		// 20 distinct values (1.00-1.19) between 30 copies of 0.5 and 30 of 2: 22 draws, ranks 32 and 49 of 80
		// (1.01, 1.18) about 1.09; as 80 draws, ranks 36 and 45 (0.041)
		{"copies count once among distinct values", tails(), 0.5, 80, (1.18 - 1.01) / 2 / 1.09},
		{"20 samples of 2 requests: wider", cycle(0.9, 0.95, 1, 1.05, 1.1), 0.5, 2, 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := QuantileSE(tt.ws, tt.q, tt.n); math.Abs(got-tt.want) > 1e-9 || math.IsNaN(got) != math.IsNaN(tt.want) {
				t.Errorf("QuantileSE = %v, want %v", got, tt.want)
			}
		})
	}
	if got := QuantileSE(nil, 0.5, 20); !math.IsNaN(got) {
		t.Errorf("no samples: %v, want NaN", got)
	}
}
