package slo

import (
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/slo/objective"
)

// Point is a workload's response at one BE timeslice: LC latency over its
// standalone latency at the objective's quantile, and BE progress over BE
// alone.
type Point struct {
	BETimeslice time.Duration
	LCRatio     float64
	BEShare     float64
	// Measured: the point was measured on a GPU (else it is modelled).
	Measured bool
}

// Workload is a simulated LC/BE pair: its response curve, interpolated in
// log(timeslice) between points, and its noise.
type Workload struct {
	Name     string
	Points   []Point // ascending BETimeslice
	Baseline time.Duration
	// Noise is the relative standard deviation of one window's latency
	// quantile; ShareNoise that of its BE share (0: Noise).
	Noise, ShareNoise float64
	// Requests per window.
	Requests int
	// Spread, when positive, plays each window request by request: a
	// request's latency is lognormal (Spread: the deviation of its log)
	// with Baseline as its quantile at the objective's, and Hiccups of
	// them (a share) wait on the host besides, an exponential time of
	// mean HiccupMean x Baseline; all of it scaled by the window's
	// response. The window reports its requests' own quantile, which for
	// a tail of a few hundred is a few of them, and their median.
	Spread, Hiccups, HiccupMean float64
	// Gated is the response with the request gate holding BE through each
	// LC request (nil: as Points); Unhinted with hint engines told not to
	// pre-preempt (nil: as Points, which then need no hints).
	Gated, Unhinted []Point
}

// EagerPyTorchH100 is resnet50 eager inference (each request ~6 ms of
// Python launches, one every 20 ms) beside resnet50 training, LC p50,
// measured on an H100 (580.159.04) on 2026-11-22, 12-15 s per setting.
// Ratios below 1 are the idle GPU clocking down between standalone
// requests; the search only needs their order.
//
// Its noise is what gpreemptd saw of it on the H100 (1 s windows of 50
// requests, under one BE timeslice: p50 5.1-8.2 ms, sd ~8%): the LC's own
// CPU-side work, as large as the effect of the BE timeslice.
var EagerPyTorchH100 = Workload{
	Name: "eager-pytorch", Baseline: 6 * time.Millisecond, Noise: 0.08, Requests: 50,
	// BE share over a window of ~27 training steps: +-1 step.
	ShareNoise: 0.03,
	Points: []Point{
		{time.Microsecond, 1.01, 0.635, true},
		{200 * time.Microsecond, 0.97, 0.761, true},
		{time.Millisecond, 0.94, 0.871, true},
		{2048 * time.Microsecond, 1.12, 0.896, true}, // the driver's defaults
		{3 * time.Millisecond, 1.17, 0.905, true},
	},
}

// GraphHintsH100 is the synthetic LC (500 us of preparation, one 20 us
// kernel on all SMs, pre-preemption hints) beside a fixed-work BE, LC p50.
// 1 us was measured on an H100 (LC 1.01x, BE 89.0%); the other points are
// modelled: a spinner launched one switch (~200 us) ahead keeps LC at
// standalone while the BE timeslice is shorter than that lead, and beyond
// it LC waits about the rest of BE's timeslice.
var GraphHintsH100 = Workload{
	Name: "graph-hints", Baseline: 31 * time.Microsecond, Noise: 0.01, Requests: 300,
	Points: []Point{
		{time.Microsecond, 1.01, 0.890, true},
		{50 * time.Microsecond, 1.01, 0.893, false},
		{200 * time.Microsecond, 1.04, 0.900, false},
		{500 * time.Microsecond, 5.8, 0.910, false},
		{time.Millisecond, 14, 0.915, false},
		{3 * time.Millisecond, 45, 0.925, false},
	},
}

// At returns the workload's noiseless response at ts.
func (w Workload) At(ts time.Duration) (lcRatio, beShare float64) {
	return at(w.Points, ts)
}

// AtArm returns the workload's noiseless response under arm a.
func (w Workload) AtArm(a Arm) (lcRatio, beShare float64) {
	switch {
	case a.Gate && w.Gated != nil:
		return at(w.Gated, a.BETimeslice)
	case !a.Prepreempt && w.Unhinted != nil:
		return at(w.Unhinted, a.BETimeslice)
	}
	return at(w.Points, a.BETimeslice)
}

func at(ps []Point, ts time.Duration) (lcRatio, beShare float64) {
	i, _ := slices.BinarySearchFunc(ps, ts, func(p Point, t time.Duration) int { return int(p.BETimeslice - t) })
	switch {
	case i == 0:
		return ps[0].LCRatio, ps[0].BEShare
	case i == len(ps):
		return ps[i-1].LCRatio, ps[i-1].BEShare
	case ps[i].BETimeslice == ts:
		return ps[i].LCRatio, ps[i].BEShare
	}
	a, b := ps[i-1], ps[i]
	f := math.Log(float64(ts)/float64(a.BETimeslice)) / math.Log(float64(b.BETimeslice)/float64(a.BETimeslice))
	return a.LCRatio + f*(b.LCRatio-a.LCRatio), a.BEShare + f*(b.BEShare-a.BEShare)
}

