package ctl

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// maxPreemptTimeout is the longest wait RM accepts for a preemption.
const maxPreemptTimeout = ioctl.NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US * time.Microsecond

var preemptCommand = &cli.Command{
	Name:  "preempt",
	Usage: "preempt a process's channel groups off the GPU now",
	Flags: append(append([]cli.Flag{}, groupFlags...),
		&cli.BoolFlag{Name: "wait", Value: true, Usage: "wait for each preemption to complete"},
		&cli.DurationFlag{Name: "timeout", Usage: "RM's wait timeout (0 = RM's default, at most 1s)"},
	),
	Action: func(c *cli.Context) error {
		// Checked before attaching to the target, which a bad value
		// would otherwise have cost.
		if d := c.Duration("timeout"); d < 0 || d > maxPreemptTimeout {
			return fmt.Errorf("%w: --timeout %v: want 0 (RM's default) up to %v", ErrInvalidArgument, d, maxPreemptTimeout)
		}
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
		return cmdutil.WriteJSON(c.App.Writer, map[string]any{"action": what, "pid": pid, "groups": handles})
	}
	for _, g := range gs {
		fmt.Fprintf(c.App.Writer, "%s pid %d tsg %v (%s)\n", what, pid, g.Handle, g.Engine)
	}
	return nil
}
