package request_test

import (
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

func TestSizesCount(t *testing.T) {
	llama := []int{33488, 33488, 33488, 33488, 33488, 33488, 33488, 33488}
	resnet := []int{225, 229, 226, 225, 227, 228, 226, 225}
	tests := []struct {
		name     string
		last     []int
		launches int
		want     int
	}{
		{"one request", llama, 33488, 1},
		// A Llama-shaped LC behind its arrivals runs three requests back to back.
		{"three of one program", llama, 100464, 3},
		{"a piece of one more (a trace detaching)", llama, 82829, 1},
		{"fewer requests seen than the window", llama[:7], 100464, 1},
		{"two requests that scatter by a few launches", resnet, 226 + 228, 2},
		{"ten of them", resnet, 2265, 10},
		// 2*k*range >= median: the multiple is no longer unambiguous.
		{"too many to tell from their scatter", resnet, 226 * 60, 1},
		{"between two multiples", resnet, 226*2 + 100, 1},
		// A decode of 6-12 steps: its requests' sizes say nothing of a longer busy period.
		{"requests of varying size", []int{600, 1200, 800, 1000, 700, 1100, 900, 650}, 1800, 1},
		{"two sizes in the window", []int{100, 150, 100, 100, 150, 100, 100, 100}, 200, 1},
		// One request told apart longer than the others and off every multiple of them: the
		// process serves requests of more than one size, a whole multiple perhaps one of them,
		// and none is divided from then on, though the window holds one size again.
		{"a longer request seen once", append([]int{100, 100, 170, 100, 100, 100, 100, 100}, slices.Repeat([]int{100}, 8)...), 200, 1},
		// One shorter, and off every multiple: none divided while it is in the window; once
		// it has left, the window is one size again and tells backlogs as it did.
		{"a shorter request in the window", append([]int{100, 100, 40, 100, 100, 100, 100, 100}, 100, 100), 200, 1},
		{"a shorter request that left the window", append([]int{100, 100, 40, 100, 100, 100, 100, 100}, 100, 100, 100), 200, 2},
		// A first window mostly backlogs (simulated: an LC 0-2 ms behind its arrivals), its
		// lower middle size two requests and its single requests half of it, reads as varying;
		// the windows after it of one program, backlogs and all, are not.
		{"a first window mostly backlogs", append([]int{420, 180, 120, 60, 120, 240, 60, 180}, 60, 120, 60, 60, 180, 60, 60, 60), 120, 2},
		// Traced from an LC's first CUDA call: an eager GPT-2's and a Llama-shaped decode's first
		// busy periods (warm-up, backlog), then backlogs of two after requests of one as BE slows
		// them: whole multiples, so backlogs, as they are once the program is known.
		{"GPT-2: warm-up, backlog, then its program", []int{8808, 17299, 8393, 8393, 8393, 8393, 8393, 8393}, 2 * 8393, 2},
		{"Llama: backlogs after requests of one", []int{101137, 167440, 33488, 33488, 33488, 66976, 66976, 33488}, 3 * 33488, 3},
		// The same GPT-2 LC's next requests: its warm-up leaves the window and the backlog after
		// it, 513 over twice its program, is still its start.
		{"GPT-2: after its warm-up left the window", []int{8808, 17299, 8393, 8393, 8393, 8393, 8393, 8393, 8393, 8393, 8393}, 2 * 8393, 2},
		// Backlogs in half the window: the median is one request's, not two's.
		{"a window half backlogs", []int{33488, 33488, 33488, 66976, 66976, 66976, 66976, 33488}, 3 * 33488, 3},
		// k requests lie between k times the smallest and k times the largest.
		{"just past twice the largest", resnet, 2*229 + 1, 1},
		// A long backlog near the largest: 60 requests, not 61 of the lower middle.
		{"after a long backlog of the largest requests", append(append([]int{225, 225, 225, 225, 229, 229, 229, 229}, 13620), 225, 229), 454, 2},
		// A first busy period under the program, then one off every multiple: a warm-up and the
		// backlog behind it, and the requests are of one size.
		{"GPT-2: a smaller warm-up, then a backlog", []int{7236, 18871, 8393, 8393, 8393, 8393, 8393, 8393}, 2 * 8393, 2},
		// A first busy period under the program is the start only with a backlog behind it: before
		// a request of the program it is a request of another size, and the sizes differ.
		{"a first request smaller than the rest", append([]int{50}, slices.Repeat([]int{100}, 7)...), 200, 1},
		{"a warm-up, then a smaller request", append([]int{300, 50}, slices.Repeat([]int{100}, 6)...), 200, 1},
		{"a smaller first request, then sizes that differ", []int{50, 100, 150, 100, 100, 150, 100, 100}, 200, 1},
		// Its scatter: the first request one launch under the rest's is one of them, and a backlog
		// of two of it is two.
		{"a first request at the bottom of the scatter", []int{224, 225, 229, 226, 225, 227, 228, 226}, 448, 2},
		// Half the window backlogs after a start under the program: the median is still one request's.
		{"backlogs in half the window after a smaller start", []int{33487, 33488, 33488, 66976, 66976, 66976, 66976, 33488}, 3 * 33488, 3},
		{"GPT-2-shaped: a smaller first request, then backlogs of two", []int{7236, 8393, 8393, 16786, 16786, 16786, 8393, 16786}, 2 * 8393, 2},
		// A warm-up of a request's launches, then a backlog off every multiple: the start too.
		{"a warm-up of the program's size, then a backlog", []int{8393, 18871, 8393, 8393, 8393, 8393, 8393, 8393}, 2 * 8393, 2},
		{"two smaller busy periods, then requests of one", []int{50, 30, 100, 100, 100, 100, 100, 100}, 200, 1},
		// Recorded (gpreemptd, a Llama-shaped LC): two of setup's pieces, a warm-up under the
		// program, then backlogs of 2.1 and 6 of it: the start, and the requests are of one size.
		{"Llama: a start of five busy periods", []int{222, 499, 29292, 71124, 200928, 33488, 33488, 33488}, 2 * 33488, 2},
		{"a setup's piece, a warm-up and a backlog", []int{222, 29292, 71124, 33488, 33488, 33488, 33488, 33488}, 2 * 33488, 2},
		// The recorded start, then a backlog of two: the program is the window's lower middle size,
		// not that of the start's backlogs and the busy periods after them.
		{"Llama: a start of five busy periods, then a backlog", []int{222, 499, 29292, 71124, 200928, 66976, 33488, 33488}, 2 * 33488, 2},
		// Requests served before a busy period over the program, within half a request of it but
		// off the tight range of the requests after it: served all the same, and no start.
		{"requests of a scatter served before one over it", []int{228, 229, 224, 560, 226, 227, 225, 226}, 452, 1},
		{"requests a launch apart served before one over it", []int{100, 101, 99, 250, 100, 100, 100, 100}, 200, 1},
		{"a warm-up and a request served before one over it", []int{8393, 18871, 8390, 20000, 8393, 8393, 8393, 8393}, 2 * 8393, 1},
		{"a decode of varying length", []int{600, 1200, 800, 2500, 1000, 1050, 950, 1000}, 2000, 1},
		{"three smaller requests before one over the program", []int{50, 50, 50, 250, 100, 100, 100, 100}, 200, 1},
		// A start longer than half the window is past what the median holds against: its pieces
		// read as requests of other sizes.
		{"a start past half the window", []int{222, 499, 300, 29292, 71124, 33488, 33488, 33488}, 2 * 33488, 1},
		// Two requests of the program before a busy period over it: the process served them, and
		// it is no start (a request off every multiple: the sizes differ).
		{"two requests before one over the program", []int{50, 100, 100, 250, 100, 100, 100, 100}, 200, 1},
		// A second request at the top of the scatter is a request, not the start.
		{"two of the largest, the second request the largest", []int{226, 229, 225, 226, 227, 225, 226, 228}, 2 * 229, 2},
		{"a smaller first request, then one a launch over the rest", []int{50, 101, 100, 100, 100, 100, 100, 100}, 200, 1},
		// One launch a request: every size is a multiple, and none tells a backlog from a larger request.
		{"a program of one launch", slices.Repeat([]int{1}, 8), 5, 1},
		{"requests of 1-7 launches", []int{1, 1, 1, 1, 5, 3, 7, 2}, 6, 1},
		// Multiples before the first single request are a backlog as the process starts, as a
		// multiple is once the program is known, and no evidence that requests differ.
		{"a backlog as the process starts", append([]int{3 * 33488}, llama[:7]...), 5 * 33488, 5},
		{"two backlogs as the process starts", []int{300, 200, 100, 100, 100, 100, 100, 100}, 200, 2},
		{"a long backlog as the process starts", append([]int{226 * 30}, resnet[:7]...), 226 + 228, 2},
		// Its warm-up, three requests back to back and work no later request repeats: off every
		// multiple, and no evidence that its requests differ.
		{"a warm-up as the process starts", append([]int{3*33488 + 57}, llama[:7]...), 4 * 33488, 4},
		{"a warm-up and a backlog as the process starts", append([]int{3*33488 + 57, 2 * 33488}, llama[:6]...), 2 * 33488, 2},
		{"a warm-up and a backlog off every multiple", append([]int{3*33488 + 57, 2*33488 + 31}, llama[:6]...), 2 * 33488, 2},
		// The start is judged once, on the first full window: requests that shrink later are
		// off every multiple of the old ones, and differ in size.
		{"sizes that change after the start", append(slices.Repeat([]int{100}, 8), 60, 60, 60, 60, 60), 120, 1},
		// A run too long to divide is no evidence that requests differ: two, later, are still two.
		{"after a run too long to divide", append(append(slices.Clone(resnet), 226*60), resnet...), 226 + 228, 2},
		// Longer and off every multiple (a piece of one more: launches lost, or a trace
		// detaching; or a longer request): none after.
		{"after a busy period off every multiple", append(append(slices.Clone(llama), 82829), llama...), 100464, 1},
		// Where the window also holds busy periods under its program's range, its lower middle
		// size is no program (a window mostly backlogs): one longer and off every multiple is
		// evidence only while it is in the window.
		{"a window of backlogs and a longer one", append([]int{240, 60, 180, 60, 180, 300, 360, 60}, 60, 120, 60, 60, 180, 60, 60, 60), 120, 2},
		// What launches cannot tell: a request of twice the program's work reads as two
		// (docs/TRACING.md), told apart or not.
		{"a double request never seen", slices.Repeat([]int{100}, 8), 200, 2},
		{"a double request told apart", []int{100, 100, 200, 100, 100, 100, 100, 100}, 200, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := request.SizesCount(tt.last, tt.launches); got != tt.want {
				t.Errorf("SizesCount(%v, %d) = %d, want %d", tt.last, tt.launches, got, tt.want)
			}
		})
	}
}

