package bench

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// finalize derives everything the reports show from the runs: ratios per
// run, then the per-scenario summaries.
func finalize(res *Results, seed uint64) {
	computeRatios(res)
	dutyIntervals(res, rand.New(rand.NewPCG(seed, 0xbb67ae8584caa73b)))
	armIntervals(res, rand.New(rand.NewPCG(seed, 0x3c6ef372fe94f82b)))
	res.Summaries = summarize(res, seed)
}

// writeReports writes results.json, results.md, cdf.png and timeline.png,
// and prints the Markdown.
func (r *runner) writeReports(res *Results) error {
	finalize(res, r.o.Seed)
	var errs []error
	if err := writeJSON(filepath.Join(r.o.Out, "results.json"), nil, res); err != nil {
		errs = append(errs, err)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil {
		errs = append(errs, err)
	} else {
		if err := os.WriteFile(filepath.Join(r.o.Out, "results.md"), md.Bytes(), 0o644); err != nil {
			errs = append(errs, err)
		}
		_, _ = r.env.stdout.Write(md.Bytes())
	}
	if err := PlotCDF(filepath.Join(r.o.Out, "cdf.png"), res); err != nil {
		errs = append(errs, fmt.Errorf("cdf.png: %w", err))
	}
	if err := PlotTimeline(filepath.Join(r.o.Out, "timeline.png"), res); err != nil {
		errs = append(errs, fmt.Errorf("timeline.png: %w", err))
	}
	if err := PlotFrontier(filepath.Join(r.o.Out, "frontier.png"), res); err != nil {
		errs = append(errs, fmt.Errorf("frontier.png: %w", err))
	}
	if err := PlotSLO(filepath.Join(r.o.Out, "slo.png"), res); err != nil {
		errs = append(errs, fmt.Errorf("slo.png: %w", err))
	}
	r.log.Info("wrote", "dir", r.o.Out)
	return errors.Join(errs...)
}

// WriteMarkdown renders results as results.md: a header describing the run,
// the per-scenario summary over repetitions with confidence intervals, the
// GPU's clocks and power, one row per scenario run, then the gpreemptctl
// calls, warnings and errors. The output depends only on res, so it is
// golden-tested.
func WriteMarkdown(w io.Writer, res *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# gpreempt-bench results\n\n")
	writeHeader(&b, res)
	writeSummary(&b, res)
	writeRequestShape(&b, res)
	writeDuty(&b, res)
	writeDaemonView(&b, res)
	writeClocks(&b, res)
	writeHost(&b, res)
	writeTenants(&b, res)
	writeRuns(&b, res)
	writeNotes(&b, res)
	_, err := io.WriteString(w, b.String())
	return err
}

func writeHeader(b *strings.Builder, res *Results) {
	d := res.Device
	fmt.Fprintf(b, "- Device: %s (%d SMs, compute capability %s, driver CUDA %d.%d), host %s, started %s\n",
		d.Name, d.SMs, d.CC, d.Driver/1000, d.Driver%1000/10, res.Host, res.StartedAt.Format("2006-01-02 15:04:05 MST"))
	c := &res.Config
	reps := max(c.Repeat, 1)
	if c.Duration != 0 {
		rs := "one repetition (no run-to-run spread: intervals cover request-to-request noise only)"
		if reps > 1 {
			rs = fmt.Sprintf("%d repetitions, interleaved (every scenario once, then again)", reps)
		}
		fmt.Fprintf(b, "- Per scenario run: %s measured after %s settle; %s\n", fmtDuration(c.Duration), fmtDuration(c.Settle), rs)
		if c.BEDuty > 0 && slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return sr.BEDuty > 0 }) {
			fmt.Fprintf(b, "- BE duty (--be-duty %s): in the runs marked so below, BE worked the first half of every %s and idled the second, and the run measured long enough for %d LC requests a half; the latency columns take both halves, BE's rate is its rate while it worked (in both the scenario and be-only)\n", fmtDuration(c.BEDuty), fmtDuration(c.BEDuty), minDutyRequests)
		}
		if c.LCCPUs != "" || c.BECPUs != "" {
			fmt.Fprintf(b, "- Workers pinned: LC to CPUs %s, BE to CPUs %s\n", cmp.Or(c.LCCPUs, "any"), cmp.Or(c.BECPUs, "any"))
		}
		if c.SLOLeadIn > 0 && slices.ContainsFunc(c.Scenarios, func(s Scenario) bool { return s.SLO }) {
			fmt.Fprintf(b, "- slo: scenarios: the LC runs %s (its latency pushed to gpreemptd) before its measurement starts; the daemon's choices through both are in the SLO table\n", fmtDuration(c.SLOLeadIn))
		}
	}
	if res.usesRuntime(RuntimeKernels) {
		n := c.lcRequests(Scenario{Runtime: RuntimeKernels})
		how := "from --requests"
		if c.Requests == 0 {
			how = fmt.Sprintf("--duration / period, at least %d", minP99Requests)
		}
		fmt.Fprintf(b, "- LC: lc_work, %s x %d threads, %d iters%s, one request every %s, prep %s, %d requests per run (%s; p99 from the %d slowest)\n",
			blocksOr(c.LCBlocks, "1 block/SM"), c.LCThreads, c.LCIters, calibratedNote(c.LCCalibrateUs > 0), fmtDuration(c.Period), c.Prep, n, how, n/100)
		fmt.Fprintf(b, "- BE: be_fma, %s x %d threads, %d iters%s, %d in flight\n",
			blocksOr(c.BEBlocks, "2 blocks/SM"), c.BEThreads, c.BEIters, calibratedNote(c.BECalibrateMs > 0), c.BEQueue)
	}
	for _, rt := range []Runtime{RuntimePyTorch, RuntimePyTorchEager} {
		if !res.usesRuntime(rt) {
			continue
		}
		mode := "eager"
		if c.PyGraph && rt == RuntimePyTorch {
			mode = "CUDA graph"
		}
		fmt.Fprintf(b, "- %s: LC %s batch %d (%s) every %s, %d requests per run; BE %s training, batch %d (BE rate in iterations/s)\n",
			rt, c.PyLCModel, c.PyLCBatch, mode, fmtDuration(c.PyPeriod), c.lcRequests(Scenario{Runtime: rt}), c.PyBEModel, c.PyBEBatch)
	}
	b.WriteString("- Ratios: to the standalone (and be-only) run of the same repetition; \"CI\" is a bootstrap 95% interval of the ratio of quantiles over all repetitions' requests together; \"clock-normalised\" scales the LC latency by the scenario's SM clock over the standalone one's (exact only for clock-bound kernels under a steady clock: NVML shows it ~100 ms late)\n")
}

