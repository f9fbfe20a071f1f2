package bench

import (
	"cmp"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// An slo: scenario's status reads (SLOSample, every --slo-poll) hold each
// LC's last window as gpreemptd saw it: its latency source, how many
// samples and their p50. DaemonView puts that beside the p50 the app
// measured of its own requests over the same windows, the check that the
// daemon steers by the latency users see (issue 51, must-show 1).

// daemonAgreement is how far the daemon's p50 may lie from the app's and
// still count as the same measure: ±10%.
const daemonAgreement = 0.10

// minuteOf is the span over which calibration's stops of BE are bounded.
const minuteOf = time.Minute

// DaemonView is what gpreemptd saw of one LC process over a run, beside
// what the app measured over the same windows.
type DaemonView struct {
	Label string `json:"label"`
	PID   int    `json:"pid"`
	// Source is the latency source the daemon named in most of the
	// compared windows, Sources every one with its count of windows.
	Source  string         `json:"source,omitempty"`
	Sources map[string]int `json:"sources,omitempty"`
	// Metric is what was compared: "latency" (the request's), "tpot" or
	// "ttft", from the LC's objective.
	Metric string `json:"metric"`
	// Windows is how many of the daemon's windows were compared: those
	// wholly inside the measurement and, under a BE duty, inside one of
	// BE's working halves past its guard.
	Windows int `json:"windows"`
	// DaemonP50Us is the median of the p50s of those windows in which the
	// app ended a request, each weighted by its samples; AppP50Us the same
	// of the app's requests that ended in them, each window's p50 taken as
	// the daemon takes one; Ratio the first over the second. DaemonSamples
	// and AppRequests are what all the windows held, by each.
	DaemonP50Us   float64 `json:"daemon_p50_us,omitempty"`
	AppP50Us      float64 `json:"app_p50_us,omitempty"`
	DaemonSamples int     `json:"daemon_samples"`
	AppRequests   int     `json:"app_requests"`
	Ratio         float64 `json:"ratio,omitempty"`
	// Agrees: Ratio within ±daemonAgreement.
	Agrees bool `json:"agrees"`
	// FirstSampleS is from the first status read (the LC's start) to the
	// first that showed a sample of it, FirstMeasuredS to the first that
	// showed a measurement counted (its latency_us: enough samples
	// accumulated, and a relative objective's reference known); -1: none.
	FirstSampleS   float64 `json:"first_sample_s"`
	FirstMeasuredS float64 `json:"first_measured_s"`
	// ReferenceUs is, for a relative objective, the median over the
	// measurement's status reads of the LC alone as gpreemptd judged it
	// (its target over the objective's factor); AppAloneUs the app's p50
	// of its requests while BE idled (a duty's idle halves) over the same
	// span; ReferenceRatio the first over the second: the other number
	// gpreemptd steers by, against the truth.
	ReferenceUs    float64 `json:"reference_us,omitempty"`
	AppAloneUs     float64 `json:"app_alone_us,omitempty"`
	ReferenceRatio float64 `json:"reference_ratio,omitempty"`
	// AppAloneRequests is how many requests AppAloneUs was taken of, to weigh an "out of reach"
	// called on a few; AppAloneCPUMeterUs their CPU loop's median, to set beside the loop while
	// an @OWN_P50@ alone was taken (an eager LC's latency follows its CPU's speed).
	AppAloneRequests   int     `json:"app_alone_requests,omitempty"`
	AppAloneCPUMeterUs float64 `json:"app_alone_cpu_meter_us,omitempty"`
	// TargetUs is, for an absolute objective, its bound; AppRunUs the app's quantile of the
	// objective's metric over the whole measurement (both of a duty's halves), met where it is no
	// more; AppAloneUs as above. An LC whose p50 alone is over its target misses under any setting.
	TargetUs float64 `json:"target_us,omitempty"`
	AppRunUs float64 `json:"app_run_us,omitempty"`
	// AloneWindows, AloneDaemonP50Us, AloneAppP50Us and AloneRatio are the same comparison as
	// Windows' over the windows that lie inside one of BE's idle halves past the guard: what
	// gpreemptd's reference is learnt from, against the app over the same windows (none without
	// a duty).
	AloneWindows     int     `json:"alone_windows,omitempty"`
	AloneDaemonP50Us float64 `json:"alone_daemon_p50_us,omitempty"`
	AloneAppP50Us    float64 `json:"alone_app_p50_us,omitempty"`
	AloneRatio       float64 `json:"alone_ratio,omitempty"`
	// BehindWindows, BehindDaemonP50Us, BehindAppP50Us and BehindRatio are the same comparison
	// over the windows of either half holding a request the app began before the one ahead of it
	// had ended: requests run back to back, which a trace must cut apart with no quiet gap.
	BehindWindows     int     `json:"behind_windows,omitempty"`
	BehindDaemonP50Us float64 `json:"behind_daemon_p50_us,omitempty"`
	BehindAppP50Us    float64 `json:"behind_app_p50_us,omitempty"`
	BehindRatio       float64 `json:"behind_ratio,omitempty"`
	// TracedReads is how many of the status reads through the measurement
	// had the process traced, VaryReads how many of them said its requests
	// vary (back-to-back ones left undivided), VaryFlips how often that
	// changed from one read to the next.
	TracedReads int `json:"traced_reads,omitempty"`
	VaryReads   int `json:"vary_reads,omitempty"`
	VaryFlips   int `json:"vary_flips,omitempty"`
}

// daemonWindow is one of the daemon's windows of one LC: its span
// (start, end] (CLOCK_MONOTONIC ns; the daemon's, else estimated) and what
// the daemon saw in it.
type daemonWindow struct {
	start, end int64
	p50        float64
	samples    int
	source     string
}

// lcWindows finds, in status reads ss, the windows of the LC process pid.
// A window is new when the daemon's window count moves (or, from a daemon
// without one, when the LC's row changes). Its span is the one the row
// gives; from a daemon that gives none, it is length long and ended
// between the read before and the read that first showed it, so its end
// is taken half way between the two (the error is half a poll, enough to
// pair a request at a window's edge with the wrong window). Windows with
// no p50 are left out. first is the index of the first read that showed
// latency for the LC (-1: none).
func lcWindows(ss []SLOSample, pid int, length time.Duration) (ws []daemonWindow, metric string, first, measured int) {
	first, measured = -1, -1
	var prev *SLOLCSample
	prevWindow := 0
	for i, s := range ss {
		j := slices.IndexFunc(s.LC, func(l SLOLCSample) bool { return l.PID == pid })
		if j < 0 {
			continue
		}
		l := &s.LC[j]
		metric = cmp.Or(metric, objectiveMetric(l.Objective))
		v := l.P50Us
		if v == 0 && l.Samples > 0 && metric == "latency" && strings.HasPrefix(l.Objective, "p50") {
			v = l.LatencyUs // a daemon without p50_us: the objective's quantile is the p50 (not a window's without samples: the last measurement's)
		}
		if first < 0 && (v > 0 || l.Samples > 0) {
			first = i
		}
		if measured < 0 && l.LatencyUs > 0 {
			measured = i
		}
		isNew := prev == nil || s.Window != prevWindow
		if s.Window == 0 && prev != nil {
			isNew = l.P50Us != prev.P50Us || l.Samples != prev.Samples || l.LatencyUs != prev.LatencyUs
		}
		prev, prevWindow = l, s.Window
		if !isNew || v <= 0 || i == 0 && l.ToMonoNs == 0 {
			continue // the first read's window: when it ended is not known without its span
		}
		w := daemonWindow{start: l.FromMonoNs, end: l.ToMonoNs, p50: v, samples: l.Samples, source: l.Source}
		if w.end == 0 {
			w.end = (ss[i-1].MonoNs + s.MonoNs) / 2
			w.start = w.end - int64(length)
		}
		ws = append(ws, w)
	}
	return ws, cmp.Or(metric, "latency"), first, measured
}

// objectiveMetric is the metric an objective ("p50<=1.10x",
// "tpot_p50<=30ms") is of: "latency", "tpot" or "ttft".
func objectiveMetric(obj string) string {
	switch {
	case obj == "":
		return ""
	case strings.HasPrefix(obj, "tpot_"):
		return "tpot"
	case strings.HasPrefix(obj, "ttft_"):
		return "ttft"
	}
	return "latency"
}

// inWorkingHalf reports whether [start, end] lies inside one of BE's
// working halves of duty, past the guard (any span, with no duty).
func inWorkingHalf(start, end int64, duty time.Duration) bool {
	return duty/2 <= 0 || inHalf(start, end, duty, 0)
}

// inHalf reports whether [start, end] lies inside one of duty's halves
// of parity (0: BE works, 1: it idles), past the guard.
func inHalf(start, end int64, duty time.Duration, parity int64) bool {
	half := int64(duty / 2)
	if half <= 0 {
		return false
	}
	k := start / half
	return start >= 0 && k%2 == parity && start-k*half >= int64(dutyGuard) && end <= (k+1)*half
}

// daemonViews compares, for each LC process of sr, the daemon's p50 of
// its windows with the app's over the same windows.
func daemonViews(sr *ScenarioResult, window time.Duration) []DaemonView {
	if len(sr.SLO) == 0 || window <= 0 {
		return nil
	}
	type lcOf struct {
		label string
		lc    *LCResult
	}
	lcs := []lcOf{{"lc", sr.LC}}
	if len(sr.Tenants) > 0 {
		lcs = nil
		for _, t := range sr.Tenants {
			lcs = append(lcs, lcOf{t.Label, t.LC})
		}
	}
	var out []DaemonView
	for _, l := range lcs {
		if l.lc == nil {
			continue
		}
		ws, metric, first, measured := lcWindows(sr.SLO, l.lc.PID, window)
		since := func(i int) float64 {
			if i < 0 {
				return -1
			}
			return float64(sr.SLO[i].MonoNs-sr.SLO[0].MonoNs) / 1e9
		}
		v := DaemonView{Label: l.label, PID: l.lc.PID, Metric: metric, FirstSampleS: since(first), FirstMeasuredS: since(measured)}
		apps, behind := appOver(l.lc, ws, metric) // over every window: where spans overlap, a request is the later one's, kept or not
		var kept, alone, backToBack []int
		for i, w := range ws {
			// By its own window: a traced one spans from a busy period's start where it holds requests run back to back.
			own := max(w.start, w.end-int64(window))
			if own < sr.WindowStartMonoNs || w.end > sr.WindowEndMonoNs {
				continue
			}
			working := inWorkingHalf(own, w.end, sr.BEDuty)
			idle := !working && inHalf(own, w.end, sr.BEDuty, 1)
			if working {
				kept = append(kept, i)
			} else if idle {
				alone = append(alone, i)
			}
			if behind[i] && (working || idle) {
				backToBack = append(backToBack, i)
			}
		}
		var idle appAlone
		if v.ReferenceUs, idle = referenceOver(sr, l.lc); v.ReferenceUs == 0 {
			v.TargetUs, v.AppRunUs, idle = absoluteOver(sr, l.lc)
		}
		v.AppAloneUs, v.AppAloneRequests, v.AppAloneCPUMeterUs = idle.us, idle.n, idle.cpuMeterUs
		if v.ReferenceUs > 0 && v.AppAloneUs > 0 {
			v.ReferenceRatio = v.ReferenceUs / v.AppAloneUs
		}
		v.Windows, v.AloneWindows, v.BehindWindows = len(kept), len(alone), len(backToBack)
		if len(kept) > 0 {
			v.Sources = map[string]int{}
			for _, i := range kept {
				v.Sources[cmp.Or(ws[i].source, "unnamed")]++
				v.DaemonSamples += ws[i].samples
				v.AppRequests += len(apps[i])
			}
			for src, n := range v.Sources {
				if n > v.Sources[v.Source] || n == v.Sources[v.Source] && src < v.Source {
					v.Source = src
				}
			}
			if v.DaemonP50Us, v.AppP50Us = pairedP50s(ws, apps, kept); v.AppP50Us > 0 {
				v.Ratio = v.DaemonP50Us / v.AppP50Us
				v.Agrees = math.Abs(v.Ratio-1) <= daemonAgreement+1e-9
			}
		}
		if v.AloneDaemonP50Us, v.AloneAppP50Us = pairedP50s(ws, apps, alone); v.AloneAppP50Us > 0 {
			v.AloneRatio = v.AloneDaemonP50Us / v.AloneAppP50Us
		}
		if v.BehindDaemonP50Us, v.BehindAppP50Us = pairedP50s(ws, apps, backToBack); v.BehindAppP50Us > 0 {
			v.BehindRatio = v.BehindDaemonP50Us / v.BehindAppP50Us
		}
		v.TracedReads, v.VaryReads, v.VaryFlips = varyOver(sr, l.lc.PID)
		out = append(out, v)
	}
	return out
}

// varyOver counts the status reads inside sr's measurement that had pid
// traced, those that said its requests vary, and the changes between them.
func varyOver(sr *ScenarioResult, pid int) (traced, vary, flips int) {
	var last *bool
	for _, s := range sr.SLO {
		if s.MonoNs < sr.WindowStartMonoNs || s.MonoNs > sr.WindowEndMonoNs {
			continue
		}
		for _, l := range s.LC {
			if l.PID != pid || l.RequestsVary == nil {
				continue
			}
			traced++
			if *l.RequestsVary {
				vary++
			}
			if last != nil && *last != *l.RequestsVary {
				flips++
			}
			last = l.RequestsVary
		}
	}
	return traced, vary, flips
}

// pairedP50s compares windows ws[kept] window by window, paired: the daemon's p50 and the app's
// (apps) by the same rule, each window's p50 as the daemon takes one (stats.WeightedQuantile),
// their medians weighted by samples and by requests, over the windows in which the app ended a
// request (0: none). A pooled median of the app's requests is another statistic, far off where a
// window holds a request or two.
func pairedP50s(ws []daemonWindow, apps [][]stats.Weighted, kept []int) (daemon, app float64) {
	var dv, dw, av, aw []float64
	for _, i := range kept {
		if w, a := ws[i], apps[i]; len(a) > 0 {
			dv, dw = append(dv, w.p50), append(dw, float64(max(w.samples, 1)))
			av, aw = append(av, float64(stats.WeightedQuantile(a, 0.5))/1e3), append(aw, float64(len(a)))
		}
	}
	if len(dv) == 0 {
		return 0, 0
	}
	return weightedMedian(dv, dw), weightedMedian(av, aw)
}

// referenceOver is, for lc's first relative objective, the LC alone as gpreemptd judged it over
// sr's measurement (the median of its status reads' target over the objective's factor; 0: no
// relative objective, or none known), and the app's own value at the objective's quantile of its
// metric over its requests in BE's idle halves of the measurement (0: no duty, or none), those
// under an arm with the gate left out: its launch probes' traps are a cost of sharing, not the LC
// alone, as gpreemptd learns it.
func referenceOver(sr *ScenarioResult, lc *LCResult) (ref float64, alone appAlone) {
	var refs []float64
	obj := objectiveOver(sr, lc, func(o objective.Objective, l SLOLCSample) {
		if l.TargetUs > 0 {
			refs = append(refs, l.TargetUs/o.Inflation)
		}
	}, true)
	if obj == nil || len(refs) == 0 {
		return 0, appAlone{}
	}
	return stats.Median(refs), aloneOver(sr, lc, *obj)
}

// absoluteOver is, for an absolute objective of lc in sr's status reads, its target, the app's
// quantile over the whole measurement and its quantile while BE idled (aloneOver); zeros
// otherwise.
func absoluteOver(sr *ScenarioResult, lc *LCResult) (target, run float64, alone appAlone) {
	obj := objectiveOver(sr, lc, func(objective.Objective, SLOLCSample) {}, false)
	if obj == nil {
		return 0, 0, appAlone{}
	}
	var all []float64
	for _, s := range lc.Samples {
		if v := metricOf(s, obj.Metric); v > 0 {
			all = append(all, float64(v)/1e3)
		}
	}
	if len(all) > 0 {
		run = stats.Percentile(all, 100*obj.Quantile)
	}
	return float64(obj.Absolute) / 1e3, run, aloneOver(sr, lc, *obj)
}

// objectiveOver is lc's first objective of the wanted kind (relative or absolute) in sr's status
// reads through the measurement, each read of it given to each; nil if none.
func objectiveOver(sr *ScenarioResult, lc *LCResult, each func(objective.Objective, SLOLCSample), relative bool) *objective.Objective {
	var obj *objective.Objective
	for _, s := range sr.SLO {
		if s.MonoNs < sr.WindowStartMonoNs || s.MonoNs > sr.WindowEndMonoNs {
			continue
		}
		for _, l := range s.LC {
			o, err := objective.Parse(l.Objective)
			if l.PID != lc.PID || err != nil || o.Relative() != relative || relative && o.Inflation <= 0 || !relative && o.Absolute <= 0 || obj != nil && o != *obj {
				continue
			}
			if obj == nil {
				obj = &o
			}
			each(o, l)
		}
	}
	return obj
}

// appAlone is the app's LC while BE idled: the objective's quantile of its requests, how many,
// and the median of their CPU loops (0 where none was timed), to set beside its alone before.
type appAlone struct {
	us, cpuMeterUs float64
	n              int
}

// aloneOver is the app's quantile of obj's metric over its requests in BE's idle halves through
// the measurement, leaving out those under a gate arm (whose launch probes' traps are a cost of
// sharing, not the LC alone); zero without a duty or such requests.
func aloneOver(sr *ScenarioResult, lc *LCResult, obj objective.Objective) appAlone {
	var gated []int64 // [since, until) pairs of the reads' gate arms
	for _, s := range sr.SLO {
		if g := strings.Contains(s.Arm, "+gate"); g != (len(gated)%2 == 1) {
			gated = append(gated, s.MonoNs)
		}
	}
	var own, meter []float64
	if sr.BEDuty > 0 {
		eachHalf(lc, sr.BEDuty, func(s LCSample, start int64, half int) {
			v := metricOf(s, obj.Metric)
			underGate := sort.Search(len(gated), func(i int) bool { return gated[i] > start })%2 == 1
			if half == 1 && v > 0 && !underGate && start >= sr.WindowStartMonoNs && start <= sr.WindowEndMonoNs {
				own = append(own, float64(v)/1e3)
				if s.CPUMeterNs > 0 {
					meter = append(meter, float64(s.CPUMeterNs)/1e3)
				}
			}
		})
	}
	if len(own) == 0 {
		return appAlone{}
	}
	a := appAlone{us: stats.Percentile(own, 100*obj.Quantile), n: len(own)}
	if len(meter) > 0 {
		a.cpuMeterUs = stats.Median(meter)
	}
	return a
}

// appOver is the app's metric of lc's requests that ended inside each of ws (start, end]: its
// request latency, or its TTFT or mean TPOT. A request ends at its start (when due, or when the
// one before ended) plus its preparation and latency. Where spans overlap (a traced window
// holding requests run back to back reaches back to their busy period's start), a request is the
// later window's: the earlier did not count it. behind marks the windows holding a request begun
// before the one ahead of it had ended.
func appOver(lc *LCResult, ws []daemonWindow, metric string) (out [][]stats.Weighted, behind []bool) {
	out, behind = make([][]stats.Weighted, len(ws)), make([]bool, len(ws))
	prevEnd := int64(math.MinInt64)
	for _, s := range lc.Samples {
		end := max(s.ArrivalMonoNs, prevEnd) + s.PrepNs + s.LatencyNs
		late := s.ArrivalMonoNs < prevEnd
		prevEnd = end
		i := lastIndexFunc(ws, func(w daemonWindow) bool { return end > w.start && end <= w.end })
		v := metricOf(s, metric)
		if i >= 0 && v > 0 {
			out[i] = append(out[i], stats.Weighted{V: time.Duration(v), W: 1})
			behind[i] = behind[i] || late
		}
	}
	return out, behind
}

// metricOf is s's value of metric: its TPOT, TTFT, else ("latency", "") its latency.
func metricOf(s LCSample, metric string) int64 {
	switch metric {
	case "tpot":
		return s.TPOTNs
	case "ttft":
		return s.TTFTNs
	}
	return s.LatencyNs
}

// weightedMedian is the value at which the cumulative weight of the sorted
// values first reaches half the total (the mean of two values when it
// lands exactly on a boundary, as stats.Median does for equal weights).
func weightedMedian(vals, weights []float64) float64 {
	idx := make([]int, len(vals))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return cmp.Compare(vals[a], vals[b]) })
	var total float64
	for _, w := range weights {
		total += w
	}
	var acc float64
	for k, i := range idx {
		acc += weights[i]
		if math.Abs(acc-total/2) < 1e-9 && k+1 < len(idx) {
			return (vals[i] + vals[idx[k+1]]) / 2
		}
		if acc > total/2 {
			return vals[i]
		}
	}
	return math.NaN()
}

