package bench

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// The report's sections that compare each LC process with itself: its requests while a duty-cycled
// BE works against its own while BE idles, and gpreemptd's view of the same requests.

// writeDuty adds, for runs with a BE duty, each LC process's requests
// while BE worked against its requests while BE idled: a ratio free of the
// process-to-process spread of an eager LC. Per scenario the median over
// repetitions [range]; per run the ratio with its bootstrap interval.
func writeDuty(b *strings.Builder, res *Results) {
	var rows []*ScenarioSummary
	for _, s := range res.Summaries {
		if slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return sr.Name == s.Name && sr.Error == "" && sr.LCDuty != nil }) {
			rows = append(rows, s)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\nWithin each LC process: BE worked the first half of every %s and idled the second; the p50 of the requests that ran while it worked over the p50 of those that ran while it idled (a request counts for a half it starts %s or more into and ends within). A run with fewer than %d requests in a half is too short: shown, but left out of the median over repetitions [range]:\n\n",
		fmtDuration(res.Config.BEDuty), fmtDuration(dutyGuard), minDutyRequests)
	b.WriteString("| scenario | repetitions | LC p50 with BE / alone | TPOT p50 with BE / alone | too short |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	for _, s := range rows {
		n := 0
		if s.Duty != nil {
			n = len(s.Duty.PerRep)
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %d |\n", s.Name, n, spreadCell(s.Duty, "x"), spreadCell(s.DutyTPOT, "x"), s.DutyTooShort)
	}
	b.WriteString("\n| scenario | rep | requests with BE / alone | median with BE / alone (us) | ratio | 95% CI | |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---|\n")
	for _, sr := range res.Scenarios {
		d := sr.LCDuty
		if d == nil || sr.Error != "" {
			continue
		}
		nw, na, pw, pa := 0, 0, "–", "–"
		if d.WithBE != nil {
			nw = d.WithBE.N
		}
		if d.Alone != nil {
			na = d.Alone.N
		}
		ratio, ci := "–", intervalCell(d.P50CI)
		if d.P50Ratio > 0 { // the medians the ratio divides, so that the row adds up
			pw, pa, ratio = fmt.Sprintf("%.1f", d.MedianWithBE), fmt.Sprintf("%.1f", d.MedianAlone), fmt.Sprintf("%.3fx", d.P50Ratio)
		}
		note := ""
		if d.TooShort {
			note = fmt.Sprintf("too short (< %d a half)", minDutyRequests)
		}
		fmt.Fprintf(b, "| %s | %d | %d / %d | %s / %s | %s | %s | %s |\n", sr.Name, repOf(sr), nw, na, pw, pa, ratio, ci, note)
	}
	writeDutyPerCPU(b, res)
	writeDutyAlone(b, res)
	writeDutyByArm(b, res)
}

// writeDutyByArm adds, where SLO mode moved, each run's duty ratio by the arm it held, beside
// SLO mode's own reading of the arm.
func writeDutyByArm(b *strings.Builder, res *Results) {
	if !slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return len(sr.LCDutyByArm) > 1 }) {
		return
	}
	b.WriteString("\nThe same by the arm SLO mode held as each request started (from the status read that first showed it), each arm's ratio with its 95% bootstrap interval (its two halves resampled): a run's ratio blends its arms, the first held before SLO mode had measured; beside it the same ratio as SLO mode read it, the median of its measurements of the arm over the measurement (each its latency over the LC alone it judged it by), the number it steered by; the app's ratio per its own CPU loop around each request (its vCPU's speed taken out, roughly: the loop is timed between requests), beside what SLO mode reads of an LC it judges per CPU; its frontier at the end of the measurement (the arm's mean over its measurements as they fade, its bounds, its verdict; over the LC alone, or over the objective where the LC has more than one); and the p50 of those requests' time off the LC thread's CPU, both halves (a cost an arm adds to both, which its ratio cannot see):\n\n")
	b.WriteString("| scenario | rep | arm | from (s into the measurement) | requests with BE / alone | ratio | SLO mode's reading (measurements) | the app's per its CPU loop | SLO mode's frontier at the end | LC off its CPU a request, p50 (ms) |\n")
	b.WriteString("|---|---:|---|---:|---:|---:|---:|---:|---|---:|\n")
	for _, sr := range res.Scenarios {
		for _, a := range sr.LCDutyByArm {
			ratio, daemon, off, perCPU := "–", "–", "–", "–"
			if a.PerCPURatio > 0 {
				perCPU = fmt.Sprintf("%.3fx", a.PerCPURatio)
			}
			if a.P50Ratio > 0 {
				ratio = fmt.Sprintf("%.3fx %s", a.P50Ratio, intervalCell(a.P50CI))
			}
			switch {
			case a.DaemonMeasurements > 0 && a.DaemonMetric == "tpot": // another ratio than the row's: the app's TPOT beside it
				daemon = fmt.Sprintf("TPOT %.3fx (%d), the app's %s", a.DaemonRatio, a.DaemonMeasurements, map[bool]string{true: fmt.Sprintf("%.3fx", a.TPOTRatio), false: "–"}[a.TPOTRatio > 0])
			case a.DaemonMeasurements > 0:
				daemon = fmt.Sprintf("%.3fx (%d)", a.DaemonRatio, a.DaemonMeasurements)
			}
			if a.OffCPUMs != nil {
				off = fmt.Sprintf("%.1f", *a.OffCPUMs)
			}
			fmt.Fprintf(b, "| %s | %d | %s | %.1f | %d / %d | %s | %s | %s | %s | %s |\n", sr.Name, repOf(sr), a.Arm, a.FromS, a.WithBE, a.Alone, ratio, daemon, perCPU, frontierCell(a.Frontier), off)
		}
	}
	for _, sr := range res.Scenarios {
		if within, offs := frontierAgainstApp(sr.LCDutyByArm); len(offs) > 0 {
			fmt.Fprintf(b, "\n%s, rep %d: SLO mode's frontier against the app's ratio over each arm's spans with one (weighted by their requests): the app's within the frontier's bounds on %d of %d arms; the frontier's mean less the app's: %s.\n",
				sr.Name, repOf(sr), within, len(offs), strings.Join(offs, ", "))
		}
	}
}

