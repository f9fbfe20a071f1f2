package reconcile

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

const allocTrace = "../../testdata/h100-580.159.04-alloc-sequence.txt"

const testPolicy = `
default: none
rules:
  - name: env
    match: {env: {GPREEMPT_CLASS: "*"}}
    class_from_env: GPREEMPT_CLASS
  - name: trainer
    match: {comm: "train*"}
    class: be
  - name: gpu1
    match: {gpu: 1}
    class: burstable
requests:
  default_max: be
  limits:
    - {match: {uid: 1000}, max: lc}
`

// fakeInspector answers from a table; a pid not in it is gone.
type fakeInspector map[int]policy.Process

func (f fakeInspector) Process(pid int) (policy.Process, uint64, error) {
	p, ok := f[pid]
	if !ok {
		return policy.Process{}, 0, ErrGone
	}
	p.PID = pid
	return p, uint64(pid), nil // a start time: a lower pid started earlier
}

func (f fakeInspector) Alive(pid int) bool {
	_, ok := f[pid]
	return ok
}

// Listed: the fake has no NVML.
func (f fakeInspector) Listed(int) (bool, bool) { return false, false }

func (f fakeInspector) GPUs(pid int) []policy.GPU { return f[pid].GPUs }

// driverInspector adds the fake driver's compute processes (what NVML
// would list) to a fakeInspector.
type driverInspector struct {
	fakeInspector
	drv *rmfake.Driver
	// notYet: pids NVML does not list yet (it lists a new context ~80 ms
	// after its groups appear).
	notYet map[int]bool
}

func (d driverInspector) Listed(pid int) (bool, bool) {
	return !d.notYet[pid] && slices.Contains(d.drv.ComputeProcesses(), pid), true
}

