package request_test

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

const (
	us = uint64(time.Microsecond)
	ms = uint64(time.Millisecond)
)

// at is a call of p at an explicit time.
func at(p tracetest.Process, role trace.Role, ret bool, t uint64) trace.Event {
	sym, idx := "cuLaunchKernel", uint32(0)
	if role == trace.RoleSync {
		sym, idx = "cuStreamSynchronize", 2
	}
	return tracetest.Call(p, role, sym, idx, ret, 0, &tracetest.Clock{Now: t}, 0)
}

// workload builds a process's calls and the requests it served.
type workload struct {
	evs  []trace.Event
	want []request.Request // what each request (or step) is, by construction
	rng  *rand.Rand
	// maxInner is the longest gap inside a request; minOuter the shortest
	// between two.
	maxInner, minOuter uint64
}

func newWorkload(seed uint64) *workload {
	return &workload{rng: rand.New(rand.NewPCG(seed, 1)), minOuter: 1 << 62}
}

func (w *workload) between(lo, hi uint64) uint64 { return lo + w.rng.Uint64N(hi-lo+1) }

func (w *workload) inner(g uint64) uint64 { w.maxInner = max(w.maxInner, g); return g }

// step is n launches of p from t with gaps in [gapLo, gapHi], then a
// synchronize waiting tail: it returns the synchronize's entry and return.
func (w *workload) step(p tracetest.Process, t uint64, n int, gapLo, gapHi, tail uint64) (uint64, uint64) {
	for i := range n {
		if i > 0 {
			t += w.inner(w.between(gapLo, gapHi))
		}
		w.evs = append(w.evs, at(p, trace.RoleLaunch, false, t))
	}
	t += w.inner(w.between(gapLo, gapHi))
	w.evs = append(w.evs, at(p, trace.RoleSync, false, t))
	enter := t
	t += tail
	w.evs = append(w.evs, at(p, trace.RoleSync, true, t))
	return enter, t
}

// request records a request of p from start to end with launches.
func (w *workload) request(p tracetest.Process, start, end uint64, launches int) {
	w.want = append(w.want, request.Request{PID: p.PID, Kind: request.KindRequest, Start: start, End: end, Launches: launches})
}

// periodic makes n requests of lcProc, one every period from 1 s: serve
// makes request i's calls from start and returns its end and launches.
func (w *workload) periodic(n int, period uint64, serve func(i int, start uint64) (end uint64, launches int)) {
	for i := range n {
		start := 1e9 + uint64(i)*period
		end, launches := serve(i, start)
		w.request(lcProc, start, end, launches)
		w.minOuter = min(w.minOuter, start+period-end)
	}
}

// run feeds evs to d, ticking every tick of event time (as the gate and
// the SLO window do), and ticks on until until; it returns what d emitted.
func run(d *request.Delimiter, evs []trace.Event, tick, until uint64) []request.Request {
	var out []request.Request
	next := uint64(0)
	tickTo := func(t uint64) {
		if next == 0 {
			next = t
		}
		for ; next < t; next += tick {
			if r, ok := d.Tick(next); ok {
				out = append(out, r)
			}
		}
	}
	for _, ev := range evs {
		tickTo(ev.Time())
		if r, ok := d.Apply(ev); ok {
			out = append(out, r)
		}
	}
	tickTo(until)
	return out
}

var lcProc = tracetest.Process{PID: 10, TID: 11, Comm: "lc"}

// resnet is an eager resnet50 every 20 ms: ~50 launches 20-200 us apart,
// a synchronize, ~14 ms between requests (under the 25 ms ceiling).
func resnet(n int) *workload {
	w := newWorkload(1)
	w.periodic(n, 20*ms, func(_ int, start uint64) (uint64, int) {
		_, end := w.step(lcProc, start, 50, 20*us, 200*us, 500*us)
		return end, 50
	})
	return w
}