func writeSummary(b *strings.Builder, res *Results) {
	if len(res.Summaries) == 0 {
		return
	}
	b.WriteString("\n| scenario | reps | LC p50 / p99 (us, pooled) | p50 vs standalone: median [min–max] | p50 CI | p99 vs standalone: median [min–max] | p99 CI | clock-normalised p50 / p99 | BE vs be-only |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range res.Summaries {
		lat := "–"
		if s.LCLatencyUs != nil {
			lat = fmt.Sprintf("%.1f / %.1f", s.LCLatencyUs.P50, s.LCLatencyUs.P99)
		}
		clock := "–"
		if s.P50Clock != nil && s.P99Clock != nil {
			clock = fmt.Sprintf("%.2fx / %.2fx", s.P50Clock.Median, s.P99Clock.Median)
		}
		reps := strconv.Itoa(s.Reps - s.Failed)
		if s.Failed > 0 {
			reps += fmt.Sprintf(" (%d failed)", s.Failed)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.Name, reps, lat,
			spreadCell(s.P50, "x"), ciCell(s.P50), spreadCell(s.P99, "x"), ciCell(s.P99), clock, spreadCell(s.BE, "%"))
	}
}

// spreadCell renders a ratio's median and range: "1.02x [0.98–1.10]", or a
// percentage.
func spreadCell(rs *RatioStats, unit string) string {
	if rs == nil {
		return "–"
	}
	f := func(v float64) string {
		if unit == "%" {
			return fmt.Sprintf("%.1f%%", 100*v)
		}
		return fmt.Sprintf("%.2fx", v)
	}
	if len(rs.PerRep) == 1 {
		return f(rs.Median)
	}
	return fmt.Sprintf("%s [%s–%s]", f(rs.Median), f(rs.Min), f(rs.Max))
}

