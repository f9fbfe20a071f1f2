package bench

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// ErrMismatch marks two results that measured different things.
var ErrMismatch = errors.New("results not comparable")

var compareCommand = &cli.Command{
	Name:      "compare",
	Usage:     "compare two results.json side by side (before/after a change)",
	ArgsUsage: "A.json B.json",
	Description: "Prints, per scenario present in both, the LC p50 and p99 ratios to standalone\n" +
		"(median over repetitions and bootstrap 95% CI) and the BE throughput kept, A beside B,\n" +
		"and says where the intervals do not overlap. Reads results.json of any version\n" +
		"(also gzipped); a file without repetitions counts as one, and has a CI only if it\n" +
		"holds the request samples. Refuses files from different GPUs or LC workloads\n" +
		"(period, preparation) unless --allow-mismatch.\n" +
		"Exit codes: 0 compared, 2 usage, 5 unreadable file, 6 not comparable.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table (Markdown) or json"},
		&cli.BoolFlag{Name: "allow-mismatch", Usage: "compare even when the device or the LC workload differ (noted in the output)"},
	},
	Action: func(c *cli.Context) error {
		if c.NArg() != 2 {
			return fmt.Errorf("%w: compare takes two results files, got %d arguments", ErrInvalidArgument, c.NArg())
		}
		format := c.String("output")
		if format != "table" && format != "json" {
			return fmt.Errorf("%w: -o %q: want table or json", ErrInvalidArgument, format)
		}
		a, err := LoadResults(c.Args().Get(0))
		if err != nil {
			return err
		}
		b, err := LoadResults(c.Args().Get(1))
		if err != nil {
			return err
		}
		cmp, err := Compare(a, b, c.Bool("allow-mismatch"))
		if err != nil {
			return err
		}
		cmp.A, cmp.B = c.Args().Get(0), c.Args().Get(1)
		if format == "json" {
			return writeJSON("-", c.App.Writer, cmp)
		}
		return cmp.WriteMarkdown(c.App.Writer)
	},
}

// Comparison is the outcome of compare.
type Comparison struct {
	A string `json:"a,omitempty"`
	B string `json:"b,omitempty"`
	// Notes are mismatches allowed with --allow-mismatch, and scenarios
	// present in one file only.
	Notes []string     `json:"notes,omitempty"`
	Rows  []CompareRow `json:"rows"`
}

// CompareRow is one scenario in both files.
type CompareRow struct {
	Scenario string           `json:"scenario"`
	A        *ScenarioSummary `json:"a"`
	B        *ScenarioSummary `json:"b"`
	// Verdict says, for p50 and p99, whether B's interval lies wholly
	// below or above A's ("" where they overlap or are missing).
	Verdict []string `json:"verdict,omitempty"`
}

