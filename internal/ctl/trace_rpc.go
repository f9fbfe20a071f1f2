package ctl

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/trace"
)

var traceRPCCommand = &cli.Command{
	Name:  "rpc",
	Usage: "latency histograms of RM controls per command and process (what a preemption control costs)",
	Description: "Time from ioctl entry to return of each NV_ESC_RM_CONTROL, as log2 histograms in\n" +
		"microseconds per (process, command). By default only channel-group controls (0xa06cXXXX:\n" +
		"SET_TIMESLICE, PREEMPT, GPFIFO_SCHEDULE, ...), which GSP-RM forwards to the firmware.",
	Flags: append([]cli.Flag{
		tracePIDFlag,
		&cli.BoolFlag{Name: "all", Usage: "every RM control, not only channel-group ones"},
		&cli.StringSliceFlag{Name: "cmd", Usage: "only these controls: names (SET_TIMESLICE, NVA06C_CTRL_CMD_PREEMPT) or numbers (0xa06c0103)"},
	}, traceCommonFlags...),
	Action: func(c *cli.Context) error {
		pid := c.Int("pid")
		if pid < 0 {
			return fmt.Errorf("%w: --pid %d", ErrInvalidArgument, pid)
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
			return &rpcTrace{out: o, all: c.Bool("all"), cmds: cmds, stats: map[rpcKey]*rpcStats{}}
		})
	},
}

// parseControl reads a control command as --cmd takes it.
func parseControl(s string) (uint32, error) {
	s = strings.TrimSpace(s)
	for _, name := range []string{s, "NVA06C_CTRL_CMD_" + strings.ToUpper(s)} {
		if cmd, ok := trace.ControlByName(name); ok {
			return cmd, nil
		}
	}
	n, err := strconv.ParseUint(s, 0, 32)
	if err != nil {
		return 0, fmt.Errorf("%w: --cmd %q: not a known control name nor a number", ErrInvalidArgument, s)
	}
	return uint32(n), nil
}

type rpcKey struct{ pid, cmd uint32 }

type rpcStats struct {
	comm   string
	hist   trace.Hist
	failed uint64
}

type rpcTrace struct {
	out      *traceOut
	all      bool
	cmds     map[uint32]bool
	stats    map[rpcKey]*rpcStats
	interval int
}

// rpcView is one histogram as -o json prints it.
type rpcView struct {
	PID    uint32   `json:"pid"`
	Comm   string   `json:"comm"`
	Cmd    uint32   `json:"cmd"`
	Name   string   `json:"name"`
	Failed uint64   `json:"failed"`
	Hist   histView `json:"latency"`
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
	case !t.all && !trace.IsChannelGroupControl(cmd):
		return nil
	}
	k := rpcKey{e.PID, cmd}
	s := t.stats[k]
	if s == nil {
		s = &rpcStats{}
		t.stats[k] = s
	}
	s.comm = e.Comm
	s.hist.Add(usecs(e.Duration()))
	if !e.OK() {
		s.failed++
	}
	return nil
}

func (t *rpcTrace) Interval() error {
	t.interval++
	if err := t.print(fmt.Sprintf("interval %d", t.interval), 0); err != nil {
		return err
	}
	clear(t.stats)
	return nil
}

func (t *rpcTrace) End(lost uint64) error { return t.print("summary", lost) }

func (t *rpcTrace) print(title string, lost uint64) error {
	keys := make([]rpcKey, 0, len(t.stats))
	for k := range t.stats {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b rpcKey) int {
		if a.pid != b.pid {
			return cmp.Compare(a.pid, b.pid)
		}
		return cmp.Compare(a.cmd, b.cmd)
	})
	if t.out.json {
		views := make([]rpcView, 0, len(keys))
		for _, k := range keys {
			s := t.stats[k]
			views = append(views, rpcView{PID: k.pid, Comm: s.comm, Cmd: k.cmd, Name: trace.ControlName(k.cmd), Failed: s.failed, Hist: viewHist(&s.hist, "usecs")})
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
	fmt.Fprintf(w, "%s: %d (process, control) pairs\n", title, len(keys))
	for _, k := range keys {
		s := t.stats[k]
		fmt.Fprintf(w, "\npid %d %s  %s (%#08x): %d calls, %d failed, avg %dus, min %dus, max %dus\n",
			k.pid, orDash(s.comm), shortControl(k.cmd), k.cmd, s.hist.N, s.failed, s.hist.Mean(), s.hist.Min, s.hist.Max)
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
