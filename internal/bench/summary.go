package bench

import (
	"cmp"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// ciWidthFloor is the narrowest 95% interval of a ratio that the report
// questions: below it, an interval is tight enough for any claim made here.
const ciWidthFloor = 0.2

// bootstrapIters is the number of resamples behind every interval.
const bootstrapIters = 1000

// RatioStats is one ratio (to a baseline) over a scenario's repetitions.
type RatioStats struct {
	// PerRep is the ratio in each repetition, in order; repetitions
	// without one (a failed run, a missing baseline) are left out.
	PerRep []float64 `json:"per_rep"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// Pooled is the ratio of the quantiles of all repetitions' requests
	// together, and CI95 its percentile-bootstrap 95% interval (nil
	// without request samples).
	Pooled float64         `json:"pooled,omitempty"`
	CI95   *stats.Interval `json:"ci95,omitempty"`
}

func newRatioStats(perRep []float64) *RatioStats {
	if len(perRep) == 0 {
		return nil
	}
	return &RatioStats{PerRep: perRep, Median: stats.Median(perRep), Min: slices.Min(perRep), Max: slices.Max(perRep)}
}

// TenantSummary is one LC worker of a multi-tenant scenario over the
// repetitions.
type TenantSummary struct {
	Label string      `json:"label"`
	P50   *RatioStats `json:"p50_vs_standalone,omitempty"`
	P99   *RatioStats `json:"p99_vs_standalone,omitempty"`
}

// ScenarioSummary is one scenario over its repetitions.
type ScenarioSummary struct {
	Name    string  `json:"name"`
	Kind    Kind    `json:"kind"`
	Runtime Runtime `json:"runtime"`
	Reps    int     `json:"reps"`
	// LCLatencyUs summarises the pooled requests of every repetition.
	LCLatencyUs *stats.Summary `json:"lc_latency_us,omitempty"`
	// LCRequestsPerRep is the fewest measured requests of one repetition.
	LCRequestsPerRep int         `json:"lc_requests_per_rep,omitempty"`
	P50              *RatioStats `json:"lc_p50_vs_standalone,omitempty"`
	P99              *RatioStats `json:"lc_p99_vs_standalone,omitempty"`
	// P50Clock and P99Clock are the clock-normalised ratios.
	P50Clock *RatioStats `json:"lc_p50_vs_standalone_clock,omitempty"`
	P99Clock *RatioStats `json:"lc_p99_vs_standalone_clock,omitempty"`
	BE       *RatioStats `json:"be_vs_be_only,omitempty"`
	// BEPerSec is the median BE rate (total of its workers).
	BEPerSec float64 `json:"be_per_sec,omitempty"`
	// BESplit is the first BE's rate over the second's, for scenarios
	// with two.
	BESplit *RatioStats       `json:"be_split,omitempty"`
	Tenants []TenantSummary   `json:"lc_tenants,omitempty"`
	GPU     *TelemetrySummary `json:"gpu,omitempty"`
	// TTFTP50 and TPOTP50: an LLM LC's median time to first token and
	// per output token against standalone.
	TTFTP50 *RatioStats `json:"ttft_p50_vs_standalone,omitempty"`
	TPOTP50 *RatioStats `json:"tpot_p50_vs_standalone,omitempty"`
	// LCBusy is the median share of the window the LC had a request in
	// flight (of the standalone runs, for their summary); BEBound is what
	// a request gate leaves BE at that busy fraction: 1 - busy - two
	// switches a request (class.SwitchTime each), against be-only.
	LCBusy  float64 `json:"lc_busy,omitempty"`
	BEBound float64 `json:"be_bound,omitempty"`
	// Duty and DutyTPOT, with --be-duty: each LC process's p50 (and TPOT
	// p50) while BE worked over while it idled.
	// Repetitions whose halves held fewer than minDutyRequests requests
	// are left out of both and counted in DutyTooShort.
	Duty         *RatioStats `json:"lc_p50_with_be_vs_alone,omitempty"`
	DutyTPOT     *RatioStats `json:"tpot_p50_with_be_vs_alone,omitempty"`
	DutyTooShort int         `json:"duty_too_short,omitempty"`
	// DaemonP50, in slo: scenarios, is the daemon's p50 over the app's of
	// the same windows (the first LC's), DaemonAgrees how many
	// repetitions had every LC within ±10%.
	DaemonP50    *RatioStats `json:"daemon_p50_vs_app,omitempty"`
	DaemonAgrees int         `json:"daemon_agrees,omitempty"`
	// Failed counts repetitions that ended in an error.
	Failed   int      `json:"failed,omitempty"`
	Warnings []string `json:"warnings,omitempty"`
}

// runKey finds a scenario run.
type runKey struct {
	name string
	rep  int
}

func repOf(sr *ScenarioResult) int { return max(sr.Rep, 1) }

// indexRuns maps (name, repetition) to the run.
func indexRuns(res *Results) map[runKey]*ScenarioResult {
	m := map[runKey]*ScenarioResult{}
	for _, sr := range res.Scenarios {
		m[runKey{sr.Name, repOf(sr)}] = sr
	}
	return m
}

// baselinesOf returns the names of sr's baselines, from its name.
func baselinesOf(sr *ScenarioResult) (standalone, beOnly string) {
	sc, err := parseScenario(sr.Name)
	if err != nil {
		// A name this binary does not know (a newer file): the runtime's
		// plain baselines.
		sc = Scenario{Name: sr.Name, Runtime: sr.Runtime}
	}
	return baselineNames(sc)
}

// computeRatios relates every scenario run to its baselines of the same
// repetition.
func computeRatios(res *Results) {
	runs := indexRuns(res)
	for _, sr := range res.Scenarios {
		standalone, beOnly := baselinesOf(sr)
		if b := runs[runKey{standalone, repOf(sr)}]; b != nil && b.LCLatencyUs != nil {
			relateLC(sr, b)
		}
		if b := runs[runKey{beOnly, repOf(sr)}]; b != nil && b.BEPerSec > 0 && len(sr.BE) > 0 {
			sr.BEVsBEOnly = sr.BEPerSec / b.BEPerSec
		}
		sr.Warnings = scenarioWarnings(sr, runs[runKey{standalone, repOf(sr)}])
		sr.Daemon = daemonViews(sr, cmp.Or(sr.SLOWindow, res.Config.SLOWindow))
		sr.LCDutyByArm = armDuty(sr)
		sr.BEStoppedMost = beStoppedMost(sr.SLO)
	}
}

func relateLC(sr, base *ScenarioResult) {
	b := base.LCLatencyUs
	if sr.LCLatencyUs != nil && b.P50 > 0 && b.P99 > 0 {
		sr.LCP50VsStandalone = sr.LCLatencyUs.P50 / b.P50
		sr.LCP99VsStandalone = sr.LCLatencyUs.P99 / b.P99
		if sr.GPU != nil && base.GPU != nil && base.GPU.SMClockP50 > 0 {
			// Latency times clock: what a clock-bound LC would have taken at
			// the standalone clock.
			f := sr.GPU.SMClockP50 / base.GPU.SMClockP50
			sr.LCP50VsStandaloneClock = sr.LCP50VsStandalone * f
			sr.LCP99VsStandaloneClock = sr.LCP99VsStandalone * f
		}
	}
	if sr.LCTTFTUs != nil && base.LCTTFTUs != nil && base.LCTTFTUs.P50 > 0 && base.LCTPOTUs.P50 > 0 {
		sr.TTFTP50VsStandalone = sr.LCTTFTUs.P50 / base.LCTTFTUs.P50
		sr.TPOTP50VsStandalone = sr.LCTPOTUs.P50 / base.LCTPOTUs.P50
	}
	for i := range sr.Tenants {
		t := &sr.Tenants[i]
		if t.LatencyUs != nil && b.P50 > 0 && b.P99 > 0 {
			t.P50VsStandalone, t.P99VsStandalone = t.LatencyUs.P50/b.P50, t.LatencyUs.P99/b.P99
		}
	}
}

// summarizeLC fills in the LC statistics from the samples.
func summarizeLC(sr *ScenarioResult) {
	for i := range sr.Tenants {
		s := stats.Summarize(latenciesUs(sr.Tenants[i].LC))
		sr.Tenants[i].LatencyUs = &s
	}
	if sr.LC == nil {
		return
	}
	lat := latenciesUs(sr.LC)
	gpu := make([]float64, len(sr.LC.Samples))
	var held int64
	for i, s := range sr.LC.Samples {
		gpu[i] = float64(s.GPUNs) / 1e3
		held += s.GPUNs
	}
	ls, gs := stats.Summarize(lat), stats.Summarize(gpu)
	sr.LCLatencyUs, sr.LCGPUUs = &ls, &gs
	sr.LCHistogramUs = stats.Log2Histogram(lat)
	if w := sr.LC.MeasureEndMonoNs - sr.LC.MeasureStartMonoNs; w > 0 {
		sr.LCGPUHeldShare = float64(held) / float64(w)
		var busy int64
		for _, s := range sr.LC.Samples {
			busy += s.LatencyNs
		}
		sr.LCBusy = min(1, float64(busy)/float64(w))
	}
	if sr.BEDuty > 0 {
		sr.LCDuty = splitByDuty(sr.LC, sr.BEDuty)
	}
	var ttft, tpot []float64
	var cpu, wall int64
	for _, s := range sr.LC.Samples {
		if s.TTFTNs > 0 && s.TPOTNs > 0 {
			ttft, tpot = append(ttft, float64(s.TTFTNs)/1e3), append(tpot, float64(s.TPOTNs)/1e3)
		}
		if s.CPUNs > 0 {
			cpu, wall = cpu+s.CPUNs, wall+s.LatencyNs
		}
	}
	if wall > 0 {
		sr.LCOnCPU = min(1, float64(cpu)/float64(wall))
	}
	if len(ttft) > 0 {
		a, b := stats.Summarize(ttft), stats.Summarize(tpot)
		sr.LCTTFTUs, sr.LCTPOTUs = &a, &b
	}
}

func latenciesUs(lc *LCResult) []float64 {
	if lc == nil {
		return nil
	}
	lat := make([]float64, len(lc.Samples))
	for i, s := range lc.Samples {
		lat[i] = float64(s.LatencyNs) / 1e3
	}
	return lat
}

// summarize builds one ScenarioSummary per scenario name, in the order the
// names first ran. seed drives the bootstrap.
func summarize(res *Results, seed uint64) []*ScenarioSummary {
	var names []string
	byName := map[string][]*ScenarioResult{}
	for _, sr := range res.Scenarios {
		if _, ok := byName[sr.Name]; !ok {
			names = append(names, sr.Name)
		}
		byName[sr.Name] = append(byName[sr.Name], sr)
	}
	rng := rand.New(rand.NewPCG(seed, 0x6a09e667f3bcc908))
	out := make([]*ScenarioSummary, 0, len(names))
	byBaseline := map[string]*ScenarioSummary{}
	for _, name := range names {
		runs := byName[name]
		standalone, _ := baselinesOf(runs[0])
		s := summarizeScenario(runs, byName[standalone], rng)
		byBaseline[name] = s
		out = append(out, s)
	}
	for _, s := range out {
		standalone, _ := baselinesOf(byName[s.Name][0])
		if b := byBaseline[standalone]; b != nil && s != b && s.LCLatencyUs != nil {
			s.Warnings = append(s.Warnings, clockWarnings(s.GPU, b.GPU)...)
		}
	}
	return out
}

func summarizeScenario(runs, baseline []*ScenarioResult, rng *rand.Rand) *ScenarioSummary {
	first := runs[0]
	s := &ScenarioSummary{Name: first.Name, Kind: first.Kind, Runtime: first.Runtime, Reps: len(runs)}
	var p50, p99, p50c, p99c, be, beRate, split, ttft, tpot, busy, bound, duty, dutyTPOT, daemonP50 []float64
	var lat []float64
	var gpus []*TelemetrySummary
	tenants := map[string]*[2][]float64{}
	var tenantOrder []string
	for _, sr := range runs {
		if sr.Error != "" {
			s.Failed++
			continue
		}
		if sr.LC != nil {
			n := len(sr.LC.Samples)
			if s.LCRequestsPerRep == 0 || n < s.LCRequestsPerRep {
				s.LCRequestsPerRep = n
			}
			lat = append(lat, latenciesUs(sr.LC)...)
		}
		appendIf(&p50, sr.LCP50VsStandalone)
		appendIf(&p99, sr.LCP99VsStandalone)
		appendIf(&p50c, sr.LCP50VsStandaloneClock)
		appendIf(&p99c, sr.LCP99VsStandaloneClock)
		appendIf(&be, sr.BEVsBEOnly)
		appendIf(&ttft, sr.TTFTP50VsStandalone)
		appendIf(&tpot, sr.TPOTP50VsStandalone)
		if d := sr.LCDuty; d != nil && d.TooShort {
			s.DutyTooShort++
		} else if d != nil {
			appendIf(&duty, d.P50Ratio)
			appendIf(&dutyTPOT, d.TPOTRatio)
		}
		if len(sr.Daemon) > 0 {
			appendIf(&daemonP50, sr.Daemon[0].Ratio)
			if !slices.ContainsFunc(sr.Daemon, func(v DaemonView) bool { return !v.Agrees }) {
				s.DaemonAgrees++
			}
		}
		if b := busyOf(sr, baseline); b != nil {
			busy, bound = append(busy, b[0]), append(bound, b[1])
		}
		appendIf(&beRate, sr.BEPerSec)
		if len(sr.BE) == 2 && sr.BE[1].WindowPerSec > 0 {
			split = append(split, sr.BE[0].WindowPerSec/sr.BE[1].WindowPerSec)
		}
		if sr.GPU != nil {
			gpus = append(gpus, sr.GPU)
		}
		for _, t := range sr.Tenants {
			if tenants[t.Label] == nil {
				tenants[t.Label] = &[2][]float64{}
				tenantOrder = append(tenantOrder, t.Label)
			}
			appendIf(&tenants[t.Label][0], t.P50VsStandalone)
			appendIf(&tenants[t.Label][1], t.P99VsStandalone)
		}
	}
	if len(lat) > 0 {
		ls := stats.Summarize(lat)
		s.LCLatencyUs = &ls
	}
	s.P50, s.P99 = newRatioStats(p50), newRatioStats(p99)
	s.P50Clock, s.P99Clock = newRatioStats(p50c), newRatioStats(p99c)
	s.BE, s.BESplit = newRatioStats(be), newRatioStats(split)
	s.TTFTP50, s.TPOTP50 = newRatioStats(ttft), newRatioStats(tpot)
	s.Duty, s.DutyTPOT = newRatioStats(duty), newRatioStats(dutyTPOT)
	s.DaemonP50 = newRatioStats(daemonP50)
	if len(busy) > 0 {
		s.LCBusy, s.BEBound = stats.Median(busy), stats.Median(bound)
	}
	if len(beRate) > 0 {
		s.BEPerSec = stats.Median(beRate)
	}
	for _, l := range tenantOrder {
		s.Tenants = append(s.Tenants, TenantSummary{Label: l, P50: newRatioStats(tenants[l][0]), P99: newRatioStats(tenants[l][1])})
	}
	s.GPU = poolTelemetry(gpus)

	var base []float64
	for _, b := range baseline {
		if b.Error == "" {
			base = append(base, latenciesUs(b.LC)...)
		}
	}
	if len(lat) > 0 && len(base) > 0 && s.P50 != nil && s.Kind != KindStandalone {
		ivs := stats.QuantileRatioCI(lat, base, []float64{50, 99}, stats.Bootstrap{Iters: bootstrapIters, Rand: rng})
		sl, sb := slices.Clone(lat), slices.Clone(base)
		slices.Sort(sl)
		slices.Sort(sb)
		for i, rs := range []*RatioStats{s.P50, s.P99} {
			p := []float64{50, 99}[i]
			rs.Pooled = stats.PercentileSorted(sl, p) / stats.PercentileSorted(sb, p)
			if !math.IsNaN(ivs[i].Lo) {
				rs.CI95 = &ivs[i]
			}
		}
	}
	s.Warnings = summaryWarnings(s)
	return s
}

// busyOf returns sr's LC busy fraction and the BE bound a gate allows at
// it: from the standalone run of the same repetition (the LC alone), or sr
// itself when it is one.
func busyOf(sr *ScenarioResult, baseline []*ScenarioResult) []float64 {
	base := sr
	if sr.Kind != KindStandalone {
		base = nil
		for _, b := range baseline {
			if repOf(b) == repOf(sr) && b.Error == "" {
				base = b
			}
		}
	}
	if base == nil || base.LC == nil || base.LCBusy == 0 {
		return nil
	}
	w := base.LC.MeasureEndMonoNs - base.LC.MeasureStartMonoNs
	switches := 2 * float64(len(base.LC.Samples)) * float64(class.SwitchTime) / float64(w)
	return []float64{base.LCBusy, max(0, 1-base.LCBusy-switches)}
}

func appendIf(xs *[]float64, v float64) {
	if v != 0 && !math.IsNaN(v) {
		*xs = append(*xs, v)
	}
}

// poolTelemetry combines the repetitions' telemetry: medians of the
// typical values, extremes of the extremes.
func poolTelemetry(ts []*TelemetrySummary) *TelemetrySummary {
	if len(ts) == 0 {
		return nil
	}
	out := &TelemetrySummary{SMClockMin: math.Inf(1)}
	var clock, power []float64
	reasons := map[string]float64{}
	for _, t := range ts {
		out.Readings += t.Readings
		clock = append(clock, t.SMClockP50)
		if t.PowerP50 > 0 {
			power = append(power, t.PowerP50)
		}
		out.SMClockMin = min(out.SMClockMin, t.SMClockMin)
		out.PowerMax = max(out.PowerMax, t.PowerMax)
		out.TempMax = max(out.TempMax, t.TempMax)
		for n, f := range t.ThrottleReasons {
			reasons[n] += f * float64(t.Readings)
		}
	}
	out.SMClockP50 = stats.Median(clock)
	if len(power) > 0 {
		out.PowerP50 = stats.Median(power)
	}
	if len(reasons) > 0 && out.Readings > 0 {
		out.ThrottleReasons = map[string]float64{}
		for n, c := range reasons {
			out.ThrottleReasons[n] = c / float64(out.Readings)
		}
	}
	return out
}

// summaryWarnings questions what the summary's numbers can support.
func summaryWarnings(s *ScenarioSummary) []string {
	var w []string
	for _, q := range []struct {
		name string
		rs   *RatioStats
	}{{"p50", s.P50}, {"p99", s.P99}} {
		if q.rs == nil || q.rs.CI95 == nil || s.Kind == KindStandalone {
			continue
		}
		if ciTooWide(q.rs.Median, *q.rs.CI95) {
			w = append(w, fmt.Sprintf("LC %s ratio %.2fx, but its 95%% CI [%.2f, %.2f] is wider than the effect claimed: the data do not support a figure this precise",
				q.name, q.rs.Median, q.rs.CI95.Lo, q.rs.CI95.Hi))
		}
	}
	if s.LCRequestsPerRep > 0 && s.LCRequestsPerRep < minP99Requests {
		w = append(w, fmt.Sprintf("%d LC requests per repetition: p99 rests on %d requests above it (want >= 50, i.e. >= %d requests)",
			s.LCRequestsPerRep, s.LCRequestsPerRep/100, minP99Requests))
	}
	if s.Failed > 0 {
		w = append(w, fmt.Sprintf("%d of %d repetitions failed and are left out", s.Failed, s.Reps))
	}
	return w
}

// clockWarnings notes an SM clock that differs from the standalone one's
// by more than 10%: the LC ratio then holds that much from the clock alone,
// unless BE stops for the LC's requests: NVML shows the clock ~100 ms late,
// while a stopped BE's power cap lifts within 25-50 ms (docs/GATE.md).
func clockWarnings(g, standalone *TelemetrySummary) []string {
	if g == nil || standalone == nil || standalone.SMClockP50 <= 0 || g.SMClockP50 <= 0 {
		return nil
	}
	f := standalone.SMClockP50 / g.SMClockP50
	if f > 0.9 && f < 1.1 {
		return nil
	}
	dir := "slower"
	if f < 1 {
		dir = "faster"
		f = 1 / f
	}
	return []string{fmt.Sprintf("SM clock p50 %.0f MHz against %.0f MHz standalone: a clock-bound LC runs %.2fx %s from that alone (see the clock-normalised ratio), unless BE stops for its requests (a gate): NVML shows the clock ~100 ms late",
		g.SMClockP50, standalone.SMClockP50, f, dir)}
}

// ciTooWide reports whether an interval is wider than the effect it is
// quoted for: wider than the ratio's distance from 1 (so it cannot tell
// the effect from none) and wider than ciWidthFloor. A claimed 1.0x with
// [0.8, 1.6] is; a 6.5x with [6.3, 6.7] is not.
func ciTooWide(claim float64, ci stats.Interval) bool {
	w := ci.Width()
	return w > ciWidthFloor && w > math.Abs(claim-1)
}