// decode is an eager LLM decode: a generate() call a second of 32 tokens,
// each ~400 launches 25-40 us apart (~13 ms), a synchronize a token that
// waits for the GPU's last kernels, and 100-800 us of sampling before the
// next token's first launch (sampLo to sampHi).
func decode(n int, sampLo, sampHi uint64) *workload {
	w := newWorkload(2)
	w.periodic(n, 1000*ms, func(_ int, start uint64) (end uint64, launches int) {
		t := start
		for tok := range 32 {
			if tok > 0 {
				t = end + w.inner(w.between(sampLo, sampHi))
			}
			_, end = w.step(lcProc, t, 400, 25*us, 40*us, w.between(1*ms, 3*ms))
		}
		return end, 32 * 400
	})
	return w
}

// graph is a CUDA-graph LC: one graph launch and one synchronize a
// request, 1.3 ms each, every 20 ms.
func graph(n int) *workload {
	w := newWorkload(3)
	w.periodic(n, 20*ms, func(_ int, start uint64) (uint64, int) {
		_, end := w.step(lcProc, start, 1, 5*us, 5*us, 1300*us)
		return end, 1
	})
	return w
}

// TestDelimiterRequests: each workload's requests, once its gap is learnt
// (from request learnFrom on), are exactly its busy periods; none is cut
// within, and the learnt gap lies between its two clusters of gaps.
func TestDelimiterRequests(t *testing.T) {
	tests := []struct {
		name      string
		w         *workload
		learnFrom int // the first request that must come out exact
	}{
		// 14 ms between requests, under the 25 ms ceiling: only a learnt
		// gap delimits them.
		{"eager resnet50 every 20 ms", resnet(60), 12},
		// One request per generate() call, not per token: its tokens'
		// synchronizes are inside it.
		{"eager LLM decode, 32 tokens a second", decode(6, 100*us, 800*us), 0},
		// Sampling gaps 16 times the launch gaps, before any request
		// ended: a clear split by ratio, but a few percent of the gap
		// time, so no quiet gap between requests.
		{"eager LLM decode, sampling 750-800 us", decode(4, 750*us, 800*us), 0},
		{"CUDA graph every 20 ms", graph(60), 12},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			last := tt.w.want[len(tt.w.want)-1].End
			got := run(d, tt.w.evs, ms, last+time2ns(time.Second))
			if !d.Learnt() {
				t.Fatalf("no gap learnt; gap %v", d.Gap())
			}
			if g := uint64(d.Gap()); g <= tt.w.maxInner || g >= tt.w.minOuter {
				t.Errorf("learnt gap %v, want between the longest gap inside a request (%v) and the shortest between (%v)",
					d.Gap(), time.Duration(tt.w.maxInner), time.Duration(tt.w.minOuter))
			}
			byStart := map[uint64]request.Request{}
			for i, r := range got {
				if r.Kind != request.KindRequest || r.End < r.Start {
					t.Errorf("request %d: %+v", i, r)
				}
				if i > 0 && r.Start < got[i-1].End {
					t.Errorf("request %d overlaps the one before: %+v after %+v", i, r, got[i-1])
				}
				byStart[r.Start] = r
			}
			for i, want := range tt.w.want[tt.learnFrom:] {
				r, ok := byStart[want.Start]
				if !ok || r.End != want.End || r.Launches != want.Launches {
					t.Fatalf("request %d: got %+v (found %v), want start %d end %d launches %d; %d requests in all",
						tt.learnFrom+i, r, ok, want.Start, want.End, want.Launches, len(got))
				}
			}
			if d.Mode() != request.KindRequest {
				t.Errorf("mode %v", d.Mode())
			}
		})
	}
}

func time2ns(d time.Duration) uint64 { return uint64(d) }

// Until a gap is learnt the ceiling is the gap: requests of an LC whose
// requests come closer together than that run into one busy period.
func TestDelimiterCeilingUntilLearnt(t *testing.T) {
	w := resnet(3)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, w.evs, ms, w.want[len(w.want)-1].End+100*ms)
	if d.Learnt() || d.Gap() != request.DefaultQuietCeiling {
		t.Fatalf("learnt %v from 3 requests (2 gaps between): gap %v", d.Learnt(), d.Gap())
	}
	if len(got) != 1 || got[0].Start != w.want[0].Start || got[0].End != w.want[2].End {
		t.Errorf("got %+v, want one busy period over the three", got)
	}
}

