package prepreempt

import "time"

// hostClock is the engine's host time source. Every host time the engine
// keeps (hint, planned launch, launch, release, expiry) is a reading of
// it: monotonic nanoseconds since the clock's own epoch, so an NTP step or
// slew of the wall clock cannot move an expiry or a switch-in estimate.
// Tests substitute a fake, so that none depends on how fast the machine
// runs.
type hostClock interface {
	// now is monotonic time in ns since the clock's epoch.
	now() int64
	// timer fires once, d from now; stop cancels it.
	timer(d time.Duration) (c <-chan time.Time, stop func() bool)
	// sleep waits d.
	sleep(d time.Duration)
}

// monoClock is the real hostClock: Go's monotonic clock reading.
type monoClock struct{ epoch time.Time }

func newMonoClock() monoClock { return monoClock{epoch: time.Now()} }

func (c monoClock) now() int64 { return int64(time.Since(c.epoch)) }

func (monoClock) timer(d time.Duration) (<-chan time.Time, func() bool) {
	t := time.NewTimer(d)
	return t.C, t.Stop
}

func (monoClock) sleep(d time.Duration) { time.Sleep(d) }