// behind is an LC of one program (steps of 50 launches, a synchronize
// each) with arrivals every second; requests i in slow take 1.2 s, so the
// ones after them start as soon as the last is done, 200 us later, with no
// quiet gap. steps gives request i's steps.
func behind(n int, slow map[int]bool, steps func(i int) int) *workload {
	w := newWorkload(21)
	prev := uint64(0)
	for i := range n {
		start := max(1e9+uint64(i)*1000*ms, prev+200*us)
		t, k := start, steps(i)
		dur := w.between(600*ms, 900*ms)
		if slow[i] {
			dur = 1200 * ms
		}
		for s := range k {
			if s > 0 {
				t += w.inner(w.between(100*us, 800*us))
			}
			_, t = w.step(lcProc, t, 50, 20*us, 40*us, dur/uint64(k)-50*30*us)
		}
		w.request(lcProc, start, t, 50*k)
		prev = t
	}
	return w
}

// TestDelimiterBehind: requests that run back to back for want of a quiet
// gap are one busy period: cut into its requests as they run where the LC
// serves one exact program known from 8 told apart (each from its first
// launch to the last synchronize return before the next's, the app's own
// request); before that, counted as one (or, where a program were known
// but not cut, as the requests its launches make, each at the mean); and
// as one where its requests differ in size.
func TestDelimiterBehind(t *testing.T) {
	slow := map[int]bool{12: true, 13: true, 20: true, 21: true, 22: true}
	// Behind at its start too: its first busy period, two requests, comes before 8 told apart.
	early := map[int]bool{0: true, 12: true, 13: true, 20: true, 21: true, 22: true}
	tests := []struct {
		name    string
		slow    map[int]bool
		steps   func(int) int
		counted bool
	}{
		{"one program", slow, func(int) int { return 8 }, true},
		{"one program, behind at its start", early, func(int) int { return 8 }, true},
		// Its first request, a warm-up, does a step no later one repeats: off every multiple.
		{"one program, behind its warm-up", early, func(i int) int {
			if i == 0 {
				return 9
			}
			return 8
		}, true},
		{"requests of 6-12 steps", slow, func(i int) int { return 6 + i*5%7 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := behind(30, tt.slow, tt.steps)
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
			var together, counted, apart, first, cut int
			for _, r := range got {
				var in []request.Request
				for _, x := range w.want {
					if x.Start >= r.Start && x.End <= r.End {
						in = append(in, x)
					}
				}
				if len(in) == 0 || in[0].Start != r.Start || in[len(in)-1].End != r.End {
					t.Fatalf("busy period %d-%d holds requests %v: want whole requests", r.Start, r.End, in)
				}
				if r.Cut > 0 { // cut from its busy period by the program as it ran: the app's own request
					if len(in) != 1 || r.Count() != 1 {
						t.Errorf("request %d cut from its busy period, %d-%d, holds %d requests, counted %d: want one", r.Cut, r.Start, r.End, len(in), r.Count())
					}
					if r.Cut == 2 {
						together++
					}
					cut++
					counted++
					continue
				}
				if len(in) > 1 {
					together++
				}
				want := 1
				if tt.counted && apart >= 8 { // the program is known from 8 requests told apart
					want = len(in)
				} else if tt.counted {
					first += len(in) - 1
				}
				if len(in) == 1 {
					apart++
				}
				if r.Count() != want || r.Each() != r.Latency()/time.Duration(want) {
					t.Errorf("busy period of %d requests (%d launches): count %d, each %v; want %d, each %v",
						len(in), r.Launches, r.Count(), r.Each(), want, r.Latency()/time.Duration(want))
				}
				counted += r.Count()
			}
			if together < 2 {
				t.Fatalf("%d busy periods of several requests: the workload should make 2", together)
			}
			if tt.counted != (cut > 0) {
				t.Errorf("%d requests cut from busy periods as they ran: want them cut %v", cut, tt.counted)
			}
			if tt.counted && counted+first != len(w.want) {
				t.Errorf("%d requests counted, want %d", counted, len(w.want))
			}
		})
	}
}

