package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/tsg"
)

// processView is a process as ps and the changing commands print it.
type processView struct {
	PID    int         `json:"pid"`
	Comm   string      `json:"comm"`
	Groups []tsg.Group `json:"groups"`
	Scan   *scanView   `json:"scan,omitempty"`
}

type scanView struct {
	ControlFDs   int   `json:"control_fds"`
	Clients      int   `json:"clients"`
	ClientProbes int64 `json:"client_probes"`
	ObjectProbes int64 `json:"object_probes"`
}

func viewOf(c *cli.Context, p *tsg.Process, gs []tsg.Group) processView {
	return processView{PID: p.PID, Comm: rt(c).env.Comm(p.PID), Groups: gs}
}

// printGroups prints groups as a table or JSON.
func printGroups(c *cli.Context, views []processView) error {
	w := c.App.Writer
	if rt(c).json {
		return cmdutil.WriteJSON(w, views)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCOMM\tFD\tCLIENT\tTSG\tHW ID\tENGINE\tCHANNELS\tTIMESLICE\tINTERLEAVE")
	for _, v := range views {
		for _, g := range v.Groups {
			engine := string(g.Engine)
			if g.Engine == tsg.EngineCompute {
				engine += " *"
			}
			// ps shows n/a for a level the driver does not report; a
			// command that set it shows what it set, and says so.
			level := g.Interleave.String()
			if g.InterleaveSetOnly {
				level += " (set)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%d\t%v\t%v\t%d\t%s\t%d\t%v\t%s\n",
				g.PID, cmdutil.OrDash(v.Comm), g.FD, g.Client, g.Handle, g.TSGID, engine, g.Channels, g.Timeslice, level)
		}
	}
	return tw.Flush()
}
