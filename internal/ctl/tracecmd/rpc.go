package tracecmd

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
)

var rpcCommand = &cli.Command{
	Name:  "rpc",
	Usage: "latency histograms of RM controls per command and process (what a preemption control costs)",
	Description: "Time from ioctl entry to return of each NV_ESC_RM_CONTROL, as log2 histograms in\n" +
		"microseconds per (process, command). By default only channel-group controls (0xa06cXXXX:\n" +
		"SET_TIMESLICE, PREEMPT, GPFIFO_SCHEDULE, ...), which GSP-RM forwards to the firmware.\n" +
		"--by comm adds up the processes of one name (each gpreemptctl call is a new process),\n" +
		"--by control all processes.",
	Flags: append([]cli.Flag{
		tracePIDFlag,
		&cli.BoolFlag{Name: "all", Usage: "every RM control, not only channel-group ones"},
		&cli.StringSliceFlag{Name: "cmd", Usage: "only these controls: names (SET_TIMESLICE, NVA06C_CTRL_CMD_PREEMPT) or numbers (0xa06c0103)"},
		&cli.StringFlag{Name: "by", Value: "pid", Usage: "one histogram per control and `pid`, per control and comm (process name), or per control"},
	}, traceCommonFlags...),
	Action: func(c *cli.Context) error {
		pid := c.Int("pid")
		if pid < 0 {
			return fmt.Errorf("%w: --pid %d", cmdutil.ErrInvalidArgument, pid)
		}
		by := c.String("by")
		if by != "pid" && by != "comm" && by != "control" {
			return fmt.Errorf("%w: --by %q: want pid, comm or control", cmdutil.ErrInvalidArgument, by)
		}
		cmds := map[uint32]bool{}
		for _, s := range c.StringSlice("cmd") {
			for _, name := range strings.Split(s, ",") {
				cmd, err := parseControl(name)
				if err != nil {
					return err
				}
				cmds[cmd] = true
			}
		}
		return runTrace(c, trace.Options{RM: true, PID: pid}, func(o *traceOut) traceHandler {
			return &rpcTrace{out: o, all: c.Bool("all"), cmds: cmds, by: by, stats: map[rpcKey]*rpcStats{}, total: map[rpcKey]*rpcStats{}}
		})
	},
}

// parseControl reads a control command as --cmd takes it.
func parseControl(s string) (uint32, error) {
	s = strings.TrimSpace(s)
	for _, name := range []string{s, "NVA06C_CTRL_CMD_" + strings.ToUpper(s)} {
		if cmd, ok := ioctl.ControlByName(name); ok {
			return cmd, nil
		}
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: --cmd %q: not a known control name nor a number", cmdutil.ErrInvalidArgument, s)
	}
	return uint32(n), nil
}

// rpcKey is what one histogram adds up: the fields --by does not name
// are zero.
type rpcKey struct {
	pid  uint32
	comm string
	cmd  uint32
}

type rpcStats struct {
	comm   string
	pids   map[uint32]bool
	hist   stats.Hist
	failed uint64
}

type rpcTrace struct {
	out  *traceOut
	all  bool
	cmds map[uint32]bool
	by   string // pid, comm or control
	// stats is the interval's (reset by --interval), total the
	// session's (the summary).
	stats, total map[rpcKey]*rpcStats
	interval     int
}

// rpcView is one histogram as -o json prints it.
type rpcView struct {
	PID  uint32 `json:"pid,omitempty"`
	Comm string `json:"comm,omitempty"`
	// Processes counts the pids added up (--by comm or control).
	Processes int      `json:"processes,omitempty"`
	Cmd       uint32   `json:"cmd"`
	Name      string   `json:"name"`
	Failed    uint64   `json:"failed"`
	Hist      histView `json:"latency"`
}

