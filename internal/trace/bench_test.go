package trace

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// BenchmarkIoctlOverhead measures what tracing adds to an ioctl: the same
// calls on /dev/null (the kernel answers ENOTTY after both tracepoints have
// run) without and with the RM programs attached for every process. The
// difference between rm-control/traced and rm-control/untraced is the cost
// of one traced RM ioctl to the process making it; other-ioctl shows what
// every other ioctl on the machine pays.
//
// The calls come in batches that fit the ring buffer, and the timer stops
// while the reader catches up: a real process makes RM calls far more
// slowly than this loop, and an event dropped on a full ring would cost
// less than one delivered.
//
//	go test -run '^$' -bench IoctlOverhead -benchtime 400000x -count 5 ./internal/trace
func BenchmarkIoctlOverhead(b *testing.B) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	fd := int(f.Fd())
	rmControl := func() {
		p := ioctl.NVOS54_PARAMETERS{HClient: 0xc1d00022, HObject: 0x5c000015, Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE}
		ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 2048}
		if errno := control(fd, &p, &ts); errno != unix.ENOTTY {
			b.Fatal(errno)
		}
	}
	var t unix.Termios
	otherIoctl := func() {
		if errno := ioctlPtr(fd, unix.TCGETS, &t); errno != unix.ENOTTY {
			b.Fatal(errno)
		}
	}
	const batch = 4096 // of 192-byte records in a 1 MiB ring
	// events says whether call is traced (and so must wait for the reader).
	run := func(call func(), traced, events bool) func(*testing.B) {
		return func(b *testing.B) {
			var received atomic.Int64
			var tr *Tracer
			if traced {
				tr = openTracer(b, Options{RM: true})
				go func() {
					for range tr.Events() {
						received.Add(1)
					}
				}()
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				call()
				if events && i%batch == batch-1 {
					b.StopTimer()
					for received.Load() < int64(i+1) {
						time.Sleep(100 * time.Microsecond)
					}
					b.StartTimer()
				}
			}
			b.StopTimer()
			if traced {
				if lost := tr.Lost(); lost != 0 {
					b.Errorf("lost %d events: the overhead measured is not that of delivered events", lost)
				}
			}
		}
	}
	b.Run("rm-control/untraced", run(rmControl, false, false))
	b.Run("rm-control/traced", run(rmControl, true, true))
	b.Run("other-ioctl/untraced", run(otherIoctl, false, false))
	b.Run("other-ioctl/traced", run(otherIoctl, true, false))
}

// BenchmarkUprobeOverhead measures what uprobes cost the traced process:
// testdata/callbench.c makes b.N requests and reports the mean time of one
// (the ns/op Go reports includes the program's start: read ns/request).
// "request": one cuLaunchKernel and one cuStreamSynchronize, both empty,
// traced as `trace requests` does (two uprobes, one uretprobe). "hint":
// gpreempt_hint and gpreempt_ready, whose first instruction is a 5-byte
// NOP, traced as `trace hints` does (two uprobes, which x86-64 kernels
// 6.18+ optimize into calls).
//
//	go test -run '^$' -bench UprobeOverhead -benchtime 20000x -count 5 ./internal/trace
func BenchmarkUprobeOverhead(b *testing.B) {
	lib, progs := buildWithFakeCUDA(b, "callbench")
	probes := map[string][]Probe{
		"request": {
			{Library: lib, Symbol: "cuLaunchKernel", Role: RoleLaunch},
			{Library: lib, Symbol: "cuStreamSynchronize", Role: RoleSync},
		},
		"hint": {
			{Library: lib, Symbol: "gpreempt_hint", Role: RoleHint},
			{Library: lib, Symbol: "gpreempt_ready", Role: RoleReady},
		},
	}
	for _, mode := range []string{"request", "hint"} {
		for _, traced := range []bool{false, true} {
			name := mode + "/untraced"
			if traced {
				name = mode + "/traced"
			}
			b.Run(name, func(b *testing.B) {
				cmd := exec.Command(progs[0], strconv.Itoa(b.N), mode)
				cmd.Env = append(os.Environ(), "FAKECUDA_SYNC_US=0")
				stdin, err := cmd.StdinPipe()
				if err != nil {
					b.Fatal(err)
				}
				var out strings.Builder
				cmd.Stdout = &out
				if err := cmd.Start(); err != nil {
					b.Fatal(err)
				}
				if traced {
					tr := openTracer(b, Options{PID: cmd.Process.Pid, Probes: probes[mode]})
					go func() {
						for range tr.Events() {
						}
					}()
				}
				fmt.Fprintln(stdin, "go")
				stdin.Close()
				if err := cmd.Wait(); err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseFloat(strings.TrimSpace(out.String()), 64)
				if err != nil {
					b.Fatalf("callbench said %q: %v", out.String(), err)
				}
				b.ReportMetric(ns, "ns/request")
			})
		}
	}
}

