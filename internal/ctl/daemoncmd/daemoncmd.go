// Package daemoncmd is `gpreemptctl daemon`: status, classes and reload
// of a running gpreemptd, over its unix socket.
package daemoncmd

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
)

var socketFlag = &cli.StringFlag{Name: "socket", Usage: "gpreemptd's socket (default " + api.DefaultSocket + ")", EnvVars: []string{api.SocketEnv}}

// Command is `gpreemptctl daemon`.
var Command = &cli.Command{
	Name:  "daemon",
	Usage: "talk to a running gpreemptd (docs/DAEMON.md)",
	// The demo's processes are a recording: there is no daemon holding
	// them to ask, and the real socket is not this demo's to reach.
	Before: func(c *cli.Context) error {
		if cmdutil.Get(c).Demo {
			return fmt.Errorf("%w: daemon commands ask a running gpreemptd and have no demo; start gpreemptd on a GPU node (README.md, docs/DAEMON.md) and leave out --demo", cmdutil.ErrInvalidArgument)
		}
		return nil
	},
	Subcommands: []*cli.Command{
		{Name: "status", Usage: "the daemon's mode, policy and the processes it holds", Flags: []cli.Flag{socketFlag}, Action: status},
		{Name: "classes", Usage: "the classes, default and rules of the policy in force", Flags: []cli.Flag{socketFlag}, Action: classes},
		{Name: "reload", Usage: "re-read the policy file (root or the policy's admin)", Flags: []cli.Flag{socketFlag}, Action: reload},
	},
}

func jsonOut(c *cli.Context) bool { return c.String("output") == "json" }

