package bench

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSplitByDuty(t *testing.T) {
	const s, ms = int64(time.Second), int64(time.Millisecond)
	req := func(start, lat, tpot int64) LCSample {
		return LCSample{ArrivalMonoNs: start, LatencyNs: lat, TPOTNs: tpot}
	}
	// A 4 s period: BE works in [0, 2 s), [4 s, 6 s), ... and idles in
	// [2 s, 4 s), [6 s, 8 s), ...
	samples := []LCSample{
		req(-1*s, 100*ms, 10*ms),    // before the clock's epoch: not counted
		req(50*ms, 100*ms, 0),       // inside the guard: not counted
		req(200*ms, 300*ms, 30*ms),  // with BE
		req(1*s, 400*ms, 40*ms),     // with BE
		req(1900*ms, 50*ms, 0),      // inside, but ends at 1.95 s: with BE
		req(1950*ms, 100*ms, 0),     // crosses into the idle half: not counted
		req(2200*ms, 150*ms, 15*ms), // alone
		req(3*s, 200*ms, 20*ms),     // alone
		req(4200*ms, 500*ms, 50*ms), // with BE (the next period)
		req(6500*ms, 100*ms, 10*ms), // alone
		req(7950*ms, 100*ms, 10*ms), // crosses into the working half: not counted
		req(9*s, 1150*ms, 0),        // 9.0-10.15 s: crosses into the idle half, not counted
		// Due at 9.5 s, it starts when the one before ends: 10.15-10.45 s,
		// alone (as due, it would have run with BE).
		req(9500*ms, 300*ms, 0),
	}
	d := splitByDuty(&LCResult{Samples: samples}, 4*time.Second)
	if d.WithBE == nil || d.Alone == nil || d.WithBE.N != 4 || d.Alone.N != 4 {
		t.Fatalf("split %+v %+v: want 4 with BE, 4 alone", d.WithBE, d.Alone)
	}
	// p50s: with BE the median of {300, 400, 50, 500} ms, 350 ms; alone of
	// {150, 200, 100, 300}, 175 ms. TPOT: with BE {30, 40, 50}, alone {15, 20, 10}.
	if got := d.P50Ratio; got != 2 {
		t.Errorf("p50 ratio %v, want 350/175", got)
	}
	if got := d.TPOTRatio; got != 40.0/15 {
		t.Errorf("TPOT ratio %v, want 40/15", got)
	}
	// Too few a side: the halves are summarized, no ratio.
	few := splitByDuty(&LCResult{Samples: samples[:5]}, 4*time.Second)
	if few.P50Ratio != 0 || few.WithBE == nil || few.Alone != nil {
		t.Errorf("three with BE, none alone: %+v", few)
	}
	if splitByDuty(nil, 4*time.Second) != nil || splitByDuty(&LCResult{}, 0) != nil {
		t.Error("no LC or no period: want nil")
	}
}

func TestDutyCount(t *testing.T) {
	const s = int64(time.Second)
	// A 4 s period; completions at 0.5, 1.5 (working), 2.5 (idle), 4.5
	// (working) and 6.5 s (idle).
	done := []int64{s / 2, 3 * s / 2, 5 * s / 2, 9 * s / 2, 13 * s / 2}
	for _, c := range []struct {
		start, end int64
		n          int64
		working    time.Duration
	}{
		{0, 8 * s, 3, 4 * time.Second},
		{s, 7 * s, 2, 3 * time.Second}, // [1, 2) and [4, 6)
		{3 * s, 4 * s, 0, 0},           // idle throughout
		{5 * s / 2, 5 * s, 1, time.Second},
		{s, s, 0, 0},
	} {
		n, w := dutyCount(done, c.start, c.end, 4*time.Second)
		if n != c.n || w != c.working {
			t.Errorf("(%d, %d]: %d in %v, want %d in %v", c.start, c.end, n, w, c.n, c.working)
		}
	}
}

func TestBEArgvDuty(t *testing.T) {
	o := testOptions(t, "llm-defaults", "")
	o.LLMPeriod = 800 * time.Millisecond
	r := &runner{o: o, scripts: "/s"}
	if be, _ := r.beArgv(o.Scenarios[0], "/tmp/be.json"); slices.Contains(be, "--duty-period") {
		t.Errorf("no --be-duty: %v", be)
	}
	r.o.BEDuty = 4 * time.Second
	be, _ := r.beArgv(o.Scenarios[0], "/tmp/be.json")
	if i := slices.Index(be, "--duty-period"); i < 0 || i+1 >= len(be) || be[i+1] != "4s" {
		t.Errorf("--be-duty 4s: %v", be)
	}
}

// TestBEGEMMDuty runs be_gemm.py on a stub torch whose products finish at
// once: with --duty-period it launches only in the working halves, so a
// product completes in an idle half only when the worker was descheduled
// across the boundary, at most once a boundary; without it, the idle
// halves hold thousands (the check can fail).
func TestBEGEMMDuty(t *testing.T) {
	py := python3(t)
	stub := writeStubTorch(t)
	const half = 20 * time.Millisecond
	run := func(args ...string) (stray, working int, halves int64) {
		out := filepath.Join(t.TempDir(), "be.json")
		cmd := exec.Command(py, append([]string{"../../bench/pytorch/be_gemm.py", "--queue", "1", "--duration", "400ms", "--out", out}, args...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+stub)
		if b, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(b), "READY") {
			t.Fatalf("be_gemm.py: %v: %s", err, b)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Start       int64   `json:"start_mono_ns"`
			End         int64   `json:"end_mono_ns"`
			Completions []int64 `json:"completions_mono_ns"`
		}
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatal(err)
		}
		for _, c := range r.Completions {
			if (c/int64(half))%2 == 1 {
				stray++
			} else {
				working++
			}
		}
		return stray, working, r.End/int64(half) - r.Start/int64(half) + 1
	}
	stray, working, halves := run("--duty-period", "40ms")
	if working == 0 || stray > int(halves)/2+1 {
		t.Errorf("with a 40ms duty: %d products in working halves, %d in idle ones (at most %d)", working, stray, halves/2+1)
	}
	if stray, _, halves := run(); stray <= int(halves)/2+1 {
		t.Errorf("without a duty: only %d products in the 'idle' halves", stray)
	}
}
