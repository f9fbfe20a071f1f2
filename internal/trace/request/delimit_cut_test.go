package request_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

// calls builds an LC's calls thread by thread; sorted gives them in time order.
type calls struct{ evs []trace.Event }

// launches is n launches of thread tid from t, 20 us apart, after an input's copy queued
// (copy, if not ""), as an HF decode's request begins; it returns the last's time.
func (c *calls) launches(tid uint32, t uint64, n int, copy string) uint64 {
	p := lcProc
	p.TID = tid
	if copy != "" {
		c.evs = append(c.evs, tracetest.Call(p, trace.RoleQueue, copy, 0, false, 0, &tracetest.Clock{Now: t}, 0))
		t += 20 * us
	}
	for range n {
		c.evs = append(c.evs, tracetest.Call(p, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, &tracetest.Clock{Now: t}, 0))
		t += 20 * us
	}
	return t - 20*us
}

func (c *calls) sync(tid uint32, enter, ret uint64) {
	p := lcProc
	p.TID = tid
	c.evs = append(c.evs, at(p, trace.RoleSync, false, enter), at(p, trace.RoleSync, true, ret))
}

func (c *calls) sorted() []trace.Event {
	slices.SortStableFunc(c.evs, func(a, b trace.Event) int { return int(a.Time()) - int(b.Time()) })
	return c.evs
}

// taught is 40 requests of 10 launches and a synchronize, 20 ms apart: an exact program.
func taught(c *calls) uint64 {
	t := uint64(1e9)
	for range 40 {
		e := c.launches(11, t, 10, "")
		c.sync(11, e+20*us, e+520*us)
		t += 20 * ms
	}
	return t
}

// counted is how many requests got holds from t on, and those cut.
func counted(got []request.Request, t uint64) (n, cut int) {
	for _, r := range got {
		if r.Start >= t && r.Kind == request.KindRequest {
			n += r.Count()
			if r.Cut > 0 {
				cut++
			}
		}
	}
	return n, cut
}

// backToBackBlind is taught's LC, then n requests back to back, each 10 launches and a
// synchronize; blind says, before request k's i-th call, whether the consumer is blind and
// whether the call goes unseen; the consumer sees again before the last Tick. It returns what the
// Delimiter made, the first request's start and every request's.
func backToBackBlind(n int, blind func(k, i int) (on, unseen bool)) (got []request.Request, t0 uint64, starts []uint64) {
	var c calls
	t0 = taught(&c)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got = run(d, c.sorted(), ms, t0-ms)
	c.evs = nil
	tt := t0
	for k := range n {
		starts = append(starts, tt)
		e := c.launches(11, tt, 10, "")
		c.sync(11, e+20*us, e+520*us)
		tt = e + 720*us
		for i, ev := range c.sorted() {
			on, unseen := blind(k, i)
			if d.Blind(on); unseen {
				continue
			}
			if r, ok := d.Apply(ev); ok {
				got = append(got, r)
			}
		}
		c.evs = nil
	}
	d.Blind(false)
	if r, ok := d.Tick(tt + time2ns(time.Second)); ok {
		got = append(got, r)
	}
	return got, t0, starts
}

// threeBackToBack is taught's LC, then three requests back to back, the
// second's synchronize as second makes it (its last launch at e2), the
// third's 500 us; it returns what the Delimiter made, the first's start and
// the first's and second's last launch.
func threeBackToBack(second func(c *calls, e2 uint64)) (got []request.Request, t0, e1, e2 uint64) {
	var c calls
	t0 = taught(&c)
	e1 = c.launches(11, t0, 10, "")
	c.sync(11, e1+20*us, e1+520*us)
	e2 = c.launches(11, e1+720*us, 10, "")
	second(&c, e2)
	e3 := c.launches(11, e2+100*us, 10, "")
	c.sync(11, e3+20*us, e3+520*us)
	return run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, e3+time2ns(time.Second)), t0, e1, e2
}

