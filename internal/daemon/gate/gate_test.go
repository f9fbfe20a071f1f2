package gate

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// gateProcs is a fixed set of classed processes and a policy.
type gateProcs struct {
	mu  sync.Mutex
	pol *policy.Policy
	lc  []policy.ProcRef
	be  []policy.ProcRef
}

func (p *gateProcs) InClass(n class.Name) []policy.ProcRef {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n == class.LC {
		return slices.Clone(p.lc)
	}
	return slices.Clone(p.be)
}

func (p *gateProcs) Policy() *policy.Policy {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pol
}

// fakePause records what is stopped; stopErr and resumeErr make its calls
// fail.
type fakePause struct {
	mu                 sync.Mutex
	stopped            map[int]bool
	stops, resumes     int
	stopErr, resumeErr error
	// during runs inside Stop (to close a hold while BE is being stopped).
	during func()
	// ever: every process a Stop stopped, resumed since or not.
	ever map[int]bool
}

func (f *fakePause) everStopped(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ever[pid]
}

func (f *fakePause) Stop(procs []policy.ProcRef, _ time.Duration) (int, error) {
	if f.during != nil {
		f.during()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stops++
	if f.stopErr != nil {
		return 0, f.stopErr
	}
	n := 0
	for _, p := range procs {
		if !f.stopped[p.PID] {
			f.stopped[p.PID] = true
			n++
		}
		if f.ever == nil {
			f.ever = map[int]bool{}
		}
		f.ever[p.PID] = true
	}
	return n, nil
}

func (f *fakePause) ResumeExcept(keep []policy.ProcRef) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.resumes++
	if f.resumeErr != nil {
		return 0, f.resumeErr
	}
	n := 0
	for pid := range f.stopped {
		if !slices.ContainsFunc(keep, func(r policy.ProcRef) bool { return r.PID == pid }) {
			delete(f.stopped, pid)
			n++
		}
	}
	return n, nil
}

func (f *fakePause) isStopped(pid int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stopped[pid]
}

type gateRig struct {
	g     *Gate
	procs *gateProcs
	pause *fakePause
	now   time.Duration
	// running: the LC thread of the last call is on a CPU (launching).
	running atomic.Bool
}

func gatePolicy(mode string) *policy.Policy {
	p := &policy.Policy{Gate: policy.DefaultGate()}
	p.Gate.Mode, p.Gate.Idle = mode, 2*time.Millisecond
	return p
}

// newGateRig: LC 10 on GPU 0; BE 20 on GPU 0, BE 21 on GPU 1, BE 22 on a
// GPU not known.
func newGateRig(t *testing.T, pol *policy.Policy) *gateRig {
	t.Helper()
	r := &gateRig{procs: &gateProcs{pol: pol,
		lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}},
		be: []policy.ProcRef{{PID: 20, Start: 1, GPUs: []int{0}}, {PID: 21, Start: 1, GPUs: []int{1}}, {PID: 22, Start: 1}}},
		pause: &fakePause{stopped: map[int]bool{}}}
	r.g = New(r.procs, r.pause, nil)
	r.g.Now = func() time.Duration { return r.now }
	r.g.Running = func(pid, tid int) bool { return r.running.Load() }
	r.g.followLCs(nil)
	return r
}

func (r *gateRig) launch(pid, tid uint32) {
	r.g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: pid, TID: tid})
	// The loop's part: hold BE for the request that began.
	for {
		select {
		case c := <-r.g.cmds:
			r.g.command(c)
			continue
		default:
		}
		return
	}
}

func (r *gateRig) syncReturn(pid, tid uint32) {
	r.g.Observe(&trace.Call{Kind: trace.CallReturn, Role: trace.RoleSync, PID: pid, TID: tid})
}

// overrun launches pid's work 1 ms apart until a hold ran to MaxHold.
func (r *gateRig) overrun(pid uint32) {
	for n := r.g.Stats().Closed["max_hold"]; r.g.Stats().Closed["max_hold"] == n; {
		r.launch(pid, 1)
		r.advance(time.Millisecond)
	}
}

func (r *gateRig) advance(d time.Duration) {
	r.now += d
	r.g.Tick()
}

// A request holds the BE on its GPU (and those on no known GPU) from its
// first launch until it has been idle for Idle; the BE on another GPU is
// never touched.
func TestGateHoldsBEForARequest(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.launch(10, 1)
	if !r.pause.isStopped(20) || !r.pause.isStopped(22) || r.pause.isStopped(21) {
		t.Fatalf("stopped %v: want 20 and 22, not 21 (another GPU)", r.pause.stopped)
	}
	for range 50 { // a decode: launches, a sync a token, short gaps
		r.advance(500 * time.Microsecond)
		r.syncReturn(10, 1)
		r.advance(500 * time.Microsecond)
		r.launch(10, 1)
	}
	if r.pause.stops != 1 {
		t.Errorf("%d stops in one request, want 1", r.pause.stops)
	}
	r.syncReturn(10, 1)
	r.advance(time.Millisecond)
	if !r.pause.isStopped(20) {
		t.Fatal("resumed before the idle time")
	}
	r.advance(time.Millisecond)
	if r.pause.isStopped(20) || r.pause.isStopped(22) {
		t.Fatalf("still stopped %v after the request ended", r.pause.stopped)
	}
	s := r.g.Stats()
	// The 50 launches after the first came while it held (its probes on:
	// the rig turns none off).
	if s.Held != 1 || s.Closed["idle"] != 1 || s.Open != 0 || s.BEStopped != 2 || s.HeldSeconds < 0.05 || s.LaunchesHeld != 50 {
		t.Errorf("stats %+v", s)
	}
}

