package slo

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
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
	// Requests per window; with PerRequest, the tokens of the window's one request, whose speed
	// is the window's (Noise).
	Requests   int
	PerRequest bool
	// Spread is the deviation of a request's log latency around its
	// window's (0: 0.02).
	Spread float64
	// HostSlow is how much slower a request runs while the LC's CPU is in its slow mode (0: no
	// modes), HostToSlow and HostToFast the chances, request to request, that the mode changes:
	// an eager LC's latency follows its vCPU's speed, alone and beside BE alike (docs/GPU-FACTS.md).
	HostSlow, HostToSlow, HostToFast float64
	// Gated is the response with the request gate holding BE through each
	// LC request (nil: as Points); Unhinted with hint engines told not to
	// pre-preempt (nil: as Points, which then need no hints).
	Gated, Unhinted []Point
	// GatedAlone is the LC alone under the gate over alone without it: its launch probes' traps through
	// its requests (0: 1, they come off for each, as the gate reports).
	GatedAlone float64
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

// SimGPU plays windows of a workload under the arms it is given, request
// by request. Deterministic for a seed.
type SimGPU struct {
	rng *rand.Rand
	// Missing drops the LC signal (no requests reported) while true; Empty
	// reports the LC's sample with no values (a window it ended no request in).
	Missing, Empty bool
	// Key names the simulated LC process ("lc" when empty): a new key is
	// a new process; Owner its tenant.
	Key, Owner string
	// ShareUnknown reports no BE share (NaN).
	ShareUnknown bool
	// Standalone gives the controller the workload's standalone latency;
	// without it the controller learns it.
	Standalone bool
	// Paused stops BE through the next window (Decision.PauseBE): the LC
	// runs alone and BE makes no progress. IgnorePause leaves BE running
	// whatever Paused says (a daemon that cannot stop it).
	Paused, IgnorePause bool
	wasPaused           bool
	hostSlow            bool // the LC's CPU in its slow mode (Workload.HostSlow)
	// Idle: BE idles of its own accord through the window (the LC alone).
	Idle bool
	// Spans places each request by when it ended, at random in the window,
	// and slows it by the part of its span, Baseline long in a window of a
	// second, that BE worked in (the LC alone the rest; the window before's
	// part at this window's arm); BE works in [BEFrom, BETo) of the window
	// (BETo 0: to its end; none where Idle or paused), and its share is
	// that part of the arm's, as a duty's edges fall inside the daemon's
	// windows.
	Spans        bool
	BEFrom, BETo float64
	was          [2]float64 // the part of the window before that BE worked in
	// Summary reports the window's quantile and count, not its values (a
	// push of quantiles alone).
	Summary bool
	// Gate and Prepreempt are the arms offered (Observation.Gate,
	// Observation.Prepreempt).
	Gate       bool
	Prepreempt time.Duration
	// Aligned windows begin as a decision takes effect, as an app's
	// reporter pushing just before the daemon reads has them: the window
	// after a move shows the new arm alone, but the one after BE was
	// stopped still drains BE's queued work.
	Aligned bool
}

// spans is the part of the window BE works in.
func (g *SimGPU) spans(paused bool) [2]float64 {
	if paused || g.Idle {
		return [2]float64{}
	}
	return [2]float64{g.BEFrom, cmp.Or(g.BETo, 1)}
}

// host moves the LC's CPU mode on by one request and returns the request's slowing by it.
func (g *SimGPU) host(w Workload) float64 {
	if w.HostSlow == 0 {
		return 1
	}
	if p := map[bool]float64{false: w.HostToSlow, true: w.HostToFast}[g.hostSlow]; g.rng.Float64() < p {
		g.hostSlow = !g.hostSlow
	}
	return map[bool]float64{false: 1, true: w.HostSlow}[g.hostSlow]
}

// NewSimGPU returns a simulator seeded with seed.
func NewSimGPU(seed uint64) *SimGPU {
	return &SimGPU{rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// Window is one observation of w under BE timeslice ts, for an LC with
// objective obj.
func (g *SimGPU) Window(w Workload, obj objective.Objective, ts, prev time.Duration) Observation {
	return g.WindowArm(w, obj, Arm{BETimeslice: ts}, Arm{BETimeslice: prev})
}

// WindowArm is one observation of w under arm a, the arm before it prev:
// a window just after a change mixes the two, unless Aligned.
func (g *SimGPU) WindowArm(w Workload, obj objective.Objective, a, prev Arm) Observation {
	paused := g.Paused && !g.IgnorePause
	at := func(a Arm, paused bool) (float64, float64) {
		if paused || g.Idle {
			return map[bool]float64{true: cmp.Or(w.GatedAlone, 1), false: 1}[a.Gate], 0
		}
		return w.AtArm(a)
	}
	r, share := at(a, paused)
	if (prev != a || paused != g.wasPaused) && !(g.Aligned && !paused && !g.wasPaused) {
		pr, ps := at(prev, g.wasPaused)
		r, share = (r+pr)/2, (share+ps)/2
	}
	g.wasPaused = paused
	noise := func(n float64) float64 { return math.Max(0.5, 1+n*g.rng.NormFloat64()) }
	sn := cmp.Or(w.ShareNoise, w.Noise)
	o := Observation{BEShare: math.Min(1, share*noise(sn)), BEPaused: paused, BEIdle: g.Idle && !paused, Gate: g.Gate, Prepreempt: g.Prepreempt, Aligned: g.Aligned}
	if g.ShareUnknown || g.Idle {
		o.BEShare = math.NaN()
	}
	cur, before := g.spans(paused), g.was
	if g.Spans {
		o.BEShare, g.was = o.BEShare*(cur[1]-cur[0]), cur
	}
	if g.Missing || w.Requests == 0 {
		return o
	}
	// The window's own speed (Noise), then each request's spread around it.
	scale := float64(w.Baseline) * r * noise(w.Noise)
	vals := make([]time.Duration, w.Requests)
	for i := range vals {
		vals[i] = time.Duration(scale * g.host(w) * math.Exp(cmp.Or(w.Spread, 0.02)*g.rng.NormFloat64()))
	}
	if g.Spans {
		alone := map[bool]float64{true: cmp.Or(w.GatedAlone, 1), false: 1}[a.Gate]
		for i := range vals {
			end, d := g.rng.Float64(), float64(w.Baseline)/float64(time.Second)
			over := func(from, to float64) float64 { return max(0, min(end, to)-max(end-d, from)) }
			worked := (over(before[0]-1, before[1]-1) + over(cur[0], cur[1])) / d
			vals[i] = time.Duration(float64(vals[i]) * (alone + worked*(r-alone)) / r)
		}
	}
	s := LCSample{Key: cmp.Or(g.Key, "lc"), Owner: g.Owner, Objective: obj, GateTraps: w.GatedAlone != 0}
	if w.PerRequest {
		s.Requests = 1
	}
	for _, v := range vals {
		s.Points = append(s.Points, stats.Weighted{V: v, W: 1})
	}
	if g.Summary {
		s.Points = []stats.Weighted{{V: stats.WeightedQuantile(s.Points, obj.Quantile), W: len(vals)}}
	}
	if g.Standalone {
		s.Standalone = w.Baseline
	}
	if g.Empty {
		s.Points, s.Requests = nil, 0
	}
	o.LC = []LCSample{s}
	return o
}