// SimGPU plays windows of a workload under the timeslices it is given.
// Deterministic for a seed.
type SimGPU struct {
	rng *rand.Rand
	// Missing drops the LC signal (no requests reported) while true.
	Missing bool
	// Key names the simulated LC process ("lc" when empty): a new key is
	// a new process.
	Key string
	// ShareUnknown reports no BE share (NaN), as gpreemptd does on the
	// GPUs it runs on (no per-process progress to read).
	ShareUnknown bool
	// Standalone gives the controller the workload's standalone latency;
	// without it the controller estimates it.
	Standalone bool
	// Paused stops BE through the next window (Decision.PauseBE): the LC
	// runs alone, at its standalone latency, and BE makes no progress.
	// IgnorePause leaves BE running whatever Paused says (a daemon that
	// cannot stop it).
	Paused, IgnorePause bool
	wasPaused           bool
	// NoMedian leaves LCSample.Median out of windows played request by
	// request (Workload.Spread), as an app that pushes only its tail.
	NoMedian bool
	// Gate and Prepreempt are the arms offered (Observation.Gate,
	// Observation.Prepreempt).
	Gate       bool
	Prepreempt time.Duration
	// Aligned windows begin as a decision takes effect, as an app's
	// reporter pushing just before the daemon reads has them: the window
	// after a move shows the new arm alone, but the one after BE was
	// stopped still drains BE's queued work (Observation.Aligned). An
	// LC's engine takes pre-preemption (and, SelfGated, the gate) from
	// the reply to that push, so the window after a move that changed
	// them runs them as before, under the new BE timeslice, and the
	// daemon does not count it aligned.
	Aligned, SelfGated bool
}

// NewSimGPU returns a simulator seeded with seed.
func NewSimGPU(seed uint64) *SimGPU {
	return &SimGPU{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Window is one observation of w under BE timeslice ts, for an LC with
// objective obj. A window just after a change (settling) mixes the
// previous setting's response, as a real one does unless Aligned.
func (g *SimGPU) Window(w Workload, obj objective.Objective, ts, prev time.Duration) Observation {
	return g.WindowArm(w, obj, Arm{BETimeslice: ts}, Arm{BETimeslice: prev})
}

// WindowArm is one observation of w under arm a, the arm before it prev.
func (g *SimGPU) WindowArm(w Workload, obj objective.Objective, a, prev Arm) Observation {
	paused := g.Paused && !g.IgnorePause
	at := func(a Arm, paused bool) (float64, float64) {
		if paused {
			return 1, 0
		}
		return w.AtArm(a)
	}
	r, share := at(a, paused)
	lag := g.Aligned && !paused && (prev.Prepreempt != a.Prepreempt || g.SelfGated && prev.Gate != a.Gate)
	if lag {
		r, share = at(Arm{BETimeslice: a.BETimeslice, Gate: prev.Gate && g.SelfGated || a.Gate && !g.SelfGated, Prepreempt: prev.Prepreempt}, paused)
	} else if (prev != a || paused != g.wasPaused) && !(g.Aligned && !paused) {
		pr, ps := at(prev, g.wasPaused)
		r, share = (r+pr)/2, (share+ps)/2
	}
	g.wasPaused = paused
	noise := func(n float64) float64 { return math.Max(0.5, 1+n*g.rng.NormFloat64()) }
	sn := w.ShareNoise
	if sn == 0 {
		sn = w.Noise
	}
	o := Observation{BEShare: math.Min(1, share*noise(sn)), BEPaused: paused, Gate: g.Gate, Prepreempt: g.Prepreempt, Aligned: g.Aligned && !lag}
	if g.ShareUnknown {
		o.BEShare = math.NaN()
	}
	if !g.Missing {
		key := g.Key
		if key == "" {
			key = "lc"
		}
		s := LCSample{
			// One LC process whatever it runs: a workload change is the
			// same process behaving differently.
			Key: key, Objective: obj, Requests: w.Requests,
			Latency: time.Duration(float64(w.Baseline) * r * noise(w.Noise)),
		}
		if w.Spread > 0 {
			s.Latency, s.Median = g.requests(w, obj.Quantile, s.Latency)
			if g.NoMedian {
				s.Median = 0
			}
		}
		o.LC = []LCSample{s}
		if g.Standalone {
			o.LC[0].Standalone = w.Baseline
		}
	}
	return o
}

// requests plays one window's requests (Workload.Spread) at at, the
// window's latency at the objective's quantile q before hiccups: every
// request's latency, hiccups included, is scaled by at/Baseline, so that
// a Point's LCRatio is the ratio of the requests' quantiles pooled at
// every q. It returns their own quantile q and median (nearest rank, as
// an app reports them).
func (g *SimGPU) requests(w Workload, q float64, at time.Duration) (lat, median time.Duration) {
	z := math.Sqrt2 * math.Erfinv(2*q-1)
	body := float64(w.Baseline) / math.Exp(w.Spread*z)
	scale := float64(at) / float64(w.Baseline)
	xs := make([]float64, w.Requests)
	for i := range xs {
		x := body * math.Exp(w.Spread*g.rng.NormFloat64())
		if g.rng.Float64() < w.Hiccups {
			x += float64(w.Baseline) * w.HiccupMean * g.rng.ExpFloat64()
		}
		xs[i] = x * scale
	}
	slices.Sort(xs)
	rank := func(p float64) time.Duration {
		return time.Duration(xs[min(max(int(math.Ceil(p*float64(len(xs))))-1, 0), len(xs)-1)])
	}
	return rank(q), rank(0.5)
}
