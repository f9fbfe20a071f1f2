package probe

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestLaunchSpeedReadsTheCPU: 60 requests of 60 launches, 20 µs of CPU work apart times the CPU's slowness then (1
// or 1.6 in stretches); of each five gaps two hold a synchronize (5 ms, 8 ms while BE works the even 4 s halves; in a
// launch-bound LC 5 and 8 µs) and two a wait off the CPU (1.5 ms; 1.5 µs), so that neither rule alone leaves most gaps the
// CPU's (without CPU times in the recording, three of five a synchronize); the loop 1.6 ms times the slowness. Where
// the recording counts the thread's blocks, its CPU time moves only at a 4 ms tick (as the kernel's does), so that
// only the count tells the waits apart. launch_speed.py must find each request's median CPU gap moving with the loop
// (correlation over 0.95, the median 20-32 µs) and, with BE over alone, as the loop does; where BE also holds the
// launches (1.3x their gaps while it works), the gap's ratio must read it over the loop's. In a launch-bound LC a
// request's scatter per its gap must be a fifth of its latency's or less, and its ratio per gap BE's own share, also
// where the CPU is slow exactly while BE works (which the app's ratio reads as BE's); BE's factor on the gap, net of
// the loop, must read what BE does to the launches (1.3 where it holds them, else 1).
func TestLaunchSpeedReadsTheCPU(t *testing.T) {
	for _, tc := range []struct {
		name             string
		held             float64 // BE's factor on the launch gaps while it works
		syncs, off       int     // of each five gaps, those holding a synchronize, and those off the CPU after them
		cpuKnown, blocks bool    // the recording has the thread's CPU time; its count of blocks (and CPU time at ticks)
		launchBound      bool    // a synchronize waits 5 µs (8 with BE), not 5 ms (8), and a wait off the CPU 1.5 µs
		slowWithBE       bool    // the CPU slow (1.6) exactly while BE works, by chance
		corrLo           float64
		ratioLo, ratioHi float64 // the CPU gap's ratio over the loop's
	}{
		{"CPU only", 1, 2, 2, true, false, false, false, 0.95, 0.95, 1.05},
		{"launches held by BE", 1.3, 2, 2, true, false, false, false, 0, 1.2, 1.4},
		{"no CPU times: synchronizes left out", 1, 3, 0, false, false, false, false, 0.95, 0.95, 1.05},
		{"blocks counted, CPU time at ticks", 1, 2, 2, true, true, false, false, 0.95, 0.95, 1.05},
		{"launch-bound", 1, 2, 2, true, true, true, false, 0.95, 0.95, 1.05},
		{"launch-bound, the CPU slow while BE works", 1, 2, 2, true, true, true, true, 0.95, 0.95, 1.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type call struct {
				At      int64  `json:"at_ns"`
				PID     int    `json:"pid"`
				TID     int    `json:"tid"`
				Role    string `json:"role"`
				Kind    string `json:"kind"`
				OnCPU   int64  `json:"on_cpu_ns"`
				Blocked int64  `json:"blocked,omitempty"`
			}
			var calls []call
			var samples []sample
			var traced []string
			cpu, blocked := int64(0), int64(1)
			seen := func() int64 { // the CPU time the recording reads
				switch {
				case !tc.cpuKnown:
					return 0
				case tc.blocks:
					return cpu - cpu%4e6
				}
				return cpu
			}
			mark := func(at int64, role, kind string) call {
				c := call{at, 7, 7, role, kind, seen(), 0}
				if tc.blocks {
					c.Blocked = blocked
				}
				return c
			}
			for j := range 60 {
				at := int64(8e9) + int64(j)*800e6
				works := (at/4e9)%2 == 0
				slow := map[bool]float64{true: 1.6, false: 1}[(j/5+j/7)%3 == 0 && !tc.slowWithBE || works && tc.slowWithBE]
				gap := 20e3 * slow * map[bool]float64{true: tc.held, false: 1}[works]
				now := at + map[bool]int64{true: 1e3, false: 1e6}[tc.launchBound] // its work before the first launch
				for k := range 60 {
					calls = append(calls, mark(now, "launch", "enter"))
					switch {
					case k%5 < tc.syncs:
						wait := map[bool]float64{true: 8e6, false: 5e6}[works]
						if tc.launchBound {
							wait /= 1000
						}
						calls = append(calls, mark(now+1000, "sync", "enter"))
						blocked++
						calls = append(calls, mark(now+1000+int64(wait), "sync", "return"))
						now += 1000 + int64(wait)
					case k%5 < tc.syncs+tc.off: // off the CPU, no call
						now += map[bool]int64{true: 1.5e3, false: 1.5e6}[tc.launchBound]
						blocked++
					}
					now += int64(gap)
					cpu += int64(gap)
				}
				samples = append(samples, sample{Arrival: at, Latency: now - at, Meter: int64(1.6e6 * slow)})
				// gpreemptctl's traced request of it, its CPU gap 1% over the probe's own (20 µs times the slowness)
				traced = append(traced, fmt.Sprintf(`{"type":"request","kind":"request","start_ns":%d,"end_ns":%d,"cpu_gap_ns":%d}`, at+1000, now, int64(20.2e3*slow*tc.held)))
			}
			dir := t.TempDir()
			callsPath := filepath.Join(dir, "calls.jsonl.gz")
			f, err := os.Create(callsPath)
			if err != nil {
				t.Fatal(err)
			}
			z := gzip.NewWriter(f)
			enc := json.NewEncoder(z)
			for _, c := range calls {
				if err := enc.Encode(c); err != nil {
					t.Fatal(err)
				}
			}
			if err := errors.Join(z.Close(), f.Close()); err != nil {
				t.Fatal(err)
			}
			b, err := json.Marshal(map[string]any{"samples": samples})
			if err != nil {
				t.Fatal(err)
			}
			lcPath := filepath.Join(dir, "lc.json")
			if err := os.WriteFile(lcPath, b, 0o644); err != nil {
				t.Fatal(err)
			}
			tracedPath := filepath.Join(dir, "traced.jsonl")
			if err := os.WriteFile(tracedPath, []byte(strings.Join(traced, "\n")+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out := runScript(t, "launch_speed.py", callsPath, lcPath, "--be-duty", "8s", "--against", tracedPath)
			if tc.held == 1 && !strings.Contains(string(out), "gpreemptctl's CPU gap over this one's: 60 requests, median +0.0100") {
				t.Errorf("want gpreemptctl's CPU gaps read 1%% over, all 60:\n%s", out)
			}
			m := regexp.MustCompile(`requests: 60 with a loop time, 60 with 10 CPU gaps or more\ncorrelation with log\(loop time\): log\(median CPU gap\) ([-+][0-9.]+).*\nmedians: CPU gap ([0-9.]+) us, loop [0-9.]+ ms\none request's scatter \(sd of log latency\): ([0-9.]+), per its median CPU gap ([0-9.]+), per its loop [0-9.]+\nwith BE over alone \(\d+ / \d+ requests\): median CPU gap ([0-9.]+), loop ([0-9.]+)\np50 ratio with BE over alone: as measured ([0-9.]+) \[[0-9., ]+\], per median CPU gap ([0-9.]+) `).FindSubmatch(out)
			if m == nil {
				t.Fatalf("want 60 requests read, a correlation, the scatter and the ratios:\n%s", out)
			}
			num := func(i int) float64 { return num2(m[i]) }
			r, med, g, l := num(1), num(2), num(5), num(6)
			if r < tc.corrLo || med < 20 || med > 32*tc.held || g/l < tc.ratioLo || g/l > tc.ratioHi { // the CPU gaps' median: 20 µs times 1-1.6
				t.Errorf("correlation %v (want %v up), median CPU gap %v us, gap's ratio over the loop's %.3f (want [%v, %v]):\n%s", r, tc.corrLo, med, g/l, tc.ratioLo, tc.ratioHi, out)
			}
			bf := regexp.MustCompile(`BE's factor \(geometric, 95%\): on the median CPU gap ([0-9.]+) \[[0-9., ]+\], net of the loop ([0-9.]+|–)`).FindSubmatch(out)
			if bf == nil {
				t.Fatalf("want BE's factor on the gap:\n%s", out)
			}
			// BE's factor on the gap, as the loop sees none: 1.3 where BE holds the launches, else none (the CPU's chance
			// speed in BE's halves, where the loop reads it, is none of BE's)
			// (where the loop moves exactly with BE's halves the two are not told apart: none)
			if g, net := num2(bf[1]), string(bf[2]); !tc.slowWithBE && (math.Abs(num2(bf[2])-tc.held) > 0.05 || math.Abs(g-tc.held) > 0.1) ||
				tc.slowWithBE && (net != "–" || math.Abs(g-1.6) > 0.05) { // the gap reads the CPU's 1.6
				t.Errorf("BE's factor on the gap %v, net of the loop %v: want %v:\n%s", g, net, tc.held, out)
			}
			// BE's own share of a launch-bound request: 24 synchronizes of 8 µs against 5 over its 1.2 ms of launches
			if raw, per, app, perGap := num(3), num(4), num(7), num(8); tc.launchBound && (per > raw/5 || perGap < 0.98 || perGap > 1.10 || tc.slowWithBE && app < 1.4) {
				t.Errorf("launch-bound: scatter %v per gap against %v (want a fifth or less), ratio per gap %v (want BE's own, [0.98, 1.10]), the app's %v:\n%s", per, raw, perGap, app, out)
			}
		})
	}
}

func num2(b []byte) float64 { v, _ := strconv.ParseFloat(string(b), 64); return v }