// TestDelimiterCutStops: where a request's start is not clear as the next
// program's worth begins, a busy period is no longer cut there, and its
// rest is counted at its close, its cut requests not again.
func TestDelimiterCutStops(t *testing.T) {
	t.Run("a synchronize under way at the next request's first launch", func(t *testing.T) {
		// Three requests back to back; the second's synchronize (another thread) returns after
		// the third's first launch: a pipeline.
		got, t0, e1, e2 := threeBackToBack(func(c *calls, e2 uint64) { c.sync(12, e2+10*us, e2+600*us) })
		if n, cut := counted(got, t0); n != 3 || cut != 2 {
			t.Errorf("%d requests counted, %d cut: want 3, the first cut and the two after counted at their close", n, cut)
		}
		// The second's own last synchronize is in what it is counted with.
		for _, r := range got {
			if r.Start > e1 && r.Start <= e2 && r.End < e2+600*us {
				t.Errorf("request from %d ends at %d, before its synchronize's return %d", r.Start, r.End, e2+600*us)
			}
		}
	})
	t.Run("a request's last synchronize returning after the next's first launch", func(t *testing.T) {
		// Requests of 4 steps, a synchronize each; behind, the first's last synchronize (another
		// thread) returns after the second's first launch.
		var c calls
		req := func(from uint64, lastTID uint32) (end, next uint64) {
			for k := range 4 {
				e := c.launches(11, from, 10, "")
				if k == 3 && lastTID != 11 {
					c.sync(lastTID, e+20*us, e+5*ms)
					return e + 5*ms, e + 100*us
				}
				c.sync(11, e+20*us, e+5*ms)
				from = e + 5*ms + 100*us
			}
			return from - 100*us, from + 100*us
		}
		now := uint64(1e9)
		for range 40 {
			req(now, 11)
			now += 100 * ms
		}
		t0 := now
		end1, next := req(now, 12)
		req(next, 11)
		got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, next+time2ns(time.Second))
		for _, r := range got {
			if r.Start == t0 && r.End < end1 {
				t.Errorf("the first request read %v (cut %d), ending %v before its last synchronize's return", r.Latency(), r.Cut, time.Duration(end1-r.End))
			}
		}
		if n, cut := counted(got, t0); n != 2 || cut != 0 {
			t.Errorf("%d requests counted, %d cut: want 2, at their close", n, cut)
		}
	})
	t.Run("requests that begin with different calls", func(t *testing.T) {
		// Told apart, every other request begins with its input's copy: its start is no call to cut at.
		var c calls
		now := uint64(1e9)
		for i := range 40 {
			first := ""
			if i%2 == 0 {
				first = "cuMemcpyHtoDAsync_v2"
			}
			e := c.launches(11, now, 10, first)
			c.sync(11, e+20*us, e+520*us)
			now += 20 * ms
		}
		t0 := now
		for range 3 { // each begins with the call the window's first began with
			e := c.launches(11, now, 10, "cuMemcpyHtoDAsync_v2")
			c.sync(11, e+20*us, e+520*us)
			now = e + 720*us
		}
		got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
		if n, cut := counted(got, t0); n != 3 || cut != 0 {
			t.Errorf("%d requests counted, %d cut: want 3 at the busy period's close", n, cut)
		}
	})
	t.Run("the next input uploaded before the result is waited for", func(t *testing.T) {
		// Requests of an input's copy, 10 launches, a synchronize (control flow), 10 launches
		// and the result's; behind, the app queues the next input's copy before it waits for
		// the result: the current request is not over at that copy.
		const in = "cuMemcpyHtoDAsync_v2"
		var c calls
		body := func(from uint64) uint64 {
			e := c.launches(11, from, 10, in)
			c.sync(11, e+20*us, e+300*us)
			return c.launches(11, e+400*us, 10, "")
		}
		now := uint64(1e9)
		for range 40 {
			e := body(now)
			c.sync(11, e+20*us, e+5*ms)
			now += 50 * ms
		}
		t0 := now
		var ends []uint64
		for i := range 4 {
			e := body(now)
			next := e + 100*us
			c.sync(11, e+150*us, e+5*ms) // the next input's copy (the next body's first call) comes first
			ends = append(ends, e+5*ms)
			if i < 3 {
				now = next
			}
		}
		got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, ends[3]+time2ns(time.Second))
		for _, r := range got {
			if r.Start >= t0 && r.Cut > 0 && !slices.Contains(ends, r.End) {
				t.Errorf("a request cut %d-%d: it ends at no request's result", r.Start, r.End)
			}
		}
		if n, _ := counted(got, t0); n != 4 {
			t.Errorf("%d requests counted: want 4", n)
		}
	})
	t.Run("a request that does not synchronize", func(t *testing.T) {
		// Three back to back; the second leaves its work to the third's synchronize.
		got, t0, _, _ := threeBackToBack(func(*calls, uint64) {})
		for _, r := range got {
			if r.Start >= t0 && (r.End <= r.Start || r.Latency() <= 0) {
				t.Errorf("a request from %d to %d (cut %d): want none that ends before it begins", r.Start, r.End, r.Cut)
			}
		}
	})
	t.Run("launches unseen in a request", func(t *testing.T) {
		// Four requests back to back; the consumer is blind through half the second's launches
		// (the gate's probes off): the program's worth counted on from there ends inside a request.
		got, _, starts := backToBackBlind(4, func(k, i int) (bool, bool) { return k == 1 && i < 5, k == 1 && i < 5 })
		for _, r := range got {
			if r.Cut > 0 && !slices.Contains(starts, r.Start) {
				t.Errorf("a request cut from %d: no request began there", r.Start)
			}
		}
	})
	t.Run("blind after a cut", func(t *testing.T) {
		// Three back to back; the consumer turns blind after the second begins.
		got, t0, _ := backToBackBlind(3, func(k, _ int) (bool, bool) { return k == 2, false })
		if n, _ := counted(got, t0); n != 3 {
			t.Errorf("%d requests counted: want 3", n)
		}
	})
	t.Run("a step of a longer request", func(t *testing.T) {
		// Requests that begin with their input's copy, 8 steps of 10 launches and a synchronize
		// each, told apart; then, never quiet for 20 s, requests of 16 steps: the program's
		// worth ends inside a request, at a step's first launch, not a request's.
		var c calls
		req := func(from uint64, steps int) uint64 {
			for k := range steps {
				first := ""
				if k == 0 {
					first = "cuMemcpyHtoDAsync_v2"
				}
				e := c.launches(11, from, 10, first)
				c.sync(11, e+20*us, e+5*ms)
				from = e + 5*ms + 100*us
			}
			return from
		}
		now := uint64(1e9)
		for range 40 {
			req(now, 8)
			now += 100 * ms
		}
		t0 := now
		for now < t0+20*uint64(time.Second) {
			now = req(now, 16) + 100*us
		}
		got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
		var steps int
		for _, r := range got {
			if r.Start >= t0 && r.Kind == request.KindStep {
				steps++
			}
		}
		if n, _ := counted(got, t0); n != 0 || steps == 0 {
			t.Errorf("%d requests, %d steps from the run back to back: want it measured per step, no request", n, steps)
		}
	})
}

