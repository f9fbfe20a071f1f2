package ctl

import (
	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/tsg"
)

var setInterleaveCommand = &cli.Command{
	Name:      "set-interleave",
	Usage:     "set the runlist interleave level of a process's channel groups (all or nothing)",
	ArgsUsage: "low|medium|high",
	Flags:     groupFlags,
	Action: func(c *cli.Context) error {
		arg, err := oneArg(c, "low|medium|high")
		if err != nil {
			return err
		}
		l, err := tsg.ParseLevel(arg)
		if err != nil {
			return err
		}
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			if err := p.SetInterleave(c.Context, gs, l); err != nil {
				return err
			}
			return printChanged(c, p, gs)
		})
	},
}
