package prepreempt

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestParseGateMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want GateMode
		err  bool
	}{
		{"off", GateOff, false}, {"on", GateOn, false}, {"auto", GateAuto, false},
		{" Auto ", GateAuto, false}, {"", 0, true}, {"yes", 0, true},
	} {
		got, err := ParseGateMode(tc.in)
		if (err != nil) != tc.err || (!tc.err && got != tc.want) {
			t.Errorf("ParseGateMode(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
		if !tc.err && got.String() != tc.want.String() {
			t.Errorf("%v.String() round trip", got)
		}
	}
}

func TestGateOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"hold over the limit", Options{GateMaxHold: GateMaxHoldLimit + time.Millisecond}},
		{"hold over the budget", Options{GateMaxHold: 5 * time.Second, GateShare: 0.1}},
		{"unknown mode", Options{Gate: 7}},
	} {
		if err := tc.o.withDefaults().check(); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("%s: check = %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if err := (Options{Gate: GateOn, GateShare: 1, GateMaxHold: GateMaxHoldLimit}).withDefaults().check(); err != nil {
		t.Errorf("no cap, longest hold: %v", err)
	}
}

// A gated request holds from Begin through Ready to End: the spinner is
// launched at once and released only at End.
func TestGateHoldsUntilEnd(t *testing.T) {
	e, clk, _ := simEngine(t, Options{Gate: GateOn}, 0, 0, 0)
	r, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	if st := r.state.Load(); st != stateLaunched {
		t.Fatalf("after Begin: state %d, want launched", st)
	}
	clk.advance(30 * time.Millisecond)
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	if st := r.state.Load(); st != stateLaunched {
		t.Fatalf("Ready released a gated request (state %d)", st)
	}
	if e.flags.(*fakeFlags).w[r.slot.idx].Load() != 0 {
		t.Fatal("flag set before End")
	}
	clk.advance(70 * time.Millisecond)
	if err := r.End(); err != nil {
		t.Fatal(err)
	}
	s := waitStats(t, e, func(s Stats) bool { return s.GateEnded == 1 && s.GateHeldNs > 0 })
	if held := time.Duration(s.GateHeldNs); held < 100*time.Millisecond {
		t.Errorf("gate held %v, want the request's whole 100ms", held)
	}
	if s.Begun != 1 || s.Gated != 1 || s.Early != 0 || len(s.HeldSamples) != 0 {
		t.Errorf("stats %+v: want one begun, gated request and no hint outcome", s)
	}
	if err := r.End(); !errors.Is(err, ErrDone) {
		t.Errorf("second End = %v, want ErrDone", err)
	}
}

// A request that never ends holds at most GateMaxHold.
func TestGateExpiresAtMaxHold(t *testing.T) {
	const hold = 40 * time.Millisecond
	e, clk, _ := simEngine(t, Options{Gate: GateOn, GateMaxHold: hold, MaxHold: 4 * time.Millisecond}, 0, 0, 0)
	r, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	for clk.peek()-r.launchT < int64(hold) {
		waitTimers(t, clk)
		clk.advance(time.Millisecond) // janitor period: MaxHold/4
	}
	waitTimers(t, clk)
	clk.advance(time.Millisecond)
	s := waitStats(t, e, func(s Stats) bool { return s.GateExpired == 1 && s.GateHeldNs > 0 })
	if held := time.Duration(s.GateHeldNs); held > hold {
		t.Errorf("an abandoned gate held %v, want at most %v", held, hold)
	}
	if err := r.End(); err != nil {
		t.Errorf("End after expiry = %v, want nil", err)
	}
}

// Off never holds; auto holds a class whose requests are long and not one
// whose requests are short; SetGate changes the mode for later requests.
func TestGateModes(t *testing.T) {
	e, clk, _ := simEngine(t, Options{}, 0, 0, 0)
	begin := func(class string, span time.Duration) *Request {
		t.Helper()
		r, err := e.Begin(context.Background(), class)
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(span)
		if err := r.End(); err != nil {
			t.Fatal(err)
		}
		return r
	}
	if r := begin("decode", 100*time.Millisecond); r.gated {
		t.Fatal("gate off, request held")
	}
	if err := e.SetGate(GateAuto); err != nil {
		t.Fatal(err)
	}
	if e.Stats().Gate != "auto" {
		t.Errorf("Stats.Gate %q, want auto", e.Stats().Gate)
	}
	// 100 ms spans against a 200 us switch: launch-bound.
	if r := begin("decode", 100*time.Millisecond); !r.gated {
		t.Error("auto: a 100ms class was not held")
	}
	for range 3 {
		begin("graph", 300*time.Microsecond)
	}
	if r := begin("graph", 300*time.Microsecond); r.gated {
		t.Error("auto: a 300us class was held")
	}
	if err := e.SetGate(GateOn); err != nil {
		t.Fatal(err)
	}
	if r := begin("graph", 300*time.Microsecond); !r.gated {
		t.Error("on: request not held")
	}
	if err := e.SetGate(9); !errors.Is(err, ErrInvalidOption) {
		t.Errorf("SetGate(9) = %v", err)
	}
}

