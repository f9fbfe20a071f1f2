package prepreempt

import (
	"cmp"
	"runtime"
	"sync"
	"time"
)

// fakeClock is a hostClock that moves only when told: by advance, and by
// step on every reading (so that code polling the clock for a condition
// makes progress without any real time passing). sleep yields without
// moving it, so that a deadline measured on it passes only when the test
// says. Timers fire when it passes their time.
type fakeClock struct {
	mu     sync.Mutex
	t      int64
	step   int64
	timers []*fakeTimer
	// onSleep, if set, is called at every sleep (before advancing).
	onSleep func()
}

type fakeTimer struct {
	at   int64
	c    chan time.Time
	done bool
}

func newFakeClock(step time.Duration) *fakeClock {
	// Start well away from 0, which the engine reads as "never".
	return &fakeClock{t: int64(time.Hour), step: int64(step)}
}

func (c *fakeClock) now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t += c.step
	c.fireLocked()
	return c.t
}

// peek reads the clock without stepping it.
func (c *fakeClock) peek() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t += int64(d)
	c.fireLocked()
}

func (c *fakeClock) sleep(time.Duration) {
	if c.onSleep != nil {
		c.onSleep()
	}
	runtime.Gosched()
	time.Sleep(10 * time.Microsecond) // not to burn a core while polling
}

func (c *fakeClock) timer(d time.Duration) (<-chan time.Time, func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ft := &fakeTimer{at: c.t + int64(d), c: make(chan time.Time, 1)}
	c.timers = append(c.timers, ft)
	c.fireLocked()
	return ft.c, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if ft.done {
			return false
		}
		ft.done = true
		return true
	}
}

func (c *fakeClock) fireLocked() {
	kept := c.timers[:0]
	for _, ft := range c.timers {
		switch {
		case ft.done:
		case c.t >= ft.at:
			ft.done = true
			ft.c <- time.Unix(0, c.t)
		default:
			kept = append(kept, ft)
		}
	}
	clear(c.timers[len(kept):])
	c.timers = kept
}

// simGPU is a spinnerGPU without goroutines, driven by a fakeClock: a
// spinner launched at host time L starts at L+switchIn and exits when the
// GPU first looks after its flag was set, or at start+maxHold. Its stamps
// are host times plus offset, the simulated %globaltimer's lead.
type simGPU struct {
	clk      *fakeClock
	flags    *fakeFlags
	switchIn time.Duration
	maxHold  time.Duration
	offset   int64
	mu       sync.Mutex
	launched map[int]int64
	exit     map[int]int64
}

func newSimGPU(clk *fakeClock, f *fakeFlags, switchIn, maxHold time.Duration, offset int64) *simGPU {
	return &simGPU{clk: clk, flags: f, switchIn: switchIn, maxHold: maxHold, offset: offset,
		launched: map[int]int64{}, exit: map[int]int64{}}
}

func (g *simGPU) launch(s *slot) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.launched[s.idx] = g.clk.peek()
	g.exit[s.idx] = 0
	return nil
}

// advanceLocked returns slot's start and exit in host time (0: not yet).
func (g *simGPU) advanceLocked(s *slot) (start, exit int64) {
	l, ok := g.launched[s.idx]
	if !ok {
		return 0, 0
	}
	now := g.clk.peek()
	start = l + int64(g.switchIn)
	if now < start {
		return 0, 0
	}
	if g.exit[s.idx] == 0 {
		// A spinner past its hold exited then, on the GPU, whenever its
		// flag was set and whenever the host looks: looked at late (a
		// reaper scheduled after the clock moved on), it is not one
		// that ran past its hold (TestGateExpiresAtMaxHold read 41 ms
		// of a 40 ms hold, 1 run in 30 on a loaded machine).
		switch limit := start + int64(cmp.Or(s.hold, g.maxHold)); {
		case now >= limit:
			g.exit[s.idx] = limit
		case g.flags.w[s.idx].Load() != 0:
			g.exit[s.idx] = max(now, start)
		}
	}
	return start, g.exit[s.idx]
}

func (g *simGPU) finished(s *slot) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.launched[s.idx]; !ok {
		return true, nil
	}
	_, exit := g.advanceLocked(s)
	return exit != 0, nil
}

func (g *simGPU) stamps(s *slot) (int64, int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	start, exit := g.advanceLocked(s)
	if start != 0 {
		start += g.offset
	}
	if exit != 0 {
		exit += g.offset
	}
	return start, exit
}

func (g *simGPU) clearStamps(s *slot) {}
func (g *simGPU) close() error        { return nil }

// simEngine is an engine on a simGPU and a fakeClock stepping step per
// reading.
func simEngine(t interface {
	Helper()
	Cleanup(func())
	Error(...any)
}, opts Options, step, switchIn time.Duration, offset int64) (*Engine, *fakeClock, *simGPU) {
	t.Helper()
	if opts.MaxHold == 0 {
		opts.MaxHold = time.Second
	}
	if opts.HoldDutyCycle == 0 {
		opts.HoldDutyCycle = 1
	}
	opts = opts.withDefaults()
	clk := newFakeClock(step)
	f := &fakeFlags{}
	g := newSimGPU(clk, f, switchIn, opts.MaxHold, offset)
	e := newEngine(opts, clk, f, g)
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Error(err)
		}
	})
	return e, clk, g
}
