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

// Add adds one window's values.
func (a *Accum) Add(w []Weighted) {
	n := 0
	for _, x := range w {
		n += x.W
	}
	a.windows, a.n = append(a.windows, w), append(a.n, n)
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
	ps := slices.Concat(a.windows...)
	if len(ps) == 0 {
		return 0
	}
	slices.SortFunc(ps, func(x, y Weighted) int { return int(x.V - y.V) })
	rank, n := int(math.Ceil(q*float64(a.Count()))), 0
	for _, p := range ps {
		if n += p.W; n >= rank {
			return p.V
		}
	}
	return ps[len(ps)-1].V
}

// Reset empties it.
func (a *Accum) Reset() { a.windows, a.n = nil, nil }
