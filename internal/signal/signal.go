// Package signal is the signals SLO mode steers by: an LC's latency over a window and where it
// came from, BE progress by launches. Producers (internal/scrape, internal/daemon/signals) and SLO
// mode (internal/slomode) both import it, so that no producer imports its consumer.
package signal

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// Where an LC's latency comes from (status and metrics show it per LC).
const (
	Pushed        = "pushed"         // the app's own windows over the socket
	TracedRequest = "traced-request" // uprobes on libcuda: busy periods between quiet gaps (request.Delimiter)
	TracedStep    = "traced-step"    // the same for an LC never quiet: synchronize to synchronize
	Scraped       = "scraped"        // the server's own Prometheus histograms
)

// Metrics of Latency.Samples (objective.Metrics): request latency, an LLM server's time to
// first token and time per output token.
const (
	MetricRequest = ""
	MetricTTFT    = "ttft"
	MetricTPOT    = "tpot"
)

// Latency is one LC process's latency over one window of its source.
type Latency struct {
	At       time.Duration // when the daemon received it (the reconciler's clock)
	Window   time.Duration
	Source   string // one of the source constants (Pushed, ...)
	Requests int
	Tokens   int // the samples of the tpot_ quantiles (0: Requests)
	// Quantiles by name ("p50", "tpot_p99", ...), for a source without Samples: the window's own
	// values by metric, at most MaxSamples each.
	Quantiles map[string]time.Duration
	Samples   map[string][]time.Duration
	// PerCPU, where a traced LC's requests are launch-bound, are its Samples each at one CPU
	// speed: over its request's CPU gap, times the process's typical one (of 32 launch-bound
	// requests after its first 8). An eager LC's latency moves with its vCPU's speed from request to request; a
	// ratio of these does not, and reads what BE costs it with a fifth of the scatter.
	PerCPU map[string][]time.Duration
	// Buckets, for a histogram's window (scraped), are its finite bucket bounds by metric,
	// ascending: a value is known only to lie in its bucket.
	Buckets map[string][]time.Duration
	Seq     uint64 // numbers a process's samples, so one is used once
	// Lag is how long after its end a sample is counted as the window ended, LagBefore as it began:
	// a traced request's, its process's quiet gap then (its end is known once the process has been
	// quiet that long); a traced window's LagBefore is the window before's Lag, or more where it
	// holds requests run back to back (back to their busy period's start); 0 for the others.
	Lag, LagBefore time.Duration
}

// Span is the interval (from, to] in which the window's samples ended (the reconciler's clock).
func (l Latency) Span() (from, to time.Duration) { return l.At - l.Window - l.LagBefore, l.At - l.Lag }

// Unresolved says why l cannot judge objective o at its quantile v ("" where it can): v lies
// somewhere in its bucket, so an absolute bound inside that bucket, or a relative objective whose
// factor is smaller than the bucket's top over its bottom, may be met or missed alike.
func (l Latency) Unresolved(o objective.Objective, v time.Duration) string {
	bounds := l.Buckets[o.Metric]
	if len(bounds) == 0 {
		return ""
	}
	i, found := slices.BinarySearch(bounds, v)
	if found && i == len(bounds)-1 {
		i++ // the last finite bound is where the +Inf bucket's values are placed: maybe above it
	}
	lo, hi := time.Duration(0), time.Duration(math.MaxInt64)
	if i > 0 {
		lo = bounds[i-1]
	}
	if i < len(bounds) {
		hi = bounds[i]
	}
	why := fmt.Sprintf("the bound %v lies inside it", o.Absolute)
	switch {
	case !o.Relative() && (o.Absolute >= hi || o.Absolute < lo || o.Absolute == lo && hi < math.MaxInt64):
		return "" // wholly on one side (v sits at lo in +Inf's bucket: there only a bound below it)
	case o.Relative() && hi < math.MaxInt64 && float64(hi) <= o.Inflation*float64(lo):
		return ""
	case o.Relative():
		why = fmt.Sprintf("its top more than %vx its bottom", o.Inflation)
	}
	return fmt.Sprintf("%s %v lies in the histogram's bucket (%v, %v], %s: use an absolute bound at a bucket's edge, finer buckets, or push or trace",
		o.Name(), v, lo, hi, why)
}

