package daemon

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/tsg"
)

// The rig of the reconciler's tests (internal/reconcile), over the
// daemon's metrics, for the tests of what the daemon builds on it.

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
		return policy.Process{}, 0, reconcile.ErrGone
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
	rec    *reconcile.Reconciler
	m      *Metrics
	reg    *registry.Registry
	clock  tracetest.Clock
	now    time.Duration
}

func newRig(t *testing.T, policyText string) *rig {
	t.Helper()
	return newRigInspecting(t, policyText, nil)
}

// newRigInspecting is newRig whose reconciler reads processes through
// what inspect makes of the rig's fakeInspector (nil: that one).
func newRigInspecting(t *testing.T, policyText string, inspect func(fakeInspector) reconcile.Inspector) *rig {
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
	ctl := &reconcile.TSGController{Source: tsg.NewAttachSource(g.drv.Host(), tsg.ScanOptions{})}
	if inspect == nil {
		inspect = func(f fakeInspector) reconcile.Inspector { return f }
	}
	g.m = NewMetrics(nil)
	g.rec = reconcile.New(pol, ctl, inspect(g.insp), g.m.Reconcile, reconcile.Options{SelfPID: 1, Debounce: 30 * time.Millisecond, MaxWait: 200 * time.Millisecond}, testLog(t))
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
	for _, e := range reconcile.Translate(g.reg, ev) {
		g.rec.Handle(e)
	}
}

func (g *rig) tick(at time.Duration) time.Duration {
	g.now = at
	return g.rec.Tick(context.Background(), at)
}

func (g *rig) groups(pid int) []tsg.Group { return g.drv.Groups(pid, 8) }

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

func counter(t testing.TB, m *Metrics, name, label string) float64 {
	t.Helper()
	x := series(t, m, name, func(x *dto.Metric) bool {
		return slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == label })
	})
	return x.GetCounter().GetValue() // 0 for none
}

// series is the first series of metric name that keep accepts (nil:
// none).
func series(t testing.TB, m *Metrics, name string, keep func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	mfs, err := m.Registry.Gather()
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

// gaugeValue is the gauge name's value in the series whose labels include
// every one of labels (NaN when there is none).
func gaugeValue(t testing.TB, m *Metrics, name string, labels map[string]string) float64 {
	t.Helper()
	x := series(t, m, name, func(x *dto.Metric) bool {
		have := map[string]string{}
		for _, l := range x.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for k, v := range labels {
			if have[k] != v {
				return false
			}
		}
		return true
	})
	if x == nil {
		return math.NaN()
	}
	return x.GetGauge().GetValue()
}
