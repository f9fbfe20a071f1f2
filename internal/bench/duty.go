package bench

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// With --be-duty D, be_gemm.py launches while CLOCK_MONOTONIC / (D/2) is
// even and idles while it is odd, so that one LC process is measured both
// beside BE and alone. An eager LC's speed moves by tens of percent from
// one process to the next; within a process, the two halves share it.

// beWorks reports whether be_gemm.py launches at CLOCK_MONOTONIC t (ns)
// with half-periods of half ns: in the even ones.
func beWorks(t, half int64) bool { return (t/half)%2 == 0 }

// dutyGuard is how far into a half a request must start to count for it:
// BE's queued work drains and a power-capped clock recovers within ~50 ms
// of a stop, and a restart takes a product or two.
const dutyGuard = 100 * time.Millisecond

// minBEDuty leaves each half a second past its guard.
const minBEDuty = 2 * (time.Second + dutyGuard)

// DefaultBEDuty is --be-duty's default: long enough that each half holds
// several requests of a one-a-second LC past its guard.
const DefaultBEDuty = 8 * time.Second

// minDutyRequests is the fewest requests each half of one run needs for
// its ratio to be reported as a repetition's: an eager LC's speed modes
// move a ratio of a dozen requests a half by tens of percent (GPU-FACTS.md).
// Runs are made long enough for it (dutyLength); a run that still falls
// short is marked too short and left out of the median.
const minDutyRequests = 30

// minDutyMedian is the fewest requests a half needs for a median at all.
const minDutyMedian = 3

// DutySplit compares one LC process's requests that ran while BE worked
// with those that ran while it idled.
type DutySplit struct {
	// WithBE and Alone are the two halves' latency summaries (us).
	WithBE *stats.Summary `json:"with_be_us,omitempty"`
	Alone  *stats.Summary `json:"alone_us,omitempty"`
	// MedianWithBE and MedianAlone are the halves' medians (us,
	// interpolated: stats.Median), P50Ratio their ratio (0: a half had
	// fewer than minDutyMedian requests).
	MedianWithBE float64 `json:"median_with_be_us,omitempty"`
	MedianAlone  float64 `json:"median_alone_us,omitempty"`
	P50Ratio     float64 `json:"p50_ratio,omitempty"`
	// P50CI is the bootstrap 95% interval of P50Ratio: the run's two
	// halves resampled (set when the results are finalized, seeded by
	// --seed).
	P50CI *stats.Interval `json:"p50_ratio_ci95,omitempty"`
	// TooShort: a half held fewer than minDutyRequests requests; the run's
	// ratio is shown but left out of the median over repetitions.
	TooShort bool `json:"too_short,omitempty"`
	// TPOTRatio is the same for an LLM LC's time per output token.
	TPOTRatio float64 `json:"tpot_p50_ratio,omitempty"`
	// Where every request carries its CPU loop's time (CPUMeterNs): CPURatio is that time's
	// median with BE over alone (the LC's own CPU slowed by the host), PerCPURatio the same
	// ratio as P50Ratio of each request's latency over its loop time (what its CPU's speed does
	// not explain). 0: not measured, or a half too short.
	CPURatio    float64 `json:"cpu_meter_p50_ratio,omitempty"`
	PerCPURatio float64 `json:"p50_per_cpu_ratio,omitempty"`
	// CPUCI and PerCPUCI are their bootstrap 95% intervals, as P50CI's.
	CPUCI    *stats.Interval `json:"cpu_meter_p50_ratio_ci95,omitempty"`
	PerCPUCI *stats.Interval `json:"p50_per_cpu_ratio_ci95,omitempty"`
}

// dutyLength is how long a run must measure for each half of duty to hold
// minDutyRequests requests of an LC that arrives every period (a run
// without an LC: one working half). A request counts for a half it starts
// dutyGuard into and ends within; taking its latency as a whole period
// (longer, and requests run late) leaves (half - guard - period) / period
// of them to a half. n halves of each kind need 2n + 1 halves of
// measurement, which hold 2n whole ones whatever the phase.
func dutyLength(duty, period time.Duration, hasLC bool) time.Duration {
	half := duty / 2
	if !hasLC {
		return 3 * half
	}
	perHalf := float64(half-dutyGuard-period) / float64(period)
	if perHalf < 1 {
		perHalf = 1 // refused by validate; never loop on it
	}
	n := int(math.Ceil(minDutyRequests / perHalf))
	return time.Duration(2*n+1) * half
}