// TestDelimiterNeverQuietCut: an LC of one exact program that falls behind
// its arrivals for longer than StepAfter (20 requests of 1.2 s, one
// arriving a second) is never quiet for 25 s: its requests are cut from
// the busy period as they run, each the app's own, not measured per step;
// one whose requests differ in size is measured per step there.
func TestDelimiterNeverQuietCut(t *testing.T) {
	slow := map[int]bool{}
	for i := 10; i < 30; i++ {
		slow[i] = true
	}
	tests := []struct {
		name  string
		steps func(int) int
		cut   bool
	}{
		{"one program", func(int) int { return 8 }, true},
		{"requests of 6-12 steps", func(i int) int { return 6 + i*5%7 }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := behind(40, slow, tt.steps)
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
			byStart := map[uint64]request.Request{}
			var steps int
			for _, r := range got {
				if r.Kind == request.KindStep {
					steps++
					continue
				}
				byStart[r.Start] = r
			}
			var long uint64 // the longest run of requests back to back
			for i, from := 1, w.want[0].Start; i <= len(w.want); i++ {
				if i == len(w.want) || w.want[i].Start-w.want[i-1].End > 10*ms {
					long, from = max(long, w.want[i-1].End-from), w.want[min(i, len(w.want)-1)].Start
				}
			}
			if time.Duration(long) <= request.DefaultStepAfter {
				t.Fatalf("the longest run back to back %v: the workload should outlast StepAfter", time.Duration(long))
			}
			if !tt.cut {
				if steps == 0 {
					t.Errorf("no step: want the run back to back measured per step")
				}
				return
			}
			if steps > 0 {
				t.Errorf("%d steps: want every request cut as it ran", steps)
			}
			for i, want := range w.want[9:] { // the program is known from 8 told apart
				if r, ok := byStart[want.Start]; !ok || r.End != want.End || r.Count() != 1 {
					t.Fatalf("request %d (%d-%d): got %+v (found %v), want it whole, alone", 9+i, want.Start, want.End, r, ok)
				}
			}
		})
	}
}

