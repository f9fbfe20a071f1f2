package registry_test

import (
	"testing"

	"github.com/gpreempt/gpreempt/internal/registry"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

// TestSubscriptionOverflow: a subscriber that does not keep up loses
// updates, counted, and never blocks the registry.
func TestSubscriptionOverflow(t *testing.T) {
	tests := []struct {
		buffer, want int
	}{
		{0, 1}, // at least one slot
		{2, 2},
		{100, 33},
	}
	for _, tt := range tests {
		clock := tracetest.Clock{Now: 1e9}
		r, _ := eventRegistry(t)
		slow := r.Subscribe(tt.buffer)
		total := 0
		for _, ev := range tracetest.LibcudaContext(loadTrace(t), python, &clock) {
			total += len(r.Apply(ev))
		}
		if total != 33 {
			t.Fatalf("%d updates from a context, want 33", total)
		}
		got := 0
		var first registry.Update
		for len(slow.Updates()) > 0 {
			u := <-slow.Updates()
			if got == 0 {
				first = u
			}
			got++
		}
		if got != tt.want || slow.Dropped() != uint64(total-tt.want) || first.Kind != registry.UpdateTSGAlloc {
			t.Errorf("buffer %d: received %d (first %s), dropped %d; want %d and %d", tt.buffer, got, first.Kind, slow.Dropped(), tt.want, total-tt.want)
		}
		slow.Close()
		slow.Close()
		if _, open := <-slow.Updates(); open {
			t.Error("Updates open after Close")
		}
		r.Apply(tracetest.Free(python, 8, client, client, client, &clock)) // no subscriber left: no panic
	}
}