func (r *gateRig) syncEnter(pid, tid uint32) {
	r.g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleSync, PID: pid, TID: tid})
}

// Synchronize calls keep a request open while they come within Idle
// of each other (a decode's tokens); the request ends Idle after the last.
func TestGateFollowsSynchronizations(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.launch(10, 1)
	for range 40 {
		r.syncEnter(10, 1)
		r.advance(time.Millisecond)
		r.syncReturn(10, 1)
		r.advance(time.Millisecond)
	}
	if !r.pause.isStopped(20) {
		t.Fatal("resumed within the request, or before the idle time")
	}
	r.advance(time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("not resumed Idle after the last synchronization")
	}
}

// A thread waiting in a synchronize keeps the request open past Idle
// (a token slow under contention is not the request's end); a return
// that is lost holds BE no longer than syncBound Idles.
func TestGateWaitsInSynchronize(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.launch(10, 1)
	r.syncEnter(10, 1)
	r.advance(10 * time.Millisecond)
	if !r.pause.isStopped(20) {
		t.Fatal("resumed while the LC waited for the GPU")
	}
	r.syncReturn(10, 1)
	r.advance(2 * time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("not resumed Idle after the return")
	}
	r.launch(10, 1)
	r.syncEnter(10, 1) // its return is lost
	for range syncBound {
		r.advance(2 * time.Millisecond)
	}
	r.advance(2 * time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("a lost return held BE past its bound")
	}
}

// While a hold is open the LC's launches are not traced: a thread still
// running past the idle time (launching a slow step) keeps the request
// open, for at most syncBound idles after its last traced call; once it
// sleeps (the request is over) the hold ends at the next tick.
func TestGateFollowsARunningThread(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn)) // idle 2 ms
	r.launch(10, 7)
	r.syncEnter(10, 7)
	r.advance(time.Millisecond)
	r.syncReturn(10, 7)
	r.running.Store(true) // the next step: 30 ms of launches, not traced
	for range 15 {
		r.advance(2 * time.Millisecond)
	}
	if !r.pause.isStopped(20) {
		t.Fatal("resumed while the LC's thread was launching its next step")
	}
	r.syncEnter(10, 7)
	r.advance(time.Millisecond)
	r.syncReturn(10, 7)
	r.running.Store(false) // the request is over: the thread sleeps
	r.advance(time.Millisecond)
	if !r.pause.isStopped(20) {
		t.Fatal("resumed before the idle time")
	}
	r.advance(time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("not resumed once the LC's thread slept for the idle time")
	}
	// A thread that never sleeps (a busy-polling server) holds BE at most
	// syncBound idles after the last traced call.
	r.launch(10, 7)
	r.syncReturn(10, 7)
	r.running.Store(true)
	for range syncBound - 1 {
		r.advance(2 * time.Millisecond)
	}
	if !r.pause.isStopped(20) {
		t.Fatal("resumed before syncBound idles")
	}
	r.advance(2 * time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("a running thread held BE past syncBound idles")
	}
	if s := r.g.Stats(); s.Held != 2 || s.Closed["idle"] != 2 {
		t.Errorf("stats %+v: want two holds ended by idle", s)
	}
}

// busyState: a thread running, runnable or held up in the kernel is within a request (a quiet gap
// needs it not busy); one asleep, stopped or gone is not.
func TestBusyState(t *testing.T) {
	for _, tc := range []struct {
		state byte
		busy  bool
	}{{'R', true}, {'D', true}, {'S', false}, {'I', false}, {'T', false}, {'t', false}, {'Z', false}, {'X', false}} {
		if got := busyState(tc.state); got != tc.busy {
			t.Errorf("state %c: busy %v, want %v", tc.state, got, tc.busy)
		}
	}
}

