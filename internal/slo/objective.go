// Package slo chooses the BE timeslice that gives best-effort work the
// most GPU that every latency-critical (LC) process's objective allows,
// from measured LC latency and BE progress.
//
// Why a search and not a formula: LC latency is not monotonic in the BE
// timeslice. Measured on an H100 with an eager (launch-bound) PyTorch LC
// beside a trainer, LC p50 went 1.01x, 0.97x, 0.94x, 1.17x standalone for
// BE timeslices of 1 us, 200 us, 1 ms, 3 ms while BE kept 63.5%, 76.1%,
// 87.1%, 90.5%; a CUDA-graph LC with pre-preemption wants the opposite end
// (1 us). Every LC switch-in costs ~170-200 us of GPU time, so the knee
// depends on how the LC feeds the GPU, and moves when the LC changes. The
// Controller keeps what it has measured at each rung of a timeslice ladder
// and moves one rung at a time, with hysteresis and a bounded change rate.
package slo

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrInvalid marks a malformed objective or option.
var ErrInvalid = errors.New("invalid SLO setting")

// Objective is an LC process's latency objective: a quantile of its
// request latency, bounded either relative to its own standalone-like
// latency (Inflation, e.g. 1.05) or absolutely (Absolute).
type Objective struct {
	// Quantile is 0.5 or 0.99 (any value in (0, 1) is accepted).
	Quantile float64 `json:"quantile"`
	// Inflation bounds latency / baseline; 0 when Absolute is used.
	Inflation float64 `json:"inflation,omitempty"`
	// Absolute bounds latency itself; 0 when Inflation is used.
	Absolute time.Duration `json:"absolute,omitempty"`
}

// ParseObjective reads "p99<=1.15x", "p50<=1.05x" or "p99<=2ms".
func ParseObjective(s string) (Objective, error) {
	q, bound, ok := strings.Cut(strings.ReplaceAll(strings.TrimSpace(s), " ", ""), "<=")
	if !ok || len(q) < 2 || (q[0] != 'p' && q[0] != 'P') {
		return Objective{}, fmt.Errorf("%w: objective %q: want pNN<=X.XXx or pNN<=DURATION (e.g. p99<=1.15x, p50<=2ms)", ErrInvalid, s)
	}
	pct, err := strconv.ParseFloat(q[1:], 64)
	if err != nil || !(pct > 0 && pct < 100) { // NaN too
		return Objective{}, fmt.Errorf("%w: objective %q: quantile %q: want p1 .. p99.9", ErrInvalid, s, q)
	}
	o := Objective{Quantile: pct / 100}
	if x, found := strings.CutSuffix(bound, "x"); found {
		f, err := strconv.ParseFloat(x, 64)
		if err != nil || !(f >= 1 && f <= 100) { // NaN too
			return Objective{}, fmt.Errorf("%w: objective %q: inflation %q: want a factor in [1, 100] such as 1.05x", ErrInvalid, s, bound)
		}
		o.Inflation = f
		return o, nil
	}
	d, err := time.ParseDuration(bound)
	if err != nil || d <= 0 {
		return Objective{}, fmt.Errorf("%w: objective %q: bound %q: want a factor (1.05x) or a positive duration (2ms)", ErrInvalid, s, bound)
	}
	o.Absolute = d
	return o, nil
}

func (o Objective) String() string {
	p := o.quantileName()
	if o.Absolute > 0 {
		return fmt.Sprintf("%s<=%v", p, o.Absolute)
	}
	return fmt.Sprintf("%s<=%sx", p, strconv.FormatFloat(o.Inflation, 'f', -1, 64))
}

// Check validates o.
func (o Objective) Check() error {
	switch {
	case o.Quantile <= 0 || o.Quantile >= 1:
		return fmt.Errorf("%w: objective quantile %v not in (0, 1)", ErrInvalid, o.Quantile)
	case (o.Inflation > 0) == (o.Absolute > 0):
		return fmt.Errorf("%w: objective %v: give exactly one of an inflation or an absolute bound", ErrInvalid, o)
	case o.Inflation > 0 && o.Inflation < 1:
		return fmt.Errorf("%w: objective inflation %v below 1", ErrInvalid, o.Inflation)
	}
	return nil
}

// Target is the latency o allows given the process's baseline (its
// standalone-like latency at the same quantile; unused for absolute
// objectives). 0 when the baseline is not known yet.
func (o Objective) Target(baseline time.Duration) time.Duration {
	if o.Absolute > 0 {
		return o.Absolute
	}
	if baseline <= 0 {
		return 0
	}
	return time.Duration(float64(baseline) * o.Inflation)
}

// Objectives are an LC process's objectives, all of which it must meet,
// in ascending quantile: "p50<=1.05x, p99<=1.15x" bounds both its median
// and its tail. Nil: none.
type Objectives []Objective

// ParseObjectives reads one objective or several separated by commas, at
// most one per quantile.
func ParseObjectives(s string) (Objectives, error) {
	var os Objectives
	for part := range strings.SplitSeq(s, ",") {
		o, err := ParseObjective(part)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(os, func(x Objective) bool { return x.Quantile == o.Quantile }) {
			return nil, fmt.Errorf("%w: objectives %q: two bounds on p%s", ErrInvalid, s, strconv.FormatFloat(o.Quantile*100, 'f', -1, 64))
		}
		os = append(os, o)
	}
	slices.SortFunc(os, func(a, b Objective) int { return cmp.Compare(a.Quantile, b.Quantile) })
	return os, nil
}

// Tail reports whether o bounds a quantile above the median: set by a
// request's worst windows, so a setting tried and missed once shows in it.
func (o Objective) Tail() bool { return o.Quantile > 0.5 }

// quantileName is "p99" for 0.99: what names an LC's baseline for it.
func (o Objective) quantileName() string {
	return "p" + strconv.FormatFloat(o.Quantile*100, 'f', -1, 64)
}

func (os Objectives) String() string {
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = o.String()
	}
	return strings.Join(parts, ", ")
}