func testLog(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

// rig is a fake node: rmfake's driver, the reconciler over it, and the
// events of each replayed context.
type rig struct {
	t      *testing.T
	drv    *rmfake.Driver
	allocs []rmfake.TraceAlloc
	insp   fakeInspector
	rec    *Reconciler
	m      *Metrics
	prom   *prometheus.Registry
	reg    *registry.Registry
	clock  tracetest.Clock
	now    time.Duration
}

func newRig(t *testing.T, policyText string) *rig {
	t.Helper()
	pol, err := policy.Parse([]byte(policyText))
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := rmfake.ParseTraceFile(allocTrace)
	if err != nil {
		t.Fatal(err)
	}
	g := &rig{t: t, drv: rmfake.New(), allocs: allocs, insp: fakeInspector{}, reg: registry.New(registry.Options{})}
	g.clock.Now = uint64(time.Second)
	ctl := &TSGController{Source: tsg.NewAttachSource(g.drv.Host(), tsg.ScanOptions{})}
	g.prom = prometheus.NewRegistry()
	g.m = NewMetrics(g.prom)
	g.rec = New(pol, ctl, g.insp, g.m, Options{SelfPID: 1, Debounce: 30 * time.Millisecond, MaxWait: 200 * time.Millisecond}, testLog(t))
	g.rec.Now = func() time.Duration { return g.now }
	return g
}

// start replays one context of pid into the fake driver (its allocations
// and libcuda's post-setup controls) and feeds the events the tracer
// would have seen, with the client handles the driver handed out. It
// returns the events' last time.
func (g *rig) start(pid int, info policy.Process) time.Duration {
	g.t.Helper()
	g.insp[pid] = info
	p := g.drv.NewProc(pid)
	clients, err := g.drv.Replay(p, g.allocs)
	if err != nil {
		g.t.Fatal(err)
	}
	offset := uint32(clients[0] - g.allocs[0].Handle) // the trace's first allocation is its first client
	evs := tracetest.LibcudaContext(g.allocs, tracetest.Process{PID: uint32(pid), TID: uint32(pid), Comm: info.Comm, ClientOffset: offset}, &g.clock)
	for _, ev := range evs {
		g.feed(ev)
	}
	return time.Duration(g.clock.Now)
}

func (g *rig) feed(ev trace.Event) {
	for _, e := range Translate(g.reg, ev) {
		g.rec.Handle(e)
	}
}

func (g *rig) tick(at time.Duration) time.Duration {
	g.now = at
	return g.rec.Tick(context.Background(), at)
}

func (g *rig) groups(pid int) []tsg.Group { return g.drv.Groups(pid, 8) }

// scan reads pid's groups through its files and adopts them, as the
// daemon's resync does.
func (g *rig) scan(pid int) {
	g.t.Helper()
	states, err := g.rec.ctl.Groups(context.Background(), pid)
	if err != nil {
		g.t.Fatal(err)
	}
	var ids []tsg.GroupID
	for _, s := range states {
		ids = append(ids, s.ID)
	}
	g.rec.Adopt(pid, ids)
	g.rec.CheckDrift(states, pid)
}

func (g *rig) wantAll(pid int, us uint64, level tsg.Level) {
	g.t.Helper()
	gs := g.groups(pid)
	if len(gs) != 4 {
		g.t.Fatalf("pid %d has %d groups, want 4", pid, len(gs))
	}
	for _, x := range gs {
		if uint64(x.Timeslice) != us || tsg.Level(x.Interleave) != level {
			g.t.Errorf("pid %d group %v: %dus %v, want %dus %v", pid, x.Handle, uint64(x.Timeslice), tsg.Level(x.Interleave), us, level)
		}
	}
}

func TestClassedAfterLastSetupCall(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})

	// Before the debounce has passed since libcuda's own SET(2048):
	// nothing is done, whatever the time since the first event.
	next := g.tick(last + 29*time.Millisecond)
	if next != last+30*time.Millisecond {
		t.Errorf("next tick at %v, want %v", next, last+30*time.Millisecond)
	}
	for _, x := range g.groups(100) {
		if uint64(x.Timeslice) == 200 {
			t.Fatalf("classed before the debounce: %+v", x)
		}
	}
	g.tick(last + 30*time.Millisecond)
	g.wantAll(100, 200, tsg.LevelLow)
	if n := histCount(t, g.prom, "gpreemptd_classed_latency_seconds"); n != 1 {
		t.Errorf("classed latency observed %d times, want 1", n)
	}
	if next := g.tick(last + time.Second); next != 0 {
		t.Errorf("work scheduled after classing: next %v", next)
	}
}

func TestMaxWaitBoundsAContextThatKeepsSettingUp(t *testing.T) {
	g := newRig(t, testPolicy)
	g.insp[100] = policy.Process{Comm: "trainer"}
	p := g.drv.NewProc(100)
	if _, err := g.drv.Replay(p, g.allocs); err != nil {
		t.Fatal(err)
	}
	evs := tracetest.LibcudaContext(g.allocs, tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}, &g.clock)
	base := time.Duration(evs[0].Time())
	var tsgAt time.Duration
	// The same setup, stretched: one event every 20 ms.
	for i, ev := range evs {
		e := ev.(*trace.RMCall)
		e.Exit = uint64(base + time.Duration(i)*20*time.Millisecond)
		if tsgAt == 0 && e.Alloc != nil && ioctl.IsChannelGroupClass(e.Alloc.Class) {
			tsgAt = time.Duration(e.Exit)
		}
		g.feed(ev)
	}
	// Classing is due MaxWait after the first group event, though setup
	// went on.
	next := g.tick(tsgAt + 10*time.Millisecond)
	if next != tsgAt+200*time.Millisecond {
		t.Fatalf("next %v, want %v", next, tsgAt+200*time.Millisecond)
	}
	g.tick(next)
	found := false
	for _, x := range g.groups(100) {
		found = found || uint64(x.Timeslice) == 200
	}
	if !found {
		t.Fatal("not classed at the max wait")
	}
}

