package probe

import (
	"fmt"
	"strings"
	"testing"
)

// TestIRQDeltaSumsTheDevicesLines: two copies of a 4-CPU /proc/interrupts, the GPU's two vectors moving on
// CPUs 2 and 3 and another device's on CPU 0, a line that counts no CPUs (ERR) and one that came between
// them: irq_delta.py must sum only the GPU's lines by CPU, name CPU 2 as taking them and CPU 1 none.
func TestIRQDeltaSumsTheDevicesLines(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string { return writeText(t, dir, name, text) }
	head := "           CPU0       CPU1       CPU2       CPU3       \n"
	before := write("before", head+
		" 60:         10          0        100          5  IR-PCI-MSIX-0000:18:00.0    0-edge      nvidia\n"+
		" 61:          0          0          0          0  IR-PCI-MSIX-0000:18:00.0    1-edge      nvidia\n"+
		" 70:         50          0          0          0  IR-PCI-MSIX-0000:3b:00.0    0-edge      eth0-TxRx-0\n"+
		"ERR:          0\n")
	after := write("after", head+
		" 60:         10          0        400          5  IR-PCI-MSIX-0000:18:00.0    0-edge      nvidia\n"+
		" 61:          0          0          0        100  IR-PCI-MSIX-0000:18:00.0    1-edge      nvidia\n"+
		" 62:          0          0          0        999  IR-PCI-MSIX-0000:18:00.0    2-edge      nvidia\n"+
		" 70:       5050          0          0          0  IR-PCI-MSIX-0000:3b:00.0    0-edge      eth0-TxRx-0\n"+
		"ERR:          0\n")
	out := string(runScript(t, "irq_delta.py", before, after, "--cpus", "1-2", "--seconds", "10"))
	wantLines(t, out,
		"'nvidia' interrupts (2 lines): 400, 40/s",
		"  cpu2: 300 (75.0%, 30/s)",
		"  cpu3: 100 (25.0%, 10/s)",
		"  irq 60 (IR-PCI-MSIX-0000:18:00.0 0-edge nvidia): cpu2 300",
		"cpu1: took none of them",
		"cpu2: took 300 of them")
	if strings.Contains(out, "cpu0") || strings.Contains(out, "irq 62") {
		t.Errorf("another device's interrupts or a line in one copy only counted:\n%s", out)
	}
	// a device named in neither copy is said so, not read as interrupts that missed the CPUs named
	if out := string(runScript(t, "irq_delta.py", before, after, "--match", "0000:99:00.0", "--cpus", "2")); out != "no line names '0000:99:00.0' in both copies\n" {
		t.Errorf("no line matched: got\n%s", out)
	}
}

// TestIRQDeltaSeriesSplitsBEsHalves: copies every 1.3 s for a minute, the GPU's vector on CPU 2 taking 100 a
// second while BE works (UPTIME / 4 even) and 10 while it idles, CPU 3 20 throughout, another device's on CPU 1:
// --series must give CPU 2 100 / 10 a second (the intervals across an edge of BE's halves left out) and CPU 1
// none of the GPU's; the CPUs' own lines (gpu-run-lanes.sh keeps LOC, RES, CAL and TLB) by their names: CAL's
// function-call interrupts 50 / 10 a second on CPU 3, the timer's left out.
func TestIRQDeltaSeriesSplitsBEsHalves(t *testing.T) {
	// taken is what a CPU took by time at (a multiple of 0.1 s), perStep each 0.1 s while BE works and idle while it idles
	taken := func(at float64, perStep, idle int) int {
		n := 0
		for i := range int(at*10 + 0.5) {
			n += map[bool]int{true: perStep, false: idle}[i/40%2 == 0]
		}
		return n
	}
	var b strings.Builder
	for k := range 46 {
		at := 0.2 + 1.3*float64(k)
		fmt.Fprintf(&b, "@ %.3f\n           CPU0       CPU1       CPU2       CPU3\n", 1000+at)
		fmt.Fprintf(&b, " 60:  0  0  %d  %d  IR-PCI-MSIX-0000:18:00.0    0-edge      nvidia\n", taken(at, 10, 1), taken(at, 2, 2))
		fmt.Fprintf(&b, " 70:  0  %d  0  0  IR-PCI-MSIX-0000:3b:00.0    0-edge      eth0\n", taken(at, 7, 7))
		fmt.Fprintf(&b, "LOC:  %d  %d  %d  %d   Local timer interrupts\n", taken(at, 25, 25), taken(at, 25, 25), taken(at, 25, 25), taken(at, 25, 25))
		fmt.Fprintf(&b, "CAL:  0  0  0  %d   Function call interrupts\n", taken(at, 5, 1))
	}
	path := writeText(t, t.TempDir(), "lane-irqs.log", b.String())
	out := string(runScript(t, "irq_delta.py", "--series", path, "--match", "0000:18:00.0", "--cpus", "1,2"))
	wantLines(t, out, "  cpu1: 0.0 / 0.0 (named)", "  cpu2: 100.0 / 10.0 (named)", "  cpu3: 20.0 / 20.0")
	out = string(runScript(t, "irq_delta.py", "--series", path, "--match", "Function call", "--cpus", "2,3"))
	wantLines(t, out, "'Function call' interrupts a second (1 lines), BE working / idle (22 s / 18 s):", "  cpu2: 0.0 / 0.0 (named)", "  cpu3: 50.0 / 10.0 (named)")
	if strings.Contains(out, "cpu0") || strings.Contains(out, "cpu1") {
		t.Errorf("the timer's line counted as function calls:\n%s", out)
	}
}
