package daemon

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

// spaced feeds tl n requests of p of latency lat, one a period (at least
// the request and a quiet gap past the 25 ms ceiling when period is 0):
// a request ends once its process has been quiet for its gap.
func spaced(tl *TracedLatency, p tracetest.Process, n int, lat, period time.Duration, clock *tracetest.Clock) {
	for range n {
		start := clock.Now
		for _, ev := range tracetest.Request(p, 3, lat, clock) {
			tl.Apply(ev)
		}
		if period == 0 {
			period = lat + 30*time.Millisecond
		}
		clock.Now = max(clock.Now, start+uint64(period))
	}
}

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
		spaced(tl, lc, 1, time.Duration(i+1)*time.Millisecond, 0, clock)
	}
	spaced(tl, other, 1, 5*time.Millisecond, 0, clock)
	// A failed synchronization is not a served request.
	failed := tracetest.Request(lc, 1, time.Second, clock)
	failed[len(failed)-1].(*trace.Call).Ret = 700
	feed(failed)
	tl.Roll(10*time.Second, nil) // its quiet gap passed: the last request is in

	s, ok := tl.Latest(100)
	if !ok || s.Requests != 100 || s.Window != 9*time.Second || s.At != 10*time.Second || s.Seq == 0 || s.Source != slomode.SourceTracedRequest {
		t.Fatalf("pid 100 window %+v %v", s, ok)
	}
	if len(s.Samples[slomode.MetricRequest]) != 100 || s.Tokens != 0 {
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
	spaced(tl, lc, 1, time.Millisecond, 0, clock)
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

func TestSLOLoopTracedLatency(t *testing.T) {
	// The LC (pid 100) pushes nothing; request tracing measures it. The
	// windows follow the eager curve of the BE timeslice the fake driver
	// holds, so the loop steers on what it traced.
	s := newSLORig(t, sloPolicy)
	tl := NewTracedLatency()
	s.loop.Traced = tl
	s.loop.Step(s.now) // the controller starts, and the first traced window
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
	clock := &tracetest.Clock{}
	for i := range 40 {
		r, _ := slo.EagerPyTorchH100.At(s.beTimeslice())
		lat := time.Duration(float64(slo.EagerPyTorchH100.Baseline) * r)
		// 50 requests a window, 19 ms apart (the LC's learnt gap
		// delimits them: they are closer together than the ceiling).
		clock.Now = max(clock.Now, uint64(s.now))
		spaced(tl, lc, 50, lat, 19*time.Millisecond, clock)
		s.now += time.Second
		s.loop.Step(s.now)
		s.tick(s.now)
		st := s.loop.Status()
		want := "traced-request"
		if i < slomode.TraceAfter-1 { // a new LC is given two windows to push
			want = "none pushed or traced"
		}
		if len(st.LC) != 1 || st.LC[0].Signal != want || want == "traced-request" && st.LC[0].Requests != 50 {
			t.Fatalf("window %d: LC status %+v, want %s", i, st.LC, want)
		}
	}
	if st := s.loop.Status(); st.Changes == 0 || st.LC[0].Ratio == nil {
		t.Errorf("the loop did not steer on traced latency: %+v", st)
	}
	// A process that pushes is judged by what it pushes once it has
	// pushed in UntraceAfter windows in a row; until then by what is
	// traced, not by both.
	for i := 1; i <= slomode.UntraceAfter; i++ {
		clock.Now = max(clock.Now, uint64(s.now))
		spaced(tl, lc, 50, slo.EagerPyTorchH100.Baseline, 19*time.Millisecond, clock)
		s.loop.Push(100, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 6000}}})
		s.now += time.Second
		s.loop.Step(s.now)
		want := "traced-request"
		if i == slomode.UntraceAfter {
			want = "pushed"
		}
		if st := s.loop.Status(); st.LC[0].Signal != want {
			t.Errorf("push %d: %+v, want %s", i, st.LC, want)
		}
	}
}

