package scrape

import (
	"math"
	"slices"
	"time"
)

// Delta is this window's histogram: cur's counts less prev's, by bucket.
// ok is false where the two do not follow one another (a counter reset:
// the server restarted, so the count or a bucket went down; or the
// buckets changed): the window then has no values, and cur is the next
// one's start.
func Delta(prev, cur Hist) (Hist, bool) {
	if !slices.Equal(prev.Bounds, cur.Bounds) {
		return Hist{}, false
	}
	d := Hist{Name: cur.Name, Bounds: cur.Bounds, Counts: make([]float64, len(cur.Counts))}
	for i := range cur.Counts {
		if d.Counts[i] = cur.Counts[i] - prev.Counts[i]; d.Counts[i] < 0 {
			return Hist{}, false
		}
		// A count can only grow by what the buckets under it grew by.
		if i > 0 && d.Counts[i] < d.Counts[i-1] {
			return Hist{}, false
		}
	}
	return d, true
}

// N is the whole number of values a window's histogram holds (counts may
// be floats in the exposition; a histogram of durations counts whole
// observations).
func (h Hist) N() int {
	return int(min(math.Round(h.Count()), math.MaxInt32))
}

// At is the value of rank r (1 <= r <= N, fractional ranks allowed) as
// Prometheus's histogram_quantile places it: spread evenly across its
// bucket, from the bucket's lower bound (0 below a first positive bound)
// to its upper bound, linearly; a value in the +Inf bucket at the last
// finite bound.
func (h Hist) At(r float64) float64 {
	below := 0.0
	for i, ub := range h.Bounds {
		c := h.Counts[i] - below
		if c <= 0 || h.Counts[i] < r {
			below = h.Counts[i]
			continue
		}
		if math.IsInf(ub, 1) {
			return h.Bounds[max(i-1, 0)]
		}
		lo := 0.0
		switch {
		case i > 0:
			lo = h.Bounds[i-1]
		case ub <= 0:
			return ub
		}
		return lo + (ub-lo)*(r-below)/c
	}
	if k := len(h.Bounds); k >= 2 {
		return h.Bounds[k-2]
	}
	return math.NaN()
}

// Quantile is h's q-quantile, as histogram_quantile computes it.
func (h Hist) Quantile(q float64) float64 {
	n := h.Count()
	if n <= 0 {
		return math.NaN()
	}
	return h.At(max(q*n, math.SmallestNonzeroFloat64))
}

// Values spreads h's values evenly inside their buckets, in unit, each at
// the middle of its share of its bucket (At of rank j+½: a lone value at
// its bucket's middle, not its top, which would read every window's values
// high by half a bucket); at most limit of them: past it, ranks evenly
// spaced across all of them, so that the values keep the distribution.
func (h Hist) Values(unit time.Duration, limit int) []time.Duration {
	n := h.N()
	if n <= 0 || limit <= 0 {
		return nil
	}
	k := min(n, limit)
	out := make([]time.Duration, k)
	for j := range out {
		out[j] = toDuration(h.At((float64(j)+0.5)*float64(n)/float64(k)), unit)
	}
	return out
}

// toDuration is v units, never negative.
func toDuration(v float64, unit time.Duration) time.Duration {
	d := v * float64(unit)
	switch {
	case math.IsNaN(d) || d <= 0:
		return 0
	case d >= math.MaxInt64:
		return math.MaxInt64
	}
	return time.Duration(d)
}