// threadRunning reads a real thread held up in the kernel as busy: a parent of vfork waits there
// (state D) until its child, which pauses, is killed.
func TestThreadRunningHeldUp(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Fatalf("gcc is needed for this test (README: Set up): %v", err)
	}
	dir := t.TempDir()
	src, bin := filepath.Join(dir, "vf.c"), filepath.Join(dir, "vf")
	code := "#include <unistd.h>\nint main(void) { if (vfork() == 0) { pause(); _exit(0); } return 0; }\n"
	if err := os.WriteFile(src, []byte(code), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(gcc, "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its child with it
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	defer func() { syscall.Kill(-pid, syscall.SIGKILL); cmd.Wait() }()
	proctest.WaitFor(t, "the vfork parent held up (D)", func() bool { return proctest.State(t, pid) == 'D' })
	if !threadRunning(pid, pid) {
		t.Error("a thread held up in the kernel (D) read as not busy")
	}
}

// threadRunning reads this test's own thread: running while it reads.
func TestThreadRunning(t *testing.T) {
	if !threadRunning(os.Getpid(), syscall.Gettid()) {
		t.Error("the reading thread is not running")
	}
	if threadRunning(os.Getpid(), 1<<30) {
		t.Error("a thread that does not exist is running")
	}
}

// A synchronize of an LC that holds nothing opens a request too: its
// first launches were not traced (the launch probes were coming back on
// after the last request).
func TestGateSynchronizeOpens(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.syncEnter(10, 1)
	for {
		select {
		case c := <-r.g.cmds:
			r.g.command(c)
			continue
		default:
		}
		break
	}
	if !r.pause.isStopped(20) {
		t.Fatal("a synchronize of an idle LC opened no hold")
	}
	r.syncReturn(10, 1)
	r.advance(2 * time.Millisecond)
	if r.pause.isStopped(20) {
		t.Fatal("not resumed Idle after the return")
	}
}

// BE is back within a bound in every way a request can go wrong.
func TestGateAlwaysResumes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		run   func(r *gateRig)
		cause string
	}{
		{"LC killed mid-request", func(r *gateRig) { r.g.Observe(&trace.TaskExit{PID: 10}) }, "exit"},
		{"LC synchronizes past MaxHold", func(r *gateRig) {
			for r.now < policy.DefaultGateMaxHold {
				r.syncReturn(10, 1)
				r.advance(time.Millisecond)
			}
		}, "max_hold"},
		{"policy turns the gate off", func(r *gateRig) {
			r.procs.mu.Lock()
			r.procs.pol = gatePolicy(policy.GateOff)
			r.procs.mu.Unlock()
			r.g.followLCs(nil)
		}, "off"},
		{"LC leaves class lc", func(r *gateRig) {
			r.procs.mu.Lock()
			r.procs.lc = nil
			r.procs.mu.Unlock()
			r.g.followLCs(nil)
		}, "off"},
		{"daemon stops", func(r *gateRig) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r.g.Run(ctx, nil)
		}, "stop"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newGateRig(t, gatePolicy(policy.GateOn))
			r.launch(10, 1)
			if !r.pause.isStopped(20) {
				t.Fatal("not held")
			}
			tc.run(r)
			if r.pause.isStopped(20) || r.pause.isStopped(22) {
				t.Errorf("BE still stopped: %v", r.pause.stopped)
			}
			if s := r.g.Stats(); s.Closed[tc.cause] != 1 || s.Open != 0 {
				t.Errorf("stats %+v: want one hold closed by %s", s, tc.cause)
			}
		})
	}
}

// A failed resume is counted and the hold ends: the pauser's watchdog
// resumes BE at MaxHold plus a margin (TestWatchdogResumesAtItsDeadline).
// A failed stop is counted and holds nothing.
func TestGatePauseFailures(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.pause.stopErr = errors.New("no")
	r.launch(10, 1)
	r.syncReturn(10, 1)
	r.advance(3 * time.Millisecond)
	r.pause.stopErr = nil
	r.pause.resumeErr = errors.New("no")
	r.launch(10, 1)
	r.syncReturn(10, 1)
	r.advance(3 * time.Millisecond)
	if s := r.g.Stats(); s.Failures != 2 || s.Open != 0 || s.Closed["idle"] != 2 {
		t.Errorf("stats %+v: want 2 failures, both holds closed", s)
	}
}

// A request that ends while BE is being stopped still resumes it.
func TestGateEndsWhileStopping(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.pause.during = func() { r.g.Observe(&trace.TaskExit{PID: 10}) }
	r.launch(10, 1)
	if r.pause.isStopped(20) {
		t.Fatal("BE left stopped by a hold that ended during its stop")
	}
}

// The share of GPU time is a budget: a request past it holds nothing.
func TestGateShare(t *testing.T) {
	pol := gatePolicy(policy.GateOn)
	pol.Gate.Share, pol.Gate.MaxHold = 0.05, time.Second // 1 s over 20 s: one reservation
	r := newGateRig(t, pol)
	r.procs.lc = append(r.procs.lc, policy.ProcRef{PID: 11, Start: 1, GPUs: []int{0}})
	r.g.followLCs(nil)
	r.launch(10, 1)
	r.launch(11, 1)
	if s := r.g.Stats(); s.Held != 1 || s.Refused != 1 {
		t.Fatalf("stats %+v: want one held, one refused", s)
	}
	// The first ends after 100 ms: 900 ms come back, and 100 ms refill
	// over 2 s at 0.05.
	r.advance(100 * time.Millisecond)
	r.syncReturn(10, 1)
	r.advance(3 * time.Millisecond)
	r.advance(2 * time.Second)
	r.launch(11, 1)
	if s := r.g.Stats(); s.Held != 2 {
		t.Errorf("stats %+v: the unused part of a hold was not given back", s)
	}
}

// Auto holds an LC whose requests are long, and not one whose requests
// take a few switches.
func TestGateAuto(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateAuto))
	for range 4 {
		r.launch(10, 1)
		r.advance(200 * time.Microsecond)
		r.syncReturn(10, 1)
		r.advance(3 * time.Millisecond)
	}
	r.launch(10, 1)
	if s := r.g.Stats(); s.Held != 4 || s.Skipped != 1 || r.pause.isStopped(20) {
		t.Errorf("stats %+v: short requests are still held", s)
	}
}

