package stats

import (
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