// frontierAgainstApp checks each arm the frontier knew the mean of, over the LC alone, against the app's ratio over
// the arm's spans that have one: how many lie within the frontier's bounds, and each mean less the app's ("+0.017").
func frontierAgainstApp(arms []ArmDuty) (within int, offs []string) {
	var order []string
	app, weight, front := map[string]float64{}, map[string]float64{}, map[string]*FrontierArm{}
	for _, a := range arms {
		if f := a.Frontier; f != nil && f.Of == "alone" && f.Mean != nil && a.P50Ratio > 0 {
			if front[a.Arm] == nil {
				order = append(order, a.Arm)
			}
			w := float64(a.WithBE + a.Alone)
			app[a.Arm], weight[a.Arm], front[a.Arm] = app[a.Arm]+a.P50Ratio*w, weight[a.Arm]+w, f
		}
	}
	for _, arm := range order {
		f, r := front[arm], app[arm]/weight[arm]
		if f.Lo != nil && f.Hi != nil && *f.Lo <= r && r <= *f.Hi {
			within++
		}
		offs = append(offs, fmt.Sprintf("%s %+.3f", arm, *f.Mean-r))
	}
	return within, offs
}

// frontierCell is an arm as SLO mode's frontier showed it: "1.062x [0.980, 1.150] over the LC alone, might meet".
func frontierCell(f *FrontierArm) string {
	if f == nil {
		return "–"
	}
	x := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.3f", *v)
	}
	mean := x(f.Mean)
	if f.Mean != nil {
		mean += "x"
	}
	return fmt.Sprintf("%s [%s, %s] over the %s, %s", mean, x(f.Lo), x(f.Hi), cmp.Or(map[string]string{"alone": "LC alone"}[f.Of], f.Of), f.Verdict)
}

// writeDutyPerCPU adds, where the LC timed its own CPU around each request, how much slower its
// CPU ran while BE worked, and its ratio per its CPU's speed: on a shared host a vCPU's speed
// moves by itself, and an eager LC's latency with it.
func writeDutyPerCPU(b *strings.Builder, res *Results) {
	measured := func(sr *ScenarioResult) bool { return sr.LCDuty != nil && sr.LCDuty.PerCPURatio > 0 && sr.Error == "" }
	if !slices.ContainsFunc(res.Scenarios, measured) {
		return
	}
	b.WriteString("\nThe LC timed a fixed loop on its own thread between requests (its CPU's speed then, in the thread's CPU time): the loop's median with BE over alone, and the ratio of each request's latency over its loop time, a rough normalisation (a request's GPU time does not scale with its CPU); 95% bootstrap intervals:\n\n")
	b.WriteString("| scenario | rep | the LC's CPU loop, with BE / alone | 95% CI | LC p50 per its CPU's speed, with BE / alone | 95% CI |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, sr := range res.Scenarios {
		if d := sr.LCDuty; measured(sr) {
			fmt.Fprintf(b, "| %s | %d | %.3fx | %s | %.3fx | %s |\n", sr.Name, repOf(sr), d.CPURatio, intervalCell(d.CPUCI), d.PerCPURatio, intervalCell(d.PerCPUCI))
		}
	}
}