// dutyPerHalf is how many requests of period fit a half of duty by
// dutyLength's reckoning (validate wants at least one).
func dutyPerHalf(duty, period time.Duration) float64 {
	return float64(duty/2-dutyGuard-period) / float64(period)
}

// splitByDuty sorts lc's requests into BE's working and idle halves of
// period: a request counts when it starts dutyGuard or more into a half and
// ends within it (its preparation included). A request starts when it is
// due or, if the one before ran past that, when that one ended.
func splitByDuty(lc *LCResult, period time.Duration) *DutySplit {
	if lc == nil || period/2 <= 0 {
		return nil
	}
	lat, tpot := dutyHalves(lc, period)
	d := &DutySplit{}
	if len(lat[0]) > 0 {
		w := stats.Summarize(lat[0])
		d.WithBE = &w
	}
	if len(lat[1]) > 0 {
		a := stats.Summarize(lat[1])
		d.Alone = &a
	}
	d.TooShort = len(lat[0]) < minDutyRequests || len(lat[1]) < minDutyRequests
	if len(lat[0]) >= minDutyMedian && len(lat[1]) >= minDutyMedian {
		d.MedianWithBE, d.MedianAlone = stats.Median(lat[0]), stats.Median(lat[1])
		d.P50Ratio = d.MedianWithBE / d.MedianAlone
		d.TPOTRatio = dutyRatio(tpot[0], tpot[1])
		if meter, per, ok := cpuHalves(lc, period); ok {
			d.CPURatio, d.PerCPURatio = dutyRatio(meter[0], meter[1]), dutyRatio(per[0], per[1])
		}
	}
	return d
}

// cpuHalves is, per half as dutyHalves counts them, each request's CPU loop time and its latency
// over it; not ok unless every request of the run carries one (ratios of a part are no ratio).
func cpuHalves(lc *LCResult, period time.Duration) (meter, per [2][]float64, ok bool) {
	if slices.ContainsFunc(lc.Samples, func(s LCSample) bool { return s.CPUMeterNs <= 0 }) {
		return meter, per, false
	}
	eachHalf(lc, period, func(s LCSample, _ int64, i int) {
		meter[i] = append(meter[i], float64(s.CPUMeterNs))
		per[i] = append(per[i], float64(s.LatencyNs)/float64(s.CPUMeterNs))
	})
	return meter, per, true
}

// dutyHalves is lc's request latencies and TPOTs (us) of BE's working
// half ([0]) and its idle half ([1]), as splitByDuty counts them.
func dutyHalves(lc *LCResult, period time.Duration) (lat, tpot [2][]float64) {
	eachHalf(lc, period, func(s LCSample, _ int64, i int) {
		lat[i] = append(lat[i], float64(s.LatencyNs)/1e3)
		if s.TPOTNs > 0 {
			tpot[i] = append(tpot[i], float64(s.TPOTNs)/1e3)
		}
	})
	return lat, tpot
}

// eachHalf calls f with each of lc's requests that lies in one half of the duty, past its guard,
// with its start and the half (0: BE working, 1: idle).
func eachHalf(lc *LCResult, period time.Duration, f func(s LCSample, start int64, half int)) {
	half := int64(period / 2)
	prevEnd := int64(math.MinInt64)
	for _, s := range lc.Samples {
		start := max(s.ArrivalMonoNs, prevEnd)
		end := start + s.PrepNs + s.LatencyNs
		prevEnd = end
		k := start / half
		if start < 0 || start-k*half < int64(dutyGuard) || end >= (k+1)*half {
			continue
		}
		f(s, start, int(k%2))
	}
}

