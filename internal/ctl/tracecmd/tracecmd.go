// Package tracecmd is gpreemptctl's trace command group: eBPF tracing of
// channel-group lifecycles (tsg), RM control latency (rpc), per-request
// latency from uprobes on libcuda (requests) and hint timelines (hints),
// printed as tables, log2 histograms or JSON (docs/TRACING.md).
package tracecmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
)

// Command is `gpreemptctl trace`.
var Command = &cli.Command{
	Name:  "trace",
	Usage: "watch channel groups, RM controls and requests as they happen (eBPF; needs root)",
	Description: "RM calls are seen on the ioctl syscall tracepoints, kernel launches, synchronizations and\n" +
		"hints by uprobes on libcuda.so.1 and libgpreempt.so; the traced processes are not touched.\n" +
		"Output is streamed as it happens (tsg, hints) or summarized as log2 histograms (rpc,\n" +
		"requests): every --interval, and at the end (--duration, or Ctrl-C).",
	Subcommands: []*cli.Command{
		tsgCommand,
		rpcCommand,
		requestsCommand,
		hintsCommand,
	},
}

// Flags every trace subcommand takes.
var (
	traceIntervalFlag = &cli.DurationFlag{Name: "interval", Usage: "print (and, for histograms, reset) every `D`; 0: only at the end"}
	traceDurationFlag = &cli.DurationFlag{Name: "duration", Usage: "stop after `D`; 0: until Ctrl-C"}
	traceJSONFlag     = &cli.BoolFlag{Name: "json", Usage: "JSON lines, one object per event or summary (also with -o json)"}
	tracePIDFlag      = &cli.IntFlag{Name: "pid", Usage: "only this process (0: all)"}
	traceTracefsFlag  = &cli.BoolFlag{Name: "mount-tracefs", Value: true, Usage: "mount tracefs at /sys/kernel/tracing if it is not mounted"}
	traceCommonFlags  = []cli.Flag{traceIntervalFlag, traceDurationFlag, traceJSONFlag, traceTracefsFlag}
)

// traceSource is what the trace commands read events from: the live
// tracer, or in tests a recorded sequence.
type traceSource interface {
	// Events delivers events until tracing ends, then is closed.
	Events() <-chan trace.Event
	// Start is when tracing began, in the events' clock; End when it
	// stopped (0: unknown, as a recording replayed).
	Start() uint64
	End() uint64
	// Lost counts events the tracer could not deliver.
	Lost() uint64
	// Err is what ended tracing early, if anything.
	Err() error
	Skipped() []trace.Skipped
	Close() error
}

// traceHooks tie the trace commands to the machine; tests replace them
// (trace_export_test.go).
var traceHooks = struct {
	open        func(ctx context.Context, opts trace.Options) (traceSource, error)
	ticker      func(d time.Duration) (<-chan time.Time, func())
	findLibrary func(name, explicit string, pid int) (string, error)
	// now is the events' clock (CLOCK_MONOTONIC).
	now func() uint64
}{
	open: func(ctx context.Context, opts trace.Options) (traceSource, error) {
		t, err := trace.Open(ctx, opts)
		if err != nil {
			return nil, err
		}
		return t, nil
	},
	ticker: func(d time.Duration) (<-chan time.Time, func()) {
		t := time.NewTicker(d)
		return t.C, t.Stop
	},
	findLibrary: trace.FindLibrary,
	now:         trace.Now,
}

// traceHandler is one trace subcommand's view of the event stream.
type traceHandler interface {
	// Event is called for each event, in order.
	Event(ev trace.Event) error
	// Interval is called every --interval.
	Interval() error
	// End is called once tracing has stopped and every event was seen.
	End(lost uint64) error
}

// traceOut formats what the trace commands print: text lines, or JSON
// lines (one object per line, so a stream can be read as it comes).
type traceOut struct {
	w          *countingWriter
	json       bool
	start, end uint64 // end: set as tracing ends (0: unknown)
}

// newTraceOut is a command's output, its times counted from start (the events' clock).
func newTraceOut(c *cli.Context, start uint64) *traceOut {
	return &traceOut{w: &countingWriter{Writer: c.App.Writer}, json: c.Bool("json") || cmdutil.Get(c).JSON, start: start}
}

