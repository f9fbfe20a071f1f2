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

// Accum gathers weighted values window by window, at most Max windows
// (older ones drop out; 0: no limit), until they are enough for a
// quantile.
type Accum struct {
	Max     int
	windows [][]Weighted
	n       []int
}

// Weight is what ws weigh together.
func Weight(ws []Weighted) (n int) {
	for _, x := range ws {
		n += x.W
	}
	return n
}

// WeightedQuantile is the weighted nearest-rank quantile q of ws (0: none).
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

// Add adds one window's values.
func (a *Accum) Add(w []Weighted) {
	a.windows, a.n = append(a.windows, w), append(a.n, Weight(w))
	if a.Max > 0 && len(a.windows) > a.Max {
		a.windows, a.n = a.windows[1:], a.n[1:]
	}
}

// Count is the weight it holds.
func (a *Accum) Count() (n int) {
	for _, x := range a.n {
		n += x
	}
	return n
}

// Quantile is the weighted nearest-rank quantile q of what it holds (0:
// nothing): exact over samples, an approximation where a value stands
// for a window's quantile.
func (a *Accum) Quantile(q float64) time.Duration {
	return WeightedQuantile(slices.Concat(a.windows...), q)
}

// Reset empties it.
func (a *Accum) Reset() { a.windows, a.n = nil, nil }