// Where SLO mode steers an LC to the gate, auto's guess that its requests
// are too short does not overrule it; steered off, it is not held.
func TestGateSteeredOverrulesAuto(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateAuto))
	short := func() {
		r.launch(10, 1)
		r.advance(200 * time.Microsecond)
		r.syncReturn(10, 1)
		r.advance(3 * time.Millisecond)
	}
	for range 4 {
		short()
	}
	r.g.Steer(map[int]bool{10: true})
	short()
	if s := r.g.Stats(); s.Held != 5 || s.Skipped != 0 {
		t.Errorf("stats %+v: a request SLO mode steered to the gate was not held", s)
	}
	r.g.Steer(map[int]bool{10: false})
	short()
	if s := r.g.Stats(); s.Held != 5 || s.Steered != 1 {
		t.Errorf("stats %+v: a request steered off the gate was held", s)
	}
}

// An LC whose requests come closer together than Idle is never idle long
// enough to end a hold: each runs to MaxHold. After two in a row the gate
// says it does not delimit the LC (SLO mode then offers it no gate arm);
// it does again once three requests began after an idle outside a hold,
// or at once when a hold ends idle.
func TestGateDelimits(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn)) // idle 2 ms
	overrun := func() { r.overrun(10) }
	request := func() {
		r.advance(3 * time.Millisecond)
		r.launch(10, 1)
		r.advance(200 * time.Microsecond)
		r.syncReturn(10, 1)
	}
	for i := range 2 {
		if !r.g.Delimits(10) {
			t.Fatalf("not delimited after %d holds to MaxHold", i)
		}
		overrun()
	}
	if s := r.g.Stats(); s.Closed["max_hold"] != 2 || s.Undelimited != 1 || r.g.Delimits(10) {
		t.Fatalf("stats %+v, delimits %v: want two holds to MaxHold, not delimited", s, r.g.Delimits(10))
	}
	if !r.g.Delimits(99) {
		t.Error("an LC the gate does not follow is not delimited")
	}
	r.g.Steer(map[int]bool{10: false}) // SLO mode left the gate arm
	for i := range 3 {
		if r.g.Delimits(10) {
			t.Fatalf("delimited after %d requests that began after an idle", i)
		}
		request()
	}
	if !r.g.Delimits(10) {
		t.Fatal("not delimited after three requests that began after an idle")
	}
	r.g.Steer(nil)
	overrun()
	overrun()
	request()
	r.advance(3 * time.Millisecond)
	if s := r.g.Stats(); s.Closed["idle"] != 1 || !r.g.Delimits(10) {
		t.Errorf("stats %+v: a hold that ended idle, and still not delimited", s)
	}
}

// With the real pauser and a real process: the BE is stopped for the
// request and running again when the LC is killed mid-request.
func TestGateRealPauser(t *testing.T) {
	be := proctest.Sleeper(t)
	be.GPUs = []int{0}
	procs := &gateProcs{pol: gatePolicy(policy.GateOn), lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{be}}
	g := New(procs, &pause.Pauser{}, nil)
	g.followLCs(nil)
	g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	g.command(<-g.cmds)
	proctest.WaitState(t, be.PID, true)
	g.Observe(&trace.TaskExit{PID: 10})
	proctest.WaitState(t, be.PID, false)
}

// Run's loop holds BE for a request that began, turns the LC's launch
// probes off for the request and back on once it ended.
func TestGateRunArmsLaunchProbes(t *testing.T) {
	procs := &gateProcs{pol: gatePolicy(policy.GateOn), lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{{PID: 20, Start: 1}}}
	pause := &fakePause{stopped: map[int]bool{}}
	g := New(procs, pause, nil)
	var now atomic.Int64
	g.Now = func() time.Duration { return time.Duration(now.Load()) }
	arms := make(chan bool, 16)
	g.Arm = func(pid int, on bool) {
		if pid == 10 {
			arms <- on
		}
	}
	g.followLCs(nil) // before the first event, as Run does before its loop
	stop := runGate(t, g)
	g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	if on := <-arms; on {
		t.Fatal("launch probes turned on at a request's start")
	}
	// The probes are turned off beside the stop, not after it.
	proctest.WaitFor(t, "BE held", func() bool { return pause.isStopped(20) })
	g.Observe(&trace.Call{Kind: trace.CallReturn, Role: trace.RoleSync, PID: 10, TID: 1})
	now.Add(int64(time.Second))
	if on := <-arms; !on {
		t.Fatal("launch probes not turned back on at the request's end")
	}
	proctest.WaitFor(t, "BE resumed", func() bool { return !pause.isStopped(20) })
	stop()
}

