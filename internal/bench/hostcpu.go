package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// An eager LC is CPU-bound Python, and on a virtual machine its vCPUs may
// be taken by the host: the steal time /proc/stat counts. HostCPU records
// it beside how much of its requests' time the LC's thread was on a CPU,
// so that a slow run can be told from a slowed GPU.

// HostCPU is what the host's CPUs gave while an LC ran (/proc/stat, from
// the LC's start to its end, lead-in included).
type HostCPU struct {
	// Steal is the share of every CPU's time the hypervisor took.
	Steal float64 `json:"steal"`
	// LCCPUsSteal is the same over the CPUs the LC was pinned to.
	LCCPUsSteal *float64 `json:"lc_cpus_steal,omitempty"`
}

// procStat is read for CPU times (a variable for tests).
var procStat = "/proc/stat"

// cpuTimes is /proc/stat's time per CPU line ("cpu" is all CPUs): the
// total of its fields and its steal, in clock ticks.
type cpuTimes map[string][2]uint64

// readCPUTimes reads procStat's cpu lines.
func readCPUTimes() (cpuTimes, error) {
	b, err := os.ReadFile(procStat)
	if err != nil {
		return nil, err
	}
	return parseCPUTimes(b)
}

func parseCPUTimes(b []byte) (cpuTimes, error) {
	t := cpuTimes{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			if len(t) > 0 {
				break // the cpu lines come first; "intr" can outgrow the scanner on a large host
			}
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]:
		// guest time is already in user and nice.
		if len(f) < 9 {
			return nil, fmt.Errorf("%s: %q: want 8 times or more", procStat, sc.Text())
		}
		var total, steal uint64
		for i, s := range f[1:9] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %q: %w", procStat, sc.Text(), err)
			}
			if total+v < total {
				return nil, fmt.Errorf("%s: %q: the times overflow", procStat, sc.Text())
			}
			total += v
			if i == 7 {
				steal = v
			}
		}
		t[f[0]] = [2]uint64{total, steal}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", procStat, err)
	}
	if _, ok := t["cpu"]; !ok {
		return nil, fmt.Errorf("%s: no cpu line", procStat)
	}
	return t, nil
}

// stealShare is the share of the CPU time between a and b that was stolen,
// over the CPUs in cpus (all when empty); ok is false when no time passed
// on them or a CPU is missing from either reading.
func stealShare(a, b cpuTimes, cpus cpuset.CPUSet) (share float64, ok bool) {
	names := []string{"cpu"}
	if !cpus.IsEmpty() {
		names = names[:0]
		for _, c := range cpus.List() {
			names = append(names, "cpu"+strconv.Itoa(c))
		}
	}
	var total, steal uint64
	for _, n := range names {
		x, okA := a[n]
		y, okB := b[n]
		if !okA || !okB || y[0] < x[0] || y[1] < x[1] {
			return 0, false
		}
		total, steal = total+y[0]-x[0], steal+y[1]-x[1]
	}
	if total == 0 {
		return 0, false
	}
	return float64(steal) / float64(total), true
}

// hostCPU is what the host's CPUs gave between a and b.
func hostCPU(a, b cpuTimes, lcCPUs cpuset.CPUSet) *HostCPU {
	all, ok := stealShare(a, b, cpuset.New())
	if !ok {
		return nil
	}
	h := &HostCPU{Steal: all}
	if !lcCPUs.IsEmpty() {
		if s, ok := stealShare(a, b, lcCPUs); ok {
			h.LCCPUsSteal = &s
		}
	}
	return h
}
