package ctl

import (
	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/tsg"
)

var suspendCommand = &cli.Command{
	Name:  "suspend",
	Usage: "take a process's channel groups off the runlist (GPFIFO_SCHEDULE disable); work stays queued",
	Flags: groupFlags,
	Action: func(c *cli.Context) error {
		return schedule(c, false, "suspended")
	},
}

var resumeCommand = &cli.Command{
	Name:  "resume",
	Usage: "put a process's channel groups back on the runlist (GPFIFO_SCHEDULE enable)",
	Flags: groupFlags,
	Action: func(c *cli.Context) error {
		return schedule(c, true, "resumed")
	},
}

func schedule(c *cli.Context, enable bool, what string) error {
	return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
		if err := p.Schedule(c.Context, gs, enable); err != nil {
			return err
		}
		return report(c, what, p.PID, gs)
	})
}
