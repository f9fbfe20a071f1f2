package ctl

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

var psCommand = &cli.Command{
	Name:  "ps",
	Usage: "list CUDA processes and their channel groups",
	Description: "Without --pid, every process with /dev/nvidiactl open is examined; those with\n" +
		"no channel group (nvidia-smi, a process before its first context) are left out.\n" +
		"The compute group is marked with '*'.",
	Flags: []cli.Flag{
		&cli.IntFlag{Name: "pid", Usage: "only this process"},
		&cli.BoolFlag{Name: "stats", Usage: "include what discovery cost (JSON only)"},
	},
	Action: func(c *cli.Context) error {
		r := rt(c)
		var pids []int
		if c.IsSet("pid") {
			pid, err := pidArg(c)
			if err != nil {
				return err
			}
			pids = []int{pid}
		} else {
			var err error
			if pids, err = r.env.Host.Processes(); err != nil {
				return err
			}
		}
		views := []processView{}
		for _, pid := range pids {
			p, err := r.source.Discover(c.Context, pid)
			if err != nil {
				// A named pid's failure is the answer; in a listing, a
				// process without a context or one that exited is not.
				if c.IsSet("pid") {
					return err
				}
				if errors.Is(err, tsg.ErrNoGPUContext) || errors.Is(err, ioctl.ErrNoSuchProcess) {
					continue
				}
				fmt.Fprintf(r.env.Stderr, "gpreemptctl: pid %d: %v\n", pid, err)
				continue
			}
			v := viewOf(c, p, p.Groups)
			if c.Bool("stats") {
				v.Scan = &scanView{p.Stats.ControlFDs, p.Stats.Clients, p.Stats.ClientProbes, p.Stats.ObjectProbes}
			}
			r.log.Info("discovered", "pid", pid, "groups", len(p.Groups), "elapsed", p.Stats.Elapsed,
				"client_probes", p.Stats.ClientProbes, "object_probes", p.Stats.ObjectProbes)
			p.Close()
			views = append(views, v)
		}
		return printGroups(c, views)
	},
}