// The gate's share is a budget of GPU time: past it, requests run ungated
// and are counted, and what a request did not use comes back at End.
func TestGateBudget(t *testing.T) {
	// Share 0.1 of 20 s: 2 s, exactly one reservation of GateMaxHold 2 s.
	e, clk, _ := simEngine(t, Options{Gate: GateOn, GateShare: 0.1, GateMaxHold: 2 * time.Second}, 0, 0, 0)
	r1, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	r2, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	if !r1.gated || r2.gated {
		t.Fatalf("gated %v, %v: want the first only", r1.gated, r2.gated)
	}
	clk.advance(10 * time.Millisecond)
	if err := r1.End(); err != nil {
		t.Fatal(err)
	}
	if err := r2.End(); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e, func(s Stats) bool { return s.GateEnded == 1 })
	// r1 used 10 ms of its 2 s; the refund, and 100 ms refilling at 0.1
	// for the 10 ms used, cover the next.
	clk.advance(100 * time.Millisecond)
	r3, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	if !r3.gated {
		t.Error("the unused reservation was not refunded")
	}
	_ = r3.End()
	if s := e.Stats(); s.GateThrottled != 1 {
		t.Errorf("throttled %d, want 1", s.GateThrottled)
	}
}

// Cancel releases a gated request at once; Close releases one never ended.
func TestGateCancelAndClose(t *testing.T) {
	e, clk, _ := simEngine(t, Options{Gate: GateOn}, 0, 0, 0)
	r, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Millisecond)
	if err := r.Cancel(); err != nil {
		t.Fatal(err)
	}
	if e.flags.(*fakeFlags).w[r.slot.idx].Load() == 0 {
		t.Error("Cancel left the gate's flag clear")
	}
	waitStats(t, e, func(s Stats) bool { return s.Cancelled == 1 && s.GateHeldNs > 0 })
	open, err := e.Begin(context.Background(), "decode")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatalf("Close with a gate open: %v", err)
	}
	if e.flags.(*fakeFlags).w[open.slot.idx].Load() == 0 {
		t.Error("Close left an open gate's flag clear")
	}
}

// End on a hinted request that never called Ready acts as Ready.
func TestEndOfHint(t *testing.T) {
	e, clk, _ := simEngine(t, Options{}, 0, 0, 0)
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	clk.advance(100 * time.Microsecond)
	if err := r.End(); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e, func(s Stats) bool { return s.Early == 1 })
	if err := r.Ready(); !errors.Is(err, ErrDone) {
		t.Errorf("Ready after End = %v, want ErrDone", err)
	}
}

// A held request that outlives its hold (here: it never ends before
// GateMaxHold, as one that waits on the hold with a device-wide
// synchronize does) is warned of once a class, and auto mode stops holding
// that class while such a request is among its recent ones.
func TestGateOutlivedHold(t *testing.T) {
	const hold = 40 * time.Millisecond
	var logs bytes.Buffer
	e, clk, _ := simEngine(t, Options{Gate: GateAuto, GateMaxHold: hold, MaxHold: 4 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))}, 0, 0, 0)
	outlive := func() {
		t.Helper()
		r, err := e.Begin(context.Background(), "infer")
		if err != nil {
			t.Fatal(err)
		}
		if !r.gated {
			t.Fatal("auto: a class with no history was not held")
		}
		before := e.Stats().GateExpired
		for clk.peek()-r.launchT < int64(hold) {
			waitTimers(t, clk)
			clk.advance(time.Millisecond)
		}
		waitTimers(t, clk)
		clk.advance(time.Millisecond)
		waitStats(t, e, func(s Stats) bool { return s.GateExpired == before+1 })
		if err := r.End(); err != nil {
			t.Fatal(err)
		}
	}
	outlive()
	r, err := e.Begin(context.Background(), "infer")
	if err != nil {
		t.Fatal(err)
	}
	if r.gated {
		t.Error("auto: held a class whose last held request outlived its hold")
	}
	if err := r.End(); err != nil {
		t.Fatal(err)
	}
	// Another class is judged on its own; its warning is its own too.
	if r, _ := e.Begin(context.Background(), "decode"); !r.gated {
		t.Error("auto: a new class was not held")
	} else if err := r.End(); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "outlived its hold"); n != 1 {
		t.Errorf("%d warnings after one outlived hold, want 1:\n%s", n, logs.String())
	}
	if err := e.SetGate(GateOn); err != nil {
		t.Fatal(err)
	}
	outlive() // on: still held, as the caller asked, and not warned again
	if n := strings.Count(logs.String(), "outlived its hold"); n != 1 {
		t.Errorf("%d warnings after two outlived holds of one class, want 1", n)
	}
}
