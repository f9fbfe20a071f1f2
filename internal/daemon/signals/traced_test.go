package signals

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

func TestTracedLatencyWindows(t *testing.T) {
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
	other := tracetest.Process{PID: 200, TID: 201, Comm: "bulk"}
	clock := &tracetest.Clock{}
	tl := NewTracedLatency()
	feed := func(evs []trace.Event) {
		for _, ev := range evs {
			tl.Apply(ev)
		}
	}
	clock.Now = uint64(500 * time.Millisecond)
	feed(tracetest.Request(lc, 2, 9*time.Millisecond, clock)) // before the first window: in none
	tl.Roll(time.Second, nil)
	if _, ok := tl.Latest(100); ok {
		t.Fatal("a window before any closed")
	}
	for i := range 100 {
		tracetest.Spaced(tl.Apply, lc, 1, time.Duration(i+1)*time.Millisecond, 0, clock)
	}
	tracetest.Spaced(tl.Apply, other, 1, 5*time.Millisecond, 0, clock)
	// A failed synchronization is not a served request.
	failed := tracetest.Request(lc, 1, time.Second, clock)
	failed[len(failed)-1].(*trace.Call).Ret = 700
	feed(failed)
	tl.Roll(10*time.Second, nil) // its quiet gap passed: the last request is in

	s, ok := tl.Latest(100)
	if !ok || s.Requests != 100 || s.Window != 9*time.Second || s.At != 10*time.Second || s.Seq == 0 || s.Source != signal.TracedRequest {
		t.Fatalf("pid 100 window %+v %v", s, ok)
	}
	if len(s.Samples[signal.MetricRequest]) != 100 || s.Tokens != 0 {
		t.Errorf("samples %v, tokens %d", s.Samples, s.Tokens)
	}
	for q, want := range map[string]time.Duration{"p50": 50 * time.Millisecond, "p90": 90 * time.Millisecond,
		"p99": 99 * time.Millisecond, "p999": 100 * time.Millisecond, "max": 100 * time.Millisecond} {
		if got := s.Quantiles[q]; got != want {
			t.Errorf("%s = %v, want %v", q, got, want)
		}
	}
	if o, ok := tl.Latest(200); !ok || o.Requests != 1 || o.Quantiles["p50"] != 5*time.Millisecond {
		t.Errorf("pid 200 window %+v %v", o, ok)
	}
	// A window without requests keeps the last one (the loop's staleness
	// check ages it out); a new one numbers itself apart.
	tl.Roll(11*time.Second, nil)
	if again, _ := tl.Latest(100); again.Seq != s.Seq {
		t.Errorf("an empty window replaced the last: %+v", again)
	}
	clock.Now = uint64(11 * time.Second)
	tracetest.Spaced(tl.Apply, lc, 1, time.Millisecond, 0, clock)
	tl.Roll(12*time.Second, nil)
	if next, _ := tl.Latest(100); next.Seq == s.Seq || next.Requests != 1 {
		t.Errorf("next window %+v", next)
	}
	tl.Apply(&trace.TaskExit{PID: 100})
	if _, ok := tl.Latest(100); ok {
		t.Error("an exited process's window kept")
	}
	// Without exits (uprobes report none), a process's last window goes
	// lastKept windows after it.
	if _, ok := tl.Latest(200); !ok {
		t.Fatal("pid 200's window gone early")
	}
	last := 10 * time.Second // its window's end; windows of 1 s
	for now := 13 * time.Second; now <= last+lastKept*time.Second; now += time.Second {
		tl.Roll(now, nil)
	}
	if _, ok := tl.Latest(200); !ok {
		t.Errorf("pid 200's window gone before %d windows", lastKept)
	}
	tl.Roll(last+(lastKept+1)*time.Second, nil)
	if s, ok := tl.Latest(200); ok {
		t.Errorf("pid 200's window kept %d windows on: %+v", lastKept, s)
	}
}

// TestBELibraryPrefersTheMapped: with --libcuda, BE progress counts in the
// libcuda a process has mapped, and in the named one for a process that
// maps none.
func TestBELibraryPrefersTheMapped(t *testing.T) {
	dir := t.TempDir()
	lib, app := proctest.BuildLCLoop(t, dir, "../..")
	cmd := exec.Command(app, "0")
	stdin, _ := cmd.StdinPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	}()
	find := BELibrary("/host/libcuda/libcuda.so.1")
	// The loader maps the library before main, which then blocks reading
	// stdin: poll for the mapping (a deadline far past any loader's).
	var got string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got, _ = find(cmd.Process.Pid); strings.HasPrefix(got, fmt.Sprintf("/proc/%d/", cmd.Process.Pid)) {
			break
		}
	}
	// The mapping itself (map_files), or its path under the process's
	// root: the file it mapped either way.
	if st, err := os.Stat(got); err != nil || !sameInode(t, st, lib) {
		t.Errorf("a process mapping %s: %q (%v); want that file", lib, got, err)
	}
	if got, err := find(os.Getpid()); err != nil || got != "/host/libcuda/libcuda.so.1" {
		t.Errorf("a process mapping no libcuda: %q, %v; want the named file", got, err)
	}
}

