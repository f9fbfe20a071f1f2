package bench

import (
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// WriteMarkdown renders results as results.md: a header describing the run,
// one table row per scenario, then the gpreemptctl calls, warnings and
// errors. The output depends only on res, so it is golden-tested.
func WriteMarkdown(w io.Writer, res *Results) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# gpreempt-bench results\n\n")
	d := res.Device
	fmt.Fprintf(&b, "- Device: %s (%d SMs, compute capability %s, driver CUDA %d.%d), host %s, started %s\n",
		d.Name, d.SMs, d.CC, d.Driver/1000, d.Driver%1000/10, res.Host, res.StartedAt.Format("2006-01-02 15:04:05 MST"))
	c := res.Config
	if c.Duration != "" {
		fmt.Fprintf(&b, "- Per scenario: %s measured after %s settle\n", c.Duration, c.Settle)
	}
	if res.usesRuntime(RuntimeKernels) {
		fmt.Fprintf(&b, "- LC: lc_work, %s x %d threads, %d iters%s, one request every %s, prep %s, %d requests\n",
			blocksOr(c.LCBlocks, "1 block/SM"), c.LCThreads, c.LCIters, calibratedNote(c.LCCalibrated), c.Period, c.Prep, c.Requests)
		fmt.Fprintf(&b, "- BE: be_fma, %s x %d threads, %d iters%s, %d in flight\n",
			blocksOr(c.BEBlocks, "2 blocks/SM"), c.BEThreads, c.BEIters, calibratedNote(c.BECalibrated), c.BEQueue)
	}
	if res.usesRuntime(RuntimePyTorch) {
		mode := "eager"
		if c.PyGraph {
			mode = "CUDA graph"
		}
		fmt.Fprintf(&b, "- PyTorch: LC %s batch %d (%s) every %s (%d requests); BE %s training, batch %d (BE rate in iterations/s)\n",
			c.PyLCModel, c.PyLCBatch, mode, c.PyPeriod, c.PyRequests, c.PyBEModel, c.PyBEBatch)
	}
	b.WriteString("\n")
	b.WriteString("| scenario | LC p50 / p99 / max (us) | vs standalone p50 / p99 | BE kernels/s | BE vs be-only | LC GPU held |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|\n")
	for _, sr := range res.Scenarios {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s |\n",
			scenarioLabel(sr), lcCell(sr), ratioCell(sr), beCell(sr), pctOrDash(sr.BEVsBEOnly), heldCell(sr))
	}

	var calls []string
	for _, sr := range res.Scenarios {
		for _, call := range sr.Ctl {
			argv := append([]string{filepath.Base(call.Argv[0])}, call.Argv[1:]...)
			calls = append(calls, fmt.Sprintf("- %s: `%s` (exit %d, %.1f ms)", sr.Name, strings.Join(argv, " "), call.ExitCode, call.DurationMs))
		}
	}
	if len(calls) > 0 {
		b.WriteString("\ngpreemptctl calls:\n\n" + strings.Join(calls, "\n") + "\n")
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
			sr.Name, ps.Backend, ps.Hints, ps.Early, ps.Late, ps.Expired, ps.Dropped, ps.TimedOut, held.P50, held.P99, sw.P50, sw.P99, lag.P50, lag.P99, lead.P50, lead.P99))
	}
	if len(pre) > 0 {
		b.WriteString("\nPre-preemption:\n\n" + strings.Join(pre, "\n") + "\n")
	}
	var notes []string
	for _, sr := range res.Scenarios {
		for _, wn := range sr.Warnings {
			notes = append(notes, fmt.Sprintf("- %s: warning: %s", sr.Name, wn))
		}
		if sr.Error != "" {
			notes = append(notes, fmt.Sprintf("- %s: **error**: %s", sr.Name, firstLine(sr.Error)))
		}
	}
	if res.Error != "" {
		notes = append(notes, "- run failed: "+firstLine(res.Error))
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func nsToUs(ns []int64) []float64 {
	out := make([]float64, len(ns))
	for i, v := range ns {
		out[i] = float64(v) / 1e3
	}
	return out
}

func (res *Results) usesRuntime(runtime string) bool {
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

func ratioCell(sr *ScenarioResult) string {
	if sr.LCP50VsStandalone == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2fx / %.2fx", sr.LCP50VsStandalone, sr.LCP99VsStandalone)
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
