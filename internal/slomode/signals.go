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
	SourceTracedRequest = "traced-request" // uprobes on libcuda: busy periods between quiet gaps (request.Delimiter)
	SourceTracedStep    = "traced-step"    // the same for an LC never quiet: synchronize to synchronize
	SourceScraped       = "scraped"        // the server's own Prometheus histograms
)

// Metrics of LatencySample.Samples (objective.Metrics): request latency, an LLM server's time to
// first token and time per output token.
const (
	MetricRequest = ""
	MetricTTFT    = "ttft"
	MetricTPOT    = "tpot"
)

// LatencySample is one LC process's latency over one window of its source.
type LatencySample struct {
	At       time.Duration // when the daemon received it (the reconciler's clock)
	Window   time.Duration
	Source   string // one of the Source constants
	Requests int
	Tokens   int // the samples of the tpot_ quantiles (0: Requests)
	// Quantiles by name ("p50", "tpot_p99", ...), for a source without Samples: the window's own
	// values by metric, at most MaxSamples each.
	Quantiles map[string]time.Duration
	Samples   map[string][]time.Duration
	Seq       uint64 // numbers a process's samples, so one is used once
}

// MaxSamples bounds the values one window keeps per metric (a launch-bound LC completes thousands
// of requests a second).
const MaxSamples = 4096

// LatencySource gives an LC process's latest latency window: the pushed windows, request tracing
// (the daemon's TracedLatency), scraping.
type LatencySource interface {
	Latest(pid int) (LatencySample, bool)
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

// pushed holds the windows apps pushed over the socket.
type pushed struct {
	mu  sync.Mutex
	now func() time.Duration
	by  map[int]LatencySample
}

func (p *pushed) push(pid int, w api.Window) {
	us := func(x float64) time.Duration { return time.Duration(x * float64(time.Microsecond)) }
	s := LatencySample{Source: SourcePushed, Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
		Tokens: int(min(w.Tokens, math.MaxInt32)), Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}}
	for q, x := range w.LatencyUs {
		s.Quantiles[q] = us(x)
	}
	for m, xs := range w.SamplesUs { // the daemon checked the names and values
		metric := map[string]string{"request": MetricRequest, "ttft": MetricTTFT, "tpot": MetricTPOT}[m]
		for _, x := range xs[:min(len(xs), MaxSamples)] {
			s.Samples[metric] = append(s.Samples[metric], us(x))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.At, s.Seq = p.now(), p.by[pid].Seq+1
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

// quantileName is the pushed quantile that stands for q: the named one at or above it (p99 for
// 0.95), never a lower one than it names.
func quantileName(q float64) string {
	for i, c := range []float64{0.5, 0.9, 0.99, 0.999} {
		if q <= c+1e-9 {
			return []string{"p50", "p90", "p99", "p999"}[i]
		}
	}
	return "max"
}