// writeDutyAlone adds, per run, the LC's requests while BE idled against those of its repetition's
// static classes (the first scenario without a daemon policy of its own that sets BE's timeslice),
// and its thread's time off its CPU per request: what a setting costs the LC in both halves, which
// the ratios above cannot see.
func writeDutyAlone(b *strings.Builder, res *Results) {
	measured := func(sr *ScenarioResult) bool { return sr.Error == "" && sr.LCDuty != nil && sr.LCDuty.MedianAlone > 0 }
	ref := map[int]*ScenarioResult{} // repetition -> its static classes
	for _, sr := range res.Scenarios {
		if _, ok := ref[repOf(sr)]; !ok && measured(sr) && sr.BETimeslice != "" && !strings.Contains(sr.Name, ":") {
			ref[repOf(sr)] = sr
		}
	}
	shown := func(sr *ScenarioResult) bool { return ref[repOf(sr)] != nil && measured(sr) } // its repetition has static classes
	if !slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return shown(sr) && ref[repOf(sr)] != sr }) {
		return
	}
	b.WriteString("\nThe LC while BE idled, against the same of its repetition's static classes (across processes: an eager LC's own speed moves 20-80% from one to the next, a graph LC's a few percent), and its thread's time off its CPU per request (its latency less its CPU time: blocked or preempted), p50 / mean; a cost paid in both halves is in neither ratio above:\n\n")
	b.WriteString("| scenario | rep | median alone (us) | over the static classes' | LC thread off its CPU per request (ms) |\n|---|---:|---:|---:|---:|\n")
	for _, sr := range res.Scenarios {
		if !shown(sr) {
			continue
		}
		var ms []float64
		for _, s := range sr.LC.Samples {
			if m, ok := s.offCPUMs(); ok {
				ms = append(ms, m)
			}
		}
		cell := "–"
		if o := stats.Summarize(ms); o.N > 0 {
			cell = fmt.Sprintf("%.1f / %.1f", o.P50, o.Mean)
		}
		fmt.Fprintf(b, "| %s | %d | %.1f | %.2fx | %s |\n", sr.Name, repOf(sr), sr.LCDuty.MedianAlone, sr.LCDuty.MedianAlone/ref[repOf(sr)].LCDuty.MedianAlone, cell)
	}
}

// writeDaemonView adds, for slo: scenarios, each LC's latency as
// gpreemptd saw it (its source and p50) beside the app's own p50 over the
// same windows, and what calibration cost BE.
func writeDaemonView(b *strings.Builder, res *Results) {
	if !slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return len(sr.Daemon) > 0 }) {
		return
	}
	fmt.Fprintf(b, "\ngpreemptd's view of each LC (GET /v1/status every --slo-poll): its latency source and the p50 of its windows that end inside the measurement (and whose own second lies inside one of BE's working halves under a duty), each weighted by its samples, beside the same taken of the app's own latencies of its requests that ended in those windows (each window's p50 as the daemon takes one: the lower of two middle values), over the windows in which the app ended a request; they agree within ±%.0f%%. The same over the windows inside BE's idle halves, what gpreemptd learns the LC alone from. The same over the windows of either half that hold a request the app began before the one ahead of it had ended (run back to back: no quiet gap for a trace to divide them by). For a relative objective, the reference gpreemptd judged the LC against (its target over the factor, the median of the measurement's reads) beside the app's own p50 while BE idled over the measurement under arms without the gate (whose launch probes' traps are a cost of sharing, not the LC alone). For a traced LC, how many of the status reads through the measurement said its requests vary (so requests run back to back were left undivided), and how often that changed:\n\n", 100*daemonAgreement)
	b.WriteString("| scenario | repetitions | daemon p50 / app p50: median [min–max] | repetitions that agree |\n|---|---:|---:|---:|\n")
	for _, s := range res.Summaries {
		if s.DaemonP50 != nil {
			fmt.Fprintf(b, "| %s | %d | %s | %d of %d |\n", s.Name, len(s.DaemonP50.PerRep), spreadCell(s.DaemonP50, "x"), s.DaemonAgrees, s.Reps-s.Failed)
		}
	}
	b.WriteString("\n| scenario | rep | LC | source | metric | windows | daemon p50 (us, samples) | app p50 (us, requests) | daemon / app | BE idle: daemon / app (us, windows) | requests run back to back: daemon / app (us, windows) | reference / app alone (us) | first sample / measurement | BE stopped, most of a minute | requests vary: reads of those traced (changes) |\n")
	b.WriteString("|---|---:|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, sr := range res.Scenarios {
		for _, v := range sr.Daemon {
			src := cmp.Or(v.Source, "–")
			if len(v.Sources) > 1 {
				var all []string
				for _, k := range slices.Sorted(maps.Keys(v.Sources)) {
					all = append(all, fmt.Sprintf("%s %d", k, v.Sources[k]))
				}
				src += " (" + strings.Join(all, ", ") + ")"
			}
			dp, ap, ratio := "–", "–", "–"
			if v.DaemonP50Us > 0 {
				dp = fmt.Sprintf("%.1f (%d)", v.DaemonP50Us, v.DaemonSamples)
			}
			if v.AppP50Us > 0 {
				ap = fmt.Sprintf("%.1f (%d)", v.AppP50Us, v.AppRequests)
			}
			if v.Ratio > 0 {
				ratio = fmt.Sprintf("%.2fx", v.Ratio)
				if !v.Agrees {
					ratio += " (outside ±10%)"
				}
			}
			at := func(s float64) string {
				return map[bool]string{true: fmt.Sprintf("+%.1f s", s), false: "never"}[s >= 0]
			}
			first := at(v.FirstSampleS) + " / " + at(v.FirstMeasuredS)
			ref := "–" // gpreemptd's reference against the app's own p50 while BE idled
			if v.ReferenceRatio > 0 {
				ref = fmt.Sprintf("%.0f / %.0f = %.2fx", v.ReferenceUs, v.AppAloneUs, v.ReferenceRatio)
			}
			paired := func(daemon, app, ratio float64, windows int) string { // over a subset of the windows
				if ratio <= 0 {
					return "–"
				}
				return fmt.Sprintf("%.0f / %.0f = %.2fx (%d)", daemon, app, ratio, windows)
			}
			idle := paired(v.AloneDaemonP50Us, v.AloneAppP50Us, v.AloneRatio, v.AloneWindows)
			behind := paired(v.BehindDaemonP50Us, v.BehindAppP50Us, v.BehindRatio, v.BehindWindows)
			vary := "–"
			if v.TracedReads > 0 {
				vary = fmt.Sprintf("%d of %d (%d)", v.VaryReads, v.TracedReads, v.VaryFlips)
			}
			fmt.Fprintf(b, "| %s | %d | %s (pid %d) | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %.1f%% | %s |\n",
				sr.Name, repOf(sr), v.Label, v.PID, src, v.Metric, v.Windows, dp, ap, ratio, idle, behind, ref, first, 100*sr.BEStoppedMost, vary)
		}
	}
	writeAbsolute(b, res)
}