// buildLCLoop builds, in dir, a library exporting libcuda's names
// (libcuda.so.1) and lcloop, a program linked against it that waits for a
// line on stdin, prints its pid and makes the requests its argument says.
func buildLCLoop(t *testing.T, dir string) (lib, app string) {
	t.Helper()
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed for the uprobe tests (README: Set up): %v", err)
	}
	lib, app = filepath.Join(dir, "libcuda.so.1"), filepath.Join(dir, "lcloop")
	for _, args := range [][]string{
		{"-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", lib, "../trace/testdata/fakecuda.c"},
		{"-O2", "-o", app, "testdata/lcloop.c", lib, "-Wl,-rpath," + dir},
	} {
		if out, err := exec.Command(gcc, args...).CombinedOutput(); err != nil {
			t.Fatalf("gcc %v: %v\n%s", args, err, out)
		}
	}
	return lib, app
}

// TestBELibraryPrefersTheMapped: with --libcuda, BE progress counts in the
// libcuda a process has mapped, and in the named one for a process that
// maps none.
func TestBELibraryPrefersTheMapped(t *testing.T) {
	dir := t.TempDir()
	lib, app := buildLCLoop(t, dir)
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
	find := beLibrary("/host/libcuda/libcuda.so.1")
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
// and reads the latency of a process that makes 30 requests whose
// synchronization sleeps 2 ms.
func TestRequestTracingUprobes(t *testing.T) {
	dir := t.TempDir()
	lib, app := buildLCLoop(t, dir)
	if _, _, err := OpenTracedLatency(context.Background(), filepath.Join(dir, "missing.so"), nil); !errors.Is(err, trace.ErrNoLibrary) {
		t.Errorf("a missing libcuda: %v, want ErrNoLibrary", err)
	}
	tl, untrace, err := OpenTracedLatency(context.Background(), lib, testLog(t))
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
		t.Fatalf("window %+v %v; want 30 requests (the failed one left out)", s, ok)
	}
	if p50 := s.Quantiles["p50"]; p50 < 2*time.Millisecond || p50 > time.Second {
		t.Errorf("p50 %v; the synchronization sleeps 2 ms", p50)
	}
}

// TestRequestTracingPerProcess: without a library named, request tracing
// attaches to the LC processes the loop names, each through the libcuda it
// has mapped; a process it was not asked for is not traced, and one it is
// no longer asked for is detached.
func TestRequestTracingPerProcess(t *testing.T) {
	dir := t.TempDir()
	_, app := buildLCLoop(t, dir)
	tl, untrace, err := OpenTracedLatency(context.Background(), "", testLog(t))
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
	tl.Roll(monotonic(), []policy.ProcRef{ref})
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
	end := monotonic()
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
}

