package ctl

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/tsg"
)

// classFlagDefault writes d as the timeslice flags take it ("200us", "5s").
func classFlagDefault(d time.Duration) string { return tsg.Micros(d / time.Microsecond).String() }

// classFlags are the per-class timeslice and interleave flags, their
// defaults from class.Defaults().
func classFlags() []cli.Flag {
	var fs []cli.Flag
	defaults := class.Defaults()
	for _, n := range class.Names {
		c := defaults[n]
		fs = append(fs,
			&cli.StringFlag{Name: string(n) + "-timeslice", Value: classFlagDefault(c.Timeslice),
				Usage: "timeslice of the " + string(n) + " class (of one unit of weight)", EnvVars: []string{envName(n) + "_TIMESLICE"}},
			&cli.StringFlag{Name: string(n) + "-interleave", Value: c.Interleave.String(),
				Usage: "interleave level of the " + string(n) + " class"})
	}
	return append(fs, &cli.StringFlag{Name: "slice-overhead", Value: classFlagDefault(class.DefaultSliceOverhead),
		Usage:   "part of each timeslice a group loses to being switched in; weights split the rest (0: weights multiply the whole timeslice)",
		EnvVars: []string{"GPREEMPT_SLICE_OVERHEAD"}})
}

func envName(n class.Name) string {
	switch n {
	case class.LC:
		return "GPREEMPT_LC"
	case class.Burstable:
		return "GPREEMPT_BURSTABLE"
	}
	return "GPREEMPT_BE"
}

// classTable reads every class's flags into a table and checks all of
// them, whichever class was asked for: a bad --be-timeslice is an error
// with `class lc` too.
func classTable(c *cli.Context) (class.Table, error) {
	t := class.Table{}
	overhead, err := class.ParseSliceOverhead(c.String("slice-overhead"))
	if err != nil {
		return nil, fmt.Errorf("--slice-overhead: %w", err)
	}
	for _, n := range class.Names {
		ts, err := tsg.ParseTimeslice(c.String(string(n) + "-timeslice"))
		if err != nil {
			return nil, fmt.Errorf("--%s-timeslice: %w", n, err)
		}
		level, err := tsg.ParseLevel(c.String(string(n) + "-interleave"))
		if err != nil {
			return nil, fmt.Errorf("--%s-interleave: %w", n, err)
		}
		t[n] = class.Class{Name: n, Timeslice: ts, Interleave: level, SliceOverhead: overhead}
	}
	return t, t.Check()
}

var classCommand = &cli.Command{
	Name:      "class",
	Usage:     "put all channel groups of a process in a scheduling class (all or nothing)",
	ArgsUsage: "lc|burstable|be",
	Description: "lc: latency-critical, long timeslice (--lc-timeslice) and HIGH interleave.\n" +
		"burstable: should keep up but may wait, libcuda's own timeslice (--burstable-timeslice), MEDIUM interleave.\n" +
		"be: best-effort, short timeslice (--be-timeslice) and LOW interleave.\n" +
		"--weight N: processes of one class share the GPU in the ratio of their weights. Each\n" +
		"turn on the GPU starts with restoring the group's context (--slice-overhead, ~20us on\n" +
		"an H100), so weight N gets the overhead plus N times the rest of the class's timeslice:\n" +
		"be:3 at 200us is 560us.",
	Flags: append([]cli.Flag{
		pidFlag,
		&cli.IntFlag{Name: "weight", Value: class.DefaultWeight,
			Usage: fmt.Sprintf("weight within the class, %d to %d: the timeslice is the slice overhead plus this times the rest of the class's", class.MinWeight, class.MaxWeight)},
	}, classFlags()...),
	Action: func(c *cli.Context) error {
		arg, err := oneArg(c, "lc|burstable|be")
		if err != nil {
			return err
		}
		name, err := class.ParseName(arg)
		if err != nil {
			return err
		}
		table, err := classTable(c)
		if err != nil {
			return err
		}
		settings, err := table.Settings(name, c.Int("weight"))
		if err != nil {
			return fmt.Errorf("--weight: %w", err)
		}
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			if err := p.Apply(c.Context, gs, settings); err != nil {
				return err
			}
			return printChanged(c, p, gs)
		})
	},
}