// With launch_probes: always a request's hold leaves the launch probes on
// (a trap a launch instead of a detach and an attach a request); the
// policy turned back to between, they come off for the hold still open.
// SLO mode steering the LC off the gate takes them off whatever the mode.
func TestGateLaunchProbesAlways(t *testing.T) {
	pol := gatePolicy(policy.GateOn)
	pol.Gate.LaunchProbes = policy.LaunchProbesAlways
	procs := &gateProcs{pol: pol, lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{{PID: 20, Start: 1}}}
	pause := &fakePause{stopped: map[int]bool{}}
	g := New(procs, pause, nil)
	g.Now = func() time.Duration { return time.Second } // the hold stays open
	arms := make(chan bool, 16)
	g.Arm = func(pid int, on bool) {
		if pid == 10 {
			arms <- on
		}
	}
	g.followLCs(nil)
	stop := runGate(t, g)
	defer stop()
	g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	proctest.WaitFor(t, "BE held", func() bool { return pause.isStopped(20) })
	if !g.launchesWanted(10) {
		t.Fatal("launch probes wanted off for a hold with launch_probes: always")
	}
	g.Steer(map[int]bool{10: false})
	if g.launchesWanted(10) {
		t.Fatal("launch probes wanted on for an LC SLO mode steered off the gate")
	}
	g.Steer(nil)
	between := gatePolicy(policy.GateOn)
	between.Gate.LaunchProbes = policy.LaunchProbesBetween
	procs.mu.Lock()
	procs.pol = between
	procs.mu.Unlock()
	g.followLCs(nil)
	if g.launchesWanted(10) {
		t.Fatal("launch probes wanted on for a hold with launch_probes: between")
	}
	for { // asks made before come first; a missing one fails at the test's deadline
		if on := <-arms; !on {
			return
		}
	}
}

// launch_probes: auto keeps an LC's launch probes on through its requests once they end before a
// detach would (its launches would trap until then anyway), and takes them off for longer ones.
// Spans measured while detaching are judged against the detach and the attach together.
func TestGateLaunchProbesAuto(t *testing.T) {
	const ms = time.Millisecond
	tests := []struct {
		name                string
		probes              string          // launch_probes ("": auto, the default)
		spans               []time.Duration // the LC's requests, in order
		detach, attach      time.Duration   // its detaches and attaches timed (0: none)
		keptWhileHeld, logs bool            // kept at the end; a line said they were kept
		offAgain            bool            // a line said they came off again
		remode              bool            // the policy to between and back to auto after the spans
	}{
		{"graph decode, 40 ms against a 70 ms detach", "", []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms}, 70 * ms, 20 * ms, true, true, false, false},
		{"eager decode, 250 ms against 70 + 20 ms", "", []time.Duration{250 * ms, 250 * ms, 250 * ms, 250 * ms}, 70 * ms, 20 * ms, false, false, false, false},
		{"lengthened by the rewrites: 80 ms against 70 + 20 ms", "", []time.Duration{80 * ms, 80 * ms, 80 * ms, 80 * ms}, 70 * ms, 20 * ms, true, true, false, false},
		{"80 ms, no attach timed yet: against the detach alone", "", []time.Duration{80 * ms, 80 * ms, 80 * ms, 80 * ms}, 70 * ms, 0, false, false, false, false},
		{"three requests: not yet judged", "", []time.Duration{40 * ms, 40 * ms, 40 * ms}, 70 * ms, 20 * ms, false, false, false, false},
		{"no detach timed", "", []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms}, 0, 0, false, false, false, false},
		{"kept, then its requests grow past the detach", "", []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms, 75 * ms, 75 * ms, 75 * ms, 75 * ms}, 70 * ms, 20 * ms, false, true, true, false},
		{"kept on lengthened spans, then judged on its own: shorter", "", []time.Duration{80 * ms, 80 * ms, 80 * ms, 80 * ms, 45 * ms, 45 * ms, 45 * ms, 45 * ms}, 70 * ms, 20 * ms, true, true, false, false},
		{"between: a 40 ms LC is judged by no one, its probes off for each request", policy.LaunchProbesBetween, []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms}, 70 * ms, 20 * ms, false, false, false, false},
		{"kept, then to between and back: judged anew", "", []time.Duration{40 * ms, 40 * ms, 40 * ms, 40 * ms}, 70 * ms, 20 * ms, false, true, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pol := gatePolicy(policy.GateOn)
			pol.Gate.Idle = policy.DefaultGateIdle // a synchronize keeps a request 40 idles at most
			pol.Gate.LaunchProbes = cmp.Or(tt.probes, policy.LaunchProbesAuto)
			r := newGateRig(t, pol)
			var log strings.Builder
			r.g.Log = slog.New(slog.NewTextHandler(&log, nil))
			if tt.detach > 0 {
				r.g.NoteRewrite(10, tt.detach, true)
			}
			if tt.attach > 0 {
				r.g.NoteRewrite(10, tt.attach, false)
			}
			call := func(k trace.CallKind, role trace.Role) { // stamped, as the tracer's are
				r.g.Observe(&trace.Call{Kind: k, Role: role, PID: 10, TID: 1, At: uint64(r.now)})
				for len(r.g.cmds) > 0 {
					r.g.command(<-r.g.cmds)
				}
			}
			for _, span := range tt.spans { // a request: in a synchronize for its span
				call(trace.CallEnter, trace.RoleLaunch)
				call(trace.CallEnter, trace.RoleSync)
				r.advance(span)
				call(trace.CallReturn, trace.RoleSync)
				r.advance(30 * ms) // idle ends the hold
			}
			if tt.remode {
				for _, m := range []string{policy.LaunchProbesBetween, policy.LaunchProbesAuto} {
					pol.Gate.LaunchProbes = m
					r.g.followLCs(nil)
				}
			}
			call(trace.CallEnter, trace.RoleLaunch)
			if r.g.open[10] == nil {
				t.Fatal("no hold open for a request")
			}
			if got := r.g.launchesWanted(10); got != tt.keptWhileHeld {
				t.Errorf("launch probes on while held: %v, want %v", got, tt.keptWhileHeld)
			}
			if kept := r.g.Stats().ProbesKept; kept != map[bool]int{true: 1}[tt.keptWhileHeld] {
				t.Errorf("status: %d LCs keep their launch probes, want it iff kept", kept)
			}
			if got := r.g.Traps(10); got != tt.keptWhileHeld { // SLO mode learns no reference under the gate for an LC whose launches trap
				t.Errorf("the LC's launches trap through its requests: %v, want %v", got, tt.keptWhileHeld)
			}
			if r.g.SelfGated(10) { // kept probes are no engine's gate: its windows do not lag a change of arm
				t.Error("an LC that keeps its launch probes counted as gating itself")
			}
			if got := strings.Contains(log.String(), "kept on"); got != tt.logs {
				t.Errorf("log %q: a line on keeping them %v, want %v", log.String(), got, tt.logs)
			}
			if got := strings.Contains(log.String(), "off for its requests again"); got != tt.offAgain {
				t.Errorf("log %q: a line on their coming off again %v, want %v", log.String(), got, tt.offAgain)
			}
		})
	}
}