func ciCell(rs *RatioStats) string {
	if rs == nil {
		return "–"
	}
	return intervalCell(rs.CI95)
}

// intervalCell is a 95% interval's cell ("–": none).
func intervalCell(iv *stats.Interval) string {
	if iv == nil {
		return "–"
	}
	return fmt.Sprintf("[%.2f, %.2f]", iv.Lo, iv.Hi)
}

// writeRequestShape adds, for the LLM and gate- scenarios, time to first token and per output token against standalone,
// the LC's busy fraction and the BE a request gate allows at it.
func writeRequestShape(b *strings.Builder, res *Results) {
	shaped := func(s *ScenarioSummary) bool {
		sc, err := parseScenario(s.Name)
		return s.LCBusy > 0 && (s.Runtime.LLM() || err == nil && sc.Gate)
	}
	if !slices.ContainsFunc(res.Summaries, shaped) {
		return
	}
	fmt.Fprintf(b, "\nRequest shape: an LLM LC's time to first token and per output token (p50 against standalone), the LC's busy fraction alone (share of wall time with a request in flight) and the BE a gate allows at it (1 - busy - two %d us switches a request):\n\n", class.SwitchTime/time.Microsecond)
	b.WriteString("| scenario | TTFT p50 vs standalone | TPOT p50 vs standalone | LC busy alone | BE bound with a gate | BE vs be-only |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, s := range res.Summaries {
		if !shaped(s) {
			continue
		}
		busy, bound := "–", "–"
		if s.LCBusy > 0 {
			busy, bound = fmt.Sprintf("%.1f%%", 100*s.LCBusy), fmt.Sprintf("%.1f%%", 100*s.BEBound)
		}
		fmt.Fprintf(b, "| %s | %s | %s | %s | %s | %s |\n", s.Name, spreadCell(s.TTFTP50, "x"), spreadCell(s.TPOTP50, "x"), busy, bound, spreadCell(s.BE, "%"))
	}
}

// writeHost adds, per run, the CPU time the host took from the machine's
// CPUs while the LC ran (steal, on a virtual machine) and the share of its
// requests' time the LC's thread was on a CPU.
func writeHost(b *strings.Builder, res *Results) {
	if !slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return sr.Host != nil || sr.LCOnCPU > 0 }) {
		return
	}
	b.WriteString("\nHost CPUs while the LC ran (/proc/stat; steal: time the hypervisor took) and the share of its requests' time the LC's thread was on a CPU:\n\n")
	b.WriteString("| scenario | rep | CPU steal, all CPUs | CPU steal, the LC's CPUs | LC thread on a CPU |\n")
	b.WriteString("|---|---:|---:|---:|---:|\n")
	pct := func(v float64) string { return fmt.Sprintf("%.1f%%", 100*v) }
	for _, sr := range res.Scenarios {
		if sr.Host == nil && sr.LCOnCPU == 0 {
			continue
		}
		all, lc, on := "–", "–", "–"
		if sr.Host != nil {
			all = pct(sr.Host.Steal)
			if sr.Host.LCCPUsSteal != nil {
				lc = pct(*sr.Host.LCCPUsSteal)
			}
		}
		if sr.LCOnCPU > 0 {
			on = pct(sr.LCOnCPU)
		}
		fmt.Fprintf(b, "| %s | %d | %s | %s | %s |\n", sr.Name, repOf(sr), all, lc, on)
	}
}

func writeClocks(b *strings.Builder, res *Results) {
	if !slices.ContainsFunc(res.Summaries, func(s *ScenarioSummary) bool { return s.GPU != nil }) {
		return
	}
	b.WriteString("\nGPU during the measurement windows (NVML):\n\n")
	b.WriteString("| scenario | SM clock p50 / min (MHz) | power p50 / max (W) | temperature max (C) | throttle reasons (share of readings) |\n")
	b.WriteString("|---|---:|---:|---:|---|\n")
	for _, s := range res.Summaries {
		g := s.GPU
		if g == nil {
			fmt.Fprintf(b, "| %s | – | – | – | – |\n", s.Name)
			continue
		}
		power := "–"
		if g.PowerP50 > 0 {
			power = fmt.Sprintf("%.0f / %.0f", g.PowerP50, g.PowerMax)
		}
		var reasons []string
		for _, n := range g.throttleList() {
			reasons = append(reasons, fmt.Sprintf("%s %.0f%%", n, 100*g.ThrottleReasons[n]))
		}
		if len(reasons) == 0 {
			reasons = []string{"none"}
		}
		fmt.Fprintf(b, "| %s | %.0f / %.0f | %s | %.0f | %s |\n", s.Name, g.SMClockP50, g.SMClockMin, power, g.TempMax, strings.Join(reasons, ", "))
	}
}

