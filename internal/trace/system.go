package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Capability bits (include/uapi/linux/capability.h).
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// canTrace reports whether effective capabilities capEff allow loading
// tracing programs and opening perf events: CAP_SYS_ADMIN, or CAP_BPF with
// CAP_PERFMON (kernel 5.8+).
func canTrace(capEff uint64) bool {
	has := func(c uint) bool { return capEff&(1<<c) != 0 }
	return has(capSysAdmin) || has(capBPF) && has(capPerfmon)
}

// effectiveCaps reads CapEff from /proc/self/status.
func effectiveCaps() (uint64, error) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, fmt.Errorf("read capabilities: %w", err)
	}
	return parseCapEff(b)
}

func parseCapEff(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapEff %q: %w", v, err)
			}
			return caps, nil
		}
	}
	return 0, errors.New("no CapEff line in /proc/self/status")
}

// checkPrivileges fails with ErrNotRoot when the process cannot trace, so
// that the user reads that rather than a bare EPERM from some later step.
func checkPrivileges() error {
	caps, err := effectiveCaps()
	if err != nil {
		return err
	}
	if !canTrace(caps) {
		return fmt.Errorf("%w (euid %d, effective capabilities %#x)", ErrNotRoot, os.Geteuid(), caps)
	}
	return nil
}

// tracefsPaths are where tracefs lives (Documentation/trace/ftrace.rst),
// the first being where it is mounted when missing; debugfs exposes it under
// tracing/ on older set-ups. The places cilium/ebpf looks. A variable for
// tests.
var tracefsPaths = []string{"/sys/kernel/tracing", "/sys/kernel/debug/tracing"}

// tracefsMounted reports whether a tracefs is reachable at a usual place.
func tracefsMounted() bool {
	for _, p := range tracefsPaths {
		var st unix.Statfs_t
		if unix.Statfs(p, &st) == nil && (st.Type == unix.TRACEFS_MAGIC || st.Type == unix.DEBUGFS_MAGIC) {
			if _, err := os.Stat(p + "/events"); err == nil {
				return true
			}
		}
	}
	return false
}

// ensureTracefs makes tracefs reachable: syscall tracepoints are attached
// by an id that only tracefs publishes. Minimal systems (containers, CI
// VMs) often have it unmounted; like trace-cmd and libtracefs, the tracer
// then mounts it at its usual place when allowed to.
func ensureTracefs(mount bool, log *slog.Logger) error {
	if tracefsMounted() {
		return nil
	}
	tracefsPath := tracefsPaths[0]
	if !mount {
		return fmt.Errorf("%w at %s (mount -t tracefs nodev %s)", ErrNoTracefs, tracefsPath, tracefsPath)
	}
	err := unix.Mount("nodev", tracefsPath, "tracefs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	switch {
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("%w: mount tracefs at %s: %w", ErrNotRoot, tracefsPath, err)
	case err != nil:
		return fmt.Errorf("%w: mount tracefs at %s: %w", ErrNoTracefs, tracefsPath, err)
	}
	if log != nil {
		log.Info("mounted tracefs", "path", tracefsPath)
	}
	if !tracefsMounted() {
		return fmt.Errorf("%w: mounted at %s but it has no events directory", ErrNoTracefs, tracefsPath)
	}
	return nil
}

// Now is CLOCK_MONOTONIC in nanoseconds, the clock of bpf_ktime_get_ns and
// so of every event's times, for consumers that compare their own moments
// with events (a registry's discovery against the allocations it races
// with).
func Now() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano())
}
