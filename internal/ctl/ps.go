package ctl

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

var psCommand = &cli.Command{
	Name:  "ps",
	Usage: "list CUDA processes and their channel groups",
	Description: "Without --pid, every process with /dev/nvidiactl open is examined (with --source\n" +
		"escape, every process the driver reports); those with no channel group (nvidia-smi,\n" +
		"a process before its first context) are left out. The compute group is marked with '*'.\n" +
		"Processes the caller may not examine are counted on stderr; if none could be, the exit\n" +
		"code is 5.",
	Flags: []cli.Flag{
		&cli.IntFlag{Name: "pid", Usage: "only this process"},
		&cli.BoolFlag{Name: "stats", Usage: "include what discovery cost (JSON only)"},
	},
	Action: func(c *cli.Context) error {
		r := rt(c)
		var procs []*tsg.Process
		var note error
		if c.IsSet("pid") {
			pid, err := cmdutil.PIDArg(c)
			if err != nil {
				return err
			}
			// A named pid's failure is the answer.
			p, err := r.source.Discover(c.Context, pid)
			if err != nil {
				return err
			}
			procs = []*tsg.Process{p}
		} else {
			l, err := r.source.DiscoverAll(c.Context)
			if err != nil {
				return err
			}
			for _, err := range l.Failed {
				fmt.Fprintf(r.env.Stderr, "gpreemptctl: %v\n", err)
			}
			if l.Denied > 0 {
				note = fmt.Errorf("%w: %d processes not examined (run as root or with CAP_SYS_PTRACE to see them)", ioctl.ErrPermission, l.Denied)
				if l.Examined == 0 && len(l.Processes) == 0 {
					return fmt.Errorf("no process could be examined: %w", note)
				}
			}
			procs = l.Processes
		}
		views := []processView{}
		for _, p := range procs {
			v := viewOf(c, p, p.Groups)
			if c.Bool("stats") {
				v.Scan = &scanView{p.Stats.ControlFDs, p.Stats.Clients, p.Stats.ClientProbes, p.Stats.ObjectProbes}
			}
			r.log.Info("discovered", "pid", p.PID, "groups", len(p.Groups), "elapsed", p.Stats.Elapsed,
				"client_probes", p.Stats.ClientProbes, "object_probes", p.Stats.ObjectProbes)
			p.Close()
			views = append(views, v)
		}
		if err := printGroups(c, views); err != nil {
			return err
		}
		if note != nil {
			// Some could be read: the listing stands, with what it lacks
			// said on stderr.
			fmt.Fprintf(r.env.Stderr, "gpreemptctl: note: %v\n", note)
		}
		return nil
	},
}
