package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

const statA = `cpu  100 0 50 800 10 0 0 40 0 0
cpu0 50 0 25 400 5 0 0 20 0 0
cpu1 50 0 25 400 5 0 0 20 0 0
intr 12345
ctxt 678
`

// 100 ticks later on each CPU: cpu0 had 30 stolen, cpu1 none.
const statB = `cpu  170 0 60 890 10 0 0 70 0 0
cpu0 80 0 30 435 5 0 0 50 0 0
cpu1 90 0 30 455 5 0 0 20 0 0
intr 23456
`

func TestParseCPUTimes(t *testing.T) {
	got, err := parseCPUTimes([]byte(statA))
	if err != nil || len(got) != 3 || got["cpu"] != [2]uint64{1000, 40} || got["cpu1"] != [2]uint64{500, 20} {
		t.Fatalf("%v, %v", got, err)
	}
	// A large host's intr line outgrows a scanner's default buffer: the
	// cpu lines before it are all that is read.
	long := statA + "intr" + strings.Repeat(" 0", 80<<10) + "\n"
	if got, err := parseCPUTimes([]byte(long)); err != nil || len(got) != 3 {
		t.Errorf("a long intr line: %v, %v", got, err)
	}
	for _, bad := range []string{
		"cpu  1 2 3\n",                // too few times
		"cpu  1 2 3 4 5 6 7 x 0 0\n",  // not a number
		"cpu0 1 2 3 4 5 6 7 8 0 0\n",  // no line for all CPUs
		"cpu  1 2 3 4 5 6 7 -8 0 0\n", // negative
	} {
		if got, err := parseCPUTimes([]byte(bad)); err == nil {
			t.Errorf("%q: %v, want an error", bad, got)
		}
	}
}

func TestStealShare(t *testing.T) {
	a, _ := parseCPUTimes([]byte(statA))
	b, _ := parseCPUTimes([]byte(statB))
	for _, c := range []struct {
		cpus  cpuset.CPUSet
		share float64
		ok    bool
	}{
		{cpuset.New(), 30.0 / 200, true},
		{cpuset.New(0), 30.0 / 100, true},
		{cpuset.New(1), 0, true},
		{cpuset.New(0, 1), 30.0 / 200, true},
		{cpuset.New(2), 0, false}, // no such CPU
	} {
		share, ok := stealShare(a, b, c.cpus)
		if share != c.share || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.cpus, share, ok, c.share, c.ok)
		}
	}
	if _, ok := stealShare(b, a, cpuset.New()); ok {
		t.Error("counters going backwards: want no share")
	}
	if _, ok := stealShare(a, a, cpuset.New()); ok {
		t.Error("no time passed: want no share")
	}
	h := hostCPU(a, b, cpuset.New(0))
	if h == nil || h.Steal != 0.15 || h.LCCPUsSteal == nil || *h.LCCPUsSteal != 0.3 {
		t.Errorf("hostCPU: %+v", h)
	}
	if h := hostCPU(a, b, cpuset.New()); h == nil || h.LCCPUsSteal != nil {
		t.Errorf("not pinned: %+v", h)
	}
}

// TestReadCPUTimesHere reads the real /proc/stat, and procStat's errors
// name the file.
func TestReadCPUTimesHere(t *testing.T) {
	if _, err := readCPUTimes(); err != nil {
		t.Fatal(err)
	}
	old := procStat
	t.Cleanup(func() { procStat = old })
	procStat = filepath.Join(t.TempDir(), "stat")
	if err := os.WriteFile(procStat, []byte("intr 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCPUTimes(); err == nil || !strings.Contains(err.Error(), procStat) {
		t.Errorf("no cpu line: %v", err)
	}
}