// A process that never goes quiet (a continuous-batching decode loop) is
// measured per step once its busy period outlasts StepAfter: each step a
// synchronize return to the next, with its launches; no request. Once
// it goes quiet, it is measured per request again.
func TestDelimiterNeverQuiet(t *testing.T) {
	w := newWorkload(4)
	tp := uint64(1e9)
	var ends []uint64
	for tp < 1e9+15_000*ms {
		var end uint64
		_, end = w.step(lcProc, tp, 400, 20*us, 40*us, 2*ms)
		ends = append(ends, end)
		tp = end + w.between(100*us, 300*us)
	}
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, w.evs, ms, ends[len(ends)-1])
	if d.Mode() != request.KindStep {
		t.Fatalf("mode %v after 15 s busy", d.Mode())
	}
	if len(got) == 0 {
		t.Fatal("no steps")
	}
	endSet := map[uint64]int{}
	for i, e := range ends {
		endSet[e] = i
	}
	for _, r := range got {
		i, ok := endSet[r.End]
		if r.Kind != request.KindStep || !ok || i == 0 || r.Start != ends[i-1] || r.Launches != 400 {
			t.Fatalf("step %+v: want a step from one synchronize return to the next with 400 launches", r)
		}
		if r.Start < 1e9+uint64(request.DefaultStepAfter)-20*ms {
			t.Fatalf("step %+v before the process was seen never quiet", r)
		}
	}
	// The loop stops; a while later a request of 20 ms comes.
	after := ends[len(ends)-1] + 2000*ms
	w2 := newWorkload(5)
	_, end := w2.step(lcProc, after, 10, 100*us, 100*us, 10*ms)
	more := run(d, w2.evs, ms, end+100*ms)
	if len(more) != 1 || more[0].Kind != request.KindRequest || more[0].Start != after || more[0].End != end || d.Mode() != request.KindRequest {
		t.Errorf("after the loop stopped: %+v, mode %v; want the request", more, d.Mode())
	}
}

// One busy period over all a process's threads: a thread inside a long
// synchronize keeps it busy while another is quiet past the ceiling, and
// launches and synchronizes of different threads make one request.
func TestDelimiterThreads(t *testing.T) {
	a := lcProc
	b := tracetest.Process{PID: lcProc.PID, TID: 12, Comm: "lc"}
	var evs []trace.Event
	t0 := uint64(1e9)
	for i := range 5 {
		evs = append(evs, at(a, trace.RoleLaunch, false, t0+uint64(i)*500*us))
	}
	evs = append(evs,
		at(b, trace.RoleSync, false, t0+1*ms),
		at(b, trace.RoleSync, true, t0+40*ms), // 37 ms after a's last launch
		at(a, trace.RoleLaunch, false, t0+40*ms+200*us),
		at(a, trace.RoleSync, false, t0+41*ms),
		at(a, trace.RoleSync, true, t0+45*ms),
	)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, evs, ms, t0+200*ms)
	if len(got) != 1 || got[0].Start != t0 || got[0].End != t0+45*ms || got[0].Launches != 6 || got[0].TID != a.TID {
		t.Fatalf("got %+v, want one request over both threads, 0-45 ms, 6 launches", got)
	}
}

