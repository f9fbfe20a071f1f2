package probe

import (
	"compress/gzip"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
)

// TestLaunchSpeedReadsTheCPU: 60 requests of 60 launches, 20 µs of CPU work apart times the CPU's slowness then (1
// or 1.6 in stretches); of each five gaps two hold a synchronize (5 ms, 8 ms while BE works the even 4 s halves) and
// two a wait off the CPU (1.5 ms), so that neither rule alone leaves most gaps the CPU's (without CPU times in the
// recording, three of five a synchronize); the loop 1.6 ms times the slowness. launch_speed.py must find each
// request's median CPU gap moving with the loop (correlation over 0.95, the median 20-32 µs) and, with BE over
// alone, as the loop does; where BE also holds the launches (1.3x their gaps while it works), the gap's ratio must
// read it over the loop's.
func TestLaunchSpeedReadsTheCPU(t *testing.T) {
	for _, tc := range []struct {
		name             string
		held             float64 // BE's factor on the launch gaps while it works
		syncs, off       int     // of each five gaps, those holding a synchronize, and those off the CPU after them
		cpuKnown         bool    // the recording has the thread's CPU time
		corrLo           float64
		ratioLo, ratioHi float64 // the CPU gap's ratio over the loop's
	}{
		{"CPU only", 1, 2, 2, true, 0.95, 0.95, 1.05},
		{"launches held by BE", 1.3, 2, 2, true, 0, 1.2, 1.4},
		{"no CPU times: synchronizes left out", 1, 3, 0, false, 0.95, 0.95, 1.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			type call struct {
				At    int64  `json:"at_ns"`
				PID   int    `json:"pid"`
				TID   int    `json:"tid"`
				Role  string `json:"role"`
				Kind  string `json:"kind"`
				OnCPU int64  `json:"on_cpu_ns"`
			}
			var calls []call
			var samples []sample
			cpu := int64(0)
			for j := range 60 {
				slow := map[bool]float64{true: 1.6, false: 1}[(j/5+j/7)%3 == 0]
				at := int64(8e9) + int64(j)*800e6
				works := (at/4e9)%2 == 0
				gap := 20e3 * slow * map[bool]float64{true: tc.held, false: 1}[works]
				now := at + 1e6
				for k := range 60 {
					c := map[bool]int64{true: cpu}[tc.cpuKnown]
					calls = append(calls, call{now, 7, 7, "launch", "enter", c})
					switch {
					case k%5 < tc.syncs:
						wait := int64(map[bool]float64{true: 8e6, false: 5e6}[works])
						calls = append(calls, call{now + 1000, 7, 7, "sync", "enter", c}, call{now + 1000 + wait, 7, 7, "sync", "return", c})
						now += 1000 + wait
					case k%5 < tc.syncs+tc.off: // off the CPU, no call
						now += 1.5e6
					}
					now += int64(gap)
					cpu += int64(gap)
				}
				samples = append(samples, sample{Arrival: at, Latency: now - at, Meter: int64(1.6e6 * slow)})
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
			out := runScript(t, "launch_speed.py", callsPath, lcPath, "--be-duty", "8s")
			m := regexp.MustCompile(`requests: 60 with a loop time, 60 with 10 CPU gaps or more\ncorrelation with log\(loop time\): log\(median CPU gap\) ([-+][0-9.]+).*\nmedians: CPU gap ([0-9.]+) us, loop [0-9.]+ ms\nwith BE over alone \(\d+ / \d+ requests\): median CPU gap ([0-9.]+), loop ([0-9.]+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("want 60 requests read, a correlation and the ratios:\n%s", out)
			}
			r, _ := strconv.ParseFloat(string(m[1]), 64)
			med, _ := strconv.ParseFloat(string(m[2]), 64)
			g, _ := strconv.ParseFloat(string(m[3]), 64)
			l, _ := strconv.ParseFloat(string(m[4]), 64)
			if r < tc.corrLo || med < 20 || med > 32*tc.held || g/l < tc.ratioLo || g/l > tc.ratioHi { // the CPU gaps' median: 20 µs times 1-1.6
				t.Errorf("correlation %v (want %v up), median CPU gap %v us, gap's ratio over the loop's %.3f (want [%v, %v]):\n%s", r, tc.corrLo, med, g/l, tc.ratioLo, tc.ratioHi, out)
			}
		})
	}
}