// TestRequestTracingUprobes attaches the real uprobe programs, as
// gpreemptd --trace-requests does, to a library exporting libcuda's names,
// and reads the latency of a process that makes 30 requests, each from an
// input copy through 3 ms of CPU work to a synchronization that sleeps
// 2 ms: a request begins at its copy, not its first launch.
func TestRequestTracingUprobes(t *testing.T) {
	dir := t.TempDir()
	lib, app := proctest.BuildLCLoop(t, dir, "../..")
	if _, _, err := OpenTracedLatency(context.Background(), filepath.Join(dir, "missing.so"), nil); !errors.Is(err, trace.ErrNoLibrary) {
		t.Errorf("a missing libcuda: %v, want ErrNoLibrary", err)
	}
	tl, untrace, err := OpenTracedLatency(context.Background(), lib, testlog.New(t))
	if errors.Is(err, trace.ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	tl.Roll(time.Second, nil)
	cmd := exec.Command(app, "30")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	var pid int
	if _, err := fmt.Fscan(bufio.NewReader(stdout), &pid); err != nil || pid != cmd.Process.Pid {
		t.Fatalf("lcloop said %d (%v)", pid, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if err := untrace(); err != nil { // drains what was recorded
		t.Fatal(err)
	}
	tl.Roll(2*time.Second, nil)
	s, ok := tl.Latest(pid)
	if !ok || s.Requests != 30 {
		// What the delimiter had learnt says which rule lost a request (seen once under load).
		t.Fatalf("window %+v %v; want 30 requests (the failed one left out); traced %+v", s, ok, tl.Status())
	}
	if p50 := s.Quantiles["p50"]; p50 < 5*time.Millisecond || p50 > time.Second {
		t.Errorf("p50 %v; a request runs from its input copy through 3 ms of CPU work and a 2 ms synchronization", p50)
	}
}

// TestRequestTracingPerProcess: without a library named, request tracing
// attaches to the LC processes the loop names, each through the libcuda it
// has mapped; a process it was not asked for is not traced, and one it is
// no longer asked for is detached.
func TestRequestTracingPerProcess(t *testing.T) {
	dir := t.TempDir()
	_, app := proctest.BuildLCLoop(t, dir, "../..")
	tl, untrace, err := OpenTracedLatency(context.Background(), "", testlog.New(t))
	if errors.Is(err, trace.ErrNotRoot) {
		t.Skipf("the kernel refuses to trace for this user: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, io.WriteCloser, *bufio.Reader) {
		cmd := exec.Command(app, "30")
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, stdin, bufio.NewReader(stdout)
	}
	lc, lcIn, lcOut := start()
	other, otherIn, otherOut := start()
	ref := policy.ProcRef{PID: lc.Process.Pid, Start: 1, Comm: "lcloop"}
	// The loader maps libcuda before main: the attach is retried only
	// after attach.Retry, so wait for the mapping first.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := trace.FindLibrary(trace.LibCUDA, "", lc.Process.Pid); err == nil {
			break
		}
	}
	// The loop's clock is the events' (CLOCK_MONOTONIC): a request that
	// began before the attach would not count.
	tl.Roll(time.Duration(trace.Now()), []policy.ProcRef{ref})
	if tp := tl.procs[ref.Key()]; tp == nil || tp.err != "" {
		t.Fatalf("lcloop not attached: %+v", tp)
	}
	for _, p := range []struct {
		cmd *exec.Cmd
		in  io.WriteCloser
		out *bufio.Reader
	}{{lc, lcIn, lcOut}, {other, otherIn, otherOut}} {
		fmt.Fprintln(p.in, "go")
		var pid int
		if _, err := fmt.Fscan(p.out, &pid); err != nil || pid != p.cmd.Process.Pid {
			t.Fatalf("lcloop said %d (%v)", pid, err)
		}
		if err := p.cmd.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	if err := untrace(); err != nil { // drains what was recorded
		t.Fatal(err)
	}
	end := time.Duration(trace.Now())
	tl.Roll(end, []policy.ProcRef{ref})
	if s, ok := tl.Latest(lc.Process.Pid); !ok || s.Requests != 30 {
		t.Errorf("the traced process: %+v %v; want 30 requests", s, ok)
	}
	if s, ok := tl.Latest(other.Process.Pid); ok {
		t.Errorf("a process not asked for was traced: %+v", s)
	}
	tl.mu.Lock()
	strays := tl.strays
	tl.mu.Unlock()
	if strays != 0 {
		t.Errorf("%d calls of processes not attached reached the programs", strays)
	}
	// No LC asked for: detached (TestPerProcessUprobes: its calls no
	// longer reach the programs), and what was measured of it forgotten.
	tl.Roll(end+time.Second, nil)
	if len(tl.procs) != 0 || len(tl.since) != 0 {
		t.Errorf("still traced: %+v, %v", tl.procs, tl.since)
	}
	if s, ok := tl.Latest(lc.Process.Pid); ok {
		t.Errorf("a detached process keeps its window: %+v", s)
	}
}

// fakeProcessTracer records attaches and detaches; an error in fail is
// returned once.
type fakeProcessTracer struct {
	attached map[int]bool
	attaches int
	detaches []int
	fail     map[int]error
	during   func(pid int) // what happens while an attach is under way
}

func (f *fakeProcessTracer) AttachProcess(pid int, lib string) error {
	f.attaches++
	if err := f.fail[pid]; err != nil {
		delete(f.fail, pid)
		return err
	}
	if f.during != nil {
		f.during(pid)
	}
	f.attached[pid] = true
	return nil
}

func (f *fakeProcessTracer) DetachProcess(pid int) {
	f.detaches = append(f.detaches, pid)
	delete(f.attached, pid)
}

// TestTracedLatencyFollow: per process, Roll attaches the processes named
// and detaches the others; a failed attach is tried again after
// attach.Retry; a reused pid is a new process; a request that began before
// its process was attached, or was open when it was detached, is not
// counted (it would span the time between).
func TestTracedLatencyFollow(t *testing.T) {
	f := &fakeProcessTracer{attached: map[int]bool{}, fail: map[int]error{300: trace.ErrNoLibrary}}
	tl := NewTracedLatency()
	tl.tracer, tl.procs, tl.since, tl.begun, tl.log = f, map[string]*tracedProc{}, map[int]time.Duration{}, map[int]time.Duration{}, testlog.New(t)
	tl.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
	a, b := policy.ProcRef{PID: 100, Start: 1, Comm: "lc-a"}, policy.ProcRef{PID: 300, Start: 1, Comm: "lc-b"}
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-a"}
	clock := &tracetest.Clock{Now: uint64(time.Second)}
	tl.clock = func() time.Duration { return time.Duration(clock.Now) }
	feed := func(evs []trace.Event) {
		for _, ev := range evs {
			tl.Apply(ev)
		}
	}
	at := func(d time.Duration) time.Duration { clock.Now = uint64(d); return d }

	tl.Roll(at(time.Second), []policy.ProcRef{a, b})
	if !f.attached[100] || f.attached[300] || f.attaches != 2 {
		t.Fatalf("after the first roll: attached %v after %d tries", f.attached, f.attaches)
	}
	feed(tracetest.Request(lc, 2, 3*time.Millisecond, clock))
	// A request open when a is detached (it started pushing, say).
	open := tracetest.Request(lc, 2, 3*time.Millisecond, clock)
	feed(open[:2])
	tl.Roll(at(2*time.Second), []policy.ProcRef{b})
	if s, ok := tl.Latest(100); ok {
		t.Errorf("a detached process keeps a window: %+v", s)
	}
	if !slices.Equal(f.detaches, []int{100}) || f.attaches != 2 {
		t.Errorf("b tried again before attach.Retry, or a not detached: detaches %v, %d tries", f.detaches, f.attaches)
	}
	// Events still on their way when it was detached, and a launch just
	// before the next attach, arrive after it.
	feed(open[2:])
	late := tracetest.Request(lc, 1, 2*time.Millisecond, &tracetest.Clock{Now: uint64(62*time.Second - time.Millisecond)})
	feed(late[:1])
	tl.Roll(at(62*time.Second), []policy.ProcRef{a, b})
	if !f.attached[100] || !f.attached[300] || f.attaches != 4 {
		t.Fatalf("after attach.Retry: attached %v after %d tries", f.attached, f.attaches)
	}
	feed(late[1:])
	feed(late) // all of it after the attach, begun before
	// The busy period those began is not counted; the next, after a
	// quiet gap, is.
	clock.Now = uint64(62*time.Second + 100*time.Millisecond)
	feed(tracetest.Request(lc, 2, 2*time.Millisecond, clock))
	tl.Roll(at(63*time.Second), []policy.ProcRef{a, b})
	s, ok := tl.Latest(100)
	if !ok || s.Requests != 1 || s.Quantiles["max"] > 3*time.Millisecond {
		t.Errorf("after the attach: %+v %v; want the one request that began after it (2 ms)", s, ok)
	}
	// Attached inside busy periods: the attach takes 80 ms; while it is under way, with some
	// probes in, a busy period seen whole (2-6 ms, perhaps without its first launches) and the
	// first call of one under way as it returns. Pieces, not counted; the next request, after
	// a quiet gap, is.
	tl.Roll(at(70*time.Second), []policy.ProcRef{b})
	var rest []trace.Event
	f.during = func(int) {
		clock.Now = uint64(131*time.Second + 2*time.Millisecond)
		feed(tracetest.Request(lc, 1, 4*time.Millisecond, clock))
		clock.Now = uint64(131*time.Second + 60*time.Millisecond)
		piece := tracetest.Request(lc, 2, 40*time.Millisecond, clock)
		feed(piece[:1])
		rest = piece[1:]
		clock.Now = uint64(131*time.Second + 80*time.Millisecond)
	}
	tl.Roll(at(131*time.Second), []policy.ProcRef{a, b})
	f.during = nil
	feed(rest)
	clock.Now += uint64(100 * time.Millisecond)
	feed(tracetest.Request(lc, 2, 2*time.Millisecond, clock))
	tl.Roll(at(132*time.Second), []policy.ProcRef{a, b})
	if s, ok := tl.Latest(100); !ok || s.Requests != 1 || s.Quantiles["max"] > 3*time.Millisecond {
		t.Errorf("attached inside a busy period: %+v %v; want the one request after a quiet gap (2 ms)", s, ok)
	}
	// A new process under a's pid: a's probes go, the new one's come.
	reused := policy.ProcRef{PID: 100, Start: 2, Comm: "lc-c"}
	tl.Roll(at(133*time.Second), []policy.ProcRef{reused, b})
	if !slices.Equal(f.detaches, []int{100, 100, 100}) || !f.attached[100] || f.attaches != 6 {
		t.Errorf("pid reused: detaches %v, %d tries", f.detaches, f.attaches)
	}
}

// TestTracedLatencyProbedInside: probes on a library catch a process
// running before them inside a busy period: a piece, not counted; the
// next request, after a quiet gap, is, as is a later process's first.
func TestTracedLatencyProbedInside(t *testing.T) {
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc"}
	late := tracetest.Process{PID: 300, TID: 300, Comm: "lc-late"}
	tl := NewTracedLatency()
	tl.probed = time.Second
	tl.Roll(time.Second, nil)
	clock := &tracetest.Clock{Now: uint64(time.Second + time.Millisecond)}
	for _, ev := range tracetest.Request(lc, 2, 40*time.Millisecond, clock) {
		tl.Apply(ev)
	}
	clock.Now += uint64(100 * time.Millisecond)
	for _, ev := range tracetest.Request(lc, 2, 2*time.Millisecond, clock) {
		tl.Apply(ev)
	}
	clock.Now += uint64(100 * time.Millisecond)
	for _, ev := range tracetest.Request(late, 2, 3*time.Millisecond, clock) {
		tl.Apply(ev)
	}
	tl.Roll(2*time.Second, nil)
	if s, ok := tl.Latest(100); !ok || s.Requests != 1 || s.Quantiles["max"] > 3*time.Millisecond {
		t.Errorf("caught inside a busy period: %+v %v; want the one request after a quiet gap (2 ms)", s, ok)
	}
	if s, ok := tl.Latest(300); !ok || s.Requests != 1 {
		t.Errorf("a process that began after the probes: %+v %v; want its first request", s, ok)
	}
}

// An LC never quiet (a decode loop that always has a next step) is
// measured per step once it has been busy for the Delimiter's StepAfter:
// its windows are traced-step, with its steps as tpot_ samples (Tokens)
// and no request latency, so a request objective finds none; the status
// says so. A request still open when a window closes is counted in the
// window it ends in.
func TestTracedLatencyStepsAndSpans(t *testing.T) {
	tl := NewTracedLatency()
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "decode-loop"}
	clock := &tracetest.Clock{Now: uint64(time.Second)}
	tl.Roll(time.Second, nil)
	// 12 s of 15 ms steps with 100 us between.
	for clock.Now < uint64(13*time.Second) {
		for _, ev := range tracetest.Request(lc, 20, 15*time.Millisecond, clock) {
			tl.Apply(ev)
		}
		clock.Now += uint64(100 * time.Microsecond)
	}
	tl.Roll(13*time.Second, nil)
	s, ok := tl.Latest(100)
	if !ok || s.Source != signal.TracedStep || s.Requests != 0 || s.Tokens < 100 || len(s.Samples[signal.MetricRequest]) != 0 ||
		len(s.Samples[signal.MetricTPOT]) != s.Tokens {
		t.Fatalf("never quiet: %+v %v; want steps only", s, ok)
	}
	if _, ok := s.Quantiles["p50"]; ok {
		t.Errorf("a request quantile for an LC measured per step: %v", s.Quantiles)
	}
	if p := s.Quantiles["tpot_p50"]; p < 15*time.Millisecond || p > 16*time.Millisecond {
		t.Errorf("tpot_p50 %v, want a step (15 ms and the gap)", p)
	}
	if from, to := s.Span(); from != time.Second || to != 13*time.Second {
		t.Errorf("steps' span (%v, %v], want the window's: a step is counted as it ends", from, to)
	}
	if st := tl.Status(); len(st) != 1 || st[0].Mode != "step" || st[0].Source != signal.TracedStep || st[0].Samples != s.Tokens {
		t.Errorf("status %+v", st)
	}

	// The loop stops; a request begins before a window's end and ends
	// after it.
	clock.Now = uint64(14 * time.Second)
	tl.Roll(14*time.Second, nil)
	clock.Now = uint64(15*time.Second - 5*time.Millisecond)
	for _, ev := range tracetest.Request(lc, 3, 10*time.Millisecond, clock) {
		tl.Apply(ev)
	}
	tl.Roll(15*time.Second, nil)
	if s, ok := tl.Latest(100); ok && s.Seq != 0 && s.At == 15*time.Second {
		t.Fatalf("the request was cut at the window's end: %+v", s)
	}
	tl.Roll(16*time.Second, nil)
	s, ok = tl.Latest(100)
	if !ok || s.At != 16*time.Second || s.Source != signal.TracedRequest || s.Requests != 1 || s.Quantiles["p50"] != 10*time.Millisecond {
		t.Errorf("the request over the window's end: %+v %v; want it whole in the window it ended in", s, ok)
	}
	st := tl.Status()
	if st[0].Mode != "request" || st[0].Samples != 1 || st[0].P50Us != 10000 {
		t.Errorf("status %+v", st)
	}
	// A request is counted once its process has been quiet for its gap: its span lags by it.
	if gap := time.Duration(st[0].QuietGapUs * 1e3); s.Lag != gap || s.LagBefore != gap {
		t.Errorf("lags %v, %v before; want the quiet gap, %v", s.Lag, s.LagBefore, gap)
	}
	// Busy again for good: the first window measured per step begins where the last request
	// window's span ended, and its own ends at its end (steps lag nothing).
	prev := s
	for clock.Now < uint64(27*time.Second) {
		for _, ev := range tracetest.Request(lc, 20, 15*time.Millisecond, clock) {
			tl.Apply(ev)
		}
		clock.Now += uint64(100 * time.Microsecond)
	}
	tl.Roll(27*time.Second, nil)
	s, _ = tl.Latest(100)
	_, prevTo := prev.Span()
	if from, to := s.Span(); s.Source != signal.TracedStep || from != prevTo || to != 27*time.Second {
		t.Errorf("%s window after a request window: span (%v, %v], want (%v, %v]", s.Source, from, to, prevTo, 27*time.Second)
	}
}

// An eager resnet50 every 20 ms (14 ms between requests, under the 25 ms
// ceiling) is delimited once its gap is learnt: each window holds its
// requests, each its own latency.
func TestTracedLatencyLearnsTheGap(t *testing.T) {
	tl := NewTracedLatency()
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "resnet"}
	clock := &tracetest.Clock{Now: uint64(time.Second)}
	tl.Roll(time.Second, nil)
	for w := range 3 {
		for range 50 {
			start := clock.Now
			for i := range 50 {
				ev := tracetest.Call(lc, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, clock, time.Duration(20+(i*37)%180)*time.Microsecond)
				tl.Apply(ev)
			}
			tl.Apply(tracetest.Call(lc, trace.RoleSync, "cuStreamSynchronize", 2, false, 0, clock, 50*time.Microsecond))
			clock.Now = start + uint64(6*time.Millisecond)
			tl.Apply(tracetest.Call(lc, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, clock, 0))
			clock.Now = start + uint64(20*time.Millisecond)
		}
		tl.Roll(time.Duration(w+2)*time.Second, nil)
	}
	s, ok := tl.Latest(100)
	want := 6*time.Millisecond - 20*time.Microsecond // from its first launch
	if !ok || s.Requests != 50 || s.Quantiles["max"] != want || s.Quantiles["p50"] != want {
		t.Fatalf("third window %+v %v; want its 50 requests of 6 ms", s, ok)
	}
	if st := tl.Status(); !st[0].Learnt || st[0].QuietGapUs >= 14000 || st[0].QuietGapUs < 1000 {
		t.Errorf("status %+v: want a learnt gap between 1 and 14 ms", st)
	}
}

// sameInode says whether st is the file at path.
func sameInode(t *testing.T, st os.FileInfo, path string) bool {
	t.Helper()
	o, err := os.Stat(path)
	return err == nil && os.SameFile(st, o)
}

// TestTracedLatencyBackToBack: requests an LC ran back to back with no
// quiet gap between them (it fell behind its arrivals) are one busy period.
// Where its requests are one exact program, each is cut from it as it runs,
// at its own latency, into the window it ended in; where the program's
// requests scatter by a launch, the window counts each of the busy
// period's requests at their mean, as the app measures each from its start.
func TestTracedLatencyBackToBack(t *testing.T) {
	tests := []struct {
		name  string
		sizes []int // the launches of the 8 requests told apart, in turn
	}{
		{"one exact program", []int{3}},
		{"a program that scatters by a launch", []int{100, 101}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc"}
			clock := &tracetest.Clock{Now: uint64(time.Second)}
			tl := NewTracedLatency()
			tl.Roll(time.Second, nil) // the window opens
			for i := range 8 {        // told apart, 40 ms apart
				start := clock.Now
				for _, ev := range tracetest.Request(lc, tt.sizes[i%len(tt.sizes)], 10*time.Millisecond, clock) {
					tl.Apply(ev)
				}
				clock.Now = start + uint64(40*time.Millisecond)
			}
			m := tt.sizes[0]
			begun := time.Duration(clock.Now) + 10*time.Microsecond // the busy period's first launch
			for i, lat := range []time.Duration{30, 20, 10} {
				if i == 2 {
					tl.Roll(time.Duration(clock.Now), nil) // a window ends inside the busy period
				}
				for _, ev := range tracetest.Request(lc, m, lat*time.Millisecond, clock) { // 10 us after the last: no quiet gap
					tl.Apply(ev)
				}
			}
			first, _ := tl.Latest(100)
			tl.Roll(10*time.Second, nil)
			s, ok := tl.Latest(100)
			st := tl.Status()
			if len(st) != 1 || st[0].RequestLaunches != m || st[0].RequestsVary {
				t.Fatalf("status %+v: want requests of %d launches, not varying", st, m)
			}
			got := s.Samples[signal.MetricRequest]
			if len(tt.sizes) == 1 {
				// Cut as they ran: the first ended before the window closed, the other two after,
				// each from its own first launch, as the app measures it.
				if !ok || first.Requests != 9 || first.Quantiles["max"] != 30*time.Millisecond || s.Requests != 2 || st[0].Samples != 2 || st[0].Together != 0 {
					t.Fatalf("windows %+v, %+v %v, status %+v: want 8 requests and the first of the three, then the other two, none at a mean", first, s, ok, st[0])
				}
				if want := []time.Duration{20 * time.Millisecond, 10 * time.Millisecond}; !slices.Equal(got, want) {
					t.Errorf("samples %v: want %v, each its own", got, want)
				}
				return
			}
			if !ok || first.Requests != 8 || s.Requests != 3 || st[0].Samples != 3 || st[0].Together != 3 {
				t.Fatalf("windows %+v, %+v %v, status %+v: want 8 requests, then 3 run back to back", first, s, ok, st[0])
			}
			// The three ended anywhere in their busy period: the window's span reaches back to its start.
			if from, _ := s.Span(); from > begun {
				t.Errorf("the window's span starts at %v, after the busy period's start %v", from, begun)
			}
			// The three: 30+20+10 ms and the 10 us before the second's and the third's first launch, a third each.
			each := (60*time.Millisecond + 2*10*time.Microsecond) / 3
			if len(got) != 3 {
				t.Fatalf("samples %v", got)
			}
			for _, x := range got {
				if x != each {
					t.Errorf("samples %v: want the last three at %v", got, each)
					break
				}
			}
		})
	}
}

