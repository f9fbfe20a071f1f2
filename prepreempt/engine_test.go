package prepreempt

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeFlags keep the words in Go memory. A write after close is recorded:
// on a real backend it writes freed memory.
type fakeFlags struct {
	w           [64]atomic.Uint32
	closed      atomic.Bool
	setAfterUse atomic.Int64
}

func (f *fakeFlags) name() string              { return "fake" }
func (f *fakeFlags) devicePtr(slot int) uint64 { return uint64(0x1000 + 4*slot) }
func (f *fakeFlags) set(slot int, v uint32) {
	if f.closed.Load() {
		f.setAfterUse.Add(1)
	}
	f.w[slot].Store(v)
}
func (f *fakeFlags) close() error { f.closed.Store(true); return nil }

// fakeGPU runs each "spinner" as a goroutine that starts after switchIn,
// polls the flag like the kernel, and gives up after maxHold.
type fakeGPU struct {
	clk      hostClock
	flags    *fakeFlags
	switchIn time.Duration
	maxHold  time.Duration
	// clock is added to the stamps: the fake %globaltimer's offset
	// from the host clock.
	clock int64
	// busyPoll: the fake spinner polls its flag without sleeping, like
	// the kernel (sleeping oversleeps by up to milliseconds on a loaded
	// machine; most tests do not care).
	busyPoll bool
	fail     error
	// entered and gate, when set, hold launch until the test lets it
	// go, after signalling that it has started.
	entered, gate chan struct{}
	// stuck: finished never reports completion (a GPU that stopped).
	stuck    atomic.Bool
	closed   atomic.Bool
	launches atomic.Int64
	mu       sync.Mutex
	st       map[int]*[2]int64
	done     map[int]*atomic.Bool
}

func newFakeGPU(clk hostClock, f *fakeFlags, switchIn, maxHold time.Duration) *fakeGPU {
	return &fakeGPU{clk: clk, flags: f, switchIn: switchIn, maxHold: maxHold, st: map[int]*[2]int64{}, done: map[int]*atomic.Bool{}}
}

func (g *fakeGPU) launch(s *slot) error {
	if g.entered != nil {
		g.entered <- struct{}{}
		<-g.gate
	}
	if g.fail != nil {
		return g.fail
	}
	g.launches.Add(1)
	g.mu.Lock()
	st, done := &[2]int64{}, &atomic.Bool{}
	g.st[s.idx], g.done[s.idx] = st, done
	g.mu.Unlock()
	hold := cmp.Or(s.hold, g.maxHold)
	go func() {
		time.Sleep(g.switchIn)
		start := g.clk.now()
		g.mu.Lock()
		st[0] = start + g.clock
		g.mu.Unlock()
		for g.flags.w[s.idx].Load() == 0 && time.Duration(g.clk.now()-start) < hold {
			if g.busyPoll {
				runtime.Gosched()
			} else {
				time.Sleep(10 * time.Microsecond)
			}
		}
		g.mu.Lock()
		st[1] = g.clk.now() + g.clock
		g.mu.Unlock()
		done.Store(true)
	}()
	return nil
}

