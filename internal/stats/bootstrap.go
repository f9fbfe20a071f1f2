package stats

import (
	"math"
	"math/rand/v2"
	"slices"
)

// Interval is a confidence interval [Lo, Hi].
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// Width is Hi - Lo.
func (iv Interval) Width() float64 { return iv.Hi - iv.Lo }

// Contains reports whether x lies in [Lo, Hi].
func (iv Interval) Contains(x float64) bool { return x >= iv.Lo && x <= iv.Hi }

// Bootstrap configures a percentile bootstrap.
type Bootstrap struct {
	// Iters is the number of resamples (0: 1000).
	Iters int
	// Level is the confidence level (0: 0.95).
	Level float64
	// Rand is the source of the resampling; a fixed seed makes the
	// intervals reproducible (tests, and reports regenerated from the same
	// samples). Nil: seed 1.
	Rand *rand.Rand
}

func (b Bootstrap) defaults() Bootstrap {
	if b.Iters <= 0 {
		b.Iters = 1000
	}
	if b.Level <= 0 || b.Level >= 1 {
		b.Level = 0.95
	}
	if b.Rand == nil {
		b.Rand = rand.New(rand.NewPCG(1, 2))
	}
	return b
}

// QuantileRatioCI returns, for each percentile p in ps (0-100, nearest rank
// as PercentileSorted), the percentile-bootstrap confidence interval of
// quantile_p(a) / quantile_p(b): a and b are resampled independently, with
// replacement, Iters times, and the interval holds the central Level of the
// resampled ratios. It returns nil when a or b is empty, and skips
// resamples whose b quantile is zero.
//
// Each resample costs O(len(a) + len(b)), not a sort: the samples are
// sorted once, a resample is drawn as a count per sorted position, and its
// order statistics are read from the cumulative counts.
func QuantileRatioCI(a, b []float64, ps []float64, cfg Bootstrap) []Interval {
	if len(a) == 0 || len(b) == 0 || len(ps) == 0 {
		return nil
	}
	cfg = cfg.defaults()
	sa, sb := slices.Clone(a), slices.Clone(b)
	slices.Sort(sa)
	slices.Sort(sb)
	ca, cb := make([]int32, len(sa)), make([]int32, len(sb))
	ratios := make([][]float64, len(ps))
	qa, qb := make([]float64, len(ps)), make([]float64, len(ps))
	for range cfg.Iters {
		resampleQuantiles(sa, ca, ps, qa, cfg.Rand)
		resampleQuantiles(sb, cb, ps, qb, cfg.Rand)
		for i := range ps {
			if qb[i] != 0 {
				ratios[i] = append(ratios[i], qa[i]/qb[i])
			}
		}
	}
	out := make([]Interval, len(ps))
	tail := (1 - cfg.Level) / 2 * 100
	for i, r := range ratios {
		if len(r) == 0 {
			out[i] = Interval{Lo: math.NaN(), Hi: math.NaN()}
			continue
		}
		slices.Sort(r)
		out[i] = Interval{Lo: PercentileSorted(r, tail), Hi: PercentileSorted(r, 100-tail)}
	}
	return out
}

// resampleQuantiles draws len(sorted) indices with replacement into counts
// and writes the nearest-rank percentiles ps of that resample into q, in
// one pass over the counts (ps in any order).
func resampleQuantiles(sorted []float64, counts []int32, ps, q []float64, rng *rand.Rand) {
	n := len(sorted)
	clear(counts)
	for range n {
		counts[rng.IntN(n)]++
	}
	order := make([]int, len(ps))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return nearestRank(n, ps[a]) - nearestRank(n, ps[b]) })
	next, seen := 0, 0
	for j, c := range counts {
		seen += int(c)
		for next < len(order) && seen >= nearestRank(n, ps[order[next]]) {
			q[order[next]] = sorted[j]
			next++
		}
		if next == len(order) {
			return
		}
	}
}

// nearestRank is the 1-based rank PercentileSorted picks for p in n samples:
// ceil(p/100 * n), clamped to [1, n]. The small epsilon keeps p*n that
// should be an integer (99.9 * 1000) from rounding up to the next rank.
func nearestRank(n int, p float64) int {
	switch {
	case p <= 0:
		return 1
	case p >= 100:
		return n
	}
	return min(max(int(math.Ceil(p/100*float64(n)-1e-9)), 1), n)
}

// Median returns the median of xs (the mean of the middle two for an even
// count, which suits a handful of per-repetition ratios better than the
// nearest rank), NaN for none.
func Median(xs []float64) float64 {
	n := len(xs)
	if n == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
