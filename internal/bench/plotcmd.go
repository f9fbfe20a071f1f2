package bench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
)

var plotCommand = &cli.Command{
	Name:      "plot",
	Usage:     "draw a results.json's charts again (latency CDF, timeline, frontier, SLO)",
	ArgsUsage: "RESULTS.json[.gz]",
	Description: "Writes cdf.png, timeline.png, frontier.png (LC p50 ratio against BE kept, per\n" +
		"scenario, with the BE a request gate allows) and slo.png into --out, as run does;\n" +
		"a chart with nothing to show is not written.\n" +
		"Exit codes: 0 drawn, 2 usage, 5 unreadable file.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "out", Value: ".", Usage: "directory to write the charts into"},
	},
	Action: func(c *cli.Context) error {
		res, err := resultsArg(c, false)
		if err != nil {
			return err
		}
		dir := c.String("out")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var errs []error
		for _, ch := range []struct {
			name string
			draw func(string, *Results) error
		}{{"cdf.png", PlotCDF}, {"timeline.png", PlotTimeline}, {"frontier.png", PlotFrontier}, {"slo.png", PlotSLO}} {
			if err := ch.draw(filepath.Join(dir, ch.name), res); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", ch.name, err))
			}
		}
		return errors.Join(errs...)
	},
}

var reportCommand = &cli.Command{
	Name:      "report",
	Usage:     "write a results.json's results.md again, analysed by this binary",
	ArgsUsage: "RESULTS.json[.gz]",
	Description: "Derives the reports' figures (ratios, summaries, gpreemptd's view) again from the\n" +
		"runs' own samples, as this binary's analysis takes them, and writes results.md to\n" +
		"stdout, or into --out.\n" +
		"Exit codes: 0 written, 2 usage, 5 unreadable file.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "out", Usage: "directory to write results.md into (default: stdout)"},
	},
	Action: func(c *cli.Context) error {
		res, err := resultsArg(c, true)
		if err != nil {
			return err
		}
		var md bytes.Buffer
		if err := WriteMarkdown(&md, res); err != nil {
			return err
		}
		dir := c.String("out")
		if dir == "" {
			_, err := c.App.Writer.Write(md.Bytes())
			return err
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dir, "results.md"), md.Bytes(), 0o644)
	},
}

// resultsArg loads the one results file a command takes, analysed afresh where fresh.
func resultsArg(c *cli.Context, fresh bool) (*Results, error) {
	if c.NArg() != 1 {
		return nil, fmt.Errorf("%w: %s takes one results file, got %d arguments", ErrInvalidArgument, c.Command.Name, c.NArg())
	}
	return loadResults(c.Args().First(), fresh)
}