func (f *fakeProcessTracer) AttachProcess(pid int, lib string) error {
	f.attaches++
	if err := f.fail[pid]; err != nil {
		delete(f.fail, pid)
		return err
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
	tl.tracer, tl.procs, tl.since, tl.log = f, map[string]*tracedProc{}, map[int]time.Duration{}, testLog(t)
	tl.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
	a, b := policy.ProcRef{PID: 100, Start: 1, Comm: "lc-a"}, policy.ProcRef{PID: 300, Start: 1, Comm: "lc-b"}
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-a"}
	clock := &tracetest.Clock{Now: uint64(time.Second)}
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
	// A new process under a's pid: a's probes go, the new one's come.
	reused := policy.ProcRef{PID: 100, Start: 2, Comm: "lc-c"}
	tl.Roll(at(64*time.Second), []policy.ProcRef{reused, b})
	if !slices.Equal(f.detaches, []int{100, 100}) || !f.attached[100] || f.attaches != 5 {
		t.Errorf("pid reused: detaches %v, %d tries", f.detaches, f.attaches)
	}
}

// recordingTraced is a WindowedSource with no samples that records whom
// each Roll asks it to trace.
type recordingTraced struct{ asked [][]int }

func (r *recordingTraced) Latest(int) (slomode.LatencySample, bool) {
	return slomode.LatencySample{}, false
}
func (r *recordingTraced) Roll(_ time.Duration, lcs []policy.ProcRef) {
	var pids []int
	for _, p := range lcs {
		pids = append(pids, p.PID)
	}
	r.asked = append(r.asked, pids)
}

// TestSLOLoopTracesWhatDoesNotPush: request tracing is asked for an LC
// process once it has pushed nothing for two windows, and no longer once
// it has pushed in four windows in a row; one that pushes from the start
// is never traced; one that pushes every third window stays traced; SLO
// mode turned off detaches all.
func TestSLOLoopTracesWhatDoesNotPush(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	s.tick(s.start(400, policy.Process{Comm: "lc-pusher"}) + time.Second)
	rt := &recordingTraced{}
	s.loop.Traced = rt
	push := func(pid int) {
		s.loop.Push(pid, api.Stats{Window: &LatencyWindow{DurationMs: 1000, Requests: 50, LatencyUs: map[string]float64{"p50": 6000}}})
	}
	step := func(pushes ...int) []int {
		t.Helper()
		for _, pid := range pushes {
			push(pid)
		}
		s.now += time.Second
		s.loop.Step(s.now)
		s.tick(s.now)
		return rt.asked[len(rt.asked)-1]
	}
	s.loop.Step(s.now) // the mode starts: both seen now
	want := func(i int, got, want []int) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Fatalf("window %d: traced %v, want %v", i, got, want)
		}
	}
	want(1, step(400), nil)        // a new LC gets TraceAfter windows
	want(2, step(400), []int{100}) // 100 has pushed nothing for two
	for i := 3; i <= 5; i++ {      // 100 pushes: still traced for 3 windows
		want(i, step(100, 400), []int{100})
	}
	want(6, step(100, 400), nil)   // the fourth in a row
	want(7, step(400), nil)        // its last push is still recent
	want(8, step(400), []int{100}) // a push is stamped when it comes: two windows old
	for i := 9; i <= 21; i++ {     // every third window: traced throughout
		var p []int
		if i%3 == 0 {
			p = append(p, 100)
		}
		want(i, step(append(p, 400)...), []int{100})
	}
	pol, err := policy.Parse([]byte("rules:\n  - {match: {comm: \"lc*\"}, class: lc, trust_self_set: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s.rec.SetPolicy(pol)
	want(22, step(), nil) // SLO mode off: every process detached
	n := len(rt.asked)
	step()
	if len(rt.asked) != n {
		t.Errorf("with SLO mode off and nothing traced, Roll was called again: %v", rt.asked[n:])
	}
}

// TestSLOLoopTracesOnlyWhatIsJudged: an LC process without an objective,
// and an MPS server classed lc (its clients launch from their own
// libcuda), are never traced.
func TestSLOLoopTracesOnlyWhatIsJudged(t *testing.T) {
	g := newRig(t, `
classes:
  be: {timeslice: 200us}
rules:
  - {name: lc, match: {comm: "lc-server"}, class: lc, objective: "p50<=1.05x", trust_self_set: true}
  - {name: free, match: {comm: "lc-free"}, class: lc, trust_self_set: true}
  - {name: mps, match: {comm: "nvidia-cuda-mps"}, class: lc, objective: "p99<=2x", trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
slo: {enabled: true, window: 1s}
`)
	s := &sloRig{rig: g, loop: NewSLOLoop(g.rec, g.m, testLog(t))}
	s.tick(s.start(100, policy.Process{Comm: "lc-server"}) + time.Second)
	s.tick(s.start(110, policy.Process{Comm: "lc-free"}) + time.Second)
	s.tick(s.start(120, policy.Process{Comm: "nvidia-cuda-mps", Exe: "/usr/bin/nvidia-cuda-mps-server"}) + time.Second)
	s.tick(s.start(200, policy.Process{Comm: "trainer"}) + time.Second)
	if n := len(s.rec.InClass(class.LC)); n != 3 {
		t.Fatalf("%d LC processes, want 3", n)
	}
	rt := &recordingTraced{}
	s.loop.Traced = rt
	s.loop.Step(s.now)
	for i := range 6 {
		s.now += time.Second
		s.loop.Step(s.now)
		s.tick(s.now)
		if got := rt.asked[len(rt.asked)-1]; i >= slomode.TraceAfter-1 && !slices.Equal(got, []int{100}) {
			t.Fatalf("window %d: traced %v, want [100]", i, got)
		}
	}
}

// TestTracedWindowNotCarriedThroughOff: with every process traced
// (--libcuda), requests keep coming while SLO mode is off; the window the
// loop closes when the mode comes back on spans the whole time off, and is
// not taken for a window of SLO mode's, also when the LC is idle in the
// windows after (nothing replaces it).
func TestTracedWindowNotCarriedThroughOff(t *testing.T) {
	s := newSLORig(t, sloPolicy)
	tl := NewTracedLatency()
	s.loop.Traced = tl
	lc := tracetest.Process{PID: 100, TID: 100, Comm: "lc-server"}
	clock := &tracetest.Clock{}
	window := func(n int, lat time.Duration) {
		clock.Now = max(clock.Now, uint64(s.now))
		spaced(tl, lc, n, lat, 19*time.Millisecond, clock)
		s.now += time.Second
		s.loop.Step(s.now)
		s.tick(s.now)
	}
	setPolicy := func(text string) {
		pol, err := policy.Parse([]byte(text))
		if err != nil {
			t.Fatal(err)
		}
		s.rec.SetPolicy(pol)
	}
	s.loop.Step(s.now)
	for range 4 {
		window(50, 6*time.Millisecond)
	}
	if st := s.loop.Status(); len(st.LC) != 1 || st.LC[0].Signal != "traced-request" {
		t.Fatalf("setup: %+v", st.LC)
	}
	setPolicy(strings.Replace(sloPolicy, "enabled: true", "enabled: false", 1))
	for range 10 {
		window(50, 30*time.Millisecond) // off: no window of SLO mode's
	}
	setPolicy(sloPolicy)
	window(50, 30*time.Millisecond) // the mode comes on: its first window starts
	for i := range 4 {
		window(0, 0) // idle
		for _, l := range s.loop.Status().LC {
			if l.Requests > 0 {
				t.Errorf("idle window %d after the mode came back on: %+v, requests of the time it was off", i, l)
			}
		}
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
	if !ok || s.Source != slomode.SourceTracedStep || s.Requests != 0 || s.Tokens < 100 || len(s.Samples[slomode.MetricRequest]) != 0 ||
		len(s.Samples[slomode.MetricTPOT]) != s.Tokens {
		t.Fatalf("never quiet: %+v %v; want steps only", s, ok)
	}
	if _, ok := s.Quantiles["p50"]; ok {
		t.Errorf("a request quantile for an LC measured per step: %v", s.Quantiles)
	}
	if p := s.Quantiles["tpot_p50"]; p < 15*time.Millisecond || p > 16*time.Millisecond {
		t.Errorf("tpot_p50 %v, want a step (15 ms and the gap)", p)
	}
	if st := tl.Status(); len(st) != 1 || st[0].Mode != "step" || st[0].Source != slomode.SourceTracedStep || st[0].Samples != s.Tokens {
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
	if !ok || s.At != 16*time.Second || s.Source != slomode.SourceTracedRequest || s.Requests != 1 || s.Quantiles["p50"] != 10*time.Millisecond {
		t.Errorf("the request over the window's end: %+v %v; want it whole in the window it ended in", s, ok)
	}
	if st := tl.Status(); st[0].Mode != "request" || st[0].Samples != 1 || st[0].P50Us != 10000 {
		t.Errorf("status %+v", st)
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