func TestDriftReappliedRateLimited(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})
	g.tick(last + 30*time.Millisecond)
	g.wantAll(100, 200, tsg.LevelLow)

	compute := g.groups(100)[0]
	tgt, err := g.drv.Host().Open(100)
	if err != nil {
		t.Fatal(err)
	}
	owner, err := tgt.Attach(8)
	tgt.Close()
	if err != nil {
		t.Fatal(err)
	}
	defer owner.Close()
	other := tracetest.Process{PID: 777, TID: 777, Comm: "gpreemptctl"}
	now := last + time.Second
	drift := func() {
		t.Helper()
		ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 5000}
		if err := ioctl.Control(owner, compute.Client, compute.Handle, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, &ts); err != nil {
			t.Fatal(err)
		}
		g.clock.Now = uint64(now)
		g.feed(tracetest.SetTimeslice(other, 8, compute.Client, compute.Handle, 5000, ioctl.NV_OK, &g.clock))
		now = time.Duration(g.clock.Now)
		g.tick(now)
	}
	// A burst of 4 is re-applied at once...
	for range 4 {
		drift()
		if got := uint64(g.groups(100)[0].Timeslice); got != 200 {
			t.Fatalf("drift not re-applied: %dus", got)
		}
	}
	// ...the fifth waits for a token.
	drift()
	if got := uint64(g.groups(100)[0].Timeslice); got != 5000 {
		t.Fatalf("fifth drift re-applied at once (%dus): no rate limit", got)
	}
	next := g.tick(now)
	if next <= now || next > now+time.Second {
		t.Fatalf("deferred re-apply scheduled at %v, want within 1s of %v", next, now)
	}
	g.tick(next)
	if got := uint64(g.groups(100)[0].Timeslice); got != 200 {
		t.Fatalf("deferred drift not re-applied: %dus", got)
	}
	if got := counter(t, g.prom, "gpreemptd_drift_total", "reapplied"); got != 5 {
		t.Errorf("drift reapplied %v, want 5", got)
	}
	// Our own SET (by the daemon's pid) is not drift.
	g.feed(tracetest.SetTimeslice(tracetest.Process{PID: 1, TID: 1}, 8, compute.Client, compute.Handle, 200, ioctl.NV_OK, &g.clock))
	if next := g.tick(time.Duration(g.clock.Now)); next != 0 {
		t.Errorf("own SET scheduled work at %v", next)
	}
}

func TestExitMidApplyLeavesNothing(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})
	g.drv.Exit(100) // RM freed it; the exit event is still in the ring buffer
	g.tick(last + 30*time.Millisecond)
	if k := g.rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
	if got := counter(t, g.prom, "gpreemptd_apply_failures_total", "gone"); got != 1 {
		t.Errorf("gone failures %v, want 1", got)
	}
	if got := counter(t, g.prom, "gpreemptd_apply_failures_total", "control"); got != 0 {
		t.Errorf("control failures %v, want 0", got)
	}
	g.feed(&trace.TaskExit{PID: 100, At: uint64(last + 40*time.Millisecond)})
	if next := g.tick(last + time.Second); next != 0 || len(g.rec.Known()) != 0 {
		t.Error("state after exit")
	}
}

func TestExitEventDropsState(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})
	g.tick(last + 30*time.Millisecond)
	g.drv.Exit(100)
	g.feed(&trace.TaskExit{PID: 100, At: uint64(last + 40*time.Millisecond)})
	if k := g.rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
}

