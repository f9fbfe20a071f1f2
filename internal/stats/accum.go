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
	ps := slices.SortedFunc(slices.Values(ws), func(x, y Weighted) int { return int(x.V - y.V) })
	rank, n := int(math.Ceil(q*float64(Weight(ps)))), 0
	for _, p := range ps {
		if n += p.W; n >= rank {
			return p.V
		}
	}
	return ps[len(ps)-1].V
}
