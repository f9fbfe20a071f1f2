package reconcile

import (
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// eventsClock is the reconciler's Now: the events' clock (trace.Now,
// CLOCK_MONOTONIC), so event times and the daemon's compare.
func eventsClock() time.Duration { return time.Duration(trace.Now()) }

// ClockTime is a time of the events' clock as token buckets take it (the
// drift buckets here, the socket API's change limit).
func ClockTime(d time.Duration) time.Time { return time.Unix(0, int64(d)) }
