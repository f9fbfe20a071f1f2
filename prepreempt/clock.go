package prepreempt

import (
	"sync"
	"sync/atomic"
)

// gpuClock maps the spinner's %globaltimer stamps to the host's
// CLOCK_REALTIME: offset = globaltimer - host time, in ns.
//
// Calibration bounds the offset from both sides with spinners the host
// watches: a start stamp the host has already seen was taken before the
// host looked (offset >= start - seen), and the exit of a spinner the host
// released was stamped after the release (offset <= exit - released). The
// bounds hold however long the spinner waited to be scheduled, so the
// calibration is as good under a saturating BE load (where a spinner waits
// ~170 us to switch in) as on an idle GPU. (Taking the midpoint of a
// launch-to-completion window instead was off by half the switch time under
// load, which made every measured switch-in ~120 us too short.)
//
// Online, every released spinner gives another upper bound; the offset
// follows the lowest of the recent ones, less the slack the calibration
// measured between a release and the spinner's exit, so that drift between
// the two clocks (NTP slewing CLOCK_REALTIME, say) does not accumulate
// into the switch-in estimates.
type gpuClock struct {
	offset atomic.Int64
	// slack: calibration's (upper bound - offset), what a release takes
	// to reach the spinner's exit stamp.
	slack int64
	mu    sync.Mutex
	ub    []int64 // recent upper bounds, a ring
	next  int
	full  bool
}

func newGPUClock(window int) *gpuClock { return &gpuClock{ub: make([]int64, window)} }

// calibrated sets the offset from calibration's tightest bounds lo <=
// offset <= hi. The upper bound fills the window, so that online samples
// replace it only once a window of them has been seen.
func (c *gpuClock) calibrated(lo, hi int64) {
	mid := lo + (hi-lo)/2
	c.offset.Store(mid)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slack = hi - mid
	for i := range c.ub {
		c.ub[i] = hi
	}
	c.next, c.full = 0, true
}

// get returns the current offset.
func (c *gpuClock) get() int64 { return c.offset.Load() }

// released records a spinner released at host time rel that stamped its
// exit at GPU time exit, and moves the offset to the window's lowest upper
// bound less the calibrated slack.
func (c *gpuClock) released(rel, exit int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ub[c.next] = exit - rel
	c.next++
	if c.next == len(c.ub) {
		c.next, c.full = 0, true
	}
	n := c.next
	if c.full {
		n = len(c.ub)
	}
	low := c.ub[0]
	for _, v := range c.ub[1:n] {
		low = min(low, v)
	}
	c.offset.Store(low - c.slack)
}