// TestDelimiterCutAtFirstCall: an HF decode's request begins with its
// input's copy, queued, and ends with a copy of its result back and a
// synchronize; behind its arrivals, each request is cut at its own input's
// copy, from it to its result's synchronize, the copy back being its own,
// though it be the same call as the input's (cuMemcpyAsync both ways).
func TestDelimiterCutAtFirstCall(t *testing.T) {
	for _, calls := range [][2]string{{"cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"}, {"cuMemcpyAsync", "cuMemcpyAsync"}} {
		t.Run(calls[0]+", "+calls[1], func(t *testing.T) { cutAtFirstCall(t, calls[0], calls[1]) })
	}
}

func cutAtFirstCall(t *testing.T, in, back string) {
	var c calls
	p := lcProc
	req := func(from uint64) (end uint64) {
		at := from
		for k := range 4 { // 4 steps of 10 launches and a synchronize
			copy := ""
			if k == 0 {
				copy = in
			}
			e := c.launches(11, at, 10, copy)
			c.sync(11, e+20*us, e+2*ms)
			at = e + 2*ms + 100*us
		}
		c.evs = append(c.evs, tracetest.Call(p, trace.RoleQueue, back, 0, false, 0, &tracetest.Clock{Now: at}, 0))
		c.sync(11, at+10*us, at+200*us)
		return at + 200*us
	}
	now := uint64(1e9)
	for range 40 {
		req(now)
		now += 100 * ms
	}
	var want [][2]uint64
	for range 3 { // back to back
		end := req(now)
		want = append(want, [2]uint64{now, end})
		now = end + 300*us
	}
	got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
	var cut [][2]uint64
	for _, r := range got {
		if r.Start >= want[0][0] {
			if r.Count() != 1 {
				t.Errorf("request %d-%d counted %d: want each cut", r.Start, r.End, r.Count())
			}
			cut = append(cut, [2]uint64{r.Start, r.End})
		}
	}
	if !slices.Equal(cut, want) {
		t.Errorf("requests %v: want %v, each from its input's copy to its result's synchronize", cut, want)
	}
}

