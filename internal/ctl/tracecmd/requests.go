package tracecmd

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"

	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// maxSamples bounds the samples kept per interval for exact percentiles;
// the histogram keeps counting past it.
const maxSamples = 1 << 20

var (
	libcudaFlag = &cli.StringFlag{Name: "libcuda", Usage: "the libcuda to probe (default: the one the process has mapped)"}
	launchFlag  = &cli.StringSliceFlag{Name: "launch-symbols", Value: cli.NewStringSlice(trace.DefaultLaunchSymbols...), Usage: "functions that launch a request's kernels"}
	queueFlag   = &cli.StringSliceFlag{Name: "queue-symbols", Value: cli.NewStringSlice(trace.DefaultQueueSymbols...), Usage: "functions that queue a request's other work (input copies, event records): they may begin one"}
	syncFlag    = &cli.StringSliceFlag{Name: "sync-symbols", Value: cli.NewStringSlice(trace.DefaultSyncSymbols...), Usage: "functions whose return ends a request"}
)

var requestsCommand = &cli.Command{
	Name:  "requests",
	Usage: "per-request latency of a process: first launch (or queued copy, event record) to the last synchronization's return",
	Description: "Uprobes on libcuda's launch and synchronize functions. A request is a busy period of the\n" +
		"process (all its threads), from the first launch, input copy or event record after a quiet gap\n" +
		"to the return of the last synchronize before the next one: the definition gpreemptd's gate and\n" +
		"SLO mode use. The quiet\n" +
		"gap is learnt from the process's own gaps (25 ms until then); a process never quiet is\n" +
		"measured per step (synchronize return to synchronize return). Latency histogram in\n" +
		"microseconds, with p50 and p99. Functions missing from the library are skipped, with a message.",
	Flags: append([]cli.Flag{
		&cli.IntFlag{Name: "pid", Usage: "the process (required, but with --replay)"},
		libcudaFlag, launchFlag, queueFlag, syncFlag,
		&cli.BoolFlag{Name: "each", Usage: "also print every request as it completes"},
		&cli.StringFlag{Name: "record", Usage: "also write the process's launches, queued calls and synchronizes to `FILE`, a JSON line each (gzip'd if it ends in .gz): a recording to replay the request definition on"},
		&cli.StringFlag{Name: "replay", Usage: "read a recording (--record's `FILE`) instead of tracing: the request definition replayed on what an LC did, offline (--pid: that process's calls; default: its first call's process)"},
	}, traceCommonFlags...),
	Action: func(c *cli.Context) error {
		if c.IsSet("replay") {
			return replayRequests(c)
		}
		pid, err := cmdutil.PIDArg(c)
		if err != nil {
			return err
		}
		lib, err := findLibrary(trace.LibCUDA, c.String("libcuda"), pid, "libcuda")
		if err != nil {
			return err
		}
		ps := slices.Concat(probes(lib, trace.RoleLaunch, c.StringSlice("launch-symbols")), probes(lib, trace.RoleQueue, c.StringSlice("queue-symbols")),
			probes(lib, trace.RoleSync, c.StringSlice("sync-symbols")))
		rec, err := newRecorder(c.String("record"))
		if err != nil {
			return err
		}
		err = runTrace(c, trace.Options{Probes: ps, PID: pid}, func(o *traceOut) traceHandler {
			t := newRequestsTrace(c, o, uint32(pid))
			t.rec = rec
			return t
		})
		return errors.Join(err, rec.finish(err))
	},
}

// replayRequests is `trace requests --replay FILE`: the recording's calls through the request
// definition as a live trace would have met them, its end at their last (its stop unknown).
func replayRequests(c *cli.Context) error {
	for _, f := range []string{"record", "interval", "duration", "libcuda", "launch-symbols", "queue-symbols", "sync-symbols", "mount-tracefs"} { // a recording holds each call's role
		if c.IsSet(f) {
			return fmt.Errorf("%w: --%s has no meaning with --replay", cmdutil.ErrInvalidArgument, f)
		}
	}
	f, err := os.Open(c.String("replay"))
	if err != nil {
		return fmt.Errorf("%w: --replay: %w", cmdutil.ErrInvalidArgument, err)
	}
	defer f.Close()
	calls, err := trace.ReadCalls(f)
	if err != nil && len(calls) == 0 {
		return fmt.Errorf("%w: --replay %s: %w", cmdutil.ErrInvalidArgument, c.String("replay"), err)
	}
	if err != nil { // a recording cut off by a kill: its calls up to the cut
		fmt.Fprintf(c.App.ErrWriter, "gpreemptctl: trace requests: --replay: %v; replaying the %d calls before it\n", err, len(calls))
	}
	if len(calls) == 0 {
		return fmt.Errorf("%w: --replay %s: no calls in it", cmdutil.ErrInvalidArgument, c.String("replay"))
	}
	pid := calls[0].PID
	if c.IsSet("pid") {
		p, err := cmdutil.PIDArg(c)
		if err != nil {
			return err
		}
		pid = uint32(p)
	}
	calls = slices.DeleteFunc(calls, func(x *trace.Call) bool { return x.PID != pid })
	if len(calls) == 0 {
		return fmt.Errorf("%w: --replay %s: no calls of pid %d", cmdutil.ErrInvalidArgument, c.String("replay"), pid)
	}
	h := newRequestsTrace(c, newTraceOut(c, calls[0].At), pid)
	for _, x := range calls {
		if err := h.Event(x); err != nil {
			return err
		}
	}
	return h.finish(nil) // what the live trace lost is not known
}

