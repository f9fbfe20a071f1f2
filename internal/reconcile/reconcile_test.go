package reconcile_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
	. "github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// driverInspector adds the fake driver's compute processes (what NVML
// would list) to a reconciletest.Procs.
type driverInspector struct {
	reconciletest.Procs
	drv *rmfake.Driver
	// notYet: pids NVML does not list yet (it lists a new context ~80 ms
	// after its groups appear).
	notYet map[int]bool
}

func (d driverInspector) Listed(pid int) (bool, bool) {
	return !d.notYet[pid] && slices.Contains(d.drv.ComputeProcesses(), pid), true
}

func newRig(t *testing.T, policyText string) *reconciletest.Rig {
	t.Helper()
	return reconciletest.New(t, policyText, reconciletest.Options{})
}

func TestClassedAfterLastSetupCall(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})

	// Before the debounce has passed since libcuda's own SET(2048):
	// nothing is done, whatever the time since the first event.
	next := g.Tick(last + 29*time.Millisecond)
	if next != last+30*time.Millisecond {
		t.Errorf("next tick at %v, want %v", next, last+30*time.Millisecond)
	}
	for _, x := range g.Groups(100) {
		if uint64(x.Timeslice) == 200 {
			t.Fatalf("classed before the debounce: %+v", x)
		}
	}
	g.Tick(last + 30*time.Millisecond)
	g.WantAll(100, 200, tsg.LevelLow)
	if n := reconciletest.HistCount(t, g.Prom, "gpreemptd_classed_latency_seconds"); n != 1 {
		t.Errorf("classed latency observed %d times, want 1", n)
	}
	if next := g.Tick(last + time.Second); next != 0 {
		t.Errorf("work scheduled after classing: next %v", next)
	}
}

func TestMaxWaitBoundsAContextThatKeepsSettingUp(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	g.Procs[100] = policy.Process{Comm: "trainer"}
	p := g.Driver.NewProc(100)
	if _, err := g.Driver.Replay(p, g.Allocs); err != nil {
		t.Fatal(err)
	}
	evs := tracetest.LibcudaContext(g.Allocs, tracetest.Process{PID: 100, TID: 100, Comm: "trainer"}, &g.Clock)
	base := time.Duration(evs[0].Time())
	var tsgAt time.Duration
	// The same setup, stretched: one event every 20 ms.
	for i, ev := range evs {
		e := ev.(*trace.RMCall)
		e.Exit = uint64(base + time.Duration(i)*20*time.Millisecond)
		if tsgAt == 0 && e.Alloc != nil && ioctl.IsChannelGroupClass(e.Alloc.Class) {
			tsgAt = time.Duration(e.Exit)
		}
		g.Feed(ev)
	}
	// Classing is due MaxWait after the first group event, though setup
	// went on.
	next := g.Tick(tsgAt + 10*time.Millisecond)
	if next != tsgAt+200*time.Millisecond {
		t.Fatalf("next %v, want %v", next, tsgAt+200*time.Millisecond)
	}
	g.Tick(next)
	found := false
	for _, x := range g.Groups(100) {
		found = found || uint64(x.Timeslice) == 200
	}
	if !found {
		t.Fatal("not classed at the max wait")
	}
}

func TestDriftReappliedRateLimited(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})
	g.Tick(last + 30*time.Millisecond)
	g.WantAll(100, 200, tsg.LevelLow)

	compute := g.Groups(100)[0]
	tgt, err := g.Driver.Host().Open(100)
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
		g.Clock.Now = uint64(now)
		g.Feed(tracetest.SetTimeslice(other, 8, compute.Client, compute.Handle, 5000, ioctl.NV_OK, &g.Clock))
		now = time.Duration(g.Clock.Now)
		g.Tick(now)
	}
	// A burst of 4 is re-applied at once...
	for range 4 {
		drift()
		if got := uint64(g.Groups(100)[0].Timeslice); got != 200 {
			t.Fatalf("drift not re-applied: %dus", got)
		}
	}
	// ...the fifth waits for a token.
	drift()
	if got := uint64(g.Groups(100)[0].Timeslice); got != 5000 {
		t.Fatalf("fifth drift re-applied at once (%dus): no rate limit", got)
	}
	next := g.Tick(now)
	if next <= now || next > now+time.Second {
		t.Fatalf("deferred re-apply scheduled at %v, want within 1s of %v", next, now)
	}
	g.Tick(next)
	if got := uint64(g.Groups(100)[0].Timeslice); got != 200 {
		t.Fatalf("deferred drift not re-applied: %dus", got)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_drift_total", "reapplied"); got != 5 {
		t.Errorf("drift reapplied %v, want 5", got)
	}
	// Our own SET (by the daemon's pid) is not drift.
	g.Feed(tracetest.SetTimeslice(tracetest.Process{PID: 1, TID: 1}, 8, compute.Client, compute.Handle, 200, ioctl.NV_OK, &g.Clock))
	if next := g.Tick(time.Duration(g.Clock.Now)); next != 0 {
		t.Errorf("own SET scheduled work at %v", next)
	}
}