// ArmDuty is the LC's duty split under one arm SLO mode held, over the part of the measurement it
// held it: a run's ratio blends its arms, the first of them held before SLO mode had measured.
type ArmDuty struct {
	Arm string `json:"arm"`
	// FromS is when the arm came into force, in seconds into the measurement (0: before it), as
	// the first status read that showed it.
	FromS  float64 `json:"from_s"`
	WithBE int     `json:"with_be"`
	Alone  int     `json:"alone"`
	// P50Ratio is the p50 of the requests with BE over those alone, with at least minDutyMedian
	// of each (0: fewer).
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	// P50CI is the bootstrap 95% interval of P50Ratio, the arm's two halves resampled: what a
	// frontier's reading of the arm is checked against (set when the results are finalized;
	// nil without a ratio).
	P50CI *stats.Interval `json:"p50_ratio_ci95,omitempty"`
	// halves is the arm's latencies (us) with BE ([0]) and alone ([1]), for P50CI; the samples
	// give them again, so they stay out of the JSON.
	halves [2][]float64
	// OffCPUMs is the p50 of those requests' time off the LC thread's CPU (latency less its CPU
	// time), both halves: what an arm costs in both, which its ratio cannot see (nil: no CPU times).
	OffCPUMs *float64 `json:"off_cpu_p50_ms,omitempty"`
	// TPOTRatio is the same of an LLM LC's time per output token (0: none, or too few).
	TPOTRatio float64 `json:"tpot_p50_ratio,omitempty"`
	// PerCPURatio is P50Ratio of each request over its CPU loop's time (the LC's own meter of its
	// CPU's speed around it), where every request of the arm has one: the app's ratio with its vCPU's
	// speed taken out, beside what SLO mode reads of an LC it judges per CPU (0: none, or too few).
	PerCPURatio float64 `json:"p50_per_cpu_ratio,omitempty"`
	// DaemonRatio is the median of SLO mode's own measurements of the arm counted over the
	// measurement under a `p50<=Nx` or `tpot_p50<=Nx` objective (DaemonMetric "" or "tpot"),
	// each its latency over the LC alone it was judged by (its target over the factor),
	// DaemonMeasurements how many: the number SLO mode steered by, beside P50Ratio or
	// TPOTRatio, the app's (0: none, or another objective). Where gpreemptd could not stop BE
	// (calibrate: shortest) its reference is the LC beside BE under the shortest arm.
	DaemonRatio        float64 `json:"daemon_ratio,omitempty"`
	DaemonMeasurements int     `json:"daemon_measurements,omitempty"`
	DaemonMetric       string  `json:"daemon_metric,omitempty"`
	// Frontier is the arm as SLO mode's frontier showed it at the end (nil: not there): its
	// latency over the LC alone where one relative objective is the LC's only one (its mean and
	// bounds over the objective, times the factor), else over the objective, and the verdict.
	Frontier *FrontierArm `json:"frontier,omitempty"`
}

// FrontierArm is one arm of SLO mode's frontier as the bench reports it: Mean, Lo and Hi (nil:
// not known) in the unit Of says ("alone" or "objective").
type FrontierArm struct {
	Mean    *float64 `json:"mean,omitempty"`
	Lo      *float64 `json:"lo,omitempty"`
	Hi      *float64 `json:"hi,omitempty"`
	Of      string   `json:"of"`
	Verdict string   `json:"verdict"`
}

