package prepreempt

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
)

// ReporterOptions tune a Reporter. The zero value gives the defaults.
type ReporterOptions struct {
	// Socket is gpreemptd's socket ("": $GPREEMPTD_SOCKET, else the
	// default).
	Socket string
	// Period is how often a window is pushed: the daemon's SLO window
	// (slo.window in its policy, 1 s by default) is the right value.
	Period time.Duration
	Logger *slog.Logger
}

// maxWindowSamples bounds the latencies a window keeps; beyond it a
// uniform sample of them is kept.
const maxWindowSamples = 1 << 16

// reservoir keeps a window's values, or past max of them a uniform sample
// (reservoir sampling: every value equally likely kept). Not safe for
// concurrent use: its owner locks.
type reservoir struct {
	max  int
	vals []time.Duration
	seen int // added in this window (may exceed len(vals))
	rng  *rand.Rand
}

func newReservoir(max int) reservoir {
	return reservoir{max: max, rng: rand.New(rand.NewPCG(1, 2))}
}

func (r *reservoir) add(d time.Duration) {
	r.seen++
	if len(r.vals) < r.max {
		r.vals = append(r.vals, d)
	} else if i := r.rng.IntN(r.seen); i < r.max {
		r.vals[i] = d
	}
}

// take returns the window's sample and how many values it saw, and starts
// the next window.
func (r *reservoir) take() ([]time.Duration, int) {
	v, n := r.vals, r.seen
	r.vals, r.seen = nil, 0
	return v, n
}

// Reporter tells gpreemptd what the app's requests take. The daemon's SLO
// mode (docs/SLO.md) needs each LC process's request latency as the app
// defines a request — arrival to result — which neither the hint engine
// (it sees Hint, Ready and its spinner) nor the driver can see. The app
// calls Record once per request; Run pushes the window's quantiles once
// a period, and passes the daemon's word on pre-preemption to the engine.
// Safe for concurrent use.
type Reporter struct {
	engine *Engine
	client *api.Client
	period time.Duration
	log    *slog.Logger
	// now is the wall clock (tests set it).
	now func() time.Time

	mu         sync.Mutex
	lat        reservoir
	ttft, tpot reservoir // RecordLLM's
	total      uint64
	since      time.Time
	failed     bool
}