func TestExitMidApplyLeavesNothing(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})
	g.Driver.Exit(100) // RM freed it; the exit event is still in the ring buffer
	g.Tick(last + 30*time.Millisecond)
	if k := g.Rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_apply_failures_total", "gone"); got != 1 {
		t.Errorf("gone failures %v, want 1", got)
	}
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_apply_failures_total", "control"); got != 0 {
		t.Errorf("control failures %v, want 0", got)
	}
	g.Feed(&trace.TaskExit{PID: 100, At: uint64(last + 40*time.Millisecond)})
	if next := g.Tick(last + time.Second); next != 0 || len(g.Rec.Known()) != 0 {
		t.Error("state after exit")
	}
}

func TestExitEventDropsState(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})
	g.Tick(last + 30*time.Millisecond)
	g.Driver.Exit(100)
	g.Feed(&trace.TaskExit{PID: 100, At: uint64(last + 40*time.Millisecond)})
	if k := g.Rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
}

func TestEnvGPUAndRequest(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	// Two processes on one fake driver: the second's clients come after
	// the first's.
	l1 := g.Start(100, policy.Process{Comm: "x", UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
	g.Tick(l1 + 30*time.Millisecond)
	g.WantAll(100, 5000000, tsg.LevelHigh)

	l2 := g.Start(200, policy.Process{Comm: "y", GPUs: []policy.GPU{{Index: 1}}})
	g.Tick(l2 + 30*time.Millisecond)
	g.WantAll(200, 2000, tsg.LevelMedium)

	// A request for its own pid within the limit: lc for uid 1000.
	g.Procs[200] = policy.Process{Comm: "y", UID: 1000}
	n, err := g.Rec.Request(context.Background(), 200, 0, class.Spec{Name: class.LC, Weight: 1}, nil)
	if err != nil || n != 4 {
		t.Fatalf("Request = %d, %v", n, err)
	}
	g.WantAll(200, 5000000, tsg.LevelHigh)

	// A reload re-classes: the env rule changes, and the request, which
	// the new policy allows no one, is revoked.
	pol, err := policy.Parse([]byte("default: be\n"))
	if err != nil {
		t.Fatal(err)
	}
	g.Rec.SetPolicy(pol)
	g.Tick(l2 + time.Second)
	g.WantAll(100, 200, tsg.LevelLow)
	g.WantAll(200, 200, tsg.LevelLow)

	// Shutdown restores the driver's defaults.
	n, err = g.Rec.RestoreAll(context.Background())
	if err != nil || n != 8 {
		t.Fatalf("RestoreAll = %d, %v", n, err)
	}
	for _, pid := range []int{100, 200} {
		for _, x := range g.Groups(pid) {
			want := uint64(1024)
			if x == g.Groups(pid)[0] {
				want = 2048 // the compute group, as libcuda left it
			}
			if uint64(x.Timeslice) != want || tsg.Level(x.Interleave) != tsg.LevelMedium {
				t.Errorf("pid %d group %v restored to %dus %v, want %dus medium", pid, x.Handle, uint64(x.Timeslice), tsg.Level(x.Interleave), want)
			}
		}
	}
}

func TestChurnLeavesNoState(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	for i := range 50 {
		pid := 1000 + i
		last := g.Start(pid, policy.Process{Comm: "trainer"})
		g.Tick(last + 30*time.Millisecond)
		g.WantAll(pid, 200, tsg.LevelLow)
		g.Driver.Exit(pid)
		g.Feed(&trace.TaskExit{PID: uint32(pid), At: uint64(last + 40*time.Millisecond)})
	}
	if k := g.Rec.Known(); len(k) != 0 {
		t.Fatalf("state left for %v", k)
	}
	if n := reconciletest.HistCount(t, g.Prom, "gpreemptd_classed_latency_seconds"); n != 50 {
		t.Errorf("classed %d, want 50", n)
	}
}

func TestFailedClassingRetriedBounded(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	last := g.Start(100, policy.Process{Comm: "trainer"})
	compute := g.Groups(100)[0]
	// The first SET_TIMESLICE on the compute group fails.
	g.Driver.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: compute.Handle, Nth: 1, Status: ioctl.NV_ERR_BUSY_RETRY})
	at := last + 30*time.Millisecond
	next := g.Tick(at)
	if next != at+50*time.Millisecond {
		t.Fatalf("retry at %v, want %v", next, at+50*time.Millisecond)
	}
	if st, _ := g.Rec.Status(100); st.Kind != Pending || st.Attempts != 1 || st.Due != next || st.Err == nil {
		t.Fatalf("after a failure: %+v, want pending with 1 attempt and the error", st)
	}
	if next := g.Tick(next); next != 0 {
		t.Fatalf("more work after the retry succeeded: %v", next)
	}
	if st, _ := g.Rec.Status(100); st.Kind != Done || st.Attempts != 0 || st.Err != nil {
		t.Fatalf("after the retry succeeded: %+v, want done", st)
	}
	g.WantAll(100, 200, tsg.LevelLow)
	if got := reconciletest.Counter(t, g.Prom, "gpreemptd_apply_failures_total", "control"); got != 1 {
		t.Errorf("control failures %v, want 1", got)
	}
	// A fault that never clears: retried MaxRetries times, then left.
	g2 := newRig(t, reconciletest.Policy)
	last = g2.Start(100, policy.Process{Comm: "trainer"})
	g2.Driver.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: compute.Handle, Status: ioctl.NV_ERR_BUSY_RETRY})
	tries := 0
	for next := last + 30*time.Millisecond; next != 0; next = g2.Tick(next) {
		tries++
	}
	if tries != 1+MaxRetries {
		t.Errorf("%d tries, want %d", tries, 1+MaxRetries)
	}
	st, _ := g2.Rec.Status(100)
	if st.Kind != Failed || st.Attempts != MaxRetries || st.Err == nil {
		t.Fatalf("after every retry failed: %+v, want failed", st)
	}
	if v := g2.Rec.Snapshot()[0]; v.Status != "failed" || v.Attempts != MaxRetries || v.Error == "" || v.Pending {
		t.Errorf("the view: %+v", v)
	}
	g2.Rec.Reclass() // a reload tries again
	if st, _ := g2.Rec.Status(100); st.Kind != Pending || st.Err == nil {
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
	g.Tick(g.Start(100, policy.Process{Comm: "ranker"}) + time.Second)
	pol := g.Rec.Policy()
	for _, tc := range []struct {
		spec      class.Spec
		rule      string
		objective bool
	}{
		{class.Spec{Name: class.LC, Weight: 1}, "ranking", true},
		{class.Spec{Name: class.BE, Weight: 1}, "request", false},
		{class.Spec{Name: class.LC, Weight: 1}, "ranking", true},
	} {
		if _, err := g.Rec.Request(context.Background(), 100, 0, tc.spec, nil); err != nil {
			t.Fatal(err)
		}
		refs := g.Rec.InClass(tc.spec.Name)
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
	last := g.Start(100, info)
	g.Tick(last + 50*time.Millisecond) // NVML has not listed its GPU yet
	info.GPUs = []policy.GPU{{Index: 1}}
	g.Procs[100] = info // now it has
	for at := last + 60*time.Millisecond; at < last+time.Second; at += 10 * time.Millisecond {
		g.Tick(at)
	}
	g.WantAll(100, 200, tsg.LevelLow) // be, by batch-on-gpu1
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
	g.Tick(g.Start(300, policy.Process{Comm: "bulk"}) + time.Second)
	if _, err := g.Rec.Request(context.Background(), 300, 0, class.Spec{Name: class.BE, Weight: 1000}, nil); err != nil {
		t.Fatal(err)
	}
	g.Tick(g.Now + time.Second)
	g.Rec.SetBETimeslices(tsg.Some(10*time.Millisecond), nil) // 9.98 s for weight 1000
	g.Tick(g.Now + time.Second)
	g.WantAll(300, uint64(tsg.MaxTimeslice/time.Microsecond), tsg.LevelLow)
}

// TestRestoreCountedAsRestore: gpreemptd_applies_total counts the groups
// put back at shutdown under "restore", not under their class.
func TestRestoreCountedAsRestore(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	g.Tick(g.Start(100, policy.Process{Comm: "trainer"}) + time.Second)
	before := reconciletest.Counter(t, g.Prom, "gpreemptd_applies_total", "be")
	if n, err := g.Rec.RestoreAll(context.Background()); err != nil || n != 4 {
		t.Fatalf("restored %d, %v", n, err)
	}
	if r, b := reconciletest.Counter(t, g.Prom, "gpreemptd_applies_total", "restore"), reconciletest.Counter(t, g.Prom, "gpreemptd_applies_total", "be"); r != 4 || b != before {
		t.Errorf("after restoring 4 groups: applies{restore}=%v, applies{be} %v -> %v", r, before, b)
	}
}

// TestBETimeslicesPerProcess: a process SetBETimeslices names unset
// keeps the policy's timeslice under the SLO mode's choice, a request for
// the class it holds is answered without a change (nor its admission
// asked), one named with a timeslice gets that one, and one no longer
// named gets the choice for the others.
func TestBETimeslicesPerProcess(t *testing.T) {
	g := newRig(t, reconciletest.Policy)
	g.Tick(g.Start(100, policy.Process{Comm: "x"}) + time.Second)
	g.Tick(g.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
	g.Tick(g.Start(300, policy.Process{Comm: "trainer"}) + time.Second)
	key := func(pid int) string { return policy.ProcRef{PID: pid, Start: uint64(pid)}.Key() }
	type opt = tsg.Opt[time.Duration]
	g.Rec.SetBETimeslices(tsg.Some(time.Millisecond), map[string]opt{key(100): {}, key(300): tsg.Some(50 * time.Microsecond)})
	g.Tick(g.Now + time.Second)
	g.WantAll(200, 1000, tsg.LevelLow)
	g.WantAll(300, 50, tsg.LevelLow)
	if got := g.Rec.Classes()[class.BE].Timeslice; got != time.Millisecond {
		t.Errorf("class table in force: BE at %v, want 1ms", got)
	}
	admits := 0
	admit := func() error { admits++; return nil }
	be := class.Spec{Name: class.BE, Weight: 1}
	for range 2 {
		if _, err := g.Rec.Request(context.Background(), 100, 0, be, admit); err != nil {
			t.Fatal(err)
		}
		g.Tick(g.Now + time.Second)
		g.WantAll(100, 200, tsg.LevelLow)
	}
	if admits != 1 {
		t.Errorf("%d admissions for two requests of the class held, want 1", admits)
	}
	// One process's timeslice alone changes, the default staying: it is
	// set again, the others are left as they are.
	for _, us := range []int{1000, 500} {
		g.Rec.SetBETimeslices(tsg.Some(time.Millisecond), map[string]opt{key(100): {}, key(300): tsg.Some(time.Duration(us) * time.Microsecond)})
		g.Tick(g.Now + time.Second)
		g.WantAll(300, uint64(us), tsg.LevelLow)
		g.WantAll(200, 1000, tsg.LevelLow)
	}
	g.Rec.SetBETimeslices(tsg.Some(2*time.Millisecond), nil)
	g.Tick(g.Now + time.Second)
	g.WantAll(100, 2000, tsg.LevelLow)
	g.WantAll(300, 2000, tsg.LevelLow)
	g.Rec.SetBETimeslices(opt{}, nil)
	g.Tick(g.Now + time.Second)
	g.WantAll(100, 200, tsg.LevelLow)
	g.WantAll(200, 200, tsg.LevelLow)
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
			last := g.Start(100, policy.Process{Comm: "server", UID: 1000})
			g.Tick(last + 40*time.Millisecond)
			g.WantAll(100, 2000, tsg.LevelMedium)
			if _, err := g.Rec.Request(context.Background(), 100, 0, tt.asked, nil); err != nil {
				t.Fatalf("Request %v: %v", tt.asked, err)
			}
			g.Rec.SetPodRecheck(tt.pod)
			pol, err := policy.Parse([]byte(tt.after))
			if err != nil {
				t.Fatal(err)
			}
			g.Rec.SetPolicy(pol)
			g.Tick(last + time.Second)
			g.WantAll(100, tt.wantUs, tt.level)
		})
	}
}
