package bench

import (
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
		if c.NArg() != 1 {
			return fmt.Errorf("%w: plot takes one results file, got %d arguments", ErrInvalidArgument, c.NArg())
		}
		res, err := LoadResults(c.Args().First())
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
