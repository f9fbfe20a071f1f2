package bench

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

// FuzzParsePrep: the --prep-dist flag.
func FuzzParsePrep(f *testing.F) {
	for _, s := range []string{"500us", "fixed:500us", "uniform:300us:700us", "uniform:700us:300us", "", "x:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParsePrep(s)
		if err != nil {
			return
		}
		if d.Min < 0 || d.Max < d.Min {
			t.Fatalf("ParsePrep(%q) = %+v: negative or inverted", s, d)
		}
		again, err := ParsePrep(d.String())
		if err != nil || again != d {
			t.Fatalf("%q -> %+v -> %q -> %+v, %v", s, d, d.String(), again, err)
		}
	})
}

// FuzzParseAlone: an LC's ALONE line. A line is refused or read into positive latencies and CPU
// loop times, one of each a comma-separated field, each the field's own two numbers in µs.
func FuzzParseAlone(f *testing.F) {
	for _, s := range []string{"200000000:2000000,201000000:1900000", "1:1", "1", "", "1:1,,2:1", "-1:1", "0:1", "1:0", "1:2:3", "99999999999999999999:1", " 5:5 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		lat, meter, err := parseAlone(s)
		if err != nil {
			return
		}
		fields := strings.Split(strings.TrimSpace(s), ",")
		if len(lat) != len(fields) || len(meter) != len(fields) {
			t.Fatalf("parseAlone(%q) = %v %v: not one of each a field", s, lat, meter)
		}
		for i, f := range fields {
			l, m, _ := strings.Cut(f, ":")
			lns, _ := strconv.ParseInt(l, 10, 64)
			mns, _ := strconv.ParseInt(m, 10, 64)
			if !(lat[i] > 0 && meter[i] > 0) || lat[i] != float64(lns)/1e3 || meter[i] != float64(mns)/1e3 {
				t.Fatalf("parseAlone(%q) = %v %v: field %q read otherwise", s, lat, meter, f)
			}
		}
	})
}

// FuzzParseCPUs: the --lc-cpus and --be-cpus flags. A list is refused or
// parsed, quickly (a range is walked a CPU at a time), into CPUs a mask
// holds; what it gives back parses to the same set.
func FuzzParseCPUs(f *testing.F) {
	for _, s := range []string{"0", "0-1", "2-3,8", "3-1", "x", "", "0-9223372036854775807", "1023", "0,,1", "-1", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cpus, err := parseCPUs("--lc-cpus", s)
		if err != nil {
			if !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("parseCPUs(%q): %v, not an invalid argument", s, err)
			}
			return
		}
		if s != "" && cpus.IsEmpty() || cpus.Size() > 0 && cpus.List()[cpus.Size()-1] >= maxCPUs {
			t.Fatalf("parseCPUs(%q) = %v", s, cpus)
		}
		if again, err := parseCPUs("--lc-cpus", cpus.String()); err != nil || !again.Equals(cpus) {
			t.Fatalf("%q -> %v -> %v, %v", s, cpus, again, err)
		}
	})
}

// FuzzParseCPUTimes: /proc/stat's cpu lines. A reading always has the line
// for all CPUs, and no CPU's steal exceeds its total.
func FuzzParseCPUTimes(f *testing.F) {
	f.Add([]byte("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\nintr 1\n"))
	f.Add([]byte("cpu 1 2 3\n"))
	f.Add([]byte("cpu  18446744073709551615 1 0 0 0 0 0 0\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ts, err := parseCPUTimes(b)
		if err != nil {
			return
		}
		if _, ok := ts["cpu"]; !ok {
			t.Fatalf("%q: no cpu line in %v", b, ts)
		}
		for n, v := range ts {
			if v[1] > v[0] {
				t.Fatalf("%q: %s steals %d of %d", b, n, v[1], v[0])
			}
		}
	})
}

// FuzzParseScenarios: the --scenarios flag.
func FuzzParseScenarios(f *testing.F) {
	for _, s := range []string{DefaultScenarios, "be-ratio:3000us:1000us", "pytorch-prepreempt-be-1us,prepreempt-standalone", "be-0us", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		scs, err := ParseScenarios(s)
		if err != nil {
			return
		}
		for _, sc := range scs {
			if sc.Hints && !sc.HasLC() {
				t.Fatalf("%q: pre-preemption without an LC worker accepted", s)
			}
			if sc.Kind == KindBERatio && (sc.Ratio[0] <= 0 || sc.Ratio[1] <= 0) {
				t.Fatalf("%q: ratio %v", s, sc.Ratio)
			}
		}
	})
}

