package ctl

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/tsg"
)

var preemptCommand = &cli.Command{
	Name:  "preempt",
	Usage: "preempt a process's channel groups off the GPU now",
	Flags: append(append([]cli.Flag{}, groupFlags...),
		&cli.BoolFlag{Name: "wait", Value: true, Usage: "wait for each preemption to complete"},
		&cli.DurationFlag{Name: "timeout", Usage: "RM's wait timeout (0 = RM's default, at most 1s)"},
	),
	Action: func(c *cli.Context) error {
		return withGroups(c, func(p *tsg.Process, gs []tsg.Group) error {
			if err := p.Preempt(c.Context, gs, c.Bool("wait"), c.Duration("timeout")); err != nil {
				return err
			}
			return report(c, "preempted", p.PID, gs)
		})
	},
}

// report prints a one-line outcome for commands that change no setting.
func report(c *cli.Context, what string, pid int, gs []tsg.Group) error {
	if rt(c).json {
		handles := make([]string, len(gs))
		for i, g := range gs {
			handles[i] = g.Handle.String()
		}
		return writeJSON(c.App.Writer, map[string]any{"action": what, "pid": pid, "groups": handles})
	}
	for _, g := range gs {
		fmt.Fprintf(c.App.Writer, "%s pid %d tsg %v (%s)\n", what, pid, g.Handle, g.Engine)
	}
	return nil
}