func TestEnvGPUAndRequest(t *testing.T) {
	g := newRig(t, testPolicy)
	// Two processes on one fake driver: the second's clients come after
	// the first's.
	l1 := g.start(100, policy.Process{Comm: "x", UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
	g.tick(l1 + 30*time.Millisecond)
	g.wantAll(100, 5000000, tsg.LevelHigh)

	l2 := g.start(200, policy.Process{Comm: "y", GPUs: []policy.GPU{{Index: 1}}})
	g.tick(l2 + 30*time.Millisecond)
	g.wantAll(200, 2000, tsg.LevelMedium)

	// A request for its own pid within the limit: lc for uid 1000.
	g.insp[200] = policy.Process{Comm: "y", UID: 1000}
	n, err := g.rec.Request(context.Background(), 200, 0, class.Spec{Name: class.LC, Weight: 1}, nil)
	if err != nil || n != 4 {
		t.Fatalf("Request = %d, %v", n, err)
	}
	g.wantAll(200, 5000000, tsg.LevelHigh)

	// A reload re-classes: the env rule changes, and the request, which
	// the new policy allows no one, is revoked.
	pol, err := policy.Parse([]byte("default: be\n"))
	if err != nil {
		t.Fatal(err)
	}
	g.rec.SetPolicy(pol)
	g.tick(l2 + time.Second)
	g.wantAll(100, 200, tsg.LevelLow)
	g.wantAll(200, 200, tsg.LevelLow)

	// Shutdown restores the driver's defaults.
	n, err = g.rec.RestoreAll(context.Background())
	if err != nil || n != 8 {
		t.Fatalf("RestoreAll = %d, %v", n, err)
	}
	for _, pid := range []int{100, 200} {
		for _, x := range g.groups(pid) {
			want := uint64(1024)
			if x == g.groups(pid)[0] {
				want = 2048 // the compute group, as libcuda left it
			}
			if uint64(x.Timeslice) != want || tsg.Level(x.Interleave) != tsg.LevelMedium {
				t.Errorf("pid %d group %v restored to %dus %v, want %dus medium", pid, x.Handle, uint64(x.Timeslice), tsg.Level(x.Interleave), want)
			}
		}
	}
}

func TestChurnLeavesNoState(t *testing.T) {
	g := newRig(t, testPolicy)
	for i := range 50 {
		pid := 1000 + i
		last := g.start(pid, policy.Process{Comm: "trainer"})
		g.tick(last + 30*time.Millisecond)
		g.wantAll(pid, 200, tsg.LevelLow)
		g.drv.Exit(pid)
		g.feed(&trace.TaskExit{PID: uint32(pid), At: uint64(last + 40*time.Millisecond)})
	}
	if k := g.rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
	if n := histCount(t, g.prom, "gpreemptd_classed_latency_seconds"); n != 50 {
		t.Errorf("classed %d, want 50", n)
	}
}

func histCount(t testing.TB, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func counter(t testing.TB, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	x := series(t, reg, name, func(x *dto.Metric) bool {
		return slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == label })
	})
	return x.GetCounter().GetValue() // 0 for none
}

// series is the first series of metric name that keep accepts (nil:
// none).
func series(t testing.TB, reg prometheus.Gatherer, name string, keep func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			if keep(x) {
				return x
			}
		}
	}
	return nil
}

func TestFailedClassingRetriedBounded(t *testing.T) {
	g := newRig(t, testPolicy)
	last := g.start(100, policy.Process{Comm: "trainer"})
	compute := g.groups(100)[0]
	// The first SET_TIMESLICE on the compute group fails.
	g.drv.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: compute.Handle, Nth: 1, Status: ioctl.NV_ERR_BUSY_RETRY})
	at := last + 30*time.Millisecond
	next := g.tick(at)
	if next != at+50*time.Millisecond {
		t.Fatalf("retry at %v, want %v", next, at+50*time.Millisecond)
	}
	if st, _ := g.rec.Status(100); st.Kind != Pending || st.Attempts != 1 || st.Due != next || st.Err == nil {
		t.Fatalf("after a failure: %+v, want pending with 1 attempt and the error", st)
	}
	if next := g.tick(next); next != 0 {
		t.Fatalf("more work after the retry succeeded: %v", next)
	}
	if st, _ := g.rec.Status(100); st.Kind != Done || st.Attempts != 0 || st.Err != nil {
		t.Fatalf("after the retry succeeded: %+v, want done", st)
	}
	g.wantAll(100, 200, tsg.LevelLow)
	if got := counter(t, g.prom, "gpreemptd_apply_failures_total", "control"); got != 1 {
		t.Errorf("control failures %v, want 1", got)
	}
	// A fault that never clears: retried maxRetries times, then left.
	g2 := newRig(t, testPolicy)
	last = g2.start(100, policy.Process{Comm: "trainer"})
	g2.drv.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: compute.Handle, Status: ioctl.NV_ERR_BUSY_RETRY})
	tries := 0
	for next := last + 30*time.Millisecond; next != 0; next = g2.tick(next) {
		tries++
	}
	if tries != 1+maxRetries {
		t.Errorf("%d tries, want %d", tries, 1+maxRetries)
	}
	st, _ := g2.rec.Status(100)
	if st.Kind != Failed || st.Attempts != maxRetries || st.Err == nil {
		t.Fatalf("after every retry failed: %+v, want failed", st)
	}
	if v := g2.rec.Snapshot()[0]; v.Status != "failed" || v.Attempts != maxRetries || v.Error == "" || v.Pending {
		t.Errorf("the view: %+v", v)
	}
	g2.rec.Reclass() // a reload tries again
	if st, _ := g2.rec.Status(100); st.Kind != Pending || st.Err == nil {
		t.Errorf("after a reload: %+v, want pending, the last error kept", st)
	}
}

