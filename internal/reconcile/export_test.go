package reconcile

import (
	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/registry"
)

// What the tests of package reconcile_test reach inside the reconciler.
// Those tests run on internal/reconcile/reconciletest's rig, which is
// built on this package and so cannot serve tests inside it.

const (
	MaxRetries = maxRetries
	GPUWait    = gpuWait
)

// TraceEventsFastAfter is the adapter over reg alone, its fast path on
// for processes that started after boot tick fastAfter.
func TraceEventsFastAfter(reg *registry.Registry, fastAfter uint64) *TraceEvents {
	return &TraceEvents{reg: reg, fastAfter: fastAfter}
}

// SetInspector replaces what r reads processes through.
func (r *Reconciler) SetInspector(i Inspector) { r.inspect = i }

// SetPodRecheck replaces r's Options.PodRecheck.
func (r *Reconciler) SetPodRecheck(f func(pid int, want class.Name) (bool, error)) {
	r.opts.PodRecheck = f
}