// TestDelimiterTraceBeginsInside: a trace that begins inside a busy period
// (the probes go in during a warmup or a backlog) sees a piece of it: no
// request, and no size of one (a piece is off every multiple, and would
// stop every later backlog from being divided). A trace that begins a quiet
// gap before the first request sees it whole.
func TestDelimiterTraceBeginsInside(t *testing.T) {
	slow := map[int]bool{12: true, 13: true, 20: true, 21: true, 22: true}
	w := behind(30, slow, func(int) int { return 8 })
	first := w.want[0]
	tests := []struct {
		name  string
		since uint64
		whole bool // the first request is emitted
	}{
		{"inside the first request", first.Start + (first.End-first.Start)/3, false},
		{"a quiet gap before it", first.Start - 100*ms, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var evs []trace.Event
			for _, ev := range w.evs {
				if ev.Time() >= tt.since {
					evs = append(evs, ev)
				}
			}
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{Since: tt.since})
			got := run(d, evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
			if len(got) == 0 {
				t.Fatal("no request")
			}
			if whole := got[0].Start == first.Start && got[0].End == first.End; whole != tt.whole || !tt.whole && got[0].End <= first.End {
				t.Fatalf("first request %d-%d; request 0 is %d-%d: want it whole %v, else not at all", got[0].Start, got[0].End, first.Start, first.End, tt.whole)
			}
			counted := 0
			for _, r := range got {
				counted += r.Count()
			}
			want := len(w.want)
			if !tt.whole {
				want-- // the piece
			}
			if counted != want {
				t.Errorf("%d requests counted, want %d: every later backlog divided", counted, want)
			}
		})
	}
}