// A request open when a window closes (Tick) is not cut there: it ends at
// its last synchronize's return, once its gap has passed, whether Tick or
// the next event finds that out.
func TestDelimiterTickSpansWindows(t *testing.T) {
	t0 := uint64(1e9)
	w := newWorkload(6)
	_, end := w.step(lcProc, t0, 20, 100*us, 100*us, 30*ms)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	var got []request.Request
	for _, ev := range w.evs {
		if r, ok := d.Apply(ev); ok {
			got = append(got, r)
		}
		if ev.Time() == t0+10*us*100 { // a window's end, mid-request
			if r, ok := d.Tick(ev.Time() + 5*us); ok {
				got = append(got, r)
			}
		}
	}
	if r, ok := d.Tick(t0 + 5*ms); ok { // inside the synchronize
		got = append(got, r)
	}
	gap := uint64(d.Gap())
	if r, ok := d.Tick(end + gap - 1); ok {
		got = append(got, r)
	}
	if len(got) != 0 {
		t.Fatalf("closed before its gap passed: %+v", got)
	}
	r, ok := d.Tick(end + gap)
	if !ok || r.Start != t0 || r.End != end || r.Launches != 20 {
		t.Fatalf("Tick at the gap's end: %+v %v; want the request %d-%d", r, ok, t0, end)
	}
	if _, ok := d.Tick(end + 2*gap); ok {
		t.Error("closed twice")
	}
	// The next event finds the gap out too, without a Tick.
	d2 := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	for _, ev := range w.evs {
		d2.Apply(ev)
	}
	r2, ok := d2.Apply(at(lcProc, trace.RoleLaunch, false, end+gap+ms))
	if !ok || r2.End != end || r2.Start != t0 {
		t.Errorf("next event: %+v %v", r2, ok)
	}
}

// Blind (launches not seen) with Busy: gaps that end at a synchronize
// teach nothing, and a quiet gap needs the last thread not busy.
func TestDelimiterBlind(t *testing.T) {
	busy := true
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{Busy: func(uint32) bool { return busy }})
	d.Blind(true)
	t0 := uint64(1e9)
	var evs []trace.Event
	// 40 tokens: two synchronizes each (two streams), 15 ms apart: the
	// launches between are not seen, so the 13 ms gaps are no quiet.
	for i := range 40 {
		s := t0 + uint64(i)*15*ms
		evs = append(evs, at(lcProc, trace.RoleSync, false, s), at(lcProc, trace.RoleSync, true, s+1*ms),
			at(lcProc, trace.RoleSync, false, s+1*ms+30*us), at(lcProc, trace.RoleSync, true, s+2*ms))
	}
	last := t0 + 39*15*ms + 2*ms
	got := run(d, evs, ms, last+30*ms)
	if d.Learnt() || len(got) != 0 {
		t.Fatalf("learnt %v (gap %v), requests %+v: a blind gap taught it, or a busy thread was quiet", d.Learnt(), d.Gap(), got)
	}
	busy = false
	r, ok := d.Tick(last + 31*ms)
	if !ok || r.Start != t0 || r.End != last {
		t.Errorf("once the thread sleeps: %+v %v", r, ok)
	}
}

// FuzzDelimiter: any sequence of calls and ticks of one process's three
// threads, each on a CPU or asleep between its calls (its CPU time
// carried by them): no negative latency, requests ordered and apart, steps within
// their busy period, a gap within its bounds, memory bounded by the
// threads.
func FuzzDelimiter(f *testing.F) {
	f.Add([]byte{0, 10, 1, 20, 2, 200, 3, 255, 0, 1})
	f.Add([]byte{1, 5, 2, 250, 0, 3, 0, 3, 1, 3, 2, 255, 3, 255, 3, 255})
	f.Fuzz(func(t *testing.T, b []byte) {
		d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{StepAfter: 50 * time.Millisecond})
		now := uint64(1e9)
		cpu := map[uint32]time.Duration{}
		var reqs []request.Request
		for i := 0; i+1 < len(b); i += 2 {
			op, arg := b[i], b[i+1]
			step := uint64(arg) * uint64(arg) * 2 * us // up to ~130 ms
			now += step
			p := lcProc
			p.TID = 11 + uint32(op>>4)%3
			if op&8 != 0 {
				cpu[p.TID] += time.Duration(step)
			}
			call := func(role trace.Role, ret bool) trace.Event {
				return tracetest.WithCPU(at(p, role, ret, now).(*trace.Call), cpu[p.TID])
			}
			var r request.Request
			var ok bool
			switch op % 5 {
			case 0:
				r, ok = d.Apply(call(trace.RoleLaunch, false))
			case 1:
				r, ok = d.Apply(call(trace.RoleSync, false))
			case 2:
				r, ok = d.Apply(call(trace.RoleSync, true))
			case 3:
				r, ok = d.Tick(now)
			case 4:
				r, ok = d.Apply(&trace.TaskExit{PID: p.PID, At: now})
			}
			if !ok {
				continue
			}
			if r.End < r.Start || r.Start == 0 || r.End > now || r.Launches < 0 || r.PID != lcProc.PID {
				t.Fatalf("bad %+v at %d", r, now)
			}
			if r.Kind == request.KindStep && r.Launches == 0 {
				t.Fatalf("a step with no launch: %+v", r)
			}
			if r.Kind == request.KindRequest {
				if n := len(reqs); n > 0 && r.Start < reqs[n-1].End {
					t.Fatalf("request %+v overlaps %+v", r, reqs[n-1])
				}
				reqs = append(reqs, r)
			}
			if g := d.Gap(); g < request.DefaultQuietFloor || g > request.DefaultQuietCeiling {
				t.Fatalf("gap %v out of bounds", g)
			}
		}
		if n := request.DelimiterThreads(d); n > 3 {
			t.Fatalf("%d threads remembered of 3", n)
		}
	})
}

