package stats

import (
	"math"
	"slices"
	"time"
)

// Weighted is a value standing for W samples: a request (1), or a
// window's quantile over its count.
type Weighted struct {
	V time.Duration
	W int
}

// Weight is what ws weigh together.
func Weight(ws []Weighted) (n int) {
	for _, x := range ws {
		n += x.W
	}
	return n
}

// WeightedQuantile is the weighted nearest-rank quantile q of ws (0:
// none): exact over samples, an approximation where a value stands for a
// window's quantile.
func WeightedQuantile(ws []Weighted, q float64) time.Duration {
	if len(ws) == 0 {
		return 0
	}
	return sortedQuantile(sortWeighted(ws), q)
}

// sortWeighted is a copy of ws in ascending value: the caller's order stays.
func sortWeighted(ws []Weighted) []Weighted {
	return slices.SortedFunc(slices.Values(ws), func(x, y Weighted) int { return int(x.V - y.V) })
}

// sortedQuantile is WeightedQuantile of ps, sorted and not empty.
func sortedQuantile(ps []Weighted, q float64) time.Duration {
	rank, n := int(math.Ceil(q*float64(Weight(ps)))), 0
	for _, p := range ps {
		if n += p.W; n >= rank {
			return p.V
		}
	}
	return ps[len(ps)-1].V
}

// QuantileSE is the relative standard error of ws's quantile q as n
// independent draws, no more than ws's distinct values (fewer where
// samples move together, or where a value stands for a window's quantile
// over its count or for copies of one mean): half the spread of the
// quantiles one binomial standard deviation of rank either side, over the
// quantile. NaN where that spread is none (one value, copies, or a tail
// quantile of too few draws to see past the extreme): not known.
func QuantileSE(ws []Weighted, q float64, n int) float64 {
	if len(ws) == 0 {
		return math.NaN()
	}
	ps := sortWeighted(ws) // sorted once: its distinct values and the three quantiles
	distinct := 1
	for i := 1; i < len(ps); i++ {
		if ps[i].V != ps[i-1].V {
			distinct++
		}
	}
	if n = min(n, distinct); n <= 0 {
		return math.NaN()
	}
	m := sortedQuantile(ps, q)
	if m <= 0 {
		return math.NaN()
	}
	d := math.Sqrt(q * (1 - q) / float64(n))
	lo, hi := sortedQuantile(ps, max(q-d, 0)), sortedQuantile(ps, min(q+d, 1))
	if hi <= lo {
		return math.NaN()
	}
	return float64(hi-lo) / 2 / float64(m)
}