// NewReporter returns a reporter for the app's requests; engine (nil if
// the app uses no hints) is told what the daemon says of pre-preemption.
func NewReporter(engine *Engine, o ReporterOptions) *Reporter {
	if o.Period <= 0 {
		o.Period = time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Reporter{engine: engine, client: api.New(o.Socket), period: o.Period, log: o.Logger, now: time.Now,
		lat: newReservoir(maxWindowSamples), ttft: newReservoir(maxWindowSamples), tpot: newReservoir(maxWindowSamples)}
	r.since = r.now()
	return r
}

// Record adds one request's latency to the window.
func (r *Reporter) Record(latency time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.lat.add(latency)
}

// RecordLLM adds one request of an LLM server: its latency, its time to
// first token, and each later output token's time since the one before.
// The window then carries ttft_ and tpot_ quantiles, which objectives such
// as tpot_p50<=12ms bound, and the tokens the tpot_ ones are over: a
// tpot_ objective counts those, for a server finishes few requests a window.
func (r *Reporter) RecordLLM(latency, ttft time.Duration, perToken []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total++
	r.lat.add(latency)
	r.ttft.add(ttft)
	for _, d := range perToken {
		r.tpot.add(d)
	}
}

// window takes the window so far and starts the next: the window, the
// request's own quantiles and the requests since the reporter began. The
// samples are taken under the lock, sorted outside it (Record waits on it).
func (r *Reporter) window() (api.Window, map[string]float64, uint64) {
	r.mu.Lock()
	now := r.now()
	lat, seen := r.lat.take()
	ttft, _ := r.ttft.take()
	tpot, tokens := r.tpot.take()
	w := api.Window{DurationMs: max(float64(now.Sub(r.since))/float64(time.Millisecond), 1e-3), Requests: uint64(seen)}
	r.since = now
	total := r.total
	r.mu.Unlock()
	if len(lat) == 0 {
		return w, nil, total
	}
	own := quantilesUs(lat) // sorts lat
	w.LatencyUs = maps.Clone(own)
	w.SamplesUs = map[string][]float64{"request": api.ThinSamples(lat)}
	for name, vals := range map[string][]time.Duration{"ttft": ttft, "tpot": tpot} {
		if len(vals) == 0 {
			continue
		}
		for q, v := range quantilesUs(vals) {
			if q != "max" && q != "mean" { // the daemon takes p50 .. p999 of these
				w.LatencyUs[name+"_"+q] = v
			}
		}
		w.SamplesUs[name] = api.ThinSamples(vals)
	}
	if len(tpot) > 0 {
		w.Tokens = uint64(tokens)
	}
	return w, own, total
}

// quantilesUs are the pushed quantiles of lat (nearest rank), in us.
func quantilesUs(lat []time.Duration) map[string]float64 {
	slices.Sort(lat)
	at := func(q float64) float64 {
		i := int(q*float64(len(lat)-1) + 0.5)
		return float64(lat[min(max(i, 0), len(lat)-1)]) / 1e3
	}
	var sum float64
	for _, d := range lat {
		sum += float64(d)
	}
	return map[string]float64{"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "p999": at(0.999),
		"max": float64(lat[len(lat)-1]) / 1e3, "mean": sum / float64(len(lat)) / 1e3}
}

// ErrDaemonUnavailable: no gpreemptd answers on the socket (Push wraps
// it).
var ErrDaemonUnavailable = api.ErrUnavailable

// DaemonReply is gpreemptd's answer to a push.
type DaemonReply struct {
	// Prepreempt: whether the engine should launch spinners (the SLO mode
	// says no while BE runs long timeslices).
	Prepreempt bool
	// SLO: the daemon steers by the pushed windows.
	SLO bool
}

// Push sends the window since the last push and applies the daemon's
// answer. ErrDaemonUnavailable (wrapped) when no daemon answers; the window is
// dropped either way: the daemon judges windows as they come.
func (r *Reporter) Push(ctx context.Context) (DaemonReply, error) {
	reply, err := r.push(ctx)
	return DaemonReply{Prepreempt: reply.Prepreempt, SLO: reply.SLO}, err
}

func (r *Reporter) push(ctx context.Context) (api.StatsReply, error) {
	w, own, total := r.window()
	s := api.Stats{Requests: total, Window: &w, RequestLatencyUs: own}
	if r.engine != nil {
		ew := r.engine.TakeWindow()
		s.ExpiredHolds = ew.Expired
		s.SpinnerHoldUs = ew.HoldUs
		s.Engine = &api.Engine{Prepreempt: ew.Spinning, SkippedNoBenefit: ew.SkippedNoBenefit, Gate: r.engine.Gate().String()}
	}
	reply, err := r.client.PushStats(ctx, s)
	if err != nil {
		return api.StatsReply{}, err
	}
	if r.engine != nil {
		r.engine.SetPrepreempt(reply.Prepreempt)
		if m, err := ParseGateMode(reply.Gate); reply.Gate != "" && err == nil {
			r.engine.SetGate(m)
		}
	}
	return reply, nil
}

// nextPush is how long after a push the next one goes: just ahead of the
// daemon's next read of the windows (reply.NextWindowMs), where the
// daemon reads once a period, so that each window begins as the daemon's
// decision takes effect (docs/SLO.md "Aligned windows"); else a period
// from the push's start (took is the push's round trip), so that the
// cadence does not drift by each round trip. Aligned, never under half a
// period: a window is not cut short for it.
func nextPush(period, took time.Duration, reply api.StatsReply) time.Duration {
	ms := func(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }
	if !reply.SLO || reply.NextWindowMs <= 0 || (ms(reply.WindowMs)-period).Abs() > period/20 {
		return max(period-took, 0)
	}
	// The lead covers the push's own way to the daemon and a thread's wakeup.
	d := ms(reply.NextWindowMs) - min(period/40, 20*time.Millisecond)
	for d < period/2 {
		d += period
	}
	return d
}

// Run pushes once a period until ctx is done, just ahead of the daemon's
// reads where it says when they are. A daemon that does not answer is
// logged once (and again once it is back); the engine keeps its last word
// from the daemon meanwhile.
func (r *Reporter) Run(ctx context.Context) error {
	t := time.NewTimer(r.period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		began := time.Now()
		reply, err := r.push(ctx)
		t.Reset(nextPush(r.period, time.Since(began), reply))
		switch {
		case err != nil && !r.failed:
			r.failed = true
			level := slog.LevelWarn
			if errors.Is(err, api.ErrUnavailable) {
				level = slog.LevelInfo
			}
			r.log.Log(ctx, level, "request latency not pushed to gpreemptd", "err", err)
		case err == nil && r.failed:
			r.failed = false
			r.log.Info("request latency pushed to gpreemptd again")
		}
	}
}
