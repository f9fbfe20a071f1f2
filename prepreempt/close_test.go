package prepreempt

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCloseReleasesOutstandingSpinners(t *testing.T) {
	e, g := testEngineClock(t, Options{}, newFakeClock(0), 0)
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	// The fake clock does not move: an error here means Close waited for
	// its deadline instead of releasing the spinner.
	if err := e.Close(); err != nil {
		t.Fatalf("Close with a spinner outstanding: %v", err)
	}
	if !g.closed.Load() {
		t.Error("Close did not free the spinners' resources")
	}
	if err := r.Ready(); err != nil {
		t.Errorf("Ready after the engine released the spinner: %v", err)
	}
}

func TestCloseDropsScheduledLaunches(t *testing.T) {
	for _, launcher := range Launchers {
		t.Run(string(launcher), func(t *testing.T) {
			clk := newFakeClock(0)
			e, g := testEngineClock(t, Options{Launcher: launcher}, clk, 0)
			r, err := e.Hint(context.Background(), "infer", 50*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Close(); err != nil {
				t.Fatalf("Close with a launch scheduled: %v", err)
			}
			clk.advance(time.Second) // the launch time passes
			if n := g.launches.Load(); n != 0 {
				t.Errorf("%d spinners launched after Close", n)
			}
			if err := r.Ready(); err != nil && !errors.Is(err, ErrDone) {
				t.Errorf("Ready after Close: %v", err)
			}
		})
	}
}

// TestCloseRacingLaunch: a launch that passed its closed check before Close
// and publishes its spinner after Close's sweep is still released, so
// Close returns without waiting out its deadline, and a late Ready writes
// no freed flag. (Before the fix: Close failed with "spinners still
// outstanding" and freed the flags, which the late Ready then wrote.)
func TestCloseRacingLaunch(t *testing.T) {
	clk := newFakeClock(0)
	e, g := testEngineClock(t, Options{}, clk, 0)
	g.entered, g.gate = make(chan struct{}), make(chan struct{})
	swept := make(chan struct{})
	var once atomic.Bool
	clk.onSleep = func() {
		// Close sleeps only in its wait for the slots, after its sweeps.
		if e.closed.Load() && once.CompareAndSwap(false, true) {
			close(swept)
		}
	}
	hinted := make(chan *Request)
	go func() {
		r, err := e.Hint(context.Background(), "infer", 0) // launches inline
		if err != nil {
			t.Error(err)
		}
		hinted <- r
	}()
	<-g.entered // the launch is past its closed check
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	<-swept
	close(g.gate)
	r := <-hinted
	if err := awaitClose(t, clk, closed); err != nil {
		t.Fatalf("Close racing a launch: %v", err)
	}
	if err := r.Ready(); err != nil && !errors.Is(err, ErrDone) {
		t.Errorf("Ready after Close: %v", err)
	}
	if n := g.flags.setAfterUse.Load(); n != 0 {
		t.Errorf("%d flag writes after the flags were freed", n)
	}
}

// TestCloseLeaksOnDeadline: when a spinner never completes, Close gives up
// at its deadline and frees nothing that a late completion check or Ready
// could still touch.
func TestCloseLeaksOnDeadline(t *testing.T) {
	clk := newFakeClock(0)
	e, g := testEngineClock(t, Options{MaxHold: 10 * time.Millisecond}, clk, 0)
	g.stuck.Store(true)
	defer g.stuck.Store(false) // let the reaper finish
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	waiting := make(chan struct{})
	var once atomic.Bool
	clk.onSleep = func() {
		if e.closed.Load() && once.CompareAndSwap(false, true) {
			close(waiting)
		}
	}
	closed := make(chan error)
	go func() { closed <- e.Close() }()
	<-waiting // Close (or the reaper it started) waits for the stuck spinner
	// Move the clock past Close's deadline until Close notices, however
	// its deadline and this goroutine interleave.
	for returned := false; !returned; {
		clk.advance(e.opts.MaxHold + closeGrace + time.Nanosecond)
		select {
		case err = <-closed:
			returned = true
		case <-time.After(time.Millisecond):
		}
	}
	if err == nil || !strings.Contains(err.Error(), "still outstanding") || !strings.Contains(err.Error(), "left allocated") {
		t.Fatalf("Close with a stuck spinner = %v, want an error saying it is left allocated", err)
	}
	if g.closed.Load() || g.flags.closed.Load() {
		t.Error("Close freed the spinners' resources while one was outstanding")
	}
	if err := r.Ready(); err != nil && !errors.Is(err, ErrDone) {
		t.Errorf("Ready after Close: %v", err)
	}
}

// TestGoroutineLauncherStopsOnRequestEnd: a goroutine waiting to launch a
// spinner stops when its request ends or the engine closes, instead of
// sleeping out the expected preparation; Close then returns at once. (The
// fake clock never reaches the launch time: before the fix, Close failed
// with "spinners still outstanding".)
func TestGoroutineLauncherStopsOnRequestEnd(t *testing.T) {
	for _, end := range []string{"ready", "cancel", "close"} {
		t.Run(end, func(t *testing.T) {
			clk := newFakeClock(0)
			e, g := testEngineClock(t, Options{}, clk, 0)
			r, err := e.Hint(context.Background(), "infer", MaxExpectedPrep)
			if err != nil {
				t.Fatal(err)
			}
			switch end {
			case "ready":
				err = r.Ready()
			case "cancel":
				err = r.Cancel()
			}
			if err != nil {
				t.Fatal(err)
			}
			closed := make(chan error, 1)
			go func() { closed <- e.Close() }()
			if err := awaitClose(t, clk, closed); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if n := e.pending.Load(); n != 0 {
				t.Errorf("%d launcher goroutines left after Close", n)
			}
			if n := g.launches.Load(); n != 0 {
				t.Errorf("%d spinners launched", n)
			}
		})
	}
}

// TestHoldDutyCycle: spinners reserve MaxHold from a budget of
// HoldDutyCycle x 1 s; hints beyond it get no spinner and are counted; a
// released spinner gives back what it did not use, and the budget refills
// with time.
func TestHoldDutyCycle(t *testing.T) {
	clk := newFakeClock(0)
	// Budget 50 ms: five spinners of MaxHold 10 ms.
	e, g := testEngineClock(t, Options{MaxHold: 10 * time.Millisecond, HoldDutyCycle: 0.05}, clk, 0)
	ctx := context.Background()
	var rs []*Request
	for range 6 {
		r, err := e.Hint(ctx, "infer", 0)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if s := e.Stats(); s.Throttled != 1 || g.launches.Load() != 5 {
		t.Fatalf("after 6 hints: throttled %d, launches %d; want 1 and 5", s.Throttled, g.launches.Load())
	}
	// A throttled request ends like any other, once.
	if err := rs[5].Ready(); err != nil {
		t.Fatal(err)
	}
	if err := rs[5].Ready(); !errors.Is(err, ErrDone) {
		t.Errorf("second Ready on a throttled request = %v", err)
	}
	// Released at once (no clock time passed): the whole reservation
	// comes back.
	if err := rs[0].Ready(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Hint(ctx, "infer", 0); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.Throttled != 1 {
		t.Errorf("a hint after a release was throttled: %+v", s)
	}
	// Now 5 reservations are out again; the budget is spent until it
	// refills: 10 ms at 5% takes 200 ms.
	if _, err := e.Hint(ctx, "infer", 0); err != nil {
		t.Fatal(err)
	}
	if s := e.Stats(); s.Throttled != 2 {
		t.Errorf("throttled %d, want 2", s.Throttled)
	}
	clk.advance(200 * time.Millisecond)
	before := g.launches.Load()
	r, err := e.Hint(ctx, "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	if g.launches.Load() != before+1 {
		t.Errorf("no spinner after the budget refilled: %+v", e.Stats())
	}
	_ = r.Cancel()
	for _, r := range rs[1:5] {
		_ = r.Cancel()
	}
}

func TestOptionsChecked(t *testing.T) {
	for _, tt := range []struct {
		name string
		o    Options
		want string
	}{
		{"launcher", Options{Launcher: "threads"}, `launcher "threads"`},
		{"max hold", Options{MaxHold: time.Minute}, "MaxHold 1m0s exceeds 1s"},
		{"lc timeslice", Options{LCTimeslice: time.Hour}, "LCTimeslice"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.o.withDefaults().check()
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("check = %v, want ErrInvalidOption naming %q", err, tt.want)
			}
		})
	}
	if err := (Options{}).withDefaults().check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestHintBoundsExpectedPrep(t *testing.T) {
	e, _ := testEngine(t, Options{}, 0)
	for _, d := range []time.Duration{-time.Microsecond, MaxExpectedPrep + 1} {
		if _, err := e.Hint(context.Background(), "x", d); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("Hint(%v) = %v, want ErrInvalidOption", d, err)
		}
	}
}

func TestParseLauncher(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Launcher
		ok   bool
	}{
		{"goroutine", LauncherGoroutine, true},
		{" Poller ", LauncherPoller, true},
		{"", "", false},
		{"threads", "", false},
	} {
		got, err := ParseLauncher(tt.in)
		if got != tt.want || (err == nil) != tt.ok {
			t.Errorf("ParseLauncher(%q) = %q, %v", tt.in, got, err)
		}
		if err != nil && !errors.Is(err, ErrInvalidOption) {
			t.Errorf("ParseLauncher(%q): %v does not wrap ErrInvalidOption", tt.in, err)
		}
	}
}

// awaitClose returns Close's result. The fake clock does not move, so a
// Close that waits for its deadline instead of for its spinners never
// returns: after a bound on goroutine scheduling (not a measurement), it is
// let go and the test fails.
func awaitClose(t *testing.T, clk *fakeClock, closed <-chan error) error {
	t.Helper()
	select {
	case err := <-closed:
		return err
	case <-time.After(30 * time.Second):
		clk.advance(time.Hour)
		t.Fatalf("Close did not return until its deadline passed: %v", <-closed)
		return nil
	}
}

// FuzzParseLauncher: any string either parses to a known launcher that
// parses back to itself, or is refused with ErrInvalidOption.
func FuzzParseLauncher(f *testing.F) {
	for _, s := range []string{"goroutine", "poller", " POLLER", "", "threads", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := ParseLauncher(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidOption) {
				t.Fatalf("ParseLauncher(%q): %v does not wrap ErrInvalidOption", s, err)
			}
			return
		}
		if again, err := ParseLauncher(l.String()); err != nil || again != l {
			t.Fatalf("ParseLauncher(%q) = %q, which parses back to %q, %v", s, l, again, err)
		}
	})
}