// writeAbsolute judges each LC with an absolute objective by the app's own latencies: met over
// the whole measurement, and whether any setting could have met it (the LC alone under it).
func writeAbsolute(b *strings.Builder, res *Results) {
	head := false
	for _, sr := range res.Scenarios {
		for _, v := range sr.Daemon {
			if v.TargetUs <= 0 || v.AppRunUs <= 0 {
				continue
			}
			if !head {
				b.WriteString("\nAn absolute objective against the app's own latencies: where it came from (`@OWN_P50@`: the p50 of the LC's own requests in BE's idle halves before its lead-in); the app's quantile over the whole measurement (both of BE's halves) over the objective, met at 1.00x or under; its quantile while BE idled (arms without the gate) over the objective, where over 1.00x no setting could meet it (its requests in brackets); and, for `@OWN_P50@`, the median of the LC's CPU loop over those requests over that while its alone was taken (over 1.00x its CPU ran slower, BE idle in both: an eager LC's latency follows its CPU's speed, which no GPU setting moves):\n\n")
				b.WriteString("| scenario | rep | LC | objective (us) | from | app over the measurement (us) | over the objective | app with BE idle (us, requests) | over the objective | its CPU loop with BE idle / alone | verdict |\n|---|---:|---|---:|---|---:|---:|---:|---:|---:|---|\n")
				head = true
			}
			alone, aloneRatio, verdict := "–", "–", "met"
			if v.AppRunUs > v.TargetUs {
				verdict = "**missed**"
			}
			if v.AppAloneUs > 0 {
				alone, aloneRatio = fmt.Sprintf("%.1f (%d)", v.AppAloneUs, v.AppAloneRequests), fmt.Sprintf("%.3fx", v.AppAloneUs/v.TargetUs)
				if v.AppAloneUs > v.TargetUs {
					verdict += ": out of reach, the LC alone over it"
				}
			}
			from, cpu := "–", "–"
			if o := sr.OwnAloneUs; o != nil {
				from = fmt.Sprintf("its LC alone: p50 %.1f us of %d requests", o.P50, o.N)
			}
			if o := sr.OwnAloneCPUMeterUs; o != nil && o.P50 > 0 && v.AppAloneCPUMeterUs > 0 {
				cpu = fmt.Sprintf("%.3fx", v.AppAloneCPUMeterUs/o.P50)
			}
			fmt.Fprintf(b, "| %s | %d | %s (pid %d) | %.0f | %s | %.1f | %.3fx | %s | %s | %s | %s |\n", sr.Name, repOf(sr), v.Label, v.PID,
				v.TargetUs, from, v.AppRunUs, v.AppRunUs/v.TargetUs, alone, aloneRatio, cpu, verdict)
		}
	}
}
