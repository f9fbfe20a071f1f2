package slomode

import (
	"math"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
)

// Where an LC's latency comes from (status and metrics show it per LC).
const (
	SourcePushed        = "pushed"         // the app's own windows over the socket
	SourceTracedRequest = "traced-request" // uprobes on libcuda: busy periods between quiet gaps (trace.Delimiter)
	SourceTracedStep    = "traced-step"    // the same for an LC never quiet: synchronize to synchronize
	SourceScraped       = "scraped"        // the server's own Prometheus histograms
)

// Metric names of LatencySample.Samples: request latency, an LLM
// server's time to first token and time per output token
// (objective.Metrics).
const (
	MetricRequest = ""
	MetricTTFT    = "ttft"
	MetricTPOT    = "tpot"
)

// LatencySample is one LC process's latency over one window of its source.
type LatencySample struct {
	// At is when the daemon received it (the reconciler's clock).
	At     time.Duration
	Window time.Duration
	// Source is one of the Source constants.
	Source   string
	Requests int
	// Tokens are the samples of the tpot_ quantiles (0: Requests).
	Tokens int
	// Quantiles by name ("p50", "p99", "tpot_p50", ...): what a source
	// gives that has no Samples (a push of quantiles alone).
	Quantiles map[string]time.Duration
	// Samples are the window's own values by metric (MetricRequest,
	// MetricTTFT, MetricTPOT), at most MaxSamples each: windows with
	// them accumulate until they hold enough to count.
	Samples map[string][]time.Duration
	// Seq numbers a process's samples, so one is used once.
	Seq uint64
}

// MaxSamples bounds the values one window keeps per metric (a
// launch-bound LC completes thousands of requests a second).
const MaxSamples = 4096

// LatencySource gives an LC process's latest latency window. The pushed
// windows of POST /v1/stats are one; request tracing (the daemon's
// TracedLatency: uprobes on libcuda) is another, for apps that do not
// push.
type LatencySource interface {
	Latest(pid int) (LatencySample, bool)
}

// WindowedSource is a LatencySource whose windows the loop closes, once
// per its own window (the daemon's TracedLatency), naming the LC processes it is
// wanted for: those that pushed no recent window.
type WindowedSource interface {
	LatencySource
	Roll(now time.Duration, lcs []policy.ProcRef)
}

// ShareSource measures BE progress relative to BE alone, in [0, 1]
// (the daemon's BEProgress: kernel launches counted by uprobes on the BE
// processes' libcuda). Roll closes the window ending at now over the BE processes
// bes, each with what the window was to it (BEWindow), and gives the
// share of those beside an LC. Without a source, BE share is unknown
// (NaN) and the controller keeps the longest BE timeslice that meets
// every LC objective (docs/SLO.md). Close ends the measuring when SLO
// mode is turned off.
type ShareSource interface {
	Roll(now time.Duration, bes []BEWindow) map[string]BERate
	Status() []api.SLOBE
	Close()
}

// BEWindow is one BE process over the window a ShareSource closes.
type BEWindow struct {
	policy.ProcRef
	// Alone: no GPU process outside class BE (but MPS servers) shared a
	// GPU with it at the window's start and its end: its rate alone.
	Alone bool
	// Stopped: it was held stopped through the window (an LC learnt
	// alone): its rate is not progress under any setting.
	Stopped bool
}

// BERate is one BE process's progress over a window: its kernel launches
// per second, and its rate alone.
type BERate struct{ Rate, Alone float64 }

// BEShare is the BE share of the processes keys name: what they launched
// over what they launch alone, in [0, 1]; false where none of them has a
// rate.
func BEShare(rates map[string]BERate, keys []string) (float64, bool) {
	var rate, ref float64
	for _, k := range keys {
		if r, ok := rates[k]; ok {
			rate, ref = rate+r.Rate, ref+r.Alone
		}
	}
	if ref <= 0 {
		return math.NaN(), false
	}
	return math.Min(1, rate/ref), true
}

// pushed holds the windows apps pushed over the socket.
type pushed struct {
	mu  sync.Mutex
	now func() time.Duration
	by  map[int]LatencySample
}

func (p *pushed) push(pid int, w api.Window) {
	s := LatencySample{Source: SourcePushed, Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
		Tokens: int(min(w.Tokens, math.MaxInt32)), Quantiles: map[string]time.Duration{}}
	for q, us := range w.LatencyUs {
		s.Quantiles[q] = time.Duration(us * float64(time.Microsecond))
	}
	for m, vs := range w.SamplesUs { // the daemon checked the names and values
		metric := map[string]string{"request": MetricRequest, "ttft": MetricTTFT, "tpot": MetricTPOT}[m]
		if s.Samples == nil {
			s.Samples = map[string][]time.Duration{}
		}
		for _, us := range vs[:min(len(vs), MaxSamples)] {
			s.Samples[metric] = append(s.Samples[metric], time.Duration(us*float64(time.Microsecond)))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.At = p.now()
	s.Seq = p.by[pid].Seq + 1
	p.by[pid] = s
}

func (p *pushed) Latest(pid int) (LatencySample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.by[pid]
	return s, ok
}

func (p *pushed) forget(pid int) {
	p.mu.Lock()
	delete(p.by, pid)
	p.mu.Unlock()
}

// quantileName is the pushed quantile that stands for q: the named one at
// or above it (p99 for 0.95), so an objective is never checked against a
// lower quantile than it names.
func quantileName(q float64) string {
	for _, c := range []struct {
		q    float64
		name string
	}{{0.5, "p50"}, {0.9, "p90"}, {0.99, "p99"}, {0.999, "p999"}} {
		if q <= c.q+1e-9 {
			return c.name
		}
	}
	return "max"
}