// recorder writes a process's calls as trace.CallRecords (--record) into a file beside the one
// named, which replaces it only once the trace ends well; a nil one writes nothing.
type recorder struct {
	path string
	f    *os.File
	z    *gzip.Writer
	w    *bufio.Writer
	enc  *json.Encoder
}

func newRecorder(path string) (*recorder, error) {
	if path == "" {
		return nil, nil
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return nil, fmt.Errorf("%w: --record %s: %w", cmdutil.ErrInvalidArgument, path, err)
	}
	r := &recorder{path: path, f: f}
	var out io.Writer = f
	if strings.HasSuffix(path, ".gz") {
		r.z = gzip.NewWriter(f)
		out = r.z
	}
	r.w = bufio.NewWriter(out)
	r.enc = json.NewEncoder(r.w)
	return r, nil
}

func (r *recorder) call(c *trace.Call) error {
	if r == nil {
		return nil
	}
	return r.enc.Encode(trace.RecordOf(c))
}

// flush writes out what is recorded so far (each --interval): a trace killed later leaves a
// recording that trace.ReadCalls reads up to the cut.
func (r *recorder) flush() error {
	if r == nil {
		return nil
	}
	err := r.w.Flush()
	if r.z != nil && err == nil {
		err = r.z.Flush()
	}
	return err
}

// finish ends the recording: in place of the file named if the trace ended well (traceErr nil),
// else removed, the file named left as it was.
func (r *recorder) finish(traceErr error) error {
	if r == nil {
		return nil
	}
	err := r.w.Flush()
	if r.z != nil {
		err = errors.Join(err, r.z.Close())
	}
	if err = errors.Join(err, r.f.Close()); err != nil || traceErr != nil {
		return errors.Join(err, os.Remove(r.f.Name()))
	}
	return os.Rename(r.f.Name(), r.path)
}

// newRequestsTrace is pid's requests delimited from out's start, live or replayed.
func newRequestsTrace(c *cli.Context, out *traceOut, pid uint32) *requestsTrace {
	return &requestsTrace{out: out, pid: pid, each: c.Bool("each"), delim: request.NewDelimiter(pid, request.DelimiterConfig{Since: out.start})}
}

type requestsTrace struct {
	out   *traceOut
	pid   uint32
	each  bool
	rec   *recorder
	delim *request.Delimiter
	// now is the latest event time seen: an interval closes what has
	// been quiet for its gap by then.
	now  uint64
	comm string
	// cur is the interval's requests (reset by --interval), all the
	// session's (the summary).
	cur, all requestAgg
	header   bool
	interval int
}

// requestAgg adds up requests: a histogram, samples for exact
// percentiles, launches and failures.
type requestAgg struct {
	hist     stats.Hist
	samples  []float64
	launches int
	failed   int
}

// add counts each request r holds at their mean (requests run back to back), its launches and result once.
func (a *requestAgg) add(r request.Request) {
	us := float64(usecs(r.Each()))
	for range r.Count() {
		a.hist.Add(us)
		if len(a.samples) < maxSamples {
			a.samples = append(a.samples, us)
		}
	}
	a.launches += r.Launches
	if r.Result != 0 {
		a.failed++
	}
}

// requestSummary is an interval or the end as -o json prints it.
type requestSummary struct {
	Type     string        `json:"type"`
	Title    string        `json:"title"`
	PID      uint32        `json:"pid"`
	Comm     string        `json:"comm"`
	Requests uint64        `json:"requests"`
	Failed   int           `json:"failed"`
	Launches int           `json:"launches"`
	Latency  stats.Summary `json:"latency_us"`
	Hist     histView      `json:"histogram"`
	Lost     *uint64       `json:"lost,omitempty"`
	// Mode is how the process is measured ("request", or "step" while
	// never quiet); QuietGapUs the gap that ends its requests, Learnt
	// whether from its own gaps.
	Mode       string  `json:"mode"`
	QuietGapUs float64 `json:"quiet_gap_us"`
	Learnt     bool    `json:"learnt"`
	// Gaps is what the quiet gap is learnt from (request.Delimiter.Gaps).
	Gaps []request.GapBucket `json:"gaps,omitempty"`
}

