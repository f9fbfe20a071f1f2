// Package stats summarizes latency samples: percentiles, empirical CDFs and
// log2 histograms. It has no GPU dependency and works on plain float64
// samples in whatever unit the caller uses (gpreempt-bench uses
// microseconds).
package stats

import (
	"math"
	"slices"
)

// Summary is the usual digest of a latency distribution.
type Summary struct {
	N    int     `json:"n"`
	Mean float64 `json:"mean"`
	Min  float64 `json:"min"`
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Summarize computes a Summary of xs (which it does not modify). An empty
// input gives the zero Summary.
func Summarize(xs []float64) Summary {
	if len(xs) == 0 {
		return Summary{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	var sum float64
	for _, x := range s {
		sum += x
	}
	return Summary{
		N:    len(s),
		Mean: sum / float64(len(s)),
		Min:  s[0],
		P50:  PercentileSorted(s, 50),
		P90:  PercentileSorted(s, 90),
		P99:  PercentileSorted(s, 99),
		P999: PercentileSorted(s, 99.9),
		Max:  s[len(s)-1],
	}
}

// Percentile returns the p-th percentile of xs (see PercentileSorted); xs is
// not modified.
func Percentile(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return PercentileSorted(s, p)
}

// PercentileSorted returns the p-th percentile (0 <= p <= 100) of sorted by
// the nearest-rank method: the smallest sample such that at least p% of the
// samples are less than or equal to it. Unlike interpolation, it always
// returns a latency that was actually observed, and a p99 of 100 samples is
// the 99th smallest, not a blend of the 99th and 100th. It returns NaN for
// an empty input.
func PercentileSorted(sorted []float64, p float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	return sorted[nearestRank(n, p)-1]
}

// Point is one point of an empirical CDF: the fraction Y of samples that are
// <= X.
type Point struct {
	X float64 `json:"x"`
	Y float64 `json:"y"`
}

// CDF returns the empirical CDF of xs as a step function's corner points,
// thinned to at most maxPoints (0: no limit) by keeping evenly spaced ranks.
// The last point, (max, 1), is always kept so that tails stay visible.
func CDF(xs []float64, maxPoints int) []Point {
	n := len(xs)
	if n == 0 {
		return nil
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	step := 1
	if maxPoints > 0 && n > maxPoints {
		step = (n + maxPoints - 1) / maxPoints
	}
	pts := make([]Point, 0, n/step+1)
	for i := step - 1; i < n; i += step {
		pts = append(pts, Point{X: s[i], Y: float64(i+1) / float64(n)})
	}
	if last := pts[len(pts)-1]; last.Y != 1 {
		pts = append(pts, Point{X: s[n-1], Y: 1})
	}
	return pts
}

// Log2Histogram bins xs by the rule of Hist: power-of-two buckets
// [2^k, 2^(k+1)), samples below 1 sharing [0, 1), from the lowest to the
// highest occupied bucket with the empty ones between.
func Log2Histogram(xs []float64) []Bucket {
	var h Hist
	for _, x := range xs {
		h.Add(x)
	}
	return h.Buckets()
}