// FuzzWorkerResult: a worker's JSON result, as the orchestrator reads and
// checks it (workers are separate programs, the Python ones included).
func FuzzWorkerResult(f *testing.F) {
	for _, name := range []string{"lc_infer.json", "be_train.json"} {
		if b, err := os.ReadFile(filepath.Join("testdata", name)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"schema":1,"samples":[{"latency_ns":-5}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "w.json")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		var lc LCResult
		if err := readJSON(path, &lc); err == nil {
			_ = checkLC(&lc, 1)
		}
		var be BEResult
		if err := readJSON(path, &be); err == nil {
			_ = checkBE("be", &be)
		}
		if json.Valid(b) {
			return
		}
		if err := readJSON(path, &lc); err == nil {
			t.Fatalf("invalid JSON accepted: %q", b)
		}
	})
}

// FuzzDecodeResults: results files come from other machines and other
// versions of the binary; compare must refuse what it cannot read, never
// crash, and whatever it accepts must render.
func FuzzDecodeResults(f *testing.F) {
	// Small seeds: the fuzzer mutates faster on them, and the repetition
	// fixture's thousands of samples add nothing to the decoder's paths.
	if b, err := json.Marshal(fixtureResults()); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"schema":1,"tool":"gpreempt-bench","config":{"period":"3.5ms","prep":"500us","scenarios":["standalone","be-1us"]},"scenarios":[{"name":"standalone","lc":{"samples":[{"latency_ns":30000}]}},{"name":"be-1us","lc":{"samples":[{"latency_ns":1}]}}]}`))
	f.Add([]byte(`{"schema":2,"tool":"gpreempt-bench","scenarios":[{"name":"x@x0"}],"summaries":[{"name":"x","lc_p50_vs_standalone":{"per_rep":[],"ci95":{"lo":1,"hi":0}}}]}`))
	f.Add([]byte{0x1f, 0x8b, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		res, err := DecodeResults(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrBadResults) {
				t.Fatalf("error %v does not wrap ErrBadResults", err)
			}
			return
		}
		if res.Summaries == nil {
			t.Fatal("accepted results without summaries")
		}
		var out bytes.Buffer
		if err := WriteMarkdown(&out, res); err != nil {
			t.Fatal(err)
		}
		if cmp, err := Compare(res, res, false); err == nil {
			if err := cmp.WriteMarkdown(&out); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// FuzzRunOptionsJSON: the config block of results.json reads back what it
// wrote, and refuses rather than crashes on anything else.
func FuzzRunOptionsJSON(f *testing.F) {
	if b, err := json.Marshal(fixtureResults().Config); err == nil {
		f.Add(b)
	}
	f.Add([]byte(`{"duration":"20s","period":"-1h","scenarios":["multi-tenant:be:3:be:1","be-1us@x2"]}`))
	f.Add([]byte(`{"prep":"uniform:1ms:0s"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var o runOptions
		if err := json.Unmarshal(b, &o); err != nil {
			return
		}
		again, err := json.Marshal(o)
		if err != nil {
			t.Fatalf("accepted %q but cannot write it back: %v", b, err)
		}
		var o2 runOptions
		if err := json.Unmarshal(again, &o2); err != nil {
			t.Fatalf("cannot read back %s: %v", again, err)
		}
		if !reflect.DeepEqual(o, o2) {
			t.Fatalf("round trip changed the options:\n%+v\n%+v", o, o2)
		}
	})
}

// FuzzParseSLOStatus: any status body gpreemptd (or something posing as it) returns is read
// without a panic, or refused with an error; an LC row says whether its requests vary only where
// a traced section that decodes whole lists its process.
func FuzzParseSLOStatus(f *testing.F) {
	f.Add([]byte(`{"slo":{"enabled":true,"lc":[{"pid":7},{"pid":8}]},"traced":[{"pid":7,"requests_vary":true},{"pid":9}]}`))
	f.Add([]byte(`{"slo":{"enabled":true,"lc":[{"pid":7}]},"traced":{"pid":7}}`))
	f.Add([]byte(`{"slo":{"enabled":false}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := parseSLOStatus(b)
		if err != nil {
			return
		}
		var traced struct {
			Traced []struct {
				PID int `json:"pid"`
			} `json:"traced"`
		}
		listed := map[int]bool{}
		if json.Unmarshal(b, &traced) == nil {
			for _, r := range traced.Traced {
				listed[r.PID] = true
			}
		}
		for _, l := range s.LC {
			if l.RequestsVary != nil && !listed[l.PID] {
				t.Fatalf("pid %d: requests_vary set, but no traced row lists it in %s", l.PID, b)
			}
		}
	})
}