// armDuty splits sr's duty comparison by the arm in force as each request started (the last
// status read at or before it). Nil without a duty or without arms in the reads.
func armDuty(sr *ScenarioResult) []ArmDuty {
	if sr.LC == nil || sr.BEDuty/2 <= 0 {
		return nil
	}
	var out []ArmDuty
	var since []int64 // when each came into force
	for _, s := range sr.SLO {
		if s.Arm != "" && (len(out) == 0 || out[len(out)-1].Arm != s.Arm) {
			out = append(out, ArmDuty{Arm: s.Arm, FromS: max(0, float64(s.MonoNs-sr.WindowStartMonoNs)/1e9)})
			since = append(since, s.MonoNs)
		}
	}
	if len(out) == 0 {
		return nil
	}
	at := func(t int64) int { return max(sort.Search(len(since), func(j int) bool { return since[j] > t })-1, 0) } // the arm in force at t; before the first read, the first
	lat, tpot, off := make([][2][]float64, len(out)), make([][2][]float64, len(out)), make([][]float64, len(out))
	per := make([][2][]float64, len(out))
	eachHalf(sr.LC, sr.BEDuty, func(s LCSample, start int64, half int) {
		i := at(start)
		lat[i][half] = append(lat[i][half], float64(s.LatencyNs)/1e3)
		if s.CPUMeterNs > 0 {
			per[i][half] = append(per[i][half], float64(s.LatencyNs)/float64(s.CPUMeterNs))
		}
		if s.TPOTNs > 0 {
			tpot[i][half] = append(tpot[i][half], float64(s.TPOTNs)/1e3)
		}
		if ms, ok := s.offCPUMs(); ok {
			off[i] = append(off[i], ms)
		}
	})
	for i := range out {
		out[i].WithBE, out[i].Alone, out[i].P50Ratio = len(lat[i][0]), len(lat[i][1]), dutyRatio(lat[i][0], lat[i][1])
		out[i].halves = lat[i]
		out[i].TPOTRatio = dutyRatio(tpot[i][0], tpot[i][1])
		if len(per[i][0]) == len(lat[i][0]) && len(per[i][1]) == len(lat[i][1]) {
			out[i].PerCPURatio = dutyRatio(per[i][0], per[i][1])
		}
		if len(off[i]) > 0 {
			m := stats.Median(off[i])
			out[i].OffCPUMs = &m
		}
	}
	readings := make([][]float64, len(out))
	for _, r := range daemonReadings(sr) {
		i := at(r.at)
		if out[i].Arm == r.arm && (len(readings[i]) == 0 || out[i].DaemonMetric == r.metric) { // one metric a span: an objective changed mid-run keeps its first
			readings[i], out[i].DaemonMetric = append(readings[i], r.v), r.metric
		}
	}
	for i, r := range readings {
		if len(r) > 0 {
			out[i].DaemonRatio, out[i].DaemonMeasurements = stats.Median(r), len(r)
		}
	}
	frontier(sr, out)
	// Arms held only before the measurement, or so briefly that no request started under them, say nothing.
	return slices.DeleteFunc(out, func(a ArmDuty) bool { return a.WithBE+a.Alone == 0 })
}

// frontier fills each arm's Frontier from the last status read, the one that keeps it.
func frontier(sr *ScenarioResult, arms []ArmDuty) {
	if len(sr.SLO) == 0 {
		return
	}
	last := sr.SLO[len(sr.SLO)-1]
	factor, of := 1.0, "objective"
	rows := slices.DeleteFunc(slices.Clone(last.LC), func(l SLOLCSample) bool { return l.PID != sr.LC.PID })
	if len(rows) == 1 {
		if o, err := objective.Parse(rows[0].Objective); err == nil && o.Relative() && o.Reference != objective.Shortest {
			factor, of = o.Inflation, "alone" // the worst of one objective: its ratio over the LC alone
		}
	}
	times := func(x *float64) *float64 {
		if x == nil {
			return nil
		}
		return new(*x * factor)
	}
	for i := range arms {
		if k := slices.IndexFunc(last.Arms, func(a api.SLOArm) bool { return a.Arm == arms[i].Arm }); k >= 0 {
			a := last.Arms[k]
			arms[i].Frontier = &FrontierArm{Mean: times(a.LCVsObjective), Lo: times(a.Lo), Hi: times(a.Hi), Of: of, Verdict: a.Verdict}
		}
	}
}

// reading is one of SLO mode's measurements of metric: of arm, in force at the read at (CLOCK_MONOTONIC ns).
type reading struct {
	at          int64
	arm, metric string
	v           float64
}

