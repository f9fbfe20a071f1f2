package prepreempt

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
)

// TestMaxHoldWithinTheBudget: a spinner reserves MaxHold from the hold
// budget (HoldDutyCycle x 1 s), so a MaxHold beyond it, which no spinner
// could ever be launched under, is refused; with a duty cycle of 1 there
// is no budget.
func TestMaxHoldWithinTheBudget(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		ok   bool
	}{
		{Options{MaxHold: 250 * time.Millisecond}, true},
		{Options{MaxHold: 300 * time.Millisecond}, false},
		{Options{MaxHold: 300 * time.Millisecond, HoldDutyCycle: 0.5}, true},
		{Options{MaxHold: time.Second, HoldDutyCycle: 1}, true},
	} {
		err := tc.opts.withDefaults().check()
		if (err == nil) != tc.ok || err != nil && !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%+v: %v, want ok %v", tc.opts, err, tc.ok)
		}
	}
}

// TestPushSaysNoSpinnersWhenEveryClassIsSkipped: an engine whose only
// request class does not benefit launches no spinner, and the engine
// state it pushes says so, so gpreemptd does not hold BE under the
// spinner ceiling for it.
func TestPushSaysNoSpinnersWhenEveryClassIsSkipped(t *testing.T) {
	e, clk, _ := simEngine(t, Options{InitialSwitch: 200 * time.Microsecond}, 0, 50*time.Microsecond, 0)
	d := &fakeDaemon{reply: api.StatsReply{Prepreempt: true, SLO: true}}
	rep := NewReporter(e, ReporterOptions{Socket: startFakeDaemon(t, d)})
	if _, err := rep.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.pushes[0].Engine; got == nil || !got.Prepreempt {
		t.Fatalf("a new engine (no class known yet) pushed %+v; want prepreempt", got)
	}
	for range 8 { // launch-bound: Ready 2 ms after the hint
		r, err := e.Hint(context.Background(), "eager", 0)
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(2 * time.Millisecond)
		r.Ready()
		waitStats(t, e, func(Stats) bool { return len(e.free) == e.opts.Slots })
	}
	for range 4 {
		r, _ := e.Hint(context.Background(), "eager", 0)
		r.Ready()
	}
	if s := e.Stats(); s.Classes["eager"] != ModeSkip || s.SkippedNoBenefit != 4 {
		t.Fatalf("setup: %+v", s)
	}
	if _, err := rep.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := d.pushes[1].Engine; got == nil || got.Prepreempt || got.SkippedNoBenefit != 4 {
		t.Errorf("every class skipped, but the push says engine %+v", got)
	}

}
