package daemon

import (
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
)

// rig is the reconciler's test rig (internal/reconcile/reconciletest)
// over the daemon's metrics, for the tests of what the daemon builds on
// it.
type rig struct {
	*reconciletest.Rig
	m *Metrics
}

func newRig(t *testing.T, policyText string) *rig {
	t.Helper()
	return newRigInspecting(t, policyText, nil)
}

// newRigInspecting is newRig whose reconciler reads processes through
// what inspect makes of the rig's table (nil: the table itself).
func newRigInspecting(t *testing.T, policyText string, inspect func(reconciletest.Procs) reconcile.Inspector) *rig {
	t.Helper()
	m := NewMetrics(nil)
	return &rig{Rig: reconciletest.New(t, policyText, reconciletest.Options{Metrics: m.Reconcile, Inspect: inspect}), m: m}
}

// counter is counter name's value in its series with a label of value
// label (0 for none).
func counter(t testing.TB, m *Metrics, name, label string) float64 {
	t.Helper()
	return reconciletest.Counter(t, m.Registry, name, label)
}

// series is the first series of metric name that keep accepts (nil:
// none).
func series(t testing.TB, m *Metrics, name string, keep func(*dto.Metric) bool) *dto.Metric {
	t.Helper()
	return reconciletest.Series(t, m.Registry, name, keep)
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