// TestDelimiterQueuedWork: a request begins at the input copy queued before
// its first kernel, and counts kernel launches alone; a copy and a
// synchronize launch nothing (request tracing leaves such a period out).
func TestDelimiterQueuedWork(t *testing.T) {
	queue := func(t uint64) trace.Event {
		return tracetest.Call(lcProc, trace.RoleQueue, "cuMemcpyHtoDAsync_v2", 7, false, 0, &tracetest.Clock{Now: t}, 0)
	}
	base := uint64(time.Second)
	evs := []trace.Event{
		queue(base), at(lcProc, trace.RoleLaunch, false, base+300*us), at(lcProc, trace.RoleLaunch, false, base+310*us),
		at(lcProc, trace.RoleSync, false, base+320*us), at(lcProc, trace.RoleSync, true, base+2*ms),
		queue(base + 20*ms), at(lcProc, trace.RoleSync, false, base+20*ms+100*us), at(lcProc, trace.RoleSync, true, base+21*ms),
	}
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{Ceiling: 5 * time.Millisecond})
	got := run(d, evs, ms, base+40*ms)
	if len(got) != 2 {
		t.Fatalf("%d requests %+v, want 2", len(got), got)
	}
	if r := got[0]; r.Start != base || r.First != "cuMemcpyHtoDAsync_v2" || r.End != base+2*ms || r.Launches != 2 {
		t.Errorf("first %+v: want it from the copy (%d) to the synchronize's return, 2 launches", r, base)
	}
	if r := got[1]; r.Launches != 0 {
		t.Errorf("second %+v: a copy launches nothing", r)
	}
}

// Gaps shows what the gap is learnt from: every gap between busy moments
// once, in its bucket, with the learnt gap between the launch gaps'
// cluster and the gaps between requests.
func TestDelimiterGaps(t *testing.T) {
	w := resnet(20)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	run(d, w.evs, ms, w.want[len(w.want)-1].End+100*ms)
	gs := d.Gaps()
	var n float64
	var between float64
	gap := float64(d.Gap()) / 1e3
	for i, g := range gs {
		if i > 0 && g.LowUs <= gs[i-1].LowUs {
			t.Fatalf("buckets out of order: %+v", gs)
		}
		if g.Count <= 0 || g.Inside != 0 {
			t.Errorf("bucket %+v: want gaps, none of CPU work (no CPU times given)", g)
		}
		n += g.Count
		if g.LowUs > gap {
			between += g.Count
		} else if g.LowUs*math.Sqrt2 > gap {
			t.Errorf("bucket %+v straddles the learnt gap %vus", g, gap)
		}
	}
	// 50 launches and a synchronize a request: 50 gaps inside, 1 after it (none while it waits).
	if !d.Learnt() || n != 20*51-1 || between != 19 {
		t.Errorf("learnt %v: %v gaps, %v above the gap %v; want 1019 and 19\n%+v", d.Learnt(), n, between, d.Gap(), gs)
	}
}
