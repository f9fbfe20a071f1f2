package request_test

import (
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// TestDelimiterReplay replays a real LC's calls through the Delimiter: an eager resnet50 every
// 20 ms beside resnet50 training on an H200, its first 1.4 s as `gpreemptctl trace requests --record`
// saw them from the moment it attached (scripts/probe/traced-gaps.sh), with the app's own requests
// over the same time. The first traced request is the ~670 ms the app took as the probes went in
// and BE came back; after it the quiet gap is learnt, each traced request ends within 2 ms of an
// app's (the traced one ends as its synchronize returns, the app's a few microseconds later), and
// the traced p50 is within 10% of the app's over the traced span (it leaves out the app's Python
// before its first call, ~0.1 ms).
func TestDelimiterReplay(t *testing.T) {
	d, got := replay(t, "testdata/resnet50-eager-beside.jsonl.gz", true)
	b, err := os.ReadFile("testdata/resnet50-eager-beside-app.json")
	if err != nil {
		t.Fatal(err)
	}
	var app struct{ Requests [][2]uint64 }
	if err := json.Unmarshal(b, &app); err != nil {
		t.Fatal(err)
	}
	if len(got) < 2 || !d.Learnt() {
		t.Fatalf("%d requests, gap learnt %v (%v): want the LC's requests, every 20 ms; gaps %+v", len(got), d.Learnt(), d.Gap(), d.Gaps())
	}
	var ends []uint64
	for _, r := range app.Requests {
		ends = append(ends, r[1])
	}
	var traced, own []float64
	lo, hi := got[1].Start, got[len(got)-1].End
	for _, r := range got[1:] {
		i, _ := slices.BinarySearch(ends, r.End)
		near := slices.ContainsFunc(ends[max(i-1, 0):min(i+1, len(ends))], func(e uint64) bool { return max(e, r.End)-min(e, r.End) <= 2e6 })
		if !near {
			t.Errorf("traced request %d-%d (%d launches) ends no app request", r.Start, r.End, r.Launches)
		}
		traced = append(traced, float64(r.End-r.Start))
	}
	for _, r := range app.Requests {
		if lo <= r[1] && r[1] <= hi {
			own = append(own, float64(r[1]-r[0]))
		}
	}
	tp, ap := stats.Median(traced), stats.Median(own)
	if len(traced) < len(own)-2 || tp < 0.9*ap || tp > 1.1*ap {
		t.Errorf("%d traced requests, p50 %.0f us; the app's %d ending in their span, p50 %.0f us: want as many, within 10%%",
			len(traced), tp/1e3, len(own), ap/1e3)
	}
	t.Logf("%d traced requests after the first (%d us), p50 %.0f us; the app's %d, p50 %.0f us (%.3fx); gap %v",
		len(traced), (got[0].End-got[0].Start)/1e3, tp/1e3, len(own), ap/1e3, tp/ap, d.Gap())
}

// replay feeds a recording's calls to a fresh Delimiter (their blocks, or none), ticking every
// millisecond, and returns the Delimiter and what it emitted.
func replay(t *testing.T, path string, blocks bool) (*request.Delimiter, []request.Request) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	calls, err := trace.ReadCalls(f)
	if err != nil {
		t.Fatal(err)
	}
	var evs []trace.Event
	for _, c := range calls {
		if !blocks {
			c.Blocked = 0
		}
		evs = append(evs, c)
	}
	d := request.NewDelimiter(calls[0].PID, request.DelimiterConfig{})
	return d, run(d, evs, ms, calls[len(calls)-1].At+uint64(100*ms))
}

// TestDelimiterReplayBlocks replays 400 ms of another recorded span of the same LC beside
// training, in which gaps the thread slept in between requests read as CPU work by its CPU
// time (which lags by up to a tick): judged by the thread's blocks, each request after the
// first (learning the gap) is one forward pass of 225 launches; by the CPU time alone, several
// run into one.
func TestDelimiterReplayBlocks(t *testing.T) {
	for _, blocks := range []bool{true, false} {
		_, got := replay(t, "testdata/resnet50-eager-misread.jsonl.gz", blocks)
		if len(got) < 2 {
			t.Fatalf("blocks %v: %d requests", blocks, len(got))
		}
		merged := slices.ContainsFunc(got[1:], func(r request.Request) bool { return r.Launches != 225 })
		if merged == blocks || blocks && len(got) < 15 {
			var ls []int
			for _, r := range got {
				ls = append(ls, r.Launches)
			}
			t.Errorf("by blocks %v: %d requests of %v launches: want one forward (225) each after the first only by blocks", blocks, len(got), ls)
		}
	}
}