// TestDelimiterCutLongBehind: an LC behind its arrivals for seconds, its
// quiet gap's learning seeing only the gaps inside requests meanwhile,
// still has every request cut, each its own, and none measured per step;
// one that stops being cut 11 s in (a request that leaves its synchronize
// to the next) has the rest counted, not measured per step.
func TestDelimiterCutLongBehind(t *testing.T) {
	tests := []struct {
		name string
		n    int // requests back to back
		odd  int // the one with no synchronize of its own (-1: none)
	}{
		{"behind over a minute", 20000, -1},
		{"a request with no synchronize 11 s in", 2700, 2300},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c calls
			t0 := taught(&c)
			now := t0
			for i := range tt.n {
				e := c.launches(11, now, 10, "")
				if i == tt.odd {
					now = e + 200*us
					continue
				}
				c.sync(11, e+20*us, e+5*ms/10*9)
				now = e + 5*ms/10*9 + 200*us
			}
			got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
			steps := 0
			for _, r := range got {
				if r.Start >= t0 && r.Kind == request.KindStep {
					steps++
				}
			}
			if time.Duration(now-t0) < 2*time.Duration(tt.n)*time.Millisecond {
				t.Fatalf("behind %v: the workload should run its requests 2 ms or more each", time.Duration(now-t0))
			}
			if n, cut := counted(got, t0); n != tt.n || steps > 0 || tt.odd < 0 && cut != tt.n {
				t.Errorf("%d requests counted (%d cut), %d steps: want %d, none per step", n, cut, steps, tt.n)
			}
		})
	}
}

// TestDelimiterCutOneThread: requests served by two threads in turn, each
// starting as the other's first half returns, are no program's worth in
// turn: the busy period is not cut.
func TestDelimiterCutOneThread(t *testing.T) {
	var c calls
	half := func(tid uint32, from uint64) uint64 {
		e := c.launches(tid, from, 5, "")
		c.sync(tid, e+20*us, e+520*us)
		return e + 520*us
	}
	req := func(tid uint32, from uint64) uint64 { return half(tid, half(tid, from)+100*us) }
	now := uint64(1e9)
	for range 40 {
		req(11, now)
		now += 20 * ms
	}
	t0 := now
	for i := range 6 {
		req(uint32(11+i%2), now)
		now += 650 * us
	}
	got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
	if n, cut := counted(got, t0); n != 6 || cut != 0 {
		t.Errorf("%d requests counted, %d cut: want 6, none cut", n, cut)
	}
}

