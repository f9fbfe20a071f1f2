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

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
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

// uprobeMultiSupport says whether a process's uprobes can be attached as
// uprobe_multi links: nil where they can, else why not (an
// ebpf.ErrNotSupported where the kernel says so). The links exist from
// Linux 6.6, but until 6.10 one made for a pid ran its program only for
// that pid's thread, not its whole process (kernel commit 46ba0e49b642,
// "bpf: fix multi-uprobe PID filtering logic"): an LC's launches from
// other threads would go unseen. Stable kernels before 6.10 that carry
// the fix cannot be told apart by their release, so they are not used.
func uprobeMultiSupport() error {
	if err := features.HaveBPFLinkUprobeMulti(); err != nil {
		return err
	}
	release, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return fmt.Errorf("kernel release: %w", err)
	}
	major, minor, ok := parseKernelRelease(string(release))
	if !ok {
		return fmt.Errorf("kernel release %q: not major.minor", strings.TrimSpace(string(release)))
	}
	if major < 6 || major == 6 && minor < 10 {
		return fmt.Errorf("%w: uprobe_multi links of Linux %d.%d filter by thread, not process (6.10+)", ebpf.ErrNotSupported, major, minor)
	}
	return nil
}

// parseKernelRelease reads the major and minor version at the start of a
// kernel release string ("6.18.44-fc-v669", "6.10.0-rc3").
func parseKernelRelease(s string) (major, minor int, ok bool) {
	s = strings.TrimSpace(s)
	majorS, rest, found := strings.Cut(s, ".")
	if !found {
		return 0, 0, false
	}
	end := 0
	for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
		end++
	}
	var err1, err2 error
	major, err1 = strconv.Atoi(majorS)
	minor, err2 = strconv.Atoi(rest[:end])
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return 0, 0, false
	}
	return major, minor, true
}
