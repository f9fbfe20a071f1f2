// Package daemoncmd is `gpreemptctl daemon`: status, classes and reload
// of a running gpreemptd, over its unix socket.
package daemoncmd

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/daemon/client"
)

var socketFlag = &cli.StringFlag{Name: "socket", Usage: "gpreemptd's socket (default " + client.DefaultSocket + ")", EnvVars: []string{client.SocketEnv}}

// Command is `gpreemptctl daemon`.
var Command = &cli.Command{
	Name:  "daemon",
	Usage: "talk to a running gpreemptd (docs/DAEMON.md)",
	Subcommands: []*cli.Command{
		{Name: "status", Usage: "the daemon's mode, policy and the processes it holds", Flags: []cli.Flag{socketFlag}, Action: status},
		{Name: "classes", Usage: "the classes, default and rules of the policy in force", Flags: []cli.Flag{socketFlag}, Action: classes},
		{Name: "reload", Usage: "re-read the policy file (root or the policy's admin)", Flags: []cli.Flag{socketFlag}, Action: reload},
	},
}

func jsonOut(c *cli.Context) bool { return c.String("output") == "json" }

func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(b))
	return err
}

func status(c *cli.Context) error {
	cl := client.New(c.String("socket"))
	st, err := cl.Status(c.Context)
	if err != nil {
		return err
	}
	procs, err := cl.Processes(c.Context)
	if err != nil {
		return err
	}
	if jsonOut(c) {
		return printJSON(c.App.Writer, map[string]any{"status": st, "processes": procs})
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	keys := make([]string, 0, len(st))
	for k := range st {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s:\t%v\n", k, st[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "PID\tCOMM\tUID\tCLASS\tRULE\tGPUS\tGROUPS\tTIMESLICES")
	for _, p := range procs {
		var ts []string
		for _, g := range p.Groups {
			ts = append(ts, fmt.Sprintf("%dus/%s", g.TimesliceUs, g.Interleave))
		}
		cls := p.Class
		if p.Pending {
			cls += " (pending)"
		}
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", p.PID, p.Comm, p.UID, cls, p.Rule, dash(p.GPUs), len(p.Groups), strings.Join(ts, ","))
	}
	return w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func classes(c *cli.Context) error {
	cl, err := client.New(c.String("socket")).Classes(c.Context)
	if err != nil {
		return err
	}
	if jsonOut(c) {
		return printJSON(c.App.Writer, cl)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "policy:\t%s\n", dash(cl.Source))
	fmt.Fprintf(w, "default:\t%s\n\n", cl.Default)
	fmt.Fprintln(w, "CLASS\tTIMESLICE\tINTERLEAVE")
	for _, k := range cl.Classes {
		fmt.Fprintf(w, "%s\t%s\t%s\n", k.Name, k.Timeslice, k.Interleave)
	}
	fmt.Fprintln(w, "\nRULE\tLINE\tCLASS")
	for _, r := range cl.Rules {
		cls := r.Class
		if r.FromEnv != "" {
			cls = "$" + r.FromEnv
			if r.Class != "" {
				cls += " else " + r.Class
			}
		}
		fmt.Fprintf(w, "%s\t%d\t%s\n", r.Name, r.Line, cls)
	}
	return w.Flush()
}

func reload(c *cli.Context) error {
	if err := client.New(c.String("socket")).Reload(c.Context); err != nil {
		return err
	}
	if jsonOut(c) {
		return printJSON(c.App.Writer, map[string]bool{"reloaded": true})
	}
	fmt.Fprintln(c.App.Writer, "reloaded")
	return nil
}
