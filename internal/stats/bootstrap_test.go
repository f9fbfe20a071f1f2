package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

// expSamples draws n exponential samples of the given scale: the true p-th
// quantile is -scale*ln(1-p/100), so the ratio of two scales' quantiles is
// the ratio of the scales at every p.
func expSamples(rng *rand.Rand, n int, scale float64) []float64 {
	xs := make([]float64, n)
	for i := range xs {
		xs[i] = scale * rng.ExpFloat64()
	}
	return xs
}

// TestQuantileRatioCICoverage checks on synthetic samples with a known
// ratio that the 95% interval holds it about 95% of the time, for the
// median and for p99. The seed is fixed, so the counts are too.
func TestQuantileRatioCICoverage(t *testing.T) {
	tests := []struct {
		name     string
		n        int
		trueRate float64
	}{
		{"equal", 2000, 1},
		{"twice slower", 2000, 2},
		{"small effect", 5000, 1.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(42, 7))
			const trials = 60
			hit := [2]int{}
			for range trials {
				a := expSamples(rng, tt.n, 30*tt.trueRate)
				b := expSamples(rng, tt.n, 30)
				ivs := QuantileRatioCI(a, b, []float64{50, 99}, Bootstrap{Iters: 300, Rand: rng})
				for i, iv := range ivs {
					if iv.Contains(tt.trueRate) {
						hit[i]++
					}
				}
			}
			for i, name := range []string{"p50", "p99"} {
				// 95% nominal; the percentile bootstrap of a tail quantile
				// runs a little narrow. Below 85% of 60 trials is a bug.
				if cov := float64(hit[i]) / trials; cov < 0.85 {
					t.Errorf("%s: true ratio %v inside the interval in %d of %d trials", name, tt.trueRate, hit[i], trials)
				}
			}
		})
	}
}

func TestQuantileRatioCIDeterministic(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	a, b := expSamples(rng, 1000, 40), expSamples(rng, 1000, 30)
	run := func() []Interval {
		return QuantileRatioCI(a, b, []float64{50, 99}, Bootstrap{Iters: 200, Rand: rand.New(rand.NewPCG(9, 9))})
	}
	x, y := run(), run()
	for i := range x {
		if x[i] != y[i] {
			t.Fatalf("same seed, different intervals: %v vs %v", x, y)
		}
		if !(x[i].Lo <= x[i].Hi) {
			t.Errorf("interval %v inverted", x[i])
		}
	}
	// The interval is about the point estimate.
	if pt := Percentile(a, 50) / Percentile(b, 50); !x[0].Contains(pt) {
		t.Errorf("p50 point ratio %v outside its interval %v", pt, x[0])
	}
}

func TestQuantileRatioCIEdges(t *testing.T) {
	if got := QuantileRatioCI(nil, []float64{1}, []float64{50}, Bootstrap{}); got != nil {
		t.Errorf("empty a: %v", got)
	}
	// Constant samples: the interval collapses on the exact ratio.
	a, b := []float64{6, 6, 6}, []float64{2, 2}
	got := QuantileRatioCI(a, b, []float64{50, 99}, Bootstrap{Iters: 50})
	for _, iv := range got {
		if iv.Lo != 3 || iv.Hi != 3 {
			t.Errorf("constant samples: %v, want [3, 3]", iv)
		}
	}
	// A zero baseline gives no ratio at all.
	got = QuantileRatioCI(a, []float64{0, 0}, []float64{50}, Bootstrap{Iters: 10})
	if !math.IsNaN(got[0].Lo) {
		t.Errorf("zero baseline: %v, want NaN", got)
	}
}

func TestNearestRankMatchesPercentileSorted(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	for _, p := range []float64{0, 1, 50, 90, 99, 99.9, 100} {
		if got, want := s[nearestRank(len(s), p)-1], PercentileSorted(s, p); got != want {
			t.Errorf("p%v: %v, want %v", p, got, want)
		}
	}
}

func TestMedian(t *testing.T) {
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := Median(tt.in); got != tt.want {
			t.Errorf("Median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if !math.IsNaN(Median(nil)) {
		t.Error("Median(nil) not NaN")
	}
}