// TestDelimiterFirstBusyPeriod: the ways a trace's first busy period is a
// piece, and one where it is whole. Each LC serves a request of two
// launches and a synchronize (10 ms), then after 100 ms of quiet another.
func TestDelimiterFirstBusyPeriod(t *testing.T) {
	const since = 1_000 * ms
	launch := func(t uint64) trace.Event { return at(lcProc, trace.RoleLaunch, false, t) }
	enter := func(t uint64) trace.Event { return at(lcProc, trace.RoleSync, false, t) }
	ret := func(t uint64) trace.Event { return at(lcProc, trace.RoleSync, true, t) }
	second := []trace.Event{launch(since + 200*ms), launch(since + 201*ms), enter(since + 202*ms), ret(since + 210*ms)}
	tests := []struct {
		name  string
		first []trace.Event
		// pending: made before the trace's start is known; tick, then Begin at begin, after
		// the first's events (0: Since given as made, no tick)
		pending     bool
		tick, begin uint64
		want        int // requests, the last the second
	}{
		{"its first call a quiet gap after the trace began", []trace.Event{launch(since + 50*ms), enter(since + 52*ms), ret(since + 60*ms)}, false, 0, 0, 2},
		{"its first call 5 ms after", []trace.Event{launch(since + 5*ms), enter(since + 7*ms), ret(since + 15*ms)}, false, 0, 0, 1},
		// The trace began inside a synchronize: its return, then the request's next launch 30 ms
		// after the trace began but 2 ms after that return.
		{"after a synchronize's return", []trace.Event{ret(since + 28*ms), launch(since + 30*ms), enter(since + 32*ms), ret(since + 40*ms)}, false, 0, 0, 1},
		// The attach took 40 ms: its first call 28 ms after the loop's moment, 12 before the probes were all in.
		{"told by Begin, as the attach returns", []trace.Event{launch(since + 28*ms), enter(since + 50*ms), ret(since + 60*ms)}, true, 0, since + 40*ms, 1},
		// A whole busy period while the attach is under way, closed by a tick before it returns.
		{"closed while the attach is under way", []trace.Event{launch(since + 5*ms), enter(since + 7*ms), ret(since + 15*ms)}, true, since + 45*ms, since + 50*ms, 1},
		// Nothing while the attach is under way; it returns 10 ms before the next request's first call.
		{"its first call within a gap of the attach's return", nil, true, 0, since + 190*ms, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := request.DelimiterConfig{Since: since, Pending: tt.pending}
			if tt.pending {
				cfg.Since = 0
			}
			d := request.NewDelimiter(lcProc.PID, cfg)
			var got []request.Request
			take := func(r request.Request, ok bool) {
				if ok {
					got = append(got, r)
				}
			}
			for _, ev := range tt.first {
				take(d.Apply(ev))
			}
			if tt.tick != 0 {
				take(d.Tick(tt.tick))
			}
			if tt.begin != 0 {
				d.Begin(tt.begin)
			}
			for _, ev := range second {
				take(d.Apply(ev))
			}
			take(d.Tick(since + 400*ms))
			if len(got) != tt.want || tt.want > 0 && got[len(got)-1].Start != since+200*ms {
				t.Errorf("got %+v: want %d requests, the last from %v", got, tt.want, since+200*ms)
			}
		})
	}
}

