// Package probe holds the GPU machine's probe scripts; its tests run the
// off-CPU recorder (scripts/lib/offcpu.sh) and its summer (offcpu.py) on a
// real process with the kernel's own scheduler events, and span_alone.py's
// replay of SLO mode's measurements on a run made up to tell its rules apart.
package probe

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestOffCPUSleepsEndAtWakeups: a python3 process sleeps ten times 40 ms
// on an otherwise idle CPU, where the kernel does not always record its
// switch back in. offcpu.py must count each sleep whole, ended at its
// wakeup: some 400 ms off its CPU in ten nanosleeps. Paired with the
// switches back in alone it read 0.2 ms of the 400 (Linux 6.18).
func TestOffCPUSleepsEndAtWakeups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: tracefs instances")
	}
	if _, err := os.Stat("/sys/kernel/tracing/instances"); err != nil {
		if _, err := os.Stat("/sys/kernel/tracing"); err != nil {
			t.Skipf("no tracefs: %v", err)
		}
	}
	for _, tool := range []string{"python3", "xz", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	trace := filepath.Join(t.TempDir(), "offcpu.trace.xz")
	script := `source ../lib/offcpu.sh && offcpu_start python3 >&2 || exit 1
python3 -c 'import time
for i in range(10): time.sleep(0.04)' &
p=$!; wait $p; offcpu_stop "$1" >&2; echo $p`
	out, err := exec.Command("bash", "-c", script, "offcpu", trace).Output()
	if err != nil {
		t.Fatalf("offcpu.sh: %v", err)
	}
	pid := strings.TrimSpace(string(out))
	sum, err := exec.Command("python3", "offcpu.py", trace, pid).CombinedOutput()
	if err != nil {
		t.Fatalf("offcpu.py: %v: %s", err, sum)
	}
	if !regexp.MustCompile(`(?m)^  [0-9.]+ ms in \d+ switches .*state S.*\n(?:      .*\n)*?      do_nanosleep`).Match(sum) {
		t.Fatalf("no sleeps in nanosleep summed:\n%s", sum)
	}
	// Every sleep in state S, whatever stack it was recorded with: under load one may come
	// without its stack, summed apart from the rest.
	var ms float64
	var n int
	for _, m := range regexp.MustCompile(`(?m)^  ([0-9.]+) ms in (\d+) switches .*state S,`).FindAllSubmatch(sum, -1) {
		v, _ := strconv.ParseFloat(string(m[1]), 64)
		k, _ := strconv.Atoi(string(m[2]))
		ms, n = ms+v, n+k
	}
	if ms < 360 || n < 10 { // a sleep leaves its CPU a few µs after its timer starts
		t.Errorf("%.1f ms off its CPU in %d sleeps, want at least 360 ms (of 400) in 10:\n%s", ms, n, sum)
	}
}
