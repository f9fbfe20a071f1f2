package reconcile

import (
	"time"

	"golang.org/x/sys/unix"
)

// monotonic reads CLOCK_MONOTONIC, the clock of the BPF programs'
// timestamps (bpf_ktime_get_ns), so event times and the daemon's compare.
func monotonic() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err) // cannot fail on Linux
	}
	return time.Duration(ts.Nano())
}