// lcCalls feeds tl an LC's requests: launches 20 µs apart times speed, its thread on its CPU between them, asleep
// between requests and in each synchronize (wait); windows close 30 s apart.
type lcCalls struct {
	tl       *TracedLatency
	clock    tracetest.Clock
	now, cpu time.Duration
	blocked  uint64
	lc       tracetest.Process
}

func newLCCalls() *lcCalls {
	c := &lcCalls{tl: NewTracedLatency(), now: time.Second, cpu: time.Second, blocked: 1, lc: tracetest.Process{PID: 100, TID: 100, Comm: "lc"}}
	c.tl.Roll(c.now, nil)
	return c
}

func (c *lcCalls) request(launches int, speed float64, wait time.Duration) {
	call := func(role trace.Role, ret bool, d time.Duration) {
		c.tl.Apply(tracetest.WithBlocked(tracetest.WithCPU(tracetest.Call(c.lc, role, "cu", 0, ret, 0, &c.clock, d), c.cpu), c.blocked))
	}
	c.blocked++ // asleep since the last
	for i := range launches {
		g := time.Duration(20 * speed * float64(time.Microsecond))
		if i == 0 {
			g = 100 * time.Millisecond // asleep
		} else {
			c.cpu += g
		}
		call(trace.RoleLaunch, false, g)
	}
	call(trace.RoleSync, false, time.Microsecond)
	c.blocked++
	call(trace.RoleSync, true, wait)
}