// TestRequestKeepsTheRule: a request for the class the process's rule
// gives it anyway (a hint engine asks for lc when it starts) keeps that
// rule, and with it the rule's objective; a request for another class is
// the request's.
func TestRequestKeepsTheRule(t *testing.T) {
	g := newRig(t, `
rules:
  - {name: ranking, match: {comm: "rank*"}, class: lc, objective: "p99<=2ms", trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
requests:
  default_max: lc
slo: {enabled: true}
`)
	g.tick(g.start(100, policy.Process{Comm: "ranker"}) + time.Second)
	pol := g.rec.Policy()
	for _, tc := range []struct {
		spec      class.Spec
		rule      string
		objective bool
	}{
		{class.Spec{Name: class.LC, Weight: 1}, "ranking", true},
		{class.Spec{Name: class.BE, Weight: 1}, "request", false},
		{class.Spec{Name: class.LC, Weight: 1}, "ranking", true},
	} {
		if _, err := g.rec.Request(context.Background(), 100, 0, tc.spec, nil); err != nil {
			t.Fatal(err)
		}
		refs := g.rec.InClass(tc.spec.Name)
		if len(refs) != 1 || refs[0].Decision.Rule != tc.rule {
			t.Fatalf("after a request for %v: %+v, want rule %q", tc.spec, refs, tc.rule)
		}
		if _, ok := pol.Objective(refs[0].Decision); ok != tc.objective {
			t.Errorf("after a request for %v: objective found %v, want %v", tc.spec, ok, tc.objective)
		}
	}
}