// toggleSymbols are six libc functions, none an alias of another, standing
// in for libcuda's six launch functions (DefaultLaunchSymbols) on a
// machine without libcuda.
var toggleSymbols = []string{"malloc", "free", "calloc", "realloc", "nanosleep", "clock_nanosleep"}

// startSleeper starts a `sleep` child and returns its pid and the libc it
// has mapped, once the dynamic linker has mapped it.
func startSleeper(tb testing.TB) (int, string) {
	tb.Helper()
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		lib, err := FindLibrary("libc.so.6", "", cmd.Process.Pid)
		if err == nil {
			return cmd.Process.Pid, lib
		}
		if time.Now().After(deadline) {
			tb.Fatalf("sleep has not mapped libc: %v", err)
		}
	}
}

// BenchmarkProcessToggle measures what the request gate pays to turn an
// LC's launch probes off and on again: DetachProcess and AttachProcess of
// six functions in a real process's libc, entries only (the launch
// tracer's probes), one perf-event uprobe per function against one
// uprobe_multi link. It reports the median of each half (detach-ms,
// attach-ms); ns/op is their sum on average.
//
//	go test -run '^$' -bench ProcessToggle -benchtime 20x -count 5 ./internal/trace
func BenchmarkProcessToggle(b *testing.B) {
	for _, tt := range []struct {
		name        string
		perFunction bool
	}{
		{"per-function", true},
		{"uprobe_multi", false},
	} {
		b.Run(tt.name, func(b *testing.B) {
			pid, lib := startSleeper(b)
			var probes []Probe
			for _, s := range toggleSymbols {
				probes = append(probes, Probe{Symbol: s, Role: RoleLaunch})
			}
			tr := openTracer(b, Options{Probes: probes, PerProcess: true, perFunction: tt.perFunction})
			if !tt.perFunction && !tr.multi {
				b.Skip("this kernel has no uprobe_multi links for a process (uprobeMultiSupport)")
			}
			if err := tr.AttachProcess(pid, lib); err != nil {
				b.Fatal(err)
			}
			if n := tr.procLinks[pid].links; len(n) != map[bool]int{true: len(toggleSymbols), false: 1}[tt.perFunction] {
				b.Fatalf("%d links for %d functions", len(n), len(toggleSymbols))
			}
			detach, attach := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				t0 := time.Now()
				tr.DetachProcess(pid)
				t1 := time.Now()
				if err := tr.AttachProcess(pid, lib); err != nil {
					b.Fatal(err)
				}
				detach, attach = append(detach, t1.Sub(t0)), append(attach, time.Since(t1))
			}
			b.StopTimer()
			b.ReportMetric(medianMs(detach), "detach-ms")
			b.ReportMetric(medianMs(attach), "attach-ms")
		})
	}
}

func medianMs(ds []time.Duration) float64 {
	slices.Sort(ds)
	return float64(ds[len(ds)/2]) / float64(time.Millisecond)
}

