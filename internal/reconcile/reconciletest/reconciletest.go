// Package reconciletest is a fake node for the tests of the reconciler
// and of what is built on it (the daemon, its socket API, SLO mode):
// rmfake's driver holding the recorded H100 contexts, the reconciler over
// it, fed the events the tracer would have seen, and readers of the
// metrics it keeps. Only tests import it.
package reconciletest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/tsg"
)

// AllocTrace is the recorded libcuda allocation sequence the rig
// replays, from a package two folders below the module root.
const AllocTrace = "../../testdata/h100-580.159.04-alloc-sequence.txt"

// Policy is the rig's usual policy: a class from the environment, the
// trainers BE, GPU 1 burstable, and uid 1000 allowed to ask for LC.
const Policy = `
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

// Procs is an Inspector answering from a table; a pid not in it is gone.
type Procs map[int]policy.Process

func (f Procs) Process(pid int) (policy.Process, uint64, error) {
	p, ok := f[pid]
	if !ok {
		return policy.Process{}, 0, reconcile.ErrGone
	}
	p.PID = pid
	return p, uint64(pid), nil // a start time: a lower pid started earlier
}

func (f Procs) Alive(pid int) bool {
	_, ok := f[pid]
	return ok
}

// Listed: the table has no NVML.
func (f Procs) Listed(int) (bool, bool) { return false, false }

func (f Procs) GPUs(pid int) []policy.GPU { return f[pid].GPUs }

// Options change the rig's parts; the zero value is the usual rig.
type Options struct {
	// Metrics are the reconciler's (nil: new ones on Rig.Prom).
	Metrics *reconcile.Metrics
	// Inspect is the reconciler's inspector made of the rig's table (nil:
	// the table itself).
	Inspect func(Procs) reconcile.Inspector
	// Procs is what the registry reads of processes (nil: its default).
	Procs registry.Procs
	// Known is the controller's fast path over the rig's registry (nil:
	// none, every classing discovers).
	Known func(*registry.Registry) func(pid int) (fd int, groups []tsg.Group, ok bool)
}

// Rig is a fake node: rmfake's driver, the reconciler over it, and the
// events of each replayed context.
type Rig struct {
	T      *testing.T
	Driver *rmfake.Driver
	Allocs []rmfake.TraceAlloc
	// Procs is what the reconciler knows of processes: Start adds one.
	Procs Procs
	Rec   *reconcile.Reconciler
	Ctl   *reconcile.TSGController
	// Prom holds the reconciler's metrics when Options.Metrics is nil.
	Prom  *prometheus.Registry
	Reg   *registry.Registry
	Clock tracetest.Clock
	// Now is the reconciler's clock, which Tick moves.
	Now time.Duration
}

// New is a rig under policyText, with the debounce at 30 ms and the
// longest wait at 200 ms.
func New(t *testing.T, policyText string, opts Options) *Rig {
	t.Helper()
	pol, err := policy.Parse([]byte(policyText))
	if err != nil {
		t.Fatal(err)
	}
	allocs, err := rmfake.ParseTraceFile(AllocTrace)
	if err != nil {
		t.Fatal(err)
	}
	g := &Rig{T: t, Driver: rmfake.New(), Allocs: allocs, Procs: Procs{}, Reg: registry.New(registry.Options{Procs: opts.Procs})}
	g.Clock.Now = uint64(time.Second)
	g.Ctl = &reconcile.TSGController{Source: tsg.NewAttachSource(g.Driver.Host(), tsg.ScanOptions{})}
	if opts.Known != nil {
		g.Ctl.Known, g.Ctl.Log = opts.Known(g.Reg), testlog.New(t)
	}
	var insp reconcile.Inspector = g.Procs
	if opts.Inspect != nil {
		insp = opts.Inspect(g.Procs)
	}
	m := opts.Metrics
	if m == nil {
		g.Prom = prometheus.NewRegistry()
		m = reconcile.NewMetrics(g.Prom)
	}
	g.Rec = reconcile.New(pol, g.Ctl, insp, m, reconcile.Options{SelfPID: 1, Debounce: 30 * time.Millisecond, MaxWait: 200 * time.Millisecond}, testlog.New(t))
	g.Rec.Now = func() time.Duration { return g.Now }
	return g
}

// Start replays one context of pid into the fake driver (its allocations
// and libcuda's post-setup controls) and feeds the events the tracer
// would have seen, with the client handles the driver handed out. It
// returns the events' last time.
func (g *Rig) Start(pid int, info policy.Process) time.Duration {
	g.T.Helper()
	g.Procs[pid] = info
	p := g.Driver.NewProc(pid)
	clients, err := g.Driver.Replay(p, g.Allocs)
	if err != nil {
		g.T.Fatal(err)
	}
	offset := uint32(clients[0] - g.Allocs[0].Handle) // the trace's first allocation is its first client
	evs := tracetest.LibcudaContext(g.Allocs, tracetest.Process{PID: uint32(pid), TID: uint32(pid), Comm: info.Comm, ClientOffset: offset}, &g.Clock)
	for _, ev := range evs {
		g.Feed(ev)
	}
	return time.Duration(g.Clock.Now)
}

// Feed hands the reconciler what the tracer's event means to it.
func (g *Rig) Feed(ev trace.Event) {
	for _, e := range reconcile.Translate(g.Reg, ev) {
		g.Rec.Handle(e)
	}
}

// Tick moves the clock to at and does what is due; it returns when the
// reconciler wants to be called next (0: nothing scheduled).
func (g *Rig) Tick(at time.Duration) time.Duration {
	g.Now = at
	return g.Rec.Tick(context.Background(), at)
}

// Groups are pid's channel groups in the fake driver.
func (g *Rig) Groups(pid int) []tsg.Group { return g.Driver.Groups(pid, 8) }

// Scan reads pid's groups through its files and adopts them, as the
// daemon's resync does.
func (g *Rig) Scan(pid int) {
	g.T.Helper()
	states, err := g.Ctl.Groups(context.Background(), pid)
	if err != nil {
		g.T.Fatal(err)
	}
	var ids []tsg.GroupID
	for _, s := range states {
		ids = append(ids, s.ID)
	}
	g.Rec.Adopt(pid, ids)
	g.Rec.CheckDrift(states, pid)
}

// WantAll checks that each of pid's 4 groups has timeslice us and level.
func (g *Rig) WantAll(pid int, us uint64, level tsg.Level) {
	g.T.Helper()
	gs := g.Groups(pid)
	if len(gs) != 4 {
		g.T.Fatalf("pid %d has %d groups, want 4", pid, len(gs))
	}
	for _, x := range gs {
		if uint64(x.Timeslice) != us || tsg.Level(x.Interleave) != level {
			g.T.Errorf("pid %d group %v: %dus %v, want %dus %v", pid, x.Handle, uint64(x.Timeslice), tsg.Level(x.Interleave), us, level)
		}
	}
}

// Series is the first series of metric name in reg that keep accepts
// (nil: none).
func Series(t testing.TB, reg prometheus.Gatherer, name string, keep func(*dto.Metric) bool) *dto.Metric {
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

// Counter is counter name's value in its series with a label of value
// label (0 for none).
func Counter(t testing.TB, reg prometheus.Gatherer, name, label string) float64 {
	t.Helper()
	x := Series(t, reg, name, func(x *dto.Metric) bool {
		return slices.ContainsFunc(x.GetLabel(), func(l *dto.LabelPair) bool { return l.GetValue() == label })
	})
	return x.GetCounter().GetValue()
}

// HistCount is how many observations histogram name's first series
// holds (0 for none).
func HistCount(t testing.TB, reg prometheus.Gatherer, name string) uint64 {
	t.Helper()
	x := Series(t, reg, name, func(*dto.Metric) bool { return true })
	return x.GetHistogram().GetSampleCount()
}