// TestEnvOnlyRuleWaitsForTheGPU: deploy/gpreemptd.yaml's from-env rule
// (class from the environment, no class of its own) does not decide a
// process whose variable holds no class, so a later per-GPU rule does,
// and the daemon waits for NVML to list the process's GPU first.
func TestEnvOnlyRuleWaitsForTheGPU(t *testing.T) {
	b, err := os.ReadFile("../../deploy/gpreemptd.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := newRig(t, string(b))
	info := policy.Process{Comm: "python3", UID: 2000, User: "batch", Env: map[string]string{"GPREEMPT_CLASS": "low"}}
	last := g.start(100, info)
	g.tick(last + 50*time.Millisecond) // NVML has not listed its GPU yet
	info.GPUs = []policy.GPU{{Index: 1}}
	g.insp[100] = info // now it has
	for at := last + 60*time.Millisecond; at < last+time.Second; at += 10 * time.Millisecond {
		g.tick(at)
	}
	g.wantAll(100, 200, tsg.LevelLow) // be, by batch-on-gpu1
}

// TestWeightBeyondTheLongestTimeslice: a request's weight the policy
// allows at its BE timeslice passes 5 s at a longer one SLO mode chose:
// the groups get the longest timeslice, not the one they had.
func TestWeightBeyondTheLongestTimeslice(t *testing.T) {
	g := newRig(t, `
classes:
  lc: {objective: "p50<=1.05x"}
rules:
  - {name: bulk, match: {comm: "bulk*"}, class: be}
requests: {default_max: be}
slo: {enabled: true, ladder: [200us, 10ms], safe: 200us}
`)
	g.tick(g.start(300, policy.Process{Comm: "bulk"}) + time.Second)
	if _, err := g.rec.Request(context.Background(), 300, 0, class.Spec{Name: class.BE, Weight: 1000}, nil); err != nil {
		t.Fatal(err)
	}
	g.tick(g.now + time.Second)
	g.rec.SetBETimeslices(tsg.Some(10*time.Millisecond), nil) // 9.98 s for weight 1000
	g.tick(g.now + time.Second)
	g.wantAll(300, uint64(tsg.MaxTimeslice/time.Microsecond), tsg.LevelLow)
}

// TestRestoreCountedAsRestore: gpreemptd_applies_total counts the groups
// put back at shutdown under "restore", not under their class.
func TestRestoreCountedAsRestore(t *testing.T) {
	g := newRig(t, testPolicy)
	g.tick(g.start(100, policy.Process{Comm: "trainer"}) + time.Second)
	before := counter(t, g.prom, "gpreemptd_applies_total", "be")
	if n, err := g.rec.RestoreAll(context.Background()); err != nil || n != 4 {
		t.Fatalf("restored %d, %v", n, err)
	}
	if r, b := counter(t, g.prom, "gpreemptd_applies_total", "restore"), counter(t, g.prom, "gpreemptd_applies_total", "be"); r != 4 || b != before {
		t.Errorf("after restoring 4 groups: applies{restore}=%v, applies{be} %v -> %v", r, before, b)
	}
}

// TestBETimeslicesPerProcess: a process SetBETimeslices names unset
// keeps the policy's timeslice under the SLO mode's choice, a request for
// the class it holds is answered without a change (nor its admission
// asked), one named with a timeslice gets that one, and one no longer
// named gets the choice for the others.
func TestBETimeslicesPerProcess(t *testing.T) {
	g := newRig(t, testPolicy)
	g.tick(g.start(100, policy.Process{Comm: "x"}) + time.Second)
	g.tick(g.start(200, policy.Process{Comm: "trainer"}) + time.Second)
	g.tick(g.start(300, policy.Process{Comm: "trainer"}) + time.Second)
	key := func(pid int) string { return policy.ProcRef{PID: pid, Start: uint64(pid)}.Key() }
	type opt = tsg.Opt[time.Duration]
	g.rec.SetBETimeslices(tsg.Some(time.Millisecond), map[string]opt{key(100): {}, key(300): tsg.Some(50 * time.Microsecond)})
	g.tick(g.now + time.Second)
	g.wantAll(200, 1000, tsg.LevelLow)
	g.wantAll(300, 50, tsg.LevelLow)
	if got := g.rec.Classes()[class.BE].Timeslice; got != time.Millisecond {
		t.Errorf("class table in force: BE at %v, want 1ms", got)
	}
	admits := 0
	admit := func() error { admits++; return nil }
	be := class.Spec{Name: class.BE, Weight: 1}
	for range 2 {
		if _, err := g.rec.Request(context.Background(), 100, 0, be, admit); err != nil {
			t.Fatal(err)
		}
		g.tick(g.now + time.Second)
		g.wantAll(100, 200, tsg.LevelLow)
	}
	if admits != 1 {
		t.Errorf("%d admissions for two requests of the class held, want 1", admits)
	}
	// One process's timeslice alone changes, the default staying: it is
	// set again, the others are left as they are.
	for _, us := range []int{1000, 500} {
		g.rec.SetBETimeslices(tsg.Some(time.Millisecond), map[string]opt{key(100): {}, key(300): tsg.Some(time.Duration(us) * time.Microsecond)})
		g.tick(g.now + time.Second)
		g.wantAll(300, uint64(us), tsg.LevelLow)
		g.wantAll(200, 1000, tsg.LevelLow)
	}
	g.rec.SetBETimeslices(tsg.Some(2*time.Millisecond), nil)
	g.tick(g.now + time.Second)
	g.wantAll(100, 2000, tsg.LevelLow)
	g.wantAll(300, 2000, tsg.LevelLow)
	g.rec.SetBETimeslices(opt{}, nil)
	g.tick(g.now + time.Second)
	g.wantAll(100, 200, tsg.LevelLow)
	g.wantAll(200, 200, tsg.LevelLow)
}

// TestReloadRevokesWhatTheNewPolicyForbids: a class granted over the
// socket lasts only while the running policy (or, for a process in a pod,
// the pod's decision) would grant it again: a reload to a stricter policy
// takes it back, and the process is classed by the new policy's rules.
func TestReloadRevokesWhatTheNewPolicyForbids(t *testing.T) {
	const before = "default: burstable\nrequests:\n  default_max: be\n  limits:\n    - {match: {uid: 1000}, max: lc}\n"
	tests := []struct {
		name   string
		asked  class.Spec
		after  string
		pod    func(pid int, want class.Name) (bool, error)
		wantUs uint64
		level  tsg.Level
	}{
		{"still allowed: kept", class.Spec{Name: class.LC, Weight: 1},
			"default: be\nrequests: {default_max: be, limits: [{match: {uid: 1000}, max: lc}]}\n", nil, 5000000, tsg.LevelHigh},
		{"class above the new limit", class.Spec{Name: class.LC, Weight: 1},
			"default: be\nrequests: {default_max: burstable}\n", nil, 200, tsg.LevelLow},
		{"no requests allowed", class.Spec{Name: class.LC, Weight: 1},
			"default: be\n", nil, 200, tsg.LevelLow},
		{"the uid's limit is gone", class.Spec{Name: class.LC, Weight: 1},
			"default: be\nrequests: {default_max: be, limits: [{match: {uid: 1001}, max: lc}]}\n", nil, 200, tsg.LevelLow},
		{"weight above the new limit's", class.Spec{Name: class.BE, Weight: 20},
			"default: burstable\nrequests: {default_max: be}\n", nil, 2000, tsg.LevelMedium},
		{"weight within the new limit's", class.Spec{Name: class.BE, Weight: 10},
			"default: burstable\nrequests: {default_max: be}\n", nil, 20 + 10*180, tsg.LevelLow},
		{"the pod may no longer have it", class.Spec{Name: class.LC, Weight: 1},
			before, func(int, class.Name) (bool, error) { return true, errors.New("this pod may have at most be") }, 2000, tsg.LevelMedium},
		{"the pod may still have it, whatever the policy's limits", class.Spec{Name: class.LC, Weight: 1},
			"default: be\n", func(int, class.Name) (bool, error) { return true, nil }, 5000000, tsg.LevelHigh},
		{"not in a pod: the policy decides", class.Spec{Name: class.LC, Weight: 1},
			"default: be\n", func(int, class.Name) (bool, error) { return false, nil }, 200, tsg.LevelLow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newRig(t, before)
			last := g.start(100, policy.Process{Comm: "server", UID: 1000})
			g.tick(last + 40*time.Millisecond)
			g.wantAll(100, 2000, tsg.LevelMedium)
			if _, err := g.rec.Request(context.Background(), 100, 0, tt.asked, nil); err != nil {
				t.Fatalf("Request %v: %v", tt.asked, err)
			}
			g.rec.opts.PodRecheck = tt.pod
			pol, err := policy.Parse([]byte(tt.after))
			if err != nil {
				t.Fatal(err)
			}
			g.rec.SetPolicy(pol)
			g.tick(last + time.Second)
			g.wantAll(100, tt.wantUs, tt.level)
		})
	}
}
