package stats

import (
	"testing"
	"time"
)

func TestAccum(t *testing.T) {
	ms := func(x int) time.Duration { return time.Duration(x) * time.Millisecond }
	tests := []struct {
		name    string
		max     int
		windows [][]Weighted
		count   int
		p50     time.Duration
	}{
		{"empty", 0, nil, 0, 0},
		{"samples", 0, [][]Weighted{{{ms(3), 1}, {ms(1), 1}}, {{ms(2), 1}}}, 3, ms(2)},
		{"a quantile stands for its count", 0, [][]Weighted{{{ms(10), 19}}, {{ms(1), 1}, {ms(2), 1}}}, 21, ms(10)},
		{"older windows drop out", 2, [][]Weighted{{{ms(100), 5}}, {{ms(1), 1}}, {{ms(2), 1}}}, 2, ms(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Accum{Max: tt.max}
			for _, w := range tt.windows {
				a.Add(w)
			}
			if a.Count() != tt.count || a.Quantile(0.5) != tt.p50 {
				t.Fatalf("count %d p50 %v, want %d and %v", a.Count(), a.Quantile(0.5), tt.count, tt.p50)
			}
			if a.Reset(); a.Count() != 0 || a.Quantile(0.5) != 0 {
				t.Error("not empty after Reset")
			}
		})
	}
}