// Points are l's values of objective o's metric, else the quantile o names over its count (none where
// l has neither), with the requests they come from where one gives several (a request's tokens move
// together: one at least, a long generation; an LC never quiet has steps, no requests), the window's
// p50, and why l cannot judge o ("": it can).
func (l Latency) Points(o objective.Objective) (pts []stats.Weighted, requests int, p50 time.Duration, why string) {
	for _, v := range l.Samples[o.Metric] {
		pts = append(pts, stats.Weighted{V: v, W: 1})
	}
	p50 = stats.WeightedQuantile(pts, 0.5)
	if l.JudgedPerCPU(o) {
		for i, v := range l.PerCPU[o.Metric] { // a ratio to its reference at one CPU speed; p50 stays what the app sees
			pts[i].V = v
		}
	}
	if len(pts) == 0 {
		prefix := map[bool]string{true: o.Metric + "_"}[o.Metric != ""]
		name := prefix + QuantileName(o.Quantile)
		lat, ok := l.Quantiles[name]
		if !ok {
			return nil, 0, 0, l.Source + " without " + name
		}
		n := cmp.Or(map[bool]int{true: l.Tokens}[o.Metric == MetricTPOT], l.Requests) // tpot_ over tokens: an LLM server ends a request or two a second
		if p50 = l.Quantiles[prefix+"p50"]; lat > 0 && n > 0 {
			pts = []stats.Weighted{{V: lat, W: n}}
		}
	}
	if len(pts) > 0 && len(l.Buckets[o.Metric]) > 0 { // a histogram's window (no other sorts its points again)
		if why := l.Unresolved(o, stats.WeightedQuantile(pts, o.Quantile)); why != "" {
			return nil, 0, 0, "refused: " + why
		}
	}
	if o.Metric == MetricTPOT && l.Source != TracedStep && len(pts) > 0 {
		requests = max(l.Requests, 1)
	}
	return pts, requests, p50, ""
}

// JudgedPerCPU reports whether Points judges objective o on l's per-CPU samples: a relative one, where every
// sample of its metric has one.
func (l Latency) JudgedPerCPU(o objective.Objective) bool {
	per := l.PerCPU[o.Metric]
	return o.Relative() && len(per) > 0 && len(per) == len(l.Samples[o.Metric])
}

// FromPush is a stats push's window as a Latency (the daemon checked its names and values), up to
// MaxSamples values a metric.
func FromPush(w *api.Window) Latency {
	us := func(x float64) time.Duration { return time.Duration(x * float64(time.Microsecond)) }
	s := Latency{Source: Pushed, Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
		Tokens: int(min(w.Tokens, math.MaxInt32)), Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}}
	for q, x := range w.LatencyUs {
		s.Quantiles[q] = us(x)
	}
	for m, xs := range w.SamplesUs {
		metric := map[string]string{"request": MetricRequest, "ttft": MetricTTFT, "tpot": MetricTPOT}[m]
		for _, x := range xs[:min(len(xs), MaxSamples)] {
			s.Samples[metric] = append(s.Samples[metric], us(x))
		}
	}
	return s
}

// Quantiles name Latency.Quantiles, ascending, as an app pushes them, a scrape gives them and an
// objective is read from them (QuantileName).
var Quantiles = []struct {
	Name string
	Q    float64
}{{"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p999", 0.999}, {"max", 1}}

// QuantileName is the named quantile that stands for q: the one at or above it (p99 for 0.95).
func QuantileName(q float64) string {
	for _, n := range Quantiles {
		if q <= n.Q+1e-9 {
			return n.Name
		}
	}
	return "max"
}

// MaxSamples bounds the values one window keeps per metric (a launch-bound LC completes thousands
// of requests a second).
const MaxSamples = 4096

// LatencySource gives an LC process's latest latency window: the pushed windows, request tracing
// (the daemon's TracedLatency), scraping.
type LatencySource interface {
	Latest(pid int) (Latency, bool)
}

// WindowedSource is a LatencySource whose windows the loop closes, once a window, naming the LC
// processes it is wanted for.
type WindowedSource interface {
	LatencySource
	Roll(now time.Duration, lcs []policy.ProcRef)
}

// ShareSource measures BE progress by kernel launches (the daemon's BEProgress): Roll closes the
// window ending at now over bes; Close ends the measuring as SLO mode goes off.
type ShareSource interface {
	Roll(now time.Duration, bes []BEWindow) map[string]BERate
	Status() []api.SLOBE
	Close()
}

// BEWindow is one BE process over the window a ShareSource closes.
type BEWindow struct {
	policy.ProcRef
	// Alone: no GPU process outside BE (but MPS servers) shared a GPU with it at the window's start
	// and end. Stopped: held stopped through it.
	Alone, Stopped bool
}

// BERate is one BE process's kernel launches per second over a window, and alone.
type BERate struct{ Rate, Alone float64 }

// BEShare is what bes launched over what they launch alone, in [0, 1]; NaN where none of them has
// a rate.
func BEShare(rates map[string]BERate, bes []policy.ProcRef) float64 {
	var rate, ref float64
	for _, b := range bes {
		if r, ok := rates[b.Key()]; ok {
			rate, ref = rate+r.Rate, ref+r.Alone
		}
	}
	if ref <= 0 {
		return math.NaN()
	}
	return math.Min(1, rate/ref)
}