func (t *requestsTrace) Event(ev trace.Event) error {
	t.now = max(t.now, ev.Time())
	if c, ok := ev.(*trace.Call); ok && c.PID == t.pid {
		if err := t.rec.call(c); err != nil {
			return fmt.Errorf("--record: %w", err)
		}
	}
	r, ok := t.delim.Apply(ev)
	if !ok {
		return nil
	}
	return t.request(r)
}

func (t *requestsTrace) request(r request.Request) error {
	t.comm = r.Comm
	t.cur.add(r)
	t.all.add(r)
	us := usecs(r.Latency())
	if !t.each {
		return nil
	}
	if t.out.json {
		return t.out.jsonLine(struct {
			Type string  `json:"type"`
			Time float64 `json:"time_s"`
			request.Request
			LatencyUs uint64 `json:"latency_us"`
		}{"request", t.out.seconds(r.End), r, us})
	}
	if !t.header {
		t.header = true
		fmt.Fprintf(t.out.w, "%-10s %-7s %-8s %-8s %-11s %-10s %-24s %s\n", "TIME(s)", "KIND", "TID", "LAUNCHES", "LATENCY(us)", "CPUGAP(us)", "SYNC", "RESULT")
	}
	kind := r.Kind.String()
	switch {
	case r.Count() > 1:
		kind = fmt.Sprintf("req×%d", r.Count()) // requests run back to back, LATENCY their whole busy period
	case r.Cut > 0:
		kind = fmt.Sprintf("cut%d", r.Cut) // the Nth request cut from a busy period by its program, LATENCY its own
	}
	gap := "-" // the median CPU work between its launches: its CPU's speed then (from 10 such gaps)
	if r.CPUGap > 0 {
		gap = fmt.Sprintf("%.1f", float64(r.CPUGap)/1e3)
	}
	_, err := fmt.Fprintf(t.out.w, "%-10.6f %-7s %-8d %-8d %-11d %-10s %-24s %d\n", t.out.seconds(r.End), kind, r.TID, r.Launches, us, gap, r.Sync, r.Result)
	return err
}

func (t *requestsTrace) Interval() error {
	if err := t.rec.flush(); err != nil {
		return fmt.Errorf("--record: %w", err)
	}
	// What ended by the latest event is in this interval.
	if r, ok := t.delim.Tick(max(t.now, traceHooks.now())); ok {
		if err := t.request(r); err != nil {
			return err
		}
	}
	t.interval++
	if err := t.print(fmt.Sprintf("interval %d", t.interval), &t.cur, nil); err != nil {
		return err
	}
	t.cur = requestAgg{samples: t.cur.samples[:0]}
	return nil
}

// End prints the whole session's requests, --interval or not. A busy
// period open as the trace stopped is a request if quiet for its gap by
// then; if not, the stop cut it: a piece, no request. A recording
// replayed (its stop unknown) ends at its last synchronize's return.
func (t *requestsTrace) End(lost uint64) error { return t.finish(&lost) }

func (t *requestsTrace) finish(lost *uint64) error {
	r, ok := t.delim.Tick(max(t.now, t.out.end))
	if !ok && t.out.end == 0 {
		r, ok = t.delim.Flush()
	}
	if ok {
		if err := t.request(r); err != nil {
			return err
		}
	}
	return t.print("summary", &t.all, lost)
}

func (t *requestsTrace) print(title string, a *requestAgg, lost *uint64) error {
	sum := stats.Summarize(a.samples)
	if t.out.json {
		return t.out.jsonLine(requestSummary{Type: "requests", Title: title, PID: t.pid, Comm: t.comm, Requests: a.hist.N,
			Failed: a.failed, Launches: a.launches, Latency: sum, Hist: viewHist(&a.hist, "usecs"), Lost: lost,
			Mode: t.delim.Mode().String(), QuietGapUs: float64(t.delim.Gap()) / 1e3, Learnt: t.delim.Learnt(), Gaps: t.delim.Gaps()})
	}
	w := t.out.w
	t.out.separate()
	fmt.Fprintf(w, "%s: pid %d %s: %d requests", title, t.pid, cmdutil.OrDash(t.comm), a.hist.N)
	if a.hist.N > 0 {
		fmt.Fprintf(w, ", latency p50 %.0fus p90 %.0fus p99 %.0fus max %.0fus, %.1f launches/request, %d failed",
			sum.P50, sum.P90, sum.P99, sum.Max, float64(a.launches)/float64(a.hist.N), a.failed)
	}
	learnt := "learnt"
	if !t.delim.Learnt() {
		learnt = "not learnt yet"
	}
	fmt.Fprintf(w, "; quiet gap %v (%s), measured per %s\n", t.delim.Gap(), learnt, t.delim.Mode())
	if a.hist.N > 0 {
		if err := writeHist(w, &a.hist, "usecs"); err != nil {
			return err
		}
	}
	if lost != nil {
		_, err := fmt.Fprintf(w, "%d events lost\n", *lost)
		return err
	}
	return nil
}
