package cmd

import (
	"testing"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/daemon"
	"github.com/gpreempt/gpreempt/internal/policy"
)

func TestClassedMessage(t *testing.T) {
	be := policy.Decision{Spec: class.Spec{Name: class.BE, Weight: 1}}
	gs := func(gpus ...string) []daemon.GroupState {
		var out []daemon.GroupState
		for _, g := range gpus {
			out = append(out, daemon.GroupState{GPU: g})
		}
		return out
	}
	for _, tt := range []struct {
		d      policy.Decision
		groups []daemon.GroupState
		want   string
	}{
		{be, gs("0", "0", "0", "0"), "classed be: 4 channel groups on GPU 0"},
		{be, gs("", "", "", ""), "classed be: 4 channel groups"},
		{policy.Decision{Spec: class.Spec{Name: class.Burstable, Weight: 2}}, gs("1", "0"), "classed burstable:2: 2 channel groups on GPUs 0, 1"},
	} {
		if got := classedMessage(tt.d, tt.groups); got != tt.want {
			t.Errorf("classedMessage(%v, %d groups) = %q, want %q", tt.d, len(tt.groups), got, tt.want)
		}
	}
}