// TestDelimiterQuietLong: a request, then quiet for longer than StepAfter
// before the next event or tick: a request, not a period of steps.
func TestDelimiterQuietLong(t *testing.T) {
	launch := at(lcProc, trace.RoleLaunch, false, 1_000*ms)
	enter, ret := at(lcProc, trace.RoleSync, false, 1_001*ms), at(lcProc, trace.RoleSync, true, 1_010*ms)
	later := at(lcProc, trace.RoleLaunch, false, 13_000*ms)
	for _, by := range []string{"tick", "call"} {
		t.Run(by, func(t *testing.T) {
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			for _, ev := range []trace.Event{launch, enter, ret} {
				d.Apply(ev)
			}
			var r request.Request
			var ok bool
			if by == "tick" {
				r, ok = d.Tick(13_000 * ms)
			} else {
				r, ok = d.Apply(later)
			}
			if !ok || r.Kind != request.KindRequest || r.End != 1_010*ms {
				t.Errorf("got %+v %v: want the request, 1.0-1.01 s", r, ok)
			}
		})
	}
}

// What sizes keeps goes on following the process where its busy periods are never divided: a
// program of one launch a request that becomes one of 100, and a decode of varying lengths whose
// longer requests come later, are told from the window as it now is, and so is whether the
// requests vary.
func TestSizesProgramFollows(t *testing.T) {
	tests := []struct {
		name   string
		last   []int
		want   int
		varies bool
	}{
		// Busy periods of no launches (a synchronize of work whose launches went unseen): no
		// program, and nothing divided.
		{"no launches, then 50", append(slices.Repeat([]int{0}, 4), 50, 50, 50, 50), 0, false},
		{"one launch, then 100", append(slices.Repeat([]int{1}, 8), slices.Repeat([]int{100}, 8)...), 100, false},
		{"one launch, then 100, the last 1 still in the window", append(slices.Repeat([]int{1}, 8), slices.Repeat([]int{100}, 7)...), 100, true},
		{"varying, then longer", append([]int{600, 1200, 800, 1000, 700, 1100, 900, 650}, slices.Repeat([]int{2400}, 8)...), 2400, false},
		{"varying, then longer, one of them still in the window", append([]int{600, 1200, 800, 1000, 700, 1100, 900, 650}, slices.Repeat([]int{2400}, 7)...), 2400, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, varies := request.SizesProgram(tt.last); got != tt.want || varies != tt.varies {
				t.Errorf("SizesProgram(%v) = %d (varies %v), want %d (%v)", tt.last, got, varies, tt.want, tt.varies)
			}
		})
	}
}

// FuzzSizes: any launch counts told apart (zeros among them: a synchronize
// of work whose launches went unseen) are judged without a panic, and any
// busy period counts as one request or more.
func FuzzSizes(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 50, 0, 50, 0, 50, 0, 50}, uint16(100))
	f.Add([]byte{1, 64, 0, 240, 0, 60, 0, 180, 0, 60, 0, 180, 1, 44, 1, 104, 0, 60}, uint16(120))
	f.Fuzz(func(t *testing.T, b []byte, launches uint16) {
		last := make([]int, 0, len(b)/2)
		for i := 0; i+1 < len(b) && len(last) < 64; i += 2 {
			last = append(last, int(b[i])<<8|int(b[i+1]))
		}
		request.SizesProgram(last)
		if n := request.SizesCount(last, int(launches)); n < 1 {
			t.Errorf("SizesCount(%v, %d) = %d, want at least 1", last, launches, n)
		}
	})
}