// countingWriter remembers whether anything was written, so that blocks of
// text output can be set apart by blank lines.
type countingWriter struct {
	io.Writer
	n int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.Writer.Write(p)
	w.n += int64(n)
	return n, err
}

// separate starts a new block of text output: a blank line unless it is
// the first output.
func (o *traceOut) separate() {
	if o.w.n > 0 {
		fmt.Fprintln(o.w)
	}
}

// seconds is an event time as seconds since tracing began.
func (o *traceOut) seconds(t uint64) float64 {
	if t < o.start {
		return 0
	}
	return float64(t-o.start) / 1e9
}

func (o *traceOut) jsonLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.w, "%s\n", b)
	return err
}

// runTrace opens the tracer with opts, feeds its events to h, and prints
// the summary when tracing ends: at --duration, on Ctrl-C (the context),
// or when the source runs dry.
func runTrace(c *cli.Context, opts trace.Options, newHandler func(*traceOut) traceHandler) error {
	if cmdutil.Get(c).Demo {
		return fmt.Errorf("%w: trace watches this machine's kernel and has no demo; leave out --demo", cmdutil.ErrInvalidArgument)
	}
	ctx := c.Context
	if d := c.Duration("duration"); d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	} else if d < 0 {
		return fmt.Errorf("%w: --duration %v", cmdutil.ErrInvalidArgument, d)
	}
	interval := c.Duration("interval")
	if interval < 0 {
		return fmt.Errorf("%w: --interval %v", cmdutil.ErrInvalidArgument, interval)
	}
	opts.MountTracefs = c.Bool("mount-tracefs")
	opts.Logger = cmdutil.Get(c).Logger
	src, err := traceHooks.open(ctx, opts)
	if errors.Is(err, trace.ErrNoTracefs) && !opts.MountTracefs {
		return fmt.Errorf("trace: %w; or leave --mount-tracefs on", err)
	}
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	defer src.Close()
	for _, s := range src.Skipped() {
		fmt.Fprintf(c.App.ErrWriter, "gpreemptctl: trace: not tracing %s\n", s)
	}
	out := newTraceOut(c, src.Start())
	h := newHandler(out)
	var tick <-chan time.Time
	if interval > 0 {
		var stop func()
		tick, stop = traceHooks.ticker(interval)
		defer stop()
	}
	for {
		select {
		case ev, ok := <-src.Events():
			if !ok {
				if err := src.Err(); err != nil {
					return fmt.Errorf("trace: %w", err)
				}
				out.end = src.End()
				return h.End(src.Lost())
			}
			if err := h.Event(ev); err != nil {
				return err
			}
		case <-tick:
			if err := h.Interval(); err != nil {
				return err
			}
		}
	}
}

// findLibrary resolves a library for uprobes, naming the flag that sets
// it in the error.
func findLibrary(name, explicit string, pid int, flag string) (string, error) {
	path, err := traceHooks.findLibrary(name, explicit, pid)
	if err != nil {
		return "", fmt.Errorf("%w (set it with --%s)", err, flag)
	}
	return path, nil
}

// probes makes the probe list for one library and role from a flag's
// comma-separated symbols.
func probes(lib string, role trace.Role, symbols []string) []trace.Probe {
	var names []string
	for _, s := range symbols {
		for _, name := range strings.Split(s, ",") {
			if name = strings.TrimSpace(name); name != "" {
				names = append(names, name)
			}
		}
	}
	return trace.ProbesOf(lib, role, names)
}

// shortControl strips the class prefix from a control's name:
// NVA06C_CTRL_CMD_SET_TIMESLICE -> SET_TIMESLICE.
func shortControl(cmd uint32) string {
	name := ioctl.ControlName(cmd)
	if _, rest, ok := strings.Cut(name, "_CTRL_CMD_"); ok {
		return rest
	}
	return name
}

func usecs(d time.Duration) uint64 { return uint64(d / time.Microsecond) }

func procName(comm string, pid uint32) string {
	if pid == 0 {
		return "?"
	}
	return fmt.Sprintf("%s[%d]", cmdutil.OrDash(comm), pid)
}