func (t *rpcTrace) Event(ev trace.Event) error {
	e, ok := ev.(*trace.RMCall)
	if !ok || e.Control == nil {
		return nil
	}
	cmd := e.Control.Cmd
	switch {
	case len(t.cmds) > 0:
		if !t.cmds[cmd] {
			return nil
		}
	case !t.all && !ioctl.IsChannelGroupControl(cmd):
		return nil
	}
	k := rpcKey{cmd: cmd}
	switch t.by {
	case "pid":
		k.pid = e.PID
	case "comm":
		k.comm = e.Comm
	}
	for _, m := range []map[rpcKey]*rpcStats{t.stats, t.total} {
		s := m[k]
		if s == nil {
			s = &rpcStats{pids: map[uint32]bool{}}
			m[k] = s
		}
		s.comm = e.Comm
		s.pids[e.PID] = true
		s.hist.Add(float64(usecs(e.Duration())))
		if !e.OK() {
			s.failed++
		}
	}
	return nil
}

func (t *rpcTrace) Interval() error {
	t.interval++
	if err := t.print(fmt.Sprintf("interval %d", t.interval), t.stats, 0); err != nil {
		return err
	}
	clear(t.stats)
	return nil
}

// End prints the whole session's controls, --interval or not.
func (t *rpcTrace) End(lost uint64) error { return t.print("summary", t.total, lost) }

func (t *rpcTrace) print(title string, stats map[rpcKey]*rpcStats, lost uint64) error {
	keys := make([]rpcKey, 0, len(stats))
	for k := range stats {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rpcKey) int {
		return cmp.Or(cmp.Compare(a.pid, b.pid), cmp.Compare(a.comm, b.comm), cmp.Compare(a.cmd, b.cmd))
	})
	if t.out.json {
		views := make([]rpcView, 0, len(keys))
		for _, k := range keys {
			s := stats[k]
			v := rpcView{PID: k.pid, Comm: s.comm, Cmd: k.cmd, Name: ioctl.ControlName(k.cmd), Failed: s.failed, Hist: viewHist(&s.hist, "usecs")}
			switch t.by {
			case "comm":
				v.Processes = len(s.pids)
			case "control":
				v.Comm, v.Processes = "", len(s.pids)
			}
			views = append(views, v)
		}
		line := struct {
			Type       string    `json:"type"`
			Title      string    `json:"title"`
			Histograms []rpcView `json:"histograms"`
			Lost       *uint64   `json:"lost,omitempty"`
		}{Type: "rpc", Title: title, Histograms: views}
		if title == "summary" {
			line.Lost = &lost
		}
		return t.out.jsonLine(line)
	}
	w := t.out.w
	t.out.separate()
	unit := map[string][2]string{
		"pid":     {"(process, control) pair", "(process, control) pairs"},
		"comm":    {"(process name, control) pair", "(process name, control) pairs"},
		"control": {"control", "controls"},
	}[t.by]
	fmt.Fprintf(w, "%s: %s\n", title, plural(len(keys), unit[0], unit[1]))
	for _, k := range keys {
		s := stats[k]
		var who string
		switch t.by {
		case "pid":
			who = fmt.Sprintf("pid %d %s", k.pid, cmdutil.OrDash(s.comm))
		case "comm":
			who = fmt.Sprintf("%s (%s)", cmdutil.OrDash(k.comm), plural(len(s.pids), "process", "processes"))
		default:
			who = "all processes (" + plural(len(s.pids), "process", "processes") + ")"
		}
		fmt.Fprintf(w, "\n%s  %s (%#08x): %d calls, %d failed, avg %.0fus, min %.0fus, max %.0fus\n",
			who, shortControl(k.cmd), k.cmd, s.hist.N, s.failed, s.hist.Mean(), s.hist.Min, s.hist.Max)
		if err := writeHist(w, &s.hist, "usecs"); err != nil {
			return err
		}
	}
	if title == "summary" {
		_, err := fmt.Fprintf(w, "\n%d events lost\n", lost)
		return err
	}
	return nil
}

// plural writes n with the noun's singular or plural form.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