// beStoppedMost is the largest share of any minute (or of the whole span
// of the reads, if shorter) in which the status showed a BE process
// stopped to learn an LC alone; each read stands for the time to the next.
func beStoppedMost(ss []SLOSample) float64 {
	if len(ss) < 2 || !slices.ContainsFunc(ss, func(s SLOSample) bool { return s.BEStopped }) {
		return 0
	}
	span := min(int64(minuteOf), ss[len(ss)-1].MonoNs-ss[0].MonoNs)
	if span <= 0 {
		return 0
	}
	var most float64
	for i := range ss {
		from, to := ss[i].MonoNs, ss[i].MonoNs+span
		if to > ss[len(ss)-1].MonoNs {
			from, to = ss[len(ss)-1].MonoNs-span, ss[len(ss)-1].MonoNs
		}
		var stopped int64
		for j := 0; j+1 < len(ss); j++ {
			if ss[j].BEStopped {
				stopped += max(0, min(to, ss[j+1].MonoNs)-max(from, ss[j].MonoNs))
			}
		}
		most = max(most, float64(stopped)/float64(span))
	}
	return most
}

// lastIndexFunc is the last i with f(ws[i]); -1: none.
func lastIndexFunc(ws []daemonWindow, f func(daemonWindow) bool) int {
	for i := len(ws) - 1; i >= 0; i-- {
		if f(ws[i]) {
			return i
		}
	}
	return -1
}
