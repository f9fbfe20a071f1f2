package bench

import (
	"time"

	"golang.org/x/sys/unix"
)

// Timestamps that cross process boundaries (an LC worker's measurement
// window, a BE worker's kernel completions, a Python worker's
// time.monotonic_ns()) are CLOCK_MONOTONIC nanoseconds, the one clock all of
// them read identically. Go's own monotonic clock is CLOCK_MONOTONIC too but
// exposes only differences, so one anchor pair, taken at start-up, converts
// a time.Time (read through the vDSO, cheap enough for every request) into
// the absolute value.
var anchorTime, anchorMono = anchor()

// anchor reads CLOCK_MONOTONIC between two time.Now calls and keeps the
// tightest of a few tries, anchored at the middle: a process descheduled
// between two plain reads (a loaded 2-core machine does that for
// milliseconds) would shift every window it reports against the other
// processes' by as long as it waited.
func anchor() (time.Time, int64) {
	var (
		at   time.Time
		mono int64
		best = time.Duration(1<<63 - 1)
	)
	for range 32 {
		before := time.Now()
		m := clockMonotonicNs()
		d := time.Since(before)
		if d < best {
			at, mono, best = before.Add(d/2), m, d
		}
	}
	return at, mono
}

func clockMonotonicNs() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		// CLOCK_MONOTONIC cannot fail on Linux; a zero anchor would only
		// shift cross-process windows, never single-process durations.
		return 0
	}
	return ts.Nano()
}

// monoNs returns t as CLOCK_MONOTONIC nanoseconds.
func monoNs(t time.Time) int64 { return anchorMono + int64(t.Sub(anchorTime)) }

// spinUntil busy-waits until t: a worker's CPU-side "preparation" is real
// CPU work, and a sleeping thread would wake up tens of microseconds late.
func spinUntil(t time.Time) {
	for time.Now().Before(t) {
	}
}

// sleepUntil waits until t, sleeping while t is far and spinning for the
// last stretch, so that periodic requests arrive on time without keeping a
// core busy between them.
func sleepUntil(t time.Time) {
	const spinTail = 200 * time.Microsecond
	if d := time.Until(t); d > spinTail {
		time.Sleep(d - spinTail)
	}
	spinUntil(t)
}