// Compare pairs the scenarios of a and b by name.
func Compare(a, b *Results, allowMismatch bool) (*Comparison, error) {
	cmp := &Comparison{}
	var mismatches []string
	if a.Device.Name != b.Device.Name {
		mismatches = append(mismatches, fmt.Sprintf("device %q against %q", a.Device.Name, b.Device.Name))
	}
	ca, cb := &a.Config, &b.Config
	if ca.Period != cb.Period {
		mismatches = append(mismatches, fmt.Sprintf("LC period %v against %v", ca.Period, cb.Period))
	}
	if ca.Prep != cb.Prep {
		mismatches = append(mismatches, fmt.Sprintf("LC preparation %v against %v", ca.Prep, cb.Prep))
	}
	if ca.LCCalibrateUs == 0 && cb.LCCalibrateUs == 0 && ca.LCIters != cb.LCIters {
		mismatches = append(mismatches, fmt.Sprintf("lc_work iterations %d against %d", ca.LCIters, cb.LCIters))
	}
	if len(mismatches) > 0 {
		if !allowMismatch {
			return nil, fmt.Errorf("%w: %s (--allow-mismatch compares anyway)", ErrMismatch, strings.Join(mismatches, "; "))
		}
		for _, m := range mismatches {
			cmp.Notes = append(cmp.Notes, "mismatch: "+m)
		}
	}
	byName := map[string]*ScenarioSummary{}
	for _, s := range b.Summaries {
		byName[s.Name] = s
	}
	inA := map[string]bool{}
	for _, sa := range a.Summaries {
		inA[sa.Name] = true
		sb := byName[sa.Name]
		if sb == nil {
			cmp.Notes = append(cmp.Notes, fmt.Sprintf("%s: only in A", sa.Name))
			continue
		}
		cmp.Rows = append(cmp.Rows, CompareRow{Scenario: sa.Name, A: sa, B: sb, Verdict: verdicts(sa, sb)})
	}
	for _, sb := range b.Summaries {
		if !inA[sb.Name] {
			cmp.Notes = append(cmp.Notes, fmt.Sprintf("%s: only in B", sb.Name))
		}
	}
	if len(cmp.Rows) == 0 {
		return nil, fmt.Errorf("%w: no scenario in common", ErrMismatch)
	}
	return cmp, nil
}

func verdicts(a, b *ScenarioSummary) []string {
	var out []string
	for _, q := range []struct {
		name   string
		ra, rb *RatioStats
	}{{"p50", a.P50, b.P50}, {"p99", a.P99, b.P99}} {
		if q.ra == nil || q.rb == nil || q.ra.CI95 == nil || q.rb.CI95 == nil {
			continue
		}
		switch ia, ib := *q.ra.CI95, *q.rb.CI95; {
		case ib.Hi < ia.Lo:
			out = append(out, q.name+" lower in B")
		case ib.Lo > ia.Hi:
			out = append(out, q.name+" higher in B")
		}
	}
	return out
}

// WriteMarkdown renders the comparison as a table.
func (cmp *Comparison) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	if cmp.A != "" {
		fmt.Fprintf(&b, "A: %s\nB: %s\n\n", cmp.A, cmp.B)
	}
	b.WriteString("| scenario | reps A / B | LC p50 / p99 us A | LC p50 / p99 us B | p50 ratio A [CI] | p50 ratio B [CI] | p99 ratio A [CI] | p99 ratio B [CI] | BE kept A / B | differs |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range cmp.Rows {
		verdict := "within noise"
		switch {
		case len(r.Verdict) > 0:
			verdict = strings.Join(r.Verdict, ", ")
		case r.A.P50 == nil || r.A.P50.CI95 == nil || r.B.P50 == nil || r.B.P50.CI95 == nil:
			verdict = "–"
		}
		fmt.Fprintf(&b, "| %s | %d / %d | %s | %s | %s | %s | %s | %s | %s / %s | %s |\n", r.Scenario,
			r.A.Reps-r.A.Failed, r.B.Reps-r.B.Failed, latPair(r.A.LCLatencyUs), latPair(r.B.LCLatencyUs),
			ratioCI(r.A.P50), ratioCI(r.B.P50), ratioCI(r.A.P99), ratioCI(r.B.P99),
			medianPct(r.A.BE), medianPct(r.B.BE), verdict)
	}
	for _, n := range cmp.Notes {
		fmt.Fprintf(&b, "\n- %s", n)
	}
	if len(cmp.Notes) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func latPair(s *stats.Summary) string {
	if s == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f / %.1f", s.P50, s.P99)
}

func ratioCI(rs *RatioStats) string {
	if rs == nil {
		return "–"
	}
	if rs.CI95 == nil {
		return fmt.Sprintf("%.2fx", rs.Median)
	}
	return fmt.Sprintf("%.2fx [%.2f, %.2f]", rs.Median, rs.CI95.Lo, rs.CI95.Hi)
}

func medianPct(rs *RatioStats) string {
	if rs == nil {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*rs.Median)
}