// BenchmarkProbeToggleCost measures what the request gate's launch probes cost a process's
// requests (testdata/toggleapp.c: 300 launches with 50 µs of CPU work after each, 15 ms a
// request, 100 ms apart), as the gate handles them: "none" (no probes), "always" (attached
// throughout: a trap a launch) and "between" (detached at a request's first launch, attached
// again after its end, one uprobe_multi link: docs/GATE.md), and "between" beside a second
// process of the library whose launches a LaunchCounter counts, as SLO mode counts BE's, by a
// perf-event uprobe a function ("between,perf-counter") or one uprobe_multi link
// ("between,multi-counter"). It reports per request the process's thread's time off its CPU
// (off-ms: blocked or preempted) and its CPU time (cpu-ms), and a detach's time (detach-ms).
//
//	go test -run '^$' -bench ProbeToggleCost -benchtime 40x -count 3 ./internal/trace [-args -toggle-app-cpus 1]
func BenchmarkProbeToggleCost(b *testing.B) {
	lib, progs := buildWithFakeCUDA(b, "toggleapp", "lcapp")
	for _, mode := range []string{"none", "always", "between", "between,perf-counter", "between,multi-counter"} {
		b.Run(mode, func(b *testing.B) {
			toggle, counter, beside := strings.Cut(mode, ",") // "between,perf-counter": toggled between, a counter beside
			if beside {
				be := startLCApp(b, progs[1]) // the second process, the library mapped, waiting for its go
				c := openLaunchCounter(b)
				if counter == "multi-counter" && !c.multi {
					b.Skip("no uprobe_multi links by process here")
				}
				c.multi = counter == "multi-counter"
				if err := c.Attach(be.cmd.Process.Pid, lib); err != nil {
					b.Fatal(err)
				}
			}
			args := []string{progs[0], strconv.Itoa(b.N), "300", "50", "100"}
			if *toggleAppCPUs != "" { // the process on its own CPUs, as a pinned LC
				args = append([]string{"taskset", "-c", *toggleAppCPUs}, args...)
			}
			cmd := exec.Command(args[0], args[1:]...)
			cmd.Env = append(os.Environ(), "FAKECUDA_SYNC_US=0")
			stdin, err := cmd.StdinPipe()
			if err != nil {
				b.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if b.Failed() { // it may wait for its go
					cmd.Process.Kill()
				}
				cmd.Wait()
			}()
			pid := cmd.Process.Pid
			var tr *Tracer
			var armed atomic.Bool // the launch probes are attached
			var detaching atomic.Bool
			var detachNs, detaches atomic.Int64
			if toggle != "none" {
				tr = openTracer(b, Options{Probes: []Probe{{Symbol: "cuLaunchKernel", Role: RoleLaunch}}, PerProcess: true})
				if err := tr.AttachProcess(pid, lib); err != nil {
					b.Fatal(err)
				}
				armed.Store(true)
				go func() {
					for range tr.Events() { // a request's first launch: its probes off, as the gate's arm loop
						if toggle == "between" && armed.Load() && detaching.CompareAndSwap(false, true) {
							go func() {
								t0 := time.Now()
								tr.DetachProcess(pid)
								detachNs.Add(int64(time.Since(t0)))
								detaches.Add(1)
								armed.Store(false)
								detaching.Store(false)
							}()
						}
					}
				}()
			}
			fmt.Fprintln(stdin, "go")
			var off, cpu []time.Duration
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				var wall, c int64
				if _, err := fmt.Sscan(sc.Text(), &wall, &c); err != nil {
					b.Fatalf("toggleapp said %q: %v", sc.Text(), err)
				}
				off, cpu = append(off, time.Duration(max(0, wall-c))), append(cpu, time.Duration(c))
				if toggle == "between" { // its end: the probes back on before the next request
					for detaching.Load() {
						time.Sleep(time.Millisecond)
					}
					if !armed.Load() {
						if err := tr.AttachProcess(pid, lib); err != nil {
							b.Fatal(err)
						}
						armed.Store(true)
					}
				}
			}
			if len(off) != b.N {
				b.Fatalf("%d requests reported, want %d", len(off), b.N)
			}
			if n := detaches.Load(); n > 0 {
				b.ReportMetric(float64(detachNs.Load())/float64(n)/1e6, "detach-ms")
			}
			b.ReportMetric(meanMs(off), "off-ms")
			b.ReportMetric(meanMs(cpu), "cpu-ms")
		})
	}
}

// toggleAppCPUs pins BenchmarkProbeToggleCost's process (taskset's list): a pinned LC's CPUs.
var toggleAppCPUs = flag.String("toggle-app-cpus", "", "CPUs for BenchmarkProbeToggleCost's process (taskset -c)")

func meanMs(ds []time.Duration) float64 {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return float64(s) / float64(len(ds)) / float64(time.Millisecond)
}