// daemonReadings is SLO mode's measurements of sr's LC counted over the measurement under a
// `p50<=Nx` or `tpot_p50<=Nx` objective against the LC alone (the ratios the app's duty ratios
// are), each its latency over its target divided by the factor. The status shows a window's
// decision from its first read to the next window's; a measurement is new where that window's
// count of measurements grows, or, from a daemon that does not count them, where its
// latency_us moves from the last one shown, or what accumulated toward it falls to 0 under an
// arm held (one may repeat the last's value: a scraped p50 sits on a bucket's middle; one that
// repeats it as the arm moves is not told apart so). It is of the arm the window before showed
// (the decision it fed may have moved the arm).
func daemonReadings(sr *ScenarioResult) (out []reading) {
	if sr.LC == nil {
		return nil
	}
	type window struct {
		at  int64
		arm string
		row SLOLCSample
	}
	var ws []window
	for i, s := range sr.SLO {
		j := slices.IndexFunc(s.LC, func(l SLOLCSample) bool { return l.PID == sr.LC.PID })
		if j >= 0 && (i == 0 || s.Window == 0 || s.Window != sr.SLO[i-1].Window) {
			ws = append(ws, window{s.MonoNs, s.Arm, s.LC[j]})
		}
	}
	last, made := 0.0, 0
	for i := 1; i < len(ws); i++ {
		prev, w := ws[i-1], ws[i]
		last, made = cmp.Or(prev.row.LatencyUs, last), cmp.Or(prev.row.Measurements, made) // a window without a sample shows neither
		o, err := objective.Parse(w.row.Objective)
		if err != nil || o.Metric != "" && o.Metric != "tpot" || o.Quantile != 0.5 || !o.Relative() || o.Reference == objective.Shortest ||
			w.row.LatencyUs <= 0 || w.row.TargetUs <= 0 || w.at < sr.WindowStartMonoNs || w.at > sr.WindowEndMonoNs {
			continue
		}
		counted := w.row.LatencyUs != last || w.row.Pending == 0 && prev.row.Pending > 0 && w.arm == prev.arm // a daemon that does not count them
		if w.row.Measurements > 0 {
			counted = w.row.Measurements != made // it starts again from 1 for an LC quiet long enough to be forgotten
		}
		if counted {
			out = append(out, reading{prev.at, prev.arm, o.Metric, w.row.LatencyUs / (w.row.TargetUs / o.Inflation)})
		}
	}
	return out
}

// dutyRatio is the median of with over the median of alone; 0 unless each holds minDutyMedian.
func dutyRatio(with, alone []float64) float64 {
	if len(with) < minDutyMedian || len(alone) < minDutyMedian {
		return 0
	}
	return stats.Median(with) / stats.Median(alone)
}

// dutyIntervals sets the bootstrap interval of every run's duty ratio:
// the run's two halves resampled, bootstrapIters times, from rng (one
// stream for all runs, in order, so that the same results always give the
// same intervals). The ratio is of medians (stats.Median), the interval
// of nearest-rank p50s: the two differ by at most one rank.
func dutyIntervals(res *Results, rng *rand.Rand) {
	for _, sr := range res.Scenarios {
		d := sr.LCDuty
		if d == nil || d.P50Ratio == 0 || sr.LC == nil {
			continue
		}
		lat, _ := dutyHalves(sr.LC, sr.BEDuty)
		d.P50CI = p50CI(lat, rng)
		if meter, per, ok := cpuHalves(sr.LC, sr.BEDuty); ok && d.PerCPURatio > 0 {
			d.CPUCI, d.PerCPUCI = p50CI(meter, rng), p50CI(per, rng)
		}
	}
}

// armIntervals sets the bootstrap interval of every arm's duty ratio, as dutyIntervals does a
// run's: from a stream of its own, so that the runs' intervals stay those of their seed.
func armIntervals(res *Results, rng *rand.Rand) {
	for _, sr := range res.Scenarios {
		for i := range sr.LCDutyByArm {
			if a := &sr.LCDutyByArm[i]; a.P50Ratio > 0 {
				a.P50CI = p50CI(a.halves, rng)
			}
		}
	}
}

// p50CI is the bootstrap 95% interval of the ratio of halves' p50s (nil: none).
func p50CI(h [2][]float64, rng *rand.Rand) *stats.Interval {
	ivs := stats.QuantileRatioCI(h[0], h[1], []float64{50}, stats.Bootstrap{Iters: bootstrapIters, Rand: rng})
	if len(ivs) != 1 || math.IsNaN(ivs[0].Lo) {
		return nil
	}
	return &ivs[0]
}

// dutyCount is what a duty-cycled BE completed in the working halves of
// (start, end] and the working time those hold: its rate while it worked,
// whichever way the window falls on the cycle.
func dutyCount(completions []int64, start, end int64, period time.Duration) (n int64, working time.Duration) {
	half := int64(period / 2)
	if half <= 0 || end <= start {
		return 0, 0
	}
	for _, t := range completions {
		if t > start && t <= end && beWorks(t, half) {
			n++
		}
	}
	for k := start / half; k*half < end; k++ {
		if beWorks(k*half, half) {
			working += time.Duration(min(end, (k+1)*half) - max(start, k*half))
		}
	}
	return n, working
}