func writeTenants(b *strings.Builder, res *Results) {
	if !slices.ContainsFunc(res.Summaries, func(s *ScenarioSummary) bool { return len(s.Tenants) > 0 }) {
		return
	}
	b.WriteString("\nSeveral tenants:\n\n| scenario | LC worker | p50 vs standalone | p99 vs standalone |\n|---|---|---:|---:|\n")
	for _, s := range res.Summaries {
		for _, t := range s.Tenants {
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", s.Name, t.Label, spreadCell(t.P50, "x"), spreadCell(t.P99, "x"))
		}
		if s.BESplit != nil {
			fmt.Fprintf(b, "| %s | BE split (be1 : be2) | %s | |\n", s.Name, spreadCell(s.BESplit, "x"))
		}
	}
}

func writeRuns(b *strings.Builder, res *Results) {
	reps := slices.ContainsFunc(res.Scenarios, func(sr *ScenarioResult) bool { return sr.Rep > 0 })
	b.WriteString("\nEvery run:\n\n")
	if reps {
		b.WriteString("| scenario | rep | LC p50 / p99 / max (us) | vs standalone p50 / p99 | clock-normalised | BE kernels/s | BE vs be-only | LC GPU held |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|\n")
	} else {
		b.WriteString("| scenario | LC p50 / p99 / max (us) | vs standalone p50 / p99 | clock-normalised | BE kernels/s | BE vs be-only | LC GPU held |\n")
		b.WriteString("|---|---:|---:|---:|---:|---:|---:|\n")
	}
	for _, sr := range res.Scenarios {
		rep := ""
		if reps {
			rep = fmt.Sprintf(" %d |", sr.Rep)
		}
		fmt.Fprintf(b, "| %s |%s %s | %s | %s | %s | %s | %s |\n",
			scenarioLabel(sr), rep, lcCell(sr), ratioCell(sr.LCP50VsStandalone, sr.LCP99VsStandalone),
			ratioCell(sr.LCP50VsStandaloneClock, sr.LCP99VsStandaloneClock), beCell(sr), pctOrDash(sr.BEVsBEOnly), heldCell(sr))
	}
}