// An LC that SLO mode steers off the gate has its launch probes off: no
// hold opens for it, and each probe costs an eager LC a trap a launch (on
// the H100 an eager LC under SLO mode's timeslice arms trapped 970,000
// launches in 3 runs). Steered back on, or handed back, they come on.
func TestGateSteeredOffDisarms(t *testing.T) {
	procs := &gateProcs{pol: gatePolicy(policy.GateOn), lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{{PID: 20, Start: 1}}}
	g := New(procs, &fakePause{stopped: map[int]bool{}}, nil)
	var armed atomic.Int32 // 0: never asked, 1: off, 2: on
	g.Arm = func(pid int, on bool) {
		if pid == 10 {
			armed.Store(map[bool]int32{false: 1, true: 2}[on])
		}
	}
	g.followLCs(nil)
	if !g.launchesWanted(10) {
		t.Fatal("launch probes not wanted for an LC the gate may hold")
	}
	stop := runGate(t, g)
	for _, tt := range []struct {
		holds map[int]bool
		want  bool
	}{{map[int]bool{10: false}, false}, {map[int]bool{10: true}, true}, {map[int]bool{10: false}, false}, {nil, true}} {
		g.Steer(tt.holds)
		if g.launchesWanted(10) != tt.want {
			t.Fatalf("steered %v: launch probes wanted %v", tt.holds, !tt.want)
		}
		want := map[bool]int32{false: 1, true: 2}[tt.want]
		proctest.WaitFor(t, fmt.Sprintf("launch probes on=%v once steered %v", tt.want, tt.holds), func() bool { return armed.Load() == want })
	}
	stop()
	// Steered off, a synchronize after Idle of quiet still shows a
	// request beginning.
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.overrun(10)
	r.overrun(10)
	r.g.Steer(map[int]bool{10: false})
	sync := func() {
		r.advance(3 * time.Millisecond)
		r.syncEnter(10, 1)
		r.syncReturn(10, 1)
	}
	// Its thread running between synchronizes is launching, untraced: no
	// idle, however far apart they are.
	r.running.Store(true)
	for range 5 {
		sync()
	}
	if r.g.Delimits(10) {
		t.Error("delimited by synchronizes of an LC that launched between them")
	}
	r.running.Store(false)
	for range 3 {
		sync()
	}
	if !r.g.Delimits(10) {
		t.Error("not delimited after three synchronizes that began after an idle")
	}
}

// An LC whose engine gates its own requests is told the policy's mode and
// left out of the daemon's gate; other processes are told nothing.
func TestGatePushedSelfGated(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateAuto))
	if got := r.g.Pushed(20, &api.Engine{Gate: "off"}); got != "" {
		t.Errorf("a BE was told gate %q", got)
	}
	if got := r.g.Pushed(10, &api.Engine{}); got != policy.GateAuto {
		t.Errorf("the LC was told %q, want auto", got)
	}
	r.g.followLCs(nil)
	if s := r.g.Stats(); s.LCs != 1 {
		t.Fatalf("an engine without a gate of its own was left out: %+v", s)
	}
	if got := r.g.Pushed(10, &api.Engine{Gate: "off"}); got != policy.GateAuto {
		t.Errorf("the LC was told %q, want auto", got)
	}
	r.g.followLCs(nil)
	if s := r.g.Stats(); s.LCs != 0 {
		t.Errorf("an LC that gates itself is still followed: %+v", s)
	}
	if !r.g.Traps(10) { // its spinner holds the GPU under the gate: not the LC alone
		t.Error("an LC that gates itself runs as alone under the gate")
	}
	r.launch(10, 1)
	if r.pause.isStopped(20) {
		t.Error("the daemon held BE for an LC that gates itself")
	}
}

