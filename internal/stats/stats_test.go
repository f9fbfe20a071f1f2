package stats

import (
	"bytes"
	"math"
	"slices"
	"testing"
)

func seq(n int) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = float64(i + 1)
	}
	return xs
}

func TestPercentile(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		p    float64
		want float64
	}{
		{"single", []float64{7}, 50, 7},
		{"median of odd", []float64{3, 1, 2}, 50, 2},
		{"median of even takes the lower", []float64{4, 1, 3, 2}, 50, 2},
		{"p99 of 100 is the 99th", seq(100), 99, 99},
		{"p99 of 1000 is the 990th", seq(1000), 99, 990},
		{"p99.9 of 1000 is the 999th", seq(1000), 99.9, 999},
		{"p90 of 10", seq(10), 90, 9},
		{"p0 is min", []float64{5, 9, 2}, 0, 2},
		{"p100 is max", []float64{5, 9, 2}, 100, 9},
		{"tiny p is min", seq(10), 0.001, 1},
		{"p99 of 10 is max", seq(10), 99, 10},
		{"unsorted input", []float64{10, 1, 9, 2, 8, 3, 7, 4, 6, 5}, 50, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			orig := slices.Clone(tt.xs)
			if got := Percentile(tt.xs, tt.p); got != tt.want {
				t.Errorf("Percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
			}
			if !slices.Equal(orig, tt.xs) {
				t.Error("Percentile modified its input")
			}
		})
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("Percentile(nil) is not NaN")
	}
}

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want Summary
	}{
		{"empty", nil, Summary{}},
		{"one", []float64{4}, Summary{N: 1, Mean: 4, Min: 4, P50: 4, P90: 4, P99: 4, P999: 4, Max: 4}},
		{"1..100", seq(100), Summary{N: 100, Mean: 50.5, Min: 1, P50: 50, P90: 90, P99: 99, P999: 100, Max: 100}},
		{"outlier", append(slices.Repeat([]float64{10}, 99), 1000), Summary{N: 100, Mean: 19.9, Min: 10, P50: 10, P90: 10, P99: 10, P999: 1000, Max: 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Summarize(tt.xs)
			if math.Abs(got.Mean-tt.want.Mean) < 1e-9 {
				got.Mean = tt.want.Mean
			}
			if got != tt.want {
				t.Errorf("Summarize = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestCDF(t *testing.T) {
	tests := []struct {
		name      string
		xs        []float64
		maxPoints int
		want      []Point
	}{
		{"empty", nil, 0, nil},
		{"all points", []float64{3, 1, 2}, 0, []Point{{1, 1.0 / 3}, {2, 2.0 / 3}, {3, 1}}},
		{"thinned keeps max", seq(10), 3, []Point{{4, 0.4}, {8, 0.8}, {10, 1}}},
		{"thinned exact", seq(9), 3, []Point{{3, 1.0 / 3}, {6, 2.0 / 3}, {9, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := CDF(tt.xs, tt.maxPoints)
			if len(got) != len(tt.want) {
				t.Fatalf("CDF = %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i].X != tt.want[i].X || math.Abs(got[i].Y-tt.want[i].Y) > 1e-12 {
					t.Fatalf("CDF = %v, want %v", got, tt.want)
				}
			}
		})
	}
	// Monotone in both coordinates, whatever the thinning.
	pts := CDF([]float64{5, 3, 3, 9, 1, 7, 7, 7, 2}, 4)
	for i := 1; i < len(pts); i++ {
		if pts[i].X < pts[i-1].X || pts[i].Y <= pts[i-1].Y {
			t.Fatalf("not monotone: %v", pts)
		}
	}
}

func TestLog2Histogram(t *testing.T) {
	tests := []struct {
		name string
		xs   []float64
		want []Bucket
	}{
		{"empty", nil, nil},
		{"powers", []float64{1, 2, 3, 4, 7, 8}, []Bucket{{1, 2, 1}, {2, 4, 2}, {4, 8, 2}, {8, 16, 1}}},
		{"gap kept", []float64{1, 20}, []Bucket{{1, 2, 1}, {2, 4, 0}, {4, 8, 0}, {8, 16, 0}, {16, 32, 1}}},
		{"below one shares a bucket", []float64{0, 0.25, -3, 1.5}, []Bucket{{0, 1, 3}, {1, 2, 1}}},
		{"latencies", []float64{35, 40, 52, 230, 240, 1000}, []Bucket{{32, 64, 3}, {64, 128, 0}, {128, 256, 2}, {256, 512, 0}, {512, 1024, 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Log2Histogram(tt.xs); !slices.Equal(got, tt.want) {
				t.Errorf("Log2Histogram(%v) = %v, want %v", tt.xs, got, tt.want)
			}
		})
	}
}

func TestHist(t *testing.T) {
	tests := []struct {
		name           string
		xs             []float64
		want           []Bucket
		mean, min, max float64
	}{
		{"empty", nil, nil, 0, 0, 0},
		// The trace's whole microseconds: 0 and 1 apart, 2-3, then the
		// gap to 256-511 kept.
		{"whole", []float64{0, 1, 2, 3, 300, 310, 290, 1000}, []Bucket{
			{0, 1, 1}, {1, 2, 1}, {2, 4, 2}, {4, 8, 0}, {8, 16, 0}, {16, 32, 0}, {32, 64, 0},
			{64, 128, 0}, {128, 256, 0}, {256, 512, 3}, {512, 1024, 1},
		}, 1906.0 / 8, 0, 1000},
		{"fractional", []float64{35.5, 63.99, 64}, []Bucket{{32, 64, 2}, {64, 128, 1}}, (35.5 + 63.99 + 64) / 3, 35.5, 64},
		{"top bucket holds everything above", []float64{math.Ldexp(1, 63), math.Ldexp(1, 80)}, []Bucket{{math.Ldexp(1, 63), math.Ldexp(1, 64), 2}}, (math.Ldexp(1, 63) + math.Ldexp(1, 80)) / 2, math.Ldexp(1, 63), math.Ldexp(1, 80)},
		{"NaN below one", []float64{math.NaN()}, []Bucket{{0, 1, 1}}, math.NaN(), math.NaN(), math.NaN()},
	}
	same := func(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var h Hist
			for _, x := range tt.xs {
				h.Add(x)
			}
			if got := h.Buckets(); !slices.Equal(got, tt.want) {
				t.Errorf("buckets %v, want %v", got, tt.want)
			}
			if h.N != uint64(len(tt.xs)) || !same(h.Mean(), tt.mean) || !same(h.Min, tt.min) || !same(h.Max, tt.max) {
				t.Errorf("n %d mean %v min %v max %v", h.N, h.Mean(), h.Min, h.Max)
			}
		})
	}
}

func TestWriteHistogram(t *testing.T) {
	var b bytes.Buffer
	if err := WriteHistogram(&b, []Bucket{{0, 1, 1}, {1, 2, 0}, {32, 64, 4}, {math.Ldexp(1, 63), math.Ldexp(1, 64), 2}}, "usecs"); err != nil {
		t.Fatal(err)
	}
	want := "" +
		"     usecs               : count    distribution\n" +
		"        [0, 1)           : 1        |**********                              |\n" +
		"        [1, 2)           : 0        |                                        |\n" +
		"       [32, 64)          : 4        |****************************************|\n" +
		"[9223372036854775808, 18446744073709551616) : 2        |********************                    |\n"
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func FuzzPercentile(f *testing.F) {
	f.Add(3.0, 1.0, 2.0, 50.0)
	f.Fuzz(func(t *testing.T, a, b, c, p float64) {
		xs := []float64{a, b, c}
		if slices.ContainsFunc(xs, math.IsNaN) || math.IsNaN(p) {
			return
		}
		got := Percentile(xs, p)
		if !slices.Contains(xs, got) {
			t.Fatalf("Percentile(%v, %v) = %v, not a sample", xs, p, got)
		}
	})
}