// window runs reqs and closes the window 30 s on (skip windows with none before), returning the LC's.
func (c *lcCalls) window(skip int, reqs func()) signal.Latency {
	for range skip {
		c.now += time.Second
		c.tl.Roll(c.now, nil)
	}
	c.clock.Now = uint64(c.now)
	reqs()
	c.now += 30 * time.Second
	c.tl.Roll(c.now, nil)
	s, _ := c.tl.Latest(100)
	return s
}

func (c *lcCalls) bound(speed float64) { c.request(200, speed, 20*time.Microsecond) }

// TestTracedLatencyPerCPU: launch-bound requests of 200 launches (their launches' CPU work all their latency);
// GPU-bound ones with a 20 ms synchronize (a sixth). The first 8 (speed 4) warm up; the next 32 (speeds 1, 1.6 and
// 1.25 in turn) set the unit, their geometric mean: the window of all 40 has no per-CPU samples. Then requests at 1,
// 1.6 and 1.25 are each at the unit's speed (within 2%), their samples what the app sees; a request of one launch (no
// CPU gap of its own) is taken at the last one's speed. Of the last 32 requests 29 launch-bound are needed to be
// judged per CPU, and under 24 it is no longer: 9 GPU-bound requests leave it (22 of 32), it is not judged so again
// at 23, 27 or 28 but at 29, and it still is at 24.
func TestTracedLatencyPerCPU(t *testing.T) {
	c := newLCCalls()
	speeds := []float64{1, 1.6, 1.25}
	logSum := 0.0
	s := c.window(0, func() {
		for range 8 {
			c.bound(4)
		}
		for i := range 32 {
			c.bound(speeds[i%3])
			logSum += math.Log(speeds[i%3])
		}
	})
	if len(s.Samples[signal.MetricRequest]) != 40 || s.PerCPU != nil {
		t.Fatalf("the first 40 requests' window: samples %v, per CPU %v: want 40, none per CPU", s.Samples, s.PerCPU)
	}
	s = c.window(0, func() {
		for _, v := range speeds {
			c.bound(v)
		}
	})
	raw, per := s.Samples[signal.MetricRequest], s.PerCPU[signal.MetricRequest]
	if len(raw) != 3 || len(per) != 3 || raw[1] < raw[0]*5/4 {
		t.Fatalf("window %+v: want 3 samples, the second at 1.6x the CPU time reading it, and 3 per CPU", s)
	}
	unit := math.Exp(logSum / 32) // the unit's speed; the first request ran at 1
	for i, v := range per {
		if math.Abs(float64(v)/(float64(raw[0])*unit)-1) > 0.02 {
			t.Errorf("per CPU %d: %v, want %v within 2%% (samples %v)", i, v, time.Duration(float64(raw[0])*unit), raw)
		}
	}
	s = c.window(0, func() {
		c.bound(1.6)
		c.request(1, 1, 5*time.Millisecond)
	})
	raw, per = s.Samples[signal.MetricRequest], s.PerCPU[signal.MetricRequest]
	if len(per) != 2 || math.Abs(float64(per[1])/(float64(raw[1])*unit/1.6)-1) > 0.02 {
		t.Errorf("a request of one launch after one at 1.6: samples %v, per CPU %v: want the second at the first's speed", raw, per)
	}
	for _, step := range []struct {
		what            string
		bound, gpuBound int
		perCPU          bool
	}{
		{"9 GPU-bound: 22 of the last 32 launch-bound", 0, 9, false},
		{"23 launch-bound: 23 of 32", 23, 0, false},
		{"4 more: 27 of 32", 4, 0, false},
		{"1 more: 28 of 32", 1, 0, false},
		{"1 more: 29 of 32", 1, 0, true},
		{"8 GPU-bound: 24 of 32, still judged so", 0, 8, true},
		{"1 more GPU-bound: 23 of 32", 0, 1, false},
	} {
		s = c.window(0, func() {
			for range step.gpuBound {
				c.request(200, 1, 20*time.Millisecond)
			}
			for range step.bound {
				c.bound(1)
			}
		})
		if got := s.PerCPU != nil; got != step.perCPU {
			t.Errorf("%s: per CPU %v, want %v", step.what, got, step.perCPU)
		}
	}
}