// A hold ends at its request's end however long turning the launch probes
// off takes: detaching uprobes waits for the kernel's grace periods (0.6-0.9
// s for a libcuda's launch functions), and Run's loop once made that call
// itself, so that no Tick could end the hold before it returned: holds of
// about 0.9 s for requests of 0.2-0.3 s on an H100.
func TestGateEndsWhileArming(t *testing.T) {
	procs := &gateProcs{pol: gatePolicy(policy.GateOn), lc: []policy.ProcRef{{PID: 10, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{{PID: 20, Start: 1}}}
	pause := &fakePause{stopped: map[int]bool{}}
	g := New(procs, pause, nil)
	var now atomic.Int64
	g.Now = func() time.Duration { return time.Duration(now.Load()) }
	arms, release := make(chan bool, 16), make(chan struct{})
	g.Arm = func(pid int, on bool) {
		arms <- on
		if !on {
			<-release // a detach that takes its time
		}
	}
	g.followLCs(nil)
	stop := runGate(t, g)
	g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	if on := <-arms; on {
		t.Fatal("launch probes turned on at a request's start")
	}
	// The probes are turned off beside the stop, not after it.
	proctest.WaitFor(t, "BE held", func() bool { return pause.isStopped(20) })
	// The request ends while the probes are still being detached.
	g.Observe(&trace.Call{Kind: trace.CallReturn, Role: trace.RoleSync, PID: 10, TID: 1})
	now.Add(int64(time.Second))
	proctest.WaitFor(t, "BE resumed while the launch probes were being detached", func() bool { return !pause.isStopped(20) })
	if s := g.Stats(); s.Open != 0 || s.Closed["idle"] != 1 {
		t.Errorf("stats %+v: want the hold closed idle", s)
	}
	close(release)
	if on := <-arms; !on {
		t.Fatal("launch probes not turned back on after the request")
	}
	stop()
}

// Launches seen while a hold opened queue requests for the loop; once that
// hold ended they are no new request: BE is not stopped again for them.
func TestGateStaleLaunchesOpenNothing(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	for range 3 { // the loop is behind: three launches queue three requests
		r.g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	}
	if !r.g.command(<-r.g.cmds) {
		t.Fatal("the request's first launch opened no hold")
	}
	r.syncReturn(10, 1)
	r.advance(time.Second) // the request ended
	if r.pause.isStopped(20) {
		t.Fatal("BE still held after the request")
	}
	for len(r.g.cmds) > 0 {
		if r.g.command(<-r.g.cmds) {
			t.Error("a launch of the ended request opened a hold")
		}
	}
	if r.pause.stops != 1 || r.pause.isStopped(20) || r.g.Stats().Held != 1 {
		t.Errorf("stops %d, held %d, BE stopped %v: want one hold, BE running", r.pause.stops, r.g.Stats().Held, r.pause.stopped)
	}
	// The next request is one.
	r.launch(10, 1)
	if !r.pause.isStopped(20) || r.g.Stats().Held != 2 {
		t.Error("the next request held nothing")
	}
}

// learningProcs learns the GPUs of processes classed before NVML listed
// them, as the reconciler's LearnGPUs does.
type learningProcs struct {
	*gateProcs
	learnt chan struct{}
}

func (p *learningProcs) LearnGPUs() {
	p.mu.Lock()
	p.lc[0].GPUs = []int{0}
	p.be[1].GPUs = []int{1}
	p.mu.Unlock()
	select {
	case p.learnt <- struct{}{}:
	default:
	}
}

// Processes classed before NVML listed them are on no known GPU, so they
// share every GPU; the gate asks for their GPUs while it follows an LC,
// and from then on a request on GPU 0 leaves GPU 1's BE alone.
func TestGateLearnsGPUs(t *testing.T) {
	procs := &gateProcs{pol: gatePolicy(policy.GateOn),
		lc: []policy.ProcRef{{PID: 10, Start: 1}},
		be: []policy.ProcRef{{PID: 20, Start: 1, GPUs: []int{0}}, {PID: 21, Start: 1}}}
	lp := &learningProcs{gateProcs: procs, learnt: make(chan struct{}, 1)}
	pause := &fakePause{stopped: map[int]bool{}}
	g := New(lp, pause, nil)
	runGate(t, g)
	<-lp.learnt
	// The loop's next resync takes the LC's GPUs; until then the hold
	// below may still stop everyone, so wait for it.
	for {
		g.mu.Lock()
		lc := g.lcs[10]
		known := lc != nil && len(lc.ref.GPUs) > 0
		g.mu.Unlock()
		if known {
			break
		}
		time.Sleep(time.Millisecond)
	}
	g.Observe(&trace.Call{Kind: trace.CallEnter, Role: trace.RoleLaunch, PID: 10, TID: 1})
	// The hold may end (idle) before this looks: what was ever stopped.
	for !pause.everStopped(20) {
		time.Sleep(time.Millisecond)
	}
	if pause.everStopped(21) {
		t.Error("a BE on GPU 1 was stopped for an LC request on GPU 0")
	}
}

// runGate runs g's loop until stop is called, or the test ends; stop
// waits for the loop to return.
func runGate(t *testing.T, g *Gate) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx, nil) }()
	stop = sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	return stop
}

