package ctl

import (
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/tsg"
)

// Class defaults. LC: a long timeslice so that, once resident, LC work is
// not switched out for BE; HIGH interleave. BE: a short timeslice so that
// the hardware yields to LC within microseconds; LOW interleave. 200 us
// keeps two BE processes from thrashing each other (1 us is the fastest
// yield to LC; see docs/GPU-RESULTS.md for both measured side by side).
const (
	defaultLCTimeslice = "5s"
	defaultBETimeslice = "200us"
)

var classCommand = &cli.Command{
	Name:      "class",
	Usage:     "put all channel groups of a process in a scheduling class (all or nothing)",
	ArgsUsage: "lc|be",
	Description: "lc: latency-critical, long timeslice (--lc-timeslice) and HIGH interleave.\n" +
		"be: best-effort, short timeslice (--be-timeslice) and LOW interleave.",
	Flags: []cli.Flag{
		pidFlag,
		&cli.StringFlag{Name: "lc-timeslice", Value: defaultLCTimeslice, Usage: "timeslice of the lc class", EnvVars: []string{"GPREEMPT_LC_TIMESLICE"}},
		&cli.StringFlag{Name: "be-timeslice", Value: defaultBETimeslice, Usage: "timeslice of the be class", EnvVars: []string{"GPREEMPT_BE_TIMESLICE"}},
		&cli.StringFlag{Name: "lc-interleave", Value: "high", Usage: "interleave level of the lc class"},
		&cli.StringFlag{Name: "be-interleave", Value: "low", Usage: "interleave level of the be class"},
	},
	Action: func(c *cli.Context) error {
		arg, err := oneArg(c, "lc|be")
		if err != nil {
			return err
		}
		class := strings.ToLower(arg)
		if class != "lc" && class != "be" {
			return fmt.Errorf("%w: class %q: want lc or be", ErrInvalidArgument, arg)
		}
		ts, err := tsg.ParseTimeslice(c.String(class + "-timeslice"))
		if err != nil {
			return fmt.Errorf("--%s-timeslice: %w", class, err)
		}
		level, err := tsg.ParseLevel(c.String(class + "-interleave"))
		if err != nil {
			return fmt.Errorf("--%s-interleave: %w", class, err)
		}
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			if err := p.Apply(c.Context, gs, tsg.Settings{Timeslice: &ts, Interleave: &level}); err != nil {
				return err
			}
			return printChanged(c, p, gs)
		})
	},
}