// TestIsLaunchBound: a request's launches' CPU work at half its latency or more is launch-bound, under it not, nor one
// without a CPU gap.
func TestIsLaunchBound(t *testing.T) {
	for _, tc := range []struct {
		latency, gap time.Duration
		want         bool
	}{
		{7 * time.Millisecond, 20 * time.Microsecond, true},  // 200 launches: 4 ms of 7
		{9 * time.Millisecond, 20 * time.Microsecond, false}, // 4 of 9
		{4 * time.Millisecond, 0, false},
	} {
		r := request.Request{Start: 1e9, End: 1e9 + uint64(tc.latency), Launches: 200, CPUGap: tc.gap}
		if got := isLaunchBound(r); got != tc.want {
			t.Errorf("%v latency, %v CPU gap: launch-bound %v, want %v", tc.latency, tc.gap, got, tc.want)
		}
	}
}

// TestTracedLatencyForgetsUnits: a request of one launch is taken at the last launch-bound one's speed 2 windows
// after it, not 4; a process traced again (its pid reused), or quiet 61 windows with no exit seen (library-wide
// tracing sees none), learns its unit again: 36 requests later it has none yet.
func TestTracedLatencyForgetsUnits(t *testing.T) {
	for _, forget := range []string{"traced again", "quiet 61 windows"} {
		t.Run(forget, func(t *testing.T) {
			c := newLCCalls()
			requests := func(skip, n int) signal.Latency {
				return c.window(skip, func() {
					for range n {
						c.bound(1)
					}
				})
			}
			if s := requests(0, 41); s.PerCPU != nil {
				t.Fatalf("the first 41: per CPU %v, want none", s.PerCPU)
			}
			if s := requests(0, 3); s.PerCPU == nil {
				t.Fatalf("after 44: no per CPU samples")
			}
			for _, quiet := range []int{1, 3} { // a request of one launch after quiet windows
				if s := c.window(quiet, func() { c.request(1, 1, 5*time.Millisecond) }); (s.PerCPU != nil) != (quiet == 1) {
					t.Errorf("a request of one launch %d windows after the last with a gap: per CPU %v (want it only at 1)", quiet+1, s.PerCPU)
				}
			}
			if forget == "traced again" {
				c.tl.track(100, -1)
			} else {
				c.window(60, func() {}) // 61 windows closed with none
			}
			requests(0, 26)
			if s := requests(0, 10); len(s.Samples[signal.MetricRequest]) != 10 || s.PerCPU != nil { // 36 since: no unit yet
				t.Errorf("%s, then 36 requests: %d samples, per CPU %v (want 10, none: its unit learnt again)", forget, len(s.Samples[signal.MetricRequest]), s.PerCPU)
			}
		})
	}
}

// TestTracedLatencyAsMeasured: with AsMeasured (gpreemptd --trace-per-cpu=false) a launch-bound LC has no per-CPU
// samples, however many requests.
func TestTracedLatencyAsMeasured(t *testing.T) {
	c := newLCCalls()
	c.tl.AsMeasured = true
	if s := c.window(0, func() {
		for range 50 {
			c.bound(1)
		}
	}); len(s.Samples[signal.MetricRequest]) != 50 || s.PerCPU != nil {
		t.Errorf("%d samples, per CPU %v: want 50, none per CPU", len(s.Samples[signal.MetricRequest]), s.PerCPU)
	}
}