func status(c *cli.Context) error {
	cl := api.New(c.String("socket"))
	st, err := cl.Status(c.Context)
	if err != nil {
		return err
	}
	procs, err := cl.Processes(c.Context)
	if err != nil {
		return err
	}
	if jsonOut(c) {
		return cmdutil.WriteJSON(c.App.Writer, map[string]any{"status": st, "processes": procs})
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	keys := make([]string, 0, len(st))
	for k := range st {
		if k != "slo" && k != "classes" { // shown as tables below
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "%s:\t%s\n", k, flat(st[k]))
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
		fmt.Fprintf(w, "%d\t%s\t%d\t%s\t%s\t%s\t%d\t%s\n", p.PID, p.Comm, p.UID, cls, p.Rule, cmdutil.OrDash(p.GPUs), len(p.Groups), strings.Join(ts, ","))
	}
	if err := classTable(w, st, procs); err != nil {
		return err
	}
	return w.Flush()
}

// flat writes a decoded JSON value on one line: an object as its sorted
// key=value pairs (braced inside another), a list comma-separated, a
// number as short as it reads.
func flat(v any) string { return flatIn(v, false) }

func flatIn(v any, nested bool) string {
	switch v := v.(type) {
	case map[string]any:
		parts := make([]string, 0, len(v))
		for _, k := range slices.Sorted(maps.Keys(v)) {
			parts = append(parts, k+"="+flatIn(v[k], true))
		}
		if nested {
			return "{" + strings.Join(parts, " ") + "}"
		}
		return strings.Join(parts, " ")
	case []any:
		parts := make([]string, len(v))
		for i, x := range v {
			parts[i] = flatIn(x, true)
		}
		return strings.Join(parts, ",")
	case float64:
		return strconv.FormatFloat(v, 'g', 6, 64)
	case nil:
		return "-"
	}
	return fmt.Sprint(v)
}

// reshape re-decodes part of a generic JSON answer into a typed value.
func reshape(v any, out any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// classTable prints per class the settings in force, the processes in it
// and, in SLO mode, each LC process's latency against its objective, BE's
// share, and the last decision with its reason.
func classTable(w io.Writer, st map[string]any, procs []api.Process) error {
	var cls []struct {
		Name       string `json:"name"`
		Timeslice  string `json:"timeslice"`
		Interleave string `json:"interleave"`
	}
	var s api.SLO
	if v, ok := st["classes"]; ok {
		if err := reshape(v, &cls); err != nil {
			return fmt.Errorf("status: classes: %w", err)
		}
	}
	if v, ok := st["slo"]; ok {
		if err := reshape(v, &s); err != nil {
			return fmt.Errorf("status: slo: %w", err)
		}
	}
	if len(cls) == 0 {
		return nil
	}
	count := map[string]int{}
	for _, p := range procs {
		name, _, _ := strings.Cut(p.Class, ":")
		count[name]++
	}
	fmt.Fprintln(w, "\nCLASS\tTIMESLICE\tINTERLEAVE\tPROCESSES\tSLO")
	for _, k := range cls {
		ts, note := k.Timeslice, ""
		switch {
		case s.Enabled && k.Name == "lc":
			note = fmt.Sprintf("worst LC at %s of its objective", ratio(s.WorstLC))
		case s.Enabled && k.Name == "be" && len(s.Searches) > 1:
			ts, note = "per GPU", "chosen per set of GPUs with an LC, below"
		case s.Enabled && k.Name == "be":
			if s.BETimeslice != "" {
				ts += " (chosen)"
			}
			share := "unknown"
			if s.BEShare != nil {
				share = percent(s.BEShare)
			}
			note = "share " + share
			if s.MinBEShare > 0 {
				note += fmt.Sprintf(" (minimum %.0f%%)", 100*s.MinBEShare)
			}
			if s.Last != nil && s.Last.BEBelowMinimum {
				note += ": below the minimum, LC objectives first"
			}
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\n", k.Name, ts, k.Interleave, count[k.Name], cmdutil.OrDash(note))
	}
	if !s.Enabled {
		fmt.Fprintln(w, "\nslo:\toff")
		return nil
	}
	floor := ""
	if s.SharedFloor != "" && s.SharedFloor != s.Safe {
		floor = "; " + s.SharedFloor + " or longer with two or more BE on a GPU"
	}
	perGPU := len(s.Searches) > 1
	if perGPU {
		fmt.Fprintf(w, "\nslo:\ton, window %s, a BE timeslice per set of GPUs with an LC (safe %s%s; ladder %s), %d changes\n", s.Window, s.Safe, floor, s.Ladder, s.Changes)
		for _, x := range s.Searches {
			share := "unknown"
			if x.BEShare != nil {
				share = percent(x.BEShare)
			}
			fmt.Fprintf(w, "%s:\tarm %s%s, BE share %s, worst LC at %s of its objective, %d changes, hint engines: prepreempt %v\n",
				api.GPUName(x.GPUs), cmp.Or(x.Arm, x.BETimeslice), phase(x.Phase), share, ratio(x.WorstLC), x.Changes, x.Prepreempt)
			decisions(w, "  ", x.Last, x.LastChange)
			references(w, "  ", x.Calibration)
		}
	} else {
		arm := "BE timeslice the policy's (no LC)"
		if ts := cmp.Or(s.Arm, s.BETimeslice); ts != "" {
			arm = "arm " + ts + phase(s.Phase)
		}
		fmt.Fprintf(w, "\nslo:\ton, window %s, %s (safe %s%s; ladder %s), %d changes\n", s.Window, arm, s.Safe, floor, s.Ladder, s.Changes)
		decisions(w, "", s.Last, s.LastChange)
		references(w, "", s.Calibration)
	}
	if s.Calibrate == "pause" {
		fmt.Fprintln(w, "calibrate:\tpause (x objectives measured against the LC alone, BE stopped)")
	}
	if len(s.BEStopped) > 0 {
		fmt.Fprintf(w, "BE stopped:\t%s (learning an LC alone)\n", strings.Trim(fmt.Sprint(s.BEStopped), "[]"))
	}
	if !perGPU {
		fmt.Fprintf(w, "hint engines:\tprepreempt %v\n", s.Prepreempt)
	}
	frontier(w, s.Searches, perGPU, len(s.LC) == 1)
	if len(s.LC) > 0 {
		fmt.Fprintln(w, "\nLC PID\tCOMM\t"+gpuColumn(perGPU, "GPU\t")+"OBJECTIVE\tLATENCY\tTARGET\tVS OBJECTIVE\tREQUESTS\tSIGNAL\tREFERENCE")
		for _, l := range s.LC {
			fmt.Fprintf(w, "%d\t%s\t%s%s\t%s\t%s\t%s\t%d\t%s\t%s\n", l.PID, l.Comm, gpuColumn(perGPU, api.GPUList(l.GPUs)+"\t"), cmdutil.OrDash(l.Objective),
				us(l.LatencyUs), us(l.TargetUs), ratio(l.Ratio), l.Requests, l.Signal, cmdutil.OrDash(l.Reference))
		}
	}
	if len(s.BE) > 0 {
		fmt.Fprintln(w, "\nBE PID\tCOMM\t"+gpuColumn(perGPU, "TIMESLICE\t")+"LAUNCHES/S\tALONE\tSHARE\tSIGNAL")
		for _, b := range s.BE {
			sig := b.Signal
			if b.Apart {
				sig += "; no LC on its GPUs: the policy's timeslice, not in the share"
			}
			fmt.Fprintf(w, "%d\t%s\t%s%s\t%s\t%s\t%s\n", b.PID, b.Comm, gpuColumn(perGPU, cmdutil.OrDash(b.Timeslice)+"\t"), perSecond(b.LaunchesPerS), perSecond(b.AlonePerS), percent(b.Share), sig)
		}
	}
	return nil
}

// frontier prints what each search knows of its arms: the LC against BE's share, the verdict, when it may be tried
// again; where one LC objective is in force (an arm's mean and bounds are then that objective's), what telling an
// arm that might meet from it takes.
func frontier(w io.Writer, searches []api.SLOSearch, perGPU, oneObjective bool) {
	header := false
	for _, x := range searches {
		for _, a := range x.Arms {
			if !header {
				fmt.Fprintln(w, "\nARM\t"+gpuColumn(perGPU, "GPU\t")+"LC VS OBJECTIVE\tBOUNDS\tBE SHARE\tVERDICT\tRETRY")
				header = true
			}
			name, bounds, retry := a.Arm, "-", "-"
			if a.Arm == x.Arm {
				name += " (in force)"
			}
			switch { // a bound of an arm not measured enough comes from a neighbour, below it at most
			case a.Lo != nil && a.Hi != nil:
				bounds = ratio(a.Lo) + " to " + ratio(a.Hi)
			case a.Lo != nil:
				bounds = "over " + ratio(a.Lo)
			}
			if a.RetryIn > 0 {
				retry = fmt.Sprintf("in %d windows", a.RetryIn)
			}
			verdict := a.Verdict
			if oneObjective {
				verdict += toTell(a)
			}
			fmt.Fprintf(w, "%s\t%s%s\t%s\t%s\t%s\t%s\n", name, gpuColumn(perGPU, api.GPUList(x.GPUs)+"\t"), ratio(a.LCVsObjective), bounds, percent(a.BEShare), verdict, retry)
		}
	}
}

// toTell says, for an arm that might meet (and is not known to give BE less than its minimum), how many times as many
// measurements as its estimate rests on its bounds would need to leave the objective, at their scatter (bounds narrow
// as the square root of the measurements): where that is many, the objective sits on the LC's own noise.
func toTell(a api.SLOArm) string {
	if a.Verdict != "might meet" || a.LCVsObjective == nil || a.Lo == nil || a.Hi == nil {
		return ""
	}
	d := math.Abs(1 - *a.LCVsObjective)
	if k := (*a.Hi - *a.Lo) / 2 / d; d > 0 && k*k < 1000 {
		return fmt.Sprintf(", told apart in ~%.0f times its measurements", math.Max(2, math.Ceil(k*k)))
	}
	return ", on its objective: not told apart in 1000 times its measurements"
}

// decisions prints a search's last decision and last change, each line
// after indent.
func decisions(w io.Writer, indent string, last, change *api.SLODecision) {
	if d := last; d != nil {
		aligned := map[bool]string{true: " (LC windows aligned)"}[d.Aligned] + map[bool]string{true: " (converged)"}[d.Converged]
		fmt.Fprintf(w, "%slast decision:\twindow %d%s: %s, %s: %s\n", indent, d.Window, aligned, keptOrChanged(d), d.Cause, d.Reason)
	}
	if d := change; d != nil {
		fmt.Fprintf(w, "%slast change:\twindow %d: to %s, %s: %s\n", indent, d.Window, cmp.Or(d.Arm, d.BETimeslice), d.Cause, d.Reason)
	}
}

// references prints what learning LC references has cost a search.
func references(w io.Writer, indent string, c *api.SLOCalibration) {
	if c != nil && c.Windows > 0 {
		fmt.Fprintf(w, "%sreferences:\tlearnt in %d of %d windows, %d of them with BE stopped\n", indent, c.Windows, c.Of, c.Paused)
	}
}

// phase is a search's phase as the status line shows it.
func phase(p string) string {
	if p == "" || p == "deciding" {
		return ""
	}
	return " (" + p + ")"
}

// gpuColumn is col where the status has a search per GPU, else nothing.
func gpuColumn(perGPU bool, col string) string {
	if perGPU {
		return col
	}
	return ""
}

func keptOrChanged(d *api.SLODecision) string {
	if d.Changed {
		return "changed to " + cmp.Or(d.Arm, d.BETimeslice)
	}
	return "kept " + cmp.Or(d.Arm, d.BETimeslice)
}

func ratio(r *float64) string {
	if r == nil {
		return "-"
	}
	return fmt.Sprintf("%.2fx", *r)
}

func perSecond(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", v)
}

func percent(f *float64) string {
	if f == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100**f)
}

func us(v float64) string {
	if v <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fus", v)
}

func classes(c *cli.Context) error {
	cl, err := api.New(c.String("socket")).Classes(c.Context)
	if err != nil {
		return err
	}
	if jsonOut(c) {
		return cmdutil.WriteJSON(c.App.Writer, cl)
	}
	w := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "policy:\t%s\n", cmdutil.OrDash(cl.Source))
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
	if err := api.New(c.String("socket")).Reload(c.Context); err != nil {
		return err
	}
	if jsonOut(c) {
		return cmdutil.WriteJSON(c.App.Writer, map[string]bool{"reloaded": true})
	}
	fmt.Fprintln(c.App.Writer, "reloaded")
	return nil
}