// An eager resnet50 every 20 ms leaves 14 ms between requests, under the
// 25 ms idle: its holds run on until the gate has learnt its quiet gap
// from its own gaps (the Delimiter's), and from then on end that gap
// after each request's synchronize, one hold a request.
func TestGateLearnsTheQuietGap(t *testing.T) {
	pol := gatePolicy(policy.GateOn)
	pol.Gate.Idle = policy.DefaultGateIdle
	r := newGateRig(t, pol)
	r.now = time.Second
	for range 40 {
		start := r.now
		for i := range 50 {
			r.launch(10, 1)
			r.advance(time.Duration(20+(i*37)%180) * time.Microsecond)
		}
		r.syncEnter(10, 1)
		r.now = start + 6*time.Millisecond
		r.syncReturn(10, 1)
		for r.now < start+20*time.Millisecond {
			r.advance(500 * time.Microsecond)
		}
	}
	s := r.g.Stats()
	if s.Closed["max_hold"] != 0 || s.Closed["idle"] < 30 {
		t.Errorf("stats %+v: want a hold a request once the gap is learnt", s)
	}
	r.g.mu.Lock()
	gap := r.g.lcs[10].delim.Gap()
	r.g.mu.Unlock()
	if gap >= 14*time.Millisecond || gap < time.Millisecond {
		t.Errorf("learnt gap %v", gap)
	}
}

// TestGateSteered: SLO mode decides, per LC, whether the gate holds: an
// LC steered off is not held, and its self-gating engine is told off; one
// steered on is held as the policy's mode says; Steer(nil) hands every LC
// back to the policy.
func TestGateSteered(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.g.Steer(map[int]bool{10: false})
	r.launch(10, 1)
	if r.pause.isStopped(20) || r.g.Stats().Steered != 1 {
		t.Fatalf("held for an LC steered off: stopped %v, stats %+v", r.pause.stopped, r.g.Stats())
	}
	if got := r.g.Pushed(10, &api.Engine{Gate: "on"}); got != policy.GateOff {
		t.Errorf("an engine of an LC steered off told %q", got)
	}
	r.advance(10 * time.Millisecond)
	r.g.Steer(map[int]bool{10: true})
	r.launch(10, 1)
	if !r.pause.isStopped(20) {
		t.Fatal("not held for an LC steered on")
	}
	if got := r.g.Pushed(10, &api.Engine{Gate: "on"}); got != policy.GateOn {
		t.Errorf("an engine of an LC steered on told %q", got)
	}
	r.g.Steer(nil)
	if got := r.g.Pushed(10, &api.Engine{Gate: "on"}); got != policy.GateOn {
		t.Errorf("unsteered: told %q", got)
	}
}

// HeldSince: a BE held by overlapping holds of two LCs is held without a break from the first
// hold's start until the last ends, though neither hold spans that time; once resumed it has had
// a moment to run, and a later hold holds it from its own start.
func TestGateHeldSince(t *testing.T) {
	r := newGateRig(t, gatePolicy(policy.GateOn))
	r.procs.lc = append(r.procs.lc, policy.ProcRef{PID: 11, Start: 1, GPUs: []int{0}})
	r.g.followLCs(nil)
	be := r.procs.be[0] // on GPU 0, beside both
	at := func(since time.Duration, want bool) {
		t.Helper()
		if got := r.g.HeldSince(be, since); got != want {
			t.Errorf("at %v: held since %v = %v, want %v", r.now, since, got, want)
		}
	}
	r.advance(time.Second)
	start := r.now
	r.launch(10, 1)
	r.advance(time.Millisecond)
	r.launch(11, 2) // the second LC's hold opens inside the first's
	r.syncEnter(11, 2)
	r.syncReturn(10, 1)
	r.advance(3 * time.Millisecond) // the first's ends (idle 2 ms); the second's goes on
	if s := r.g.Stats(); s.Closed["idle"] != 1 || !r.pause.isStopped(20) {
		t.Fatalf("stats %+v, stopped %v: want the first hold ended, BE still stopped", s, r.pause.stopped)
	}
	at(start, true)
	at(start-time.Millisecond, false) // it ran before the first hold
	r.syncReturn(11, 2)
	r.advance(3 * time.Millisecond) // the second's ends: BE resumed
	if r.pause.isStopped(20) {
		t.Fatal("BE still stopped after both holds ended")
	}
	at(start, false)
	r.advance(time.Millisecond)
	again := r.now
	r.launch(10, 1)
	at(again-time.Millisecond, false) // it ran between the holds
	at(again, true)
	r.syncReturn(10, 1)
	r.advance(3 * time.Millisecond)
	// A stop that fails leaves BE running: it is not held.
	r.pause.mu.Lock()
	r.pause.stopErr = errors.New("kill: operation not permitted")
	r.pause.mu.Unlock()
	r.advance(time.Millisecond)
	failed := r.now
	r.launch(10, 1)
	at(failed, false)
}
