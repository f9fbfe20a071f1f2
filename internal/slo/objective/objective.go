// Package objective reads and checks an LC process's latency objectives: "p99<=40ms", "tpot_p50<=12ms", "p50<=1.05x@standalone" (docs/SLO.md).
package objective

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

// Metrics an objective may bound besides request latency: an LLM server's time to first token and per output token ("ttft_p50", "tpot_p99").
var Metrics = []string{"ttft", "tpot"}

// References a relative objective is measured against.
const (
	Standalone = "standalone" // the LC with BE stopped (paused) for a few windows; the default
	Shortest   = "shortest"   // beside BE under the shortest BE timeslice: no pause, not the LC alone
)

// Objective is an LC process's latency objective: a quantile of its request latency (or of Metric), bounded
// absolutely (Absolute) or relative to a reference latency at the same quantile (Inflation).
type Objective struct {
	Metric    string        `json:"metric,omitempty"`    // "" (request latency) or one of Metrics
	Quantile  float64       `json:"quantile"`            // in (0, 1): 0.5, 0.99
	Inflation float64       `json:"inflation,omitempty"` // bounds latency / reference; 0 with Absolute
	Absolute  time.Duration `json:"absolute,omitempty"`  // bounds latency itself; 0 with Inflation
	Reference string        `json:"reference,omitempty"` // what Inflation is relative to: Standalone, Shortest, or "" (standalone where BE may be paused)
}

// Parse reads "p99<=40ms", "tpot_p50<=12ms", "p50<=1.05x" or "p50<=1.05x@shortest".
func Parse(s string) (Objective, error) {
	bad := func(what string, args ...any) (Objective, error) {
		return Objective{}, fmt.Errorf("%w: objective %q: %s", ErrInvalid, s, fmt.Sprintf(what, args...))
	}
	lhs, bound, ok := strings.Cut(strings.ReplaceAll(strings.TrimSpace(s), " ", ""), "<=")
	var o Objective
	if m, q, found := strings.Cut(lhs, "_"); found {
		if !slices.Contains(Metrics, strings.ToLower(m)) {
			return bad("metric %q: want %s", m, strings.Join(Metrics, " or "))
		}
		o.Metric, lhs = strings.ToLower(m), q
	}
	if !ok || len(lhs) < 2 || (lhs[0] != 'p' && lhs[0] != 'P') {
		return bad("want pNN<=DURATION or pNN<=X.XXx (e.g. p99<=40ms, tpot_p50<=12ms, p50<=1.05x)")
	}
	pct, err := strconv.ParseFloat(lhs[1:], 64)
	if err != nil || !(pct > 0 && pct < 100) { // NaN too
		return bad("quantile %q: want p1 .. p99.9", lhs)
	}
	o.Quantile = pct / 100
	if x, ref, found := strings.Cut(bound, "@"); found || strings.HasSuffix(bound, "x") {
		if o.Reference = strings.ToLower(ref); found && o.Reference != Standalone && o.Reference != Shortest {
			return bad("reference %q: want %s or %s", ref, Standalone, Shortest)
		}
		if o.Inflation, err = strconv.ParseFloat(strings.TrimSuffix(x, "x"), 64); err != nil || !strings.HasSuffix(x, "x") || !(o.Inflation >= 1 && o.Inflation <= 100) { // NaN too
			return bad("inflation %q: want a factor in [1, 100] such as 1.05x", x)
		}
		return o, nil
	}
	if o.Absolute, err = time.ParseDuration(bound); err != nil || o.Absolute <= 0 {
		return bad("bound %q: want a positive duration (40ms) or a factor (1.05x)", bound)
	}
	return o, nil
}

func (o Objective) String() string {
	if o.Absolute > 0 {
		return fmt.Sprintf("%s<=%v", o.Name(), o.Absolute)
	}
	return fmt.Sprintf("%s<=%sx", o.Name(), strconv.FormatFloat(o.Inflation, 'f', -1, 64)) + map[bool]string{true: "@" + o.Reference}[o.Reference != ""]
}

// Check validates o built in code or decoded: what Parse refuses, and what String drops (a metric's case, an inflation or reference beside a bound).
func (o Objective) Check() error {
	back, err := Parse(o.String())
	if err == nil && (back.Metric != o.Metric || back.Inflation != o.Inflation || back.Reference != o.Reference) {
		err = fmt.Errorf("%w: objective %+v: not as written", ErrInvalid, o)
	}
	return err
}

// Relative reports whether o is bounded relative to a reference latency.
func (o Objective) Relative() bool { return o.Absolute <= 0 }

// Target is the latency o allows given the reference latency at its quantile (unused if absolute); 0 while it is not known.
func (o Objective) Target(reference time.Duration) time.Duration {
	if o.Absolute > 0 {
		return o.Absolute
	}
	return time.Duration(float64(max(reference, 0)) * o.Inflation)
}

// Name names o's quantile as an app pushes it: "p50", "p99"; with a metric, "tpot_p50".
func (o Objective) Name() string { // to 12 digits: 0.57*100 is 56.99999999999999, which no one wrote
	return map[bool]string{true: o.Metric + "_"}[o.Metric != ""] + "p" + strconv.FormatFloat(o.Quantile*100, 'g', 12, 64)
}

// Objectives are an LC process's objectives, all to be met, in ascending metric and quantile ("p50<=1.05x, p99<=40ms"); nil: none.
type Objectives []Objective

// ParseList reads objectives separated by commas, at most one per metric and quantile.
func ParseList(s string) (Objectives, error) {
	var os Objectives
	for part := range strings.SplitSeq(s, ",") {
		o, err := Parse(part)
		if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(os, func(x Objective) bool { return x.Name() == o.Name() }) {
			return nil, fmt.Errorf("%w: objectives %q: two bounds on %s", ErrInvalid, s, o.Name())
		}
		os = append(os, o)
	}
	slices.SortFunc(os, func(a, b Objective) int {
		return cmp.Or(cmp.Compare(a.Metric, b.Metric), cmp.Compare(a.Quantile, b.Quantile))
	})
	return os, nil
}

func (os Objectives) String() string {
	parts := make([]string, len(os))
	for i, o := range os {
		parts[i] = o.String()
	}
	return strings.Join(parts, ", ")
}
