package slomode

import (
	"math"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// pushed holds the windows apps pushed over the socket.
type pushed struct {
	mu  sync.Mutex
	now func() time.Duration
	by  map[int]signal.Latency
}

func (p *pushed) push(pid int, w api.Window) {
	us := func(x float64) time.Duration { return time.Duration(x * float64(time.Microsecond)) }
	s := signal.Latency{Source: signal.Pushed, Window: time.Duration(w.DurationMs * float64(time.Millisecond)), Requests: int(min(w.Requests, math.MaxInt32)),
		Tokens: int(min(w.Tokens, math.MaxInt32)), Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}}
	for q, x := range w.LatencyUs {
		s.Quantiles[q] = us(x)
	}
	for m, xs := range w.SamplesUs { // the daemon checked the names and values
		metric := map[string]string{"request": signal.MetricRequest, "ttft": signal.MetricTTFT, "tpot": signal.MetricTPOT}[m]
		for _, x := range xs[:min(len(xs), signal.MaxSamples)] {
			s.Samples[metric] = append(s.Samples[metric], us(x))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.At, s.Seq = p.now(), p.by[pid].Seq+1
	p.by[pid] = s
}

func (p *pushed) Latest(pid int) (signal.Latency, bool) {
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