func writeNotes(b *strings.Builder, res *Results) {
	runName := func(sr *ScenarioResult) string {
		if sr.Rep > 0 {
			return fmt.Sprintf("%s (rep %d)", sr.Name, sr.Rep)
		}
		return sr.Name
	}
	var calls []string
	for _, sr := range res.Scenarios {
		for _, call := range sr.Ctl {
			argv := append([]string{filepath.Base(call.Argv[0])}, call.Argv[1:]...)
			calls = append(calls, fmt.Sprintf("- %s: `%s` (exit %d, %.1f ms)", runName(sr), strings.Join(argv, " "), call.ExitCode, call.DurationMs))
		}
	}
	if len(calls) > 0 {
		b.WriteString("\ngpreemptctl calls:\n\n" + strings.Join(calls, "\n") + "\n")
	}
	var classed []string
	for _, sr := range res.Scenarios {
		if len(sr.DaemonClassed) > 0 {
			classed = append(classed, fmt.Sprintf("- %s: %s", runName(sr), daemonClassedLine(sr.DaemonClassed)))
		}
	}
	var slo []string
	for _, sr := range res.Scenarios {
		if len(sr.SLO) > 0 {
			slo = append(slo, fmt.Sprintf("- %s: %s", runName(sr), sloLine(sr.SLO, sr.WindowStartMonoNs, switchAtNs(sr.LC))))
		}
	}
	if len(slo) > 0 {
		b.WriteString("\ngpreemptd SLO mode (GET /v1/status through the lead-in and the measurement):\n\n" + strings.Join(slo, "\n") + "\n")
	}
	if len(classed) > 0 {
		b.WriteString("\nClassed by gpreemptd (READY to the first read-back showing the class; resolution: one `gpreemptctl get-timeslice`):\n\n" + strings.Join(classed, "\n") + "\n")
	}
	var pre []string
	for _, sr := range res.Scenarios {
		if sr.LC == nil || sr.LC.Prepreempt == nil {
			continue
		}
		ps := sr.LC.Prepreempt
		held := stats.Summarize(nsToUs(ps.HeldSamples))
		sw := stats.Summarize(nsToUs(ps.SwitchInSamples))
		lag := stats.Summarize(nsToUs(ps.LaunchLagSamples))
		lead := stats.Summarize(nsToUs(ps.ReadyLeadSamples))
		pre = append(pre, fmt.Sprintf("- %s: %s flags; %d hints: %d early, %d late, %d expired, %d dropped, %d timed out; spinner held the GPU p50 %.1f / p99 %.1f us per request; switch-in p50 %.1f / p99 %.1f us; launch lag p50 %.1f / p99 %.1f us; Ready after launch p50 %.1f / p99 %.1f us",
			runName(sr), ps.Backend, ps.Hints, ps.Early, ps.Late, ps.Expired, ps.Dropped, ps.TimedOut, held.P50, held.P99, sw.P50, sw.P99, lag.P50, lag.P99, lead.P50, lead.P99))
	}
	if len(pre) > 0 {
		b.WriteString("\nPre-preemption:\n\n" + strings.Join(pre, "\n") + "\n")
	}
	var notes []string
	for _, s := range res.Summaries {
		for _, wn := range s.Warnings {
			notes = append(notes, fmt.Sprintf("- %s: warning: %s", s.Name, wn))
		}
	}
	for _, sr := range res.Scenarios {
		for _, wn := range sr.Warnings {
			notes = append(notes, fmt.Sprintf("- %s: warning: %s", runName(sr), wn))
		}
		if sr.Error != "" {
			notes = append(notes, fmt.Sprintf("- %s: **error**: %s", runName(sr), firstLine(sr.Error)))
		}
	}
	if res.Error != "" {
		notes = append(notes, "- run failed: "+firstLine(res.Error))
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
}

func nsToUs(ns []int64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(v) / 1e3
	}
	return out
}

func (res *Results) usesRuntime(runtime Runtime) bool {
	for _, sr := range res.Scenarios {
		if sr.Runtime == runtime {
			return true
		}
	}
	return false
}

func blocksOr(n int, dflt string) string {
	if n == 0 {
		return dflt
	}
	return fmt.Sprintf("%d blocks", n)
}

func calibratedNote(calibrated bool) string {
	if calibrated {
		return " (calibrated)"
	}
	return ""
}

func scenarioLabel(sr *ScenarioResult) string {
	if sr.Error != "" {
		return sr.Name + " (failed)"
	}
	return sr.Name
}

func lcCell(sr *ScenarioResult) string {
	if sr.LCLatencyUs == nil {
		return "–"
	}
	s := sr.LCLatencyUs
	return fmt.Sprintf("%.1f / %.1f / %.1f", s.P50, s.P99, s.Max)
}

func ratioCell(p50, p99 float64) string {
	if p50 == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx / %.2fx", p50, p99)
}

func beCell(sr *ScenarioResult) string {
	switch len(sr.BE) {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%.1f", sr.BE[0].WindowPerSec)
	}
	parts := make([]string, len(sr.BE))
	for i, sh := range sr.BE {
		parts[i] = fmt.Sprintf("%.1f", sh.WindowPerSec)
	}
	cell := strings.Join(parts, " + ")
	if len(sr.BE) == 2 && sr.BE[1].WindowPerSec > 0 {
		cell += fmt.Sprintf(" (%.2f:1)", sr.BE[0].WindowPerSec/sr.BE[1].WindowPerSec)
	}
	return cell
}

func heldCell(sr *ScenarioResult) string {
	if sr.LC == nil {
		return "–"
	}
	return fmt.Sprintf("%.2f%%", 100*sr.LCGPUHeldShare)
}

func pctOrDash(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*v)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
