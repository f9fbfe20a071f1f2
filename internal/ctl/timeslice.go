package ctl

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/tsg"
)

var getTimesliceCommand = &cli.Command{
	Name:  "get-timeslice",
	Usage: "print the timeslice of a process's channel groups",
	Flags: groupFlags,
	Action: func(c *cli.Context) error {
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			return printGroups(c, []processView{viewOf(c, p, gs)})
		})
	},
}

var setTimesliceCommand = &cli.Command{
	Name:      "set-timeslice",
	Usage:     "set the timeslice of a process's channel groups (all or nothing)",
	ArgsUsage: "DURATION (e.g. 200us, 2ms; 1us to 5s)",
	Flags:     groupFlags,
	Action: func(c *cli.Context) error {
		arg, err := oneArg(c, "DURATION")
		if err != nil {
			return err
		}
		d, err := tsg.ParseTimeslice(arg)
		if err != nil {
			return err
		}
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			if err := p.SetTimeslice(c.Context, gs, d); err != nil {
				return err
			}
			return printChanged(c, p, gs)
		})
	},
}

// printChanged re-reads the changed groups from RM and prints them, so the
// output shows what the driver now holds rather than what was asked.
func printChanged(c *cli.Context, p *tsg.Process, gs []tsg.Group) error {
	if err := p.Refresh(c.Context); err != nil {
		return fmt.Errorf("read back: %w", err)
	}
	keep := map[string]bool{}
	for _, g := range gs {
		keep[g.Key()] = true
	}
	var now []tsg.Group
	for _, g := range p.Groups {
		if keep[g.Key()] {
			now = append(now, g)
		}
	}
	return printGroups(c, []processView{viewOf(c, p, now)})
}
