package tracecmd

import (
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

var tsgCommand = &cli.Command{
	Name:  "tsg",
	Usage: "stream channel-group lifecycles and who changes their scheduling",
	Description: "One line per channel group created or freed, channel added, engine found, and control\n" +
		"on a group (timeslice, interleave, schedule, preempt) with the caller, RM status and\n" +
		"duration. At the end (and every --interval) the live groups as the events built them.",
	Flags: append([]cli.Flag{tracePIDFlag}, traceCommonFlags...),
	Action: func(c *cli.Context) error {
		pid := c.Int("pid")
		if pid < 0 {
			return fmt.Errorf("%w: --pid %d", cmdutil.ErrInvalidArgument, pid)
		}
		// Every process is traced even with --pid: the groups of pid are
		// also changed by others (gpreemptctl, a policy daemon).
		return runTrace(c, trace.Options{RM: true}, func(o *traceOut) traceHandler {
			return &tsgTrace{out: o, pid: uint32(pid), reg: registry.New(registry.Options{})}
		})
	},
}

type tsgTrace struct {
	out    *traceOut
	pid    uint32
	reg    *registry.Registry
	header bool
	calls  int
}

// tsgLine is one update as -o json prints it.
type tsgLine struct {
	Type   string          `json:"type"`
	Time   float64         `json:"time_s"`
	Event  string          `json:"event"`
	By     registry.Caller `json:"by"`
	Client ioctl.Handle    `json:"client"`
	TSG    ioctl.Handle    `json:"tsg"`
	Detail string          `json:"detail"`
	Result string          `json:"result,omitempty"`
	TookUs uint64          `json:"took_us,omitempty"`
	Group  *registry.Group `json:"group,omitempty"`
}

func (t *tsgTrace) Event(ev trace.Event) error {
	if _, ok := ev.(*trace.RMCall); ok {
		t.calls++
	}
	for _, u := range t.reg.Apply(ev) {
		if u.Kind == registry.UpdateProcessExit {
			// Its groups' tsg-exit lines already said it.
			continue
		}
		if err := t.print(ev, u); err != nil {
			return err
		}
	}
	return nil
}

func (t *tsgTrace) print(ev trace.Event, u registry.Update) error {
	g := u.After
	if g.Handle == 0 {
		g = u.Before
	}
	line := tsgLine{Type: "update", Time: t.out.seconds(ev.Time()), Event: string(u.Kind), Client: g.Client, TSG: g.Handle}
	if u.Call != nil {
		line.By = registry.Caller{PID: u.Call.PID, TID: u.Call.TID, Comm: u.Call.Comm}
		line.Result = u.Call.Result()
		line.TookUs = usecs(u.Call.Duration())
	} else {
		line.By = registry.Caller{PID: uint32(g.PID), Comm: g.Comm}
	}
	if t.pid != 0 && line.By.PID != t.pid && uint32(g.PID) != t.pid {
		return nil
	}
	line.Detail = tsgDetail(u, g)
	// Who owns the group, when someone else acted on it.
	owner := ""
	if line.By.PID != uint32(g.PID) && g.PID != 0 {
		owner = ", group of " + procName(g.Comm, uint32(g.PID))
	}
	if t.out.json {
		line.Detail += owner
		if u.Kind != registry.UpdateTSGFree && u.Kind != registry.UpdateTSGExit {
			line.Group = &g
		}
		return t.out.jsonLine(line)
	}
	if !t.header {
		t.header = true
		fmt.Fprintf(t.out.w, "%-10s %-7s %-15s %-20s %-10s %-10s %s\n", "TIME(s)", "PID", "COMM", "EVENT", "CLIENT", "TSG", "DETAIL")
	}
	// RM's answer and the call's time, for controls (what they cost) and
	// for refused calls.
	status := ""
	if u.Call != nil && (u.Kind == registry.UpdateControl || !u.Call.OK()) {
		status = fmt.Sprintf(": %s in %dus", line.Result, line.TookUs)
	}
	_, err := fmt.Fprintf(t.out.w, "%-10.6f %-7d %-15s %-20s %-10v %-10v %s%s%s\n",
		line.Time, line.By.PID, cmdutil.OrDash(line.By.Comm), eventName(u), line.Client, line.TSG, line.Detail, status, owner)
	return err
}

// eventName is the EVENT column: the update kind, or for controls the
// command (SET_TIMESLICE, PREEMPT, ...).
func eventName(u registry.Update) string {
	if u.Kind == registry.UpdateControl && u.Call != nil && u.Call.Control != nil {
		return shortControl(u.Call.Control.Cmd)
	}
	return string(u.Kind)
}

// tsgDetail says what the update did.
func tsgDetail(u registry.Update, g registry.Group) string {
	switch u.Kind {
	case registry.UpdateTSGAlloc:
		return fmt.Sprintf("device %v fd %d", g.Device, u.Call.FD)
	case registry.UpdateChannelAlloc:
		return fmt.Sprintf("channel %v class %#x, %d channels", u.Object, u.Class, g.Channels)
	case registry.UpdateEngine:
		return fmt.Sprintf("%s (%v class %#x)", g.Engine, u.Object, u.Class)
	case registry.UpdateChannelFree:
		return fmt.Sprintf("channel %v, %d channels", u.Object, g.Channels)
	case registry.UpdateTSGFree:
		return fmt.Sprintf("%s, %d channels", g.Engine, g.Channels)
	case registry.UpdateTSGExit:
		return fmt.Sprintf("%s, %d channels: freed with its process", g.Engine, g.Channels)
	case registry.UpdateControl:
		return controlDetail(u.Call.Control, u.Before)
	}
	return ""
}

// controlDetail shows a control's value, and for a change what it was.
func controlDetail(c *trace.Control, before registry.Group) string {
	switch c.Cmd {
	case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE:
		us, ok := c.TimesliceUs()
		if !ok {
			return "?"
		}
		s := tsg.Micros(us).String()
		if c.Cmd == ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE && before.Timeslice != 0 {
			s += " (was " + before.Timeslice.String() + ")"
		}
		return s
	case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL:
		if l, ok := c.InterleaveLevel(); ok {
			return tsg.Level(l).String()
		}
	case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
		if on, ok := c.ScheduleEnable(); ok {
			if on {
				return "enable"
			}
			return "disable"
		}
	case ioctl.NVA06C_CTRL_CMD_PREEMPT:
		if p, ok := c.Preempt(); ok {
			s := "no wait"
			if p.BWait != 0 {
				s = "wait"
			}
			if p.BManualTimeout != 0 {
				s += fmt.Sprintf(", timeout %dus", p.TimeoutUs)
			}
			return s
		}
	default:
		return ""
	}
	return "?"
}

func (t *tsgTrace) Interval() error { return t.printGroups("groups") }

func (t *tsgTrace) End(lost uint64) error {
	if err := t.printGroups("summary"); err != nil {
		return err
	}
	if t.out.json {
		return t.out.jsonLine(struct {
			Type    string `json:"type"`
			RMCalls int    `json:"rm_calls"`
			Lost    uint64 `json:"lost"`
		}{"end", t.calls, lost})
	}
	_, err := fmt.Fprintf(t.out.w, "%d RM calls traced, %d events lost\n", t.calls, lost)
	return err
}

// printGroups prints the live groups and, for each, its last change.
func (t *tsgTrace) printGroups(kind string) error {
	var groups []registry.Group
	for _, g := range t.reg.Groups() {
		if t.pid == 0 || uint32(g.PID) == t.pid {
			groups = append(groups, g)
		}
	}
	if t.out.json {
		if groups == nil {
			groups = []registry.Group{}
		}
		return t.out.jsonLine(struct {
			Type   string           `json:"type"`
			Groups []registry.Group `json:"groups"`
		}{kind, groups})
	}
	t.out.separate()
	fmt.Fprintf(t.out.w, "live channel groups (%d):\n", len(groups))
	tw := tabwriter.NewWriter(t.out.w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PID\tCOMM\tFD\tCLIENT\tTSG\tENGINE\tCHANNELS\tTIMESLICE\tSET BY\tINTERLEAVE\tSCHEDULE\tPREEMPTS\tLAST CHANGE")
	for _, g := range groups {
		ts, setBy, last := "?", "-", "-"
		if g.Timeslice != 0 {
			ts = g.Timeslice.String()
		}
		for _, c := range g.Changes {
			if c.Cmd == ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE {
				setBy = procName(c.By.Comm, c.By.PID)
			}
		}
		if n := len(g.Changes); n > 0 {
			c := g.Changes[n-1]
			last = strings.Join(slices.DeleteFunc([]string{shortControl(c.Cmd), c.Value, "by " + procName(c.By.Comm, c.By.PID)},
				func(s string) bool { return s == "" }), " ")
		}
		pid := "?"
		if g.PID != 0 {
			pid = fmt.Sprint(g.PID)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%v\t%s\t%d\t%s\t%s\t%v\t%v\t%d\t%s\n",
			pid, cmdutil.OrDash(g.Comm), g.FD, g.Client, g.Handle, g.Engine, g.Channels, ts, setBy, g.Interleave, g.Schedule, g.Preemptions, last)
	}
	return tw.Flush()
}