func (g *fakeGPU) finished(s *slot) (bool, error) {
	if g.stuck.Load() {
		return false, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	d := g.done[s.idx]
	return d == nil || d.Load(), nil
}

func (g *fakeGPU) stamps(s *slot) (int64, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.st[s.idx]; st != nil {
		return st[0], st[1]
	}
	return 0, 0
}

func (g *fakeGPU) clearStamps(s *slot) {}
func (g *fakeGPU) close() error        { g.closed.Store(true); return nil }

func testEngine(t *testing.T, opts Options, switchIn time.Duration) (*Engine, *fakeGPU) {
	t.Helper()
	return testEngineClock(t, opts, newMonoClock(), switchIn)
}

// testEngineClock is testEngine on clk.
func testEngineClock(t *testing.T, opts Options, clk hostClock, switchIn time.Duration) (*Engine, *fakeGPU) {
	t.Helper()
	if opts.MaxHold == 0 {
		// Tests about expiry set their own; the others must not see a
		// request expire because a loaded machine slept 5 ms too long.
		opts.MaxHold = time.Second
	}
	if opts.HoldDutyCycle == 0 {
		opts.HoldDutyCycle = 1 // tests of the cap set their own
	}
	opts = opts.withDefaults()
	f := &fakeFlags{}
	g := newFakeGPU(clk, f, switchIn, opts.MaxHold)
	e := newEngine(opts, clk, f, g)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e, g
}

// waitStats polls until cond holds on the engine's stats (the reaper runs
// asynchronously).
func waitStats(t *testing.T, e *Engine, cond func(Stats) bool) Stats {
	t.Helper()
	// A bound on a goroutine being scheduled at all, not a measurement.
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := e.Stats()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stats never reached the expected state: %+v", s)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestReadyReleasesLaunchedSpinner(t *testing.T) {
	e, clk, g := simEngine(t, Options{InitialSwitch: 100 * time.Microsecond}, 0, 50*time.Microsecond, 0)
	ctx := context.Background()
	// Expected preparation shorter than the switch lead: launched at once.
	r, err := e.Hint(ctx, "infer", 50*time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if len(g.launched) != 1 {
		t.Fatalf("launches = %d, want 1 (launch time already passed)", len(g.launched))
	}
	clk.advance(50*time.Microsecond + time.Millisecond) // resident, then held 1 ms
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(); !errors.Is(err, ErrDone) {
		t.Errorf("second Ready = %v, want ErrDone", err)
	}
	s := waitStats(t, e, func(s Stats) bool { return len(s.HeldSamples) == 1 })
	if s.Hints != 1 || s.Early != 1 || s.Late != 0 || s.Expired != 0 {
		t.Errorf("stats %+v", s)
	}
	if held := time.Duration(s.HeldSamples[0]); held != time.Millisecond {
		t.Errorf("held %v, want the 1 ms between the spinner's start and Ready", held)
	}
	if len(e.free) != e.opts.Slots {
		t.Errorf("%d of %d slots free after the spinner finished", len(e.free), e.opts.Slots)
	}
}

func TestReadyBeforeLaunchIsLate(t *testing.T) {
	// The fake clock never reaches the launch time, however slowly this
	// machine runs the test.
	e, g := testEngineClock(t, Options{}, newFakeClock(0), 0)
	r, err := e.Hint(context.Background(), "infer", 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e, func(Stats) bool { return e.pending.Load() == 0 })
	if g.launches.Load() != 0 {
		t.Errorf("a spinner was launched after Ready")
	}
	if s := e.Stats(); s.Late != 1 || s.Early != 0 {
		t.Errorf("stats %+v, want one late request", s)
	}
}

func TestScheduledLaunch(t *testing.T) {
	for _, launcher := range Launchers {
		t.Run(string(launcher), func(t *testing.T) { testScheduledLaunch(t, launcher) })
	}
}

func testScheduledLaunch(t *testing.T, launcher Launcher) {
	e, g := testEngine(t, Options{InitialSwitch: 200 * time.Microsecond, Margin: time.Microsecond, Launcher: launcher}, 0)
	start := time.Now()
	r, err := e.Hint(context.Background(), "infer", 3*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	for g.launches.Load() == 0 {
		if time.Since(start) > 30*time.Second { // not a measurement: a bound on being scheduled at all
			t.Fatal("spinner never launched")
		}
		time.Sleep(50 * time.Microsecond)
	}
	// Launched about 3 ms - 200 us after the hint, not at once.
	if d := time.Since(start); d < 2*time.Millisecond {
		t.Errorf("spinner launched %v after the hint, want about 2.8 ms", d)
	}
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	s := waitStats(t, e, func(s Stats) bool { return s.Early == 1 && len(s.HeldSamples) == 1 })
	if len(s.LaunchLagSamples) != 1 || len(s.ReadyLeadSamples) != 1 || s.ReadyLeadSamples[0] <= 0 {
		t.Errorf("launch lag %v, ready lead %v: want one sample each, the lead positive", s.LaunchLagSamples, s.ReadyLeadSamples)
	}
}

func TestMissedReadyExpires(t *testing.T) {
	const maxHold = 2 * time.Millisecond
	e, clk, _ := simEngine(t, Options{MaxHold: maxHold}, 0, 0, 0)
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 { // four janitor periods of MaxHold/4
		waitTimers(t, clk)
		clk.advance(maxHold / 4)
	}
	s := waitStats(t, e, func(s Stats) bool { return s.Expired == 1 && len(s.HeldSamples) == 1 })
	if held := time.Duration(s.HeldSamples[0]); held > maxHold {
		t.Errorf("an abandoned spinner held the GPU %v (max hold %v)", held, maxHold)
	}
	// The late Ready is fine; a second one is not.
	if err := r.Ready(); err != nil {
		t.Errorf("Ready after expiry = %v, want nil", err)
	}
	if err := r.Ready(); !errors.Is(err, ErrDone) {
		t.Errorf("second Ready after expiry = %v, want ErrDone", err)
	}
}

func TestCancel(t *testing.T) {
	e, _ := testEngine(t, Options{}, 0)
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Cancel(); err != nil {
		t.Fatal(err)
	}
	waitStats(t, e, func(s Stats) bool { return s.Cancelled == 1 && len(s.HeldSamples) == 1 })
}

func TestLaunchErrorIsReturned(t *testing.T) {
	e, g := testEngine(t, Options{}, 0)
	g.fail = errors.New("CUDA_ERROR_LAUNCH_FAILED")
	r, err := e.Hint(context.Background(), "infer", 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Ready(); err == nil || err.Error() != "CUDA_ERROR_LAUNCH_FAILED" {
		t.Fatalf("Ready = %v, want the launch error", err)
	}
}

func TestSlotsExhaustedDrop(t *testing.T) {
	e, _ := testEngine(t, Options{Slots: 2}, 0)
	ctx := context.Background()
	var rs []*Request
	for range 3 {
		r, err := e.Hint(ctx, "infer", 0)
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	if s := e.Stats(); s.Dropped != 1 {
		t.Errorf("dropped = %d, want 1", s.Dropped)
	}
	for _, r := range rs {
		if err := r.Ready(); err != nil {
			t.Fatal(err)
		}
	}
	if err := rs[2].Cancel(); !errors.Is(err, ErrDone) {
		t.Errorf("Cancel after Ready on a dropped request = %v", err)
	}
}

func TestConcurrentRequests(t *testing.T) {
	for _, launcher := range Launchers {
		t.Run(string(launcher), func(t *testing.T) { testConcurrentRequests(t, launcher) })
	}
}

func testConcurrentRequests(t *testing.T, launcher Launcher) {
	e, _ := testEngine(t, Options{Slots: 8, Launcher: launcher}, 20*time.Microsecond)
	var wg sync.WaitGroup
	for i := range 64 {
		wg.Go(func() {
			r, err := e.Hint(context.Background(), "infer", time.Duration(i%5)*100*time.Microsecond)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(300 * time.Microsecond)
			if i%7 == 0 {
				err = r.Cancel()
			} else {
				err = r.Ready()
			}
			if err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	s := waitStats(t, e, func(s Stats) bool { return len(e.free) == 8 })
	// Every hint has exactly one outcome. Which one depends on the
	// scheduler (a class whose holds ran long may be skipped for no
	// benefit), so only the sum is fixed.
	if got := outcomes(s); got != 64 || s.Hints != 64 {
		t.Errorf("outcomes add up to %d of %d hints, want 64: %+v", got, s.Hints, s)
	}
}

// outcomes is the number of hints that reached an outcome: each hint is
// counted once, in exactly one of these.
func outcomes(s Stats) uint64 {
	return s.Early + s.Late + s.Cancelled + s.Dropped + s.Throttled + s.Expired + s.SkippedNoBenefit + s.SkippedByDaemon
}

func TestPredictorUsesHistoryLowQuantile(t *testing.T) {
	p := newPredictor(0.02, 128, 8)
	if d, ok := p.predict("a", 500*time.Microsecond); ok || d != 500*time.Microsecond {
		t.Errorf("without history: %v %v", d, ok)
	}
	for i := range 100 {
		p.observe("a", time.Duration(300+4*i)*time.Microsecond) // 300..696 us
	}
	d, ok := p.predict("a", time.Second)
	if !ok || d < 300*time.Microsecond || d > 320*time.Microsecond {
		t.Errorf("prediction %v, %v; want near the shortest recent preparation", d, ok)
	}
	if _, ok := p.predict("b", 0); ok {
		t.Error("class b has no history")
	}
}

func TestWindowQuantile(t *testing.T) {
	w := newWindow(4)
	if _, ok := w.quantile(0.5); ok {
		t.Error("empty window answered")
	}
	for _, v := range []time.Duration{5, 1, 4, 2, 3} { // 5 falls out
		w.add(v)
	}
	tests := []struct {
		q    float64
		want time.Duration
	}{{0, 1}, {0.5, 3}, {1, 4}}
	for _, tt := range tests {
		if got, _ := w.quantile(tt.q); got != tt.want {
			t.Errorf("quantile(%v) = %v, want %v", tt.q, got, tt.want)
		}
	}
}

func TestSwitchTracker(t *testing.T) {
	s := newSwitchTracker(100*time.Microsecond, 0.9, 32)
	if s.estimate() != 100*time.Microsecond {
		t.Error("initial estimate")
	}
	for i := range 20 {
		s.observe(time.Duration(150+i) * time.Microsecond)
	}
	s.observe(-time.Microsecond) // clock noise is clamped, not trusted
	if d := s.estimate(); d < 160*time.Microsecond || d > 170*time.Microsecond {
		t.Errorf("estimate %v, want the 90th percentile of 150..169 us", d)
	}
	low := newSwitchTracker(200*time.Microsecond, 0.9, 32)
	for range 20 {
		low.observe(30 * time.Microsecond)
	}
	if d := low.estimate(); d != 200*time.Microsecond {
		t.Errorf("estimate %v below the configured floor", d)
	}
}

func TestLog2Bucket(t *testing.T) {
	for d, want := range map[time.Duration]int{0: 0, 999: 0, time.Microsecond: 0, 2 * time.Microsecond: 1, 200 * time.Microsecond: 7, time.Hour: 23} {
		if got := log2Bucket(d); got != want {
			t.Errorf("log2Bucket(%v) = %d, want %d", d, got, want)
		}
	}
}
