package stats

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Hist is a log2 histogram in constant memory whatever the number of
// samples, which is what a tracer left running needs (as the bcc tools keep
// theirs); gpreempt-bench fills one from its samples as well, so that a
// latency reads the same in both.
//
// Bucket k holds the samples x with 2^k <= x < 2^(k+1): half-open bounds
// that are exact for fractional samples (35.4 us) as for whole ones, and
// that agree with bcc's "2 -> 3, 4 -> 7" rows for every whole number from
// 2 on. Everything below 1 (0, fractions, negatives, NaN) shares one bucket
// [0, 1) — "under a microsecond" for latencies in microseconds — rather
// than an ever-deeper run of fractional buckets. Unlike bcc, 1 is not
// lumped with 0.
type Hist struct {
	// counts[0] is [0, 1); counts[k+1] is [2^k, 2^(k+1)), the last one
	// also holding everything above.
	counts [65]uint64
	// N counts the samples, Sum adds them up.
	N   uint64
	Sum float64
	// Min and Max are the extreme samples (0 when empty).
	Min, Max float64
}

// Bucket is one bin of a log2 histogram: samples in [Lo, Hi).
type Bucket struct {
	Lo    float64 `json:"lo"`
	Hi    float64 `json:"hi"`
	Count int     `json:"count"`
}

// Add counts one sample.
func (h *Hist) Add(x float64) {
	h.counts[bucketIndex(x)+1]++
	if h.N == 0 || x < h.Min {
		h.Min = x
	}
	if h.N == 0 || x > h.Max {
		h.Max = x
	}
	h.N++
	h.Sum += x
}

// Mean is the average sample (0 when empty).
func (h *Hist) Mean() float64 {
	if h.N == 0 {
		return 0
	}
	return h.Sum / float64(h.N)
}

// Buckets returns the histogram's rows, from the lowest to the highest
// occupied bucket, the empty ones between included so that gaps show; nil
// when empty.
func (h *Hist) Buckets() []Bucket {
	lo, hi := -1, -1
	for i, n := range h.counts {
		if n == 0 {
			continue
		}
		if lo < 0 {
			lo = i
		}
		hi = i
	}
	if lo < 0 {
		return nil
	}
	out := make([]Bucket, 0, hi-lo+1)
	for i := lo; i <= hi; i++ {
		b := Bucket{Lo: 0, Hi: 1, Count: int(h.counts[i])}
		if i > 0 {
			b.Lo, b.Hi = math.Ldexp(1, i-1), math.Ldexp(1, i)
		}
		out = append(out, b)
	}
	return out
}

// bucketIndex returns k with 2^k <= x < 2^(k+1), at most 63, or -1 for
// x < 1 and NaN.
func bucketIndex(x float64) int {
	if !(x >= 1) { // also catches NaN
		return -1
	}
	_, exp := math.Frexp(x) // x = frac * 2^exp, frac in [0.5, 1)
	return min(exp-1, 63)
}

// histBarWidth is the width of the distribution column, as in bcc.
const histBarWidth = 40

// WriteHistogram prints buckets laid out as the bcc tools print a log2
// histogram (print_log2_hist in funclatency, biolatency): a "usecs : count
// distribution" header, then one row per bucket with a bar scaled to the
// fullest one. Bounds are printed as the half-open interval they are:
// "[256, 512)" counts the samples from 256 up to, not including, 512.
func WriteHistogram(w io.Writer, buckets []Bucket, unit string) error {
	peak := 0
	for _, b := range buckets {
		peak = max(peak, b.Count)
	}
	if _, err := fmt.Fprintf(w, "%-24s : count    distribution\n", fmt.Sprintf("%10s", unit)); err != nil {
		return err
	}
	for _, b := range buckets {
		stars := 0
		if peak > 0 {
			stars = b.Count * histBarWidth / peak
		}
		bounds := fmt.Sprintf("%10s, %s)", "["+formatBound(b.Lo), formatBound(b.Hi))
		if _, err := fmt.Fprintf(w, "%-24s : %-8d |%-*s|\n", bounds, b.Count, histBarWidth, strings.Repeat("*", stars)); err != nil {
			return err
		}
	}
	return nil
}

// formatBound prints a bound (0 or a power of two from 1 up) in full,
// never as 1.8e+19.
func formatBound(x float64) string { return strconv.FormatFloat(x, 'f', 0, 64) }