// TestDelimiterCutUnderItsGap: a busy decode whose tokens were told apart
// under a gap learnt from its sampling misread as asleep (1 ms), the gap
// then learnt again (5-12 ms): its whole requests, 8 or 16 tokens'
// launches, are neither cut nor counted as tokens, whose sizes the window
// held; it comes to hold the requests' own.
func TestDelimiterCutUnderItsGap(t *testing.T) {
	for _, k := range []int{8, 16} {
		t.Run(fmt.Sprintf("%d tokens", k), func(t *testing.T) {
			w := busyDecode(60, k, 120*ms, decodeOpts{tick: 10 * ms})
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
			if m, _, _ := d.Program(); m != 60*k {
				t.Errorf("program %d launches, want the request's %d", m, 60*k)
			}
			for _, r := range got {
				if r.Cut > 0 || r.Count() > 1 {
					t.Fatalf("the busy period from %d (%d launches) read as %d (cut %d): want none read as its tokens", r.Start, r.Launches, r.Count(), r.Cut)
				}
			}
		})
	}
}

// TestDelimiterSlowsUnlearnt: an LC whose launches slow tenfold midway (a
// CPU's slow mode: 10-20 us apart, then 100-200 us) with 0-3 ms between its
// requests loses its learnt gap (the two clusters meet), and its requests
// run as one busy period under the ceiling: they are still divided by the
// program the window holds, since an unlearnt gap measures nothing about
// it (judged by the ceiling, the last 300 were counted as 102).
func TestDelimiterSlowsUnlearnt(t *testing.T) {
	w := newWorkload(0)
	c := newCPUThread(w, true)
	for i := range 400 {
		if g := w.between(0, 3*ms); g > 100*us {
			c.wait(g)
		}
		lo, hi := uint64(10*us), uint64(20*us)
		if i >= 200 {
			lo, hi = 100*us, 200*us
		}
		start := c.now
		w.request(lcProc, start, c.step(60, lo, hi, w.between(ms, 2*ms)), 60)
	}
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
	if d.Learnt() {
		t.Fatalf("gap %v learnt: the workload should leave it unlearnt", d.Gap())
	}
	if n, _ := counted(got, w.want[100].Start); 100*abs(n-300) > 300 {
		t.Errorf("%d requests counted: want 300 within 1%%", n)
	}
}

// TestDelimiterCutOnceVaried: a request of another size seen once (one step
// where the program is two) says a running busy period may be a longer
// request; once the window is one size again its backlogs are divided at
// their close, but a longer request alone, its program's worth run, is not
// cut short there.
func TestDelimiterCutOnceVaried(t *testing.T) {
	var c calls
	req := func(from uint64, steps int) uint64 {
		for range steps {
			e := c.launches(11, from, 10, "")
			c.sync(11, e+20*us, e+520*us)
			from = e + 620*us
		}
		return from - 100*us
	}
	now := uint64(1e9)
	for i := range 40 {
		steps := 2
		if i == 10 {
			steps = 1
		}
		req(now, steps)
		now += 20 * ms
	}
	t1 := now
	req(req(now, 2)+100*us, 2) // two back to back
	now += 20 * ms
	t0 := now
	end := req(now, 3)
	got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, now+time2ns(time.Second))
	for _, r := range got {
		if r.Start == t0 && (r.End != end || r.Launches != 30 || r.Count() != 1) {
			t.Errorf("the longer request read %d launches as %d to %d (cut %d): want one of 30 to %d", r.Launches, r.Count(), r.End, r.Cut, end)
		}
	}
	if n, cut := counted(got, t1); n != 3 || cut != 0 {
		t.Errorf("%d requests counted, %d cut: want the backlog's 2, at its close, and the longer one", n, cut)
	}
}

// TestDelimiterBehindAtRandom: an LC whose requests (one program: 60
// launches and a synchronize) arrive 0-2 to 0-10 ms after the last one
// ended, so that it runs some back to back from its start, its first
// window mostly backlogs. Evidence of sizes that differ lasts as long as the
// busy period that gave it stays in the window: the requests after its
// first 100 are counted within 0.1% (none of 16,000 wrong; with that
// evidence kept for good, 485 were read into longer ones).
func TestDelimiterBehindAtRandom(t *testing.T) {
	lost, total := 0, 0
	for seed := range uint64(10) {
		for _, most := range []uint64{2 * ms, 3 * ms, 5 * ms, 10 * ms} {
			for _, tick := range []uint64{0, 4 * ms} {
				w := newWorkload(seed)
				c := newCPUThread(w, true)
				c.tick = tick
				for range 300 {
					if g := w.between(0, most); g > 200*us {
						c.wait(g)
					}
					start := c.now
					w.request(lcProc, start, c.step(60, 10*us, 20*us, w.between(ms, 2*ms)), 60)
				}
				got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
				n, _ := counted(got, w.want[100].Start)
				lost, total = lost+abs(len(w.want)-100-n), total+len(w.want)-100
			}
		}
	}
	if 1000*lost > total {
		t.Errorf("%d of %d requests counted wrong: want under 0.1%%", lost, total)
	}
}

func abs(x int) int { return max(x, -x) }

// TestDelimiterCutRest: a request longer than the program, cut at the
// program's worth as it ran, leaves a rest under the program; the window
// keeps the size it was, and nothing is cut from then on. Three steps where
// the program is two: a later request of four steps alone, whole multiple
// though it is, reads as one. Two steps and a launch: a later one, within
// the program's scatter, is not cut short again.
func TestDelimiterCutRest(t *testing.T) {
	tests := []struct {
		name          string
		longer, later [3]int // launches of up to three steps
	}{
		{"three steps, then four", [3]int{10, 10, 10}, [3]int{10, 10, 20}},
		{"two steps and a launch, twice", [3]int{10, 10, 1}, [3]int{10, 10, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c calls
			req := func(from uint64, steps [3]int) uint64 {
				for _, n := range steps {
					if n > 0 {
						e := c.launches(11, from, n, "")
						c.sync(11, e+20*us, e+520*us)
						from = e + 620*us
					}
				}
				return from - 100*us
			}
			now := uint64(1e9)
			for i := range 30 {
				steps := [3]int{10, 10}
				if i == 20 {
					steps = tt.longer
				}
				req(now, steps)
				now += 20 * ms
			}
			t0 := now
			end := req(now, tt.later)
			got := run(request.NewDelimiter(lcProc.PID, request.DelimiterConfig{}), c.sorted(), ms, end+time2ns(time.Second))
			if n, cut := counted(got, t0); n != 1 || cut != 0 {
				t.Errorf("the later request read as %d, %d cut: want one, whole", n, cut)
			}
		})
	}
}

// TestDelimiterCutRestBlind: a cut's rest short of the program because the
// consumer was blind through part of it (launches unseen) is no longer
// request: it is evidence only while it is in the window, and a backlog
// after the window has moved on is divided again.
func TestDelimiterCutRestBlind(t *testing.T) {
	var c calls
	t0 := taught(&c)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, c.sorted(), ms, t0-ms)
	apply := func(evs []trace.Event, blindFrom, blindTo int) {
		for i, ev := range evs {
			if d.Blind(i >= blindFrom && i < blindTo); i >= blindFrom && i < blindTo {
				continue // unseen
			}
			if r, ok := d.Apply(ev); ok {
				got = append(got, r)
			}
		}
	}
	// Two back to back; the consumer is blind through the second's last five launches.
	c.evs = nil
	e := c.launches(11, t0, 10, "")
	c.sync(11, e+20*us, e+520*us)
	e = c.launches(11, e+720*us, 10, "")
	c.sync(11, e+20*us, e+520*us)
	apply(c.sorted(), 12+5, 12+10) // the first's 10 launches and synchronize's two calls, the second's first five
	now := e + 20*ms
	for range 10 { // the window moves on
		c.evs = nil
		e := c.launches(11, now, 10, "")
		c.sync(11, e+20*us, e+520*us)
		apply(c.sorted(), -1, -1)
		now += 20 * ms
	}
	t1 := now
	c.evs = nil
	e = c.launches(11, now, 10, "")
	c.sync(11, e+20*us, e+520*us)
	e = c.launches(11, e+720*us, 10, "")
	c.sync(11, e+20*us, e+520*us)
	apply(c.sorted(), -1, -1)
	if r, ok := d.Tick(e + time2ns(time.Second)); ok {
		got = append(got, r)
	}
	if n, _ := counted(got, t1); n != 2 {
		t.Errorf("the backlog after it read as %d: want 2", n)
	}
}
