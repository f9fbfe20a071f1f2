package request_test

import (
	"cmp"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

// cpuThread is one thread's calls with the CPU time they carry: it runs
// (on a CPU) or waits (asleep) between them.
type cpuThread struct {
	w     *workload
	p     tracetest.Process
	now   uint64
	cpu   time.Duration
	known bool // the calls carry the CPU time (else 0: unknown)
	// tick, if set, is the scheduler tick: a running thread's CPU time is
	// read as of its last tick or wake-up (the kernel's sum_exec_runtime).
	tick, woke uint64
	// blocked counts the thread's sleeps; the calls carry it if knowBlocked
	// (trace.Call.Blocked, the kernel's nvcsw).
	blocked     uint64
	knowBlocked bool
	// spin: its synchronizes spin on a CPU (CUDA's default with a CPU to spare), never blocking.
	spin bool
}

func newCPUThread(w *workload, known bool) *cpuThread {
	return &cpuThread{w: w, p: lcProc, now: 1e9, cpu: time.Second, known: known, woke: 1e9}
}

func (c *cpuThread) run(d uint64) { c.now += d; c.cpu += time.Duration(d) }
func (c *cpuThread) wait(d uint64) {
	if d > 0 {
		c.now, c.woke = c.now+d, c.now+d
		c.blocked++
	}
}

// read is the CPU time a call carries: behind by the time run since the
// last tick or wake-up, when there is a tick.
func (c *cpuThread) read() time.Duration {
	if c.tick == 0 {
		return c.cpu
	}
	return c.cpu - time.Duration(c.now-max(c.now-c.now%c.tick, c.woke))
}

func (c *cpuThread) call(role trace.Role, ret bool) {
	ev := at(c.p, role, ret, c.now).(*trace.Call)
	if c.known {
		tracetest.WithCPU(ev, c.read())
	}
	if c.knowBlocked {
		tracetest.WithBlocked(ev, c.blocked+1)
	}
	c.w.evs = append(c.w.evs, ev)
}

// step is n launches gapLo-gapHi apart, the thread running between them,
// then a synchronize that sleeps (or spins) for tail; it returns the return's time.
func (c *cpuThread) step(n int, gapLo, gapHi, tail uint64) uint64 {
	for i := range n {
		if i > 0 {
			c.run(c.w.inner(c.w.between(gapLo, gapHi)))
		}
		c.call(trace.RoleLaunch, false)
	}
	c.run(c.w.inner(c.w.between(gapLo, gapHi)))
	c.call(trace.RoleSync, false)
	if c.spin {
		c.run(tail)
	} else {
		c.wait(tail)
	}
	c.call(trace.RoleSync, true)
	return c.now
}

// strayStep is n launches 20-200 us apart, the gap before launch at (0:
// none) a stray of CPU work in [lo, hi], then a synchronize that sleeps
// 500 us; it returns the return's time.
func (c *cpuThread) strayStep(n, at int, lo, hi uint64) uint64 {
	for k := range n {
		if g := c.w.between(20*us, 200*us); k > 0 {
			if k == at {
				g = c.w.between(lo, hi)
			}
			c.run(c.w.inner(g))
		}
		c.call(trace.RoleLaunch, false)
	}
	c.run(c.w.inner(c.w.between(20*us, 200*us)))
	c.call(trace.RoleSync, false)
	c.wait(500 * us)
	c.call(trace.RoleSync, true)
	return c.now
}

// generate is an eager HuggingFace generate() of 16 tokens every 800 ms
// (the shape of GPU-FACTS.md's): per token 200 launches 25-40 us apart and a
// synchronize that sleeps 5-8 ms, and between tokens 2-8 ms of Python
// (sampling, stopping criteria) on a CPU, launching nothing; between
// requests, ~460 ms asleep.
func generate(n int, known bool) *workload { return generateTicks(n, known, 0, false) }

// generateTicks is generate with CPU times read at ticks of tick (0: exact), and the thread's
// blocks if knowBlocked.
func generateTicks(n int, known bool, tick uint64, knowBlocked bool) *workload {
	w := newWorkload(7)
	c := newCPUThread(w, known)
	c.tick, c.knowBlocked = tick, knowBlocked
	w.periodic(n, 800*ms, func(_ int, start uint64) (end uint64, launches int) {
		c.wait(start - c.now)
		for tok := range 16 {
			if tok > 0 {
				c.run(w.inner(w.between(2*ms, 8*ms)))
			}
			end = c.step(200, 25*us, 40*us, w.between(5*ms, 8*ms))
		}
		return end, 16 * 200
	})
	return w
}

// decodeOpts are how busyDecode's thread reads: the CPU times at ticks of tick, its blocks if
// knowBlocked; with gil, its sampling waits 30 us for another thread midway (the GIL: the thread
// blocks in work); with spin, its synchronizes spin.
type decodeOpts struct {
	tick                   uint64
	knowBlocked, gil, spin bool
}

// busyDecode is an eager decode of k tokens every period, per token 60 launches 10-20 us apart
// and a synchronize that sleeps 3-5 ms, with 1.2-2 ms of sampling on a CPU between tokens: a
// loaded server, its gaps between requests short.
func busyDecode(n, k int, period uint64, o decodeOpts) *workload {
	w := newWorkload(7)
	c := newCPUThread(w, true)
	c.tick, c.knowBlocked, c.spin = o.tick, o.knowBlocked, o.spin
	gil := o.gil
	w.periodic(n, period, func(_ int, start uint64) (end uint64, launches int) {
		c.wait(start - c.now)
		for tok := range k {
			switch {
			case tok > 0 && gil:
				g := w.between(1200*us, 2*ms)
				c.run(g / 2)
				c.wait(30 * us)
				c.run(g - g/2)
				w.inner(g + 30*us)
			case tok > 0:
				c.run(w.inner(w.between(1200*us, 2*ms)))
			}
			end = c.step(60, 10*us, 20*us, w.between(3*ms, 5*ms))
		}
		return end, k * 60
	})
	return w
}

// resnetCPU is resnet's stream with CPU times: launches on a CPU, the
// synchronize and the ~14 ms to the next request asleep.
func resnetCPU(n int) *workload {
	w := newWorkload(8)
	c := newCPUThread(w, true)
	w.periodic(n, 20*ms, func(_ int, start uint64) (uint64, int) {
		c.wait(start - c.now)
		return c.step(50, 20*us, 200*us, 500*us), 50
	})
	return w
}

// stray is a long gap between two launches spent on a CPU (a thread
// preempted, Python's collector), lo to hi long, in one request of every.
type stray struct {
	every  int
	lo, hi uint64
}

// spinSync is an LC every 18 ms whose synchronize spins (CUDA's default with a CPU to spare: it
// never blocks), 50 launches 20-200 us apart and 8-10 ms of spinning, then 0.5-1 ms of Python and
// a sleep of ~2-4 ms to the next arrival; the CPU times read at 4 ms ticks, the blocks known. Each
// gap between requests has the thread block, and its CPU time at the synchronize's return lags by
// up to a tick.
func spinSync(n int) *workload {
	w := newWorkload(17)
	c := newCPUThread(w, true)
	c.tick, c.knowBlocked, c.spin = 4*ms, true, true
	w.periodic(n, 18*ms, func(_ int, start uint64) (uint64, int) {
		c.wait(start - c.now)
		end := c.step(50, 20*us, 200*us, w.between(8*ms, 10*ms))
		c.run(w.between(500*us, ms))
		return end, 50
	})
	return w
}

// resnetStray is resnetCPU with strays (seeded by seed), the calls
// carrying CPU times (if known) read at ticks of tick (0: exact).
func resnetStray(n int, s stray, seed uint64, known bool, tick uint64) *workload {
	w := newWorkload(seed)
	c := newCPUThread(w, known)
	c.tick = tick
	w.periodic(n, 20*ms, func(i int, start uint64) (uint64, int) {
		c.wait(start - c.now)
		at := 0
		if i%s.every == 3%s.every {
			at = 25
		}
		return c.strayStep(50, at, s.lo, s.hi), 50
	})
	return w
}

// resnetPause is an LC every 40 ms whose requests are two phases of 25
// launches, each with a stray of 1.2-1.4 ms of CPU work, the first
// phase's synchronize followed by a pause of 4.2-5.5 ms asleep (waiting on
// another thread): ~27 ms asleep between requests.
func resnetPause(n int) *workload {
	w := newWorkload(12)
	c := newCPUThread(w, true)
	w.periodic(n, 40*ms, func(_ int, start uint64) (uint64, int) {
		c.wait(start - c.now)
		for phase := range 2 {
			if phase > 0 {
				c.wait(w.inner(w.between(4200*us, 5500*us)))
			}
			c.strayStep(25, 12, 1200*us, 1400*us)
		}
		return c.now, 50
	})
	return w
}

// twoThreads is requests every 100 ms served by two threads in turn, each
// of 20 launches on a CPU and a synchronize, asleep between; the second
// thread has run for far longer than the first.
func twoThreads(n int) *workload {
	w := newWorkload(10)
	a, b := newCPUThread(w, true), newCPUThread(w, true)
	b.p.TID, b.cpu = lcProc.TID+1, time.Minute
	for i := range n {
		c := a
		if i%2 == 1 {
			c = b
		}
		start := 1e9 + uint64(i)*100*ms
		c.wait(start - c.now)
		end := c.step(20, 50*us, 100*us, 2*ms)
		r := request.Request{PID: lcProc.PID, Kind: request.KindRequest, Start: start, End: end, Launches: 20}
		w.want = append(w.want, r)
		w.minOuter = min(w.minOuter, 1e9+uint64(i+1)*100*ms-end)
	}
	return w
}

// outcome is what a workload's requests come out as.
type outcome uint8

const (
	// learntExact: the gap is learnt above every gap inside a request and
	// below every gap between two, and each request comes out exact.
	learntExact outcome = iota
	// ceilingWhole: no clear split, the gap stays the ceiling, and the
	// requests, more than the ceiling apart, come out exact.
	ceilingWhole
	// firstCut: the first request comes out cut where its thread ran.
	firstCut
	// runTogether: no clear split, and the requests, less than the
	// ceiling apart, run into fewer.
	runTogether
)

// TestDelimiterOnCPU: a gap the thread spent on a CPU is inside a
// request, one it slept through may end one.
func TestDelimiterOnCPU(t *testing.T) {
	rare := stray{every: 10, lo: 1500 * us, hi: 1500 * us}
	often := stray{every: 2, lo: 500 * us, hi: 2 * ms}
	tests := []struct {
		name string
		w    *workload
		want outcome
	}{
		// The Python between tokens is on a CPU: no quiet, though the
		// gaps are as long as the learnt gap would be without it.
		{"eager generate(), CPU time known", generate(8, true), learntExact},
		// CPU times read at 4 ms ticks: some of the Python between tokens
		// reads as asleep, but the gaps of CPU work above a split between
		// the launch gaps and it are no strays (strayShare): still no quiet.
		{"eager generate(), CPU time by ticks", generateTicks(12, true, 4*ms, false), learntExact},
		// The thread's blocks say what the ticks misread: the sampling never blocks.
		{"eager generate(), CPU time by ticks, blocks known", generateTicks(12, true, 4*ms, true), learntExact},
		// A loaded server at 10 ms ticks: most of the sampling reads as asleep, and the
		// sampling holds a fifth of the gap time; the few gaps of it flagged share their
		// buckets with more read asleep, so they are CPU work misread, no strays.
		{"busy eager decode of 16 tokens every 120 ms, CPU time by 10 ms ticks", busyDecode(60, 16, 120*ms, decodeOpts{tick: 10 * ms}), learntExact},
		{"busy eager decode of 8 tokens every 70 ms, CPU time by 10 ms ticks", busyDecode(60, 8, 70*ms, decodeOpts{tick: 10 * ms}), learntExact},
		{"busy eager decode of 8 tokens every 70 ms, blocks known", busyDecode(60, 8, 70*ms, decodeOpts{tick: 10 * ms, knowBlocked: true}), learntExact},
		// Every gap of sampling has the thread block once: by its CPU time, most of it is work.
		{"busy eager decode of 8 tokens every 70 ms, blocks known, a wait for the GIL in each sampling", busyDecode(60, 8, 70*ms, decodeOpts{tick: 4 * ms, knowBlocked: true, gil: true}), learntExact},
		// The behaviour where the CPU time is unknown (kernels and
		// traces without it), as before it was read: until requests have
		// ended, the between-token gaps and the launch gaps are the two
		// clusters (the first a large share of the gap time), the gap is
		// learnt between them (~1 ms) and the first generate() is cut
		// per token. Here the gaps between requests outweigh them later
		// and the gap is learnt again above them; with the noisier gaps
		// of a real app it stays at 1.7-8 ms (docs/GPU-FACTS.md).
		{"eager generate(), CPU time unknown", generate(8, false), firstCut},
		// A synchronize that spins leaves the CPU time at its return up to a tick behind, and the
		// block in the gap after it syncs it: some gaps between requests of a few milliseconds
		// read as work, and the requests run together. The error is on the side of requests too
		// long: judged as asleep from such a start, a decode whose synchronize spins and whose
		// sampling waits for the GIL is cut per token (the row below).
		{"an LC whose synchronize spins, short sleeps between requests, blocks known", spinSync(60), runTogether},
		{"busy eager decode of 8 tokens every 70 ms, its synchronize spinning, a wait for the GIL in each sampling", busyDecode(60, 8, 70*ms, decodeOpts{tick: 4 * ms, knowBlocked: true, gil: true, spin: true}), learntExact},
		// The ~14 ms between requests are asleep: still quiet.
		{"eager resnet50 every 20 ms, CPU time known", resnetCPU(60), learntExact},
		// A stray long gap of CPU work puts the gap above it, and the
		// requests are still delimited (without it one such gap kept the
		// gap from being learnt at all: docs/TRACING.md). Once
		// counted, its bucket joins the launch gaps' cluster, ~2 ms, less
		// than 16x below the gaps between requests: the asleep gaps are
		// split from the CPU work by 4x.
		{"eager resnet50 every 20 ms, a stray long gap of CPU work", resnetStray(60, rare, 11, true, 0), learntExact},
		// Strays of 0.5-2 ms in every other request, and CPU times read
		// at 4 ms scheduler ticks (docs/TRACING.md), so most strays look asleep and a
		// few launch gaps look like CPU work; the gaps between requests,
		// after a wake-up, do not.
		{"eager resnet50 every 20 ms, strays, CPU time by ticks", resnetStray(60, often, 13, true, 4*ms), learntExact},
		// As before the CPU time was read: the strays join the launch
		// gaps' cluster, which then joins the gaps between requests: no
		// split.
		{"eager resnet50 every 20 ms, strays, CPU time unknown", resnetStray(60, often, 13, false, 0), runTogether},
		// An asleep pause inside a request, less than 4x above its CPU
		// work: judged by length, and no clear split from the gaps
		// between requests.
		{"two phases with an asleep pause near the CPU work", resnetPause(30), ceilingWhole},
		// A gap from one thread's call to another's: the CPU times of
		// two threads say nothing of it.
		{"two threads in turn, CPU time known", twoThreads(10), learntExact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			last := tt.w.want[len(tt.w.want)-1].End
			got := run(d, tt.w.evs, ms, last+time2ns(time.Second))
			byStart := map[uint64]request.Request{}
			for _, r := range got {
				byStart[r.Start] = r
			}
			switch tt.want {
			case firstCut:
				first := tt.w.want[0]
				var pieces int
				for _, r := range got {
					if r.Start >= first.Start && r.End <= first.End {
						pieces++
					}
				}
				if pieces < 2 {
					t.Errorf("the first generate() in %d pieces (%d requests in all): want it cut", pieces, len(got))
				}
				return
			case runTogether:
				if d.Learnt() || len(got) >= len(tt.w.want) {
					t.Errorf("learnt %v gap %v, %d requests of %d: want the ceiling and requests run together",
						d.Learnt(), d.Gap(), len(got), len(tt.w.want))
				}
				return
			case ceilingWhole:
				if d.Learnt() {
					t.Errorf("learnt gap %v: want none (the longest gap inside a request %v, the shortest between %v)",
						d.Gap(), time.Duration(tt.w.maxInner), time.Duration(tt.w.minOuter))
				}
			case learntExact:
				if !d.Learnt() || uint64(d.Gap()) <= tt.w.maxInner || uint64(d.Gap()) >= tt.w.minOuter {
					t.Errorf("learnt %v gap %v: want one between the longest gap inside a request (%v) and the shortest between (%v)",
						d.Learnt(), d.Gap(), time.Duration(tt.w.maxInner), time.Duration(tt.w.minOuter))
				}
			}
			// resnet's first requests come before a gap is learnt
			// (TestDelimiterRequests): they run into one.
			from := 0
			if len(tt.w.want) > 12 {
				from = 12
			}
			for i, want := range tt.w.want[from:] {
				r, ok := byStart[want.Start]
				if !ok || r.End != want.End || r.Launches != want.Launches {
					t.Fatalf("request %d: got %+v (found %v), want start %d end %d launches %d; %d requests in all",
						from+i, r, ok, want.Start, want.End, want.Launches, len(got))
				}
			}
			if from == 0 && len(got) != len(tt.w.want) {
				t.Errorf("%d requests, want %d", len(got), len(tt.w.want))
			}
		})
	}
}

// A process that is never quiet is measured per step when its calls carry
// CPU times or blocks, though between steps it works 3-6 ms on a CPU (a
// decode server's scheduling in Python): without them, those gaps would be
// learnt as quiet and end requests. Its synchronizes sleep.
func TestDelimiterOnCPUNeverQuiet(t *testing.T) {
	for _, knowBlocked := range []bool{false, true} {
		w := newWorkload(9)
		c := newCPUThread(w, true)
		c.knowBlocked = knowBlocked
		var ends []uint64
		for c.now < 1e9+15_000*ms {
			ends = append(ends, c.step(400, 20*us, 40*us, 2*ms))
			c.run(w.between(3*ms, 6*ms))
		}
		d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
		got := run(d, w.evs, ms, ends[len(ends)-1])
		if d.Mode() != request.KindStep || len(got) == 0 {
			t.Fatalf("blocks known %v: mode %v, %d steps after 15 s busy", knowBlocked, d.Mode(), len(got))
		}
		for _, r := range got {
			if r.Kind != request.KindStep || r.Launches != 400 {
				t.Fatalf("blocks known %v: %+v: want steps of 400 launches", knowBlocked, r)
			}
		}
	}
}

// A one-off long gap of CPU work (a hiccup: the thread ran 60 ms between two launches) is a
// stray among the gaps slept through between requests: the learnt gap stays, and only the
// request holding it comes out cut there. Were it to forbid every split until the histogram
// halved it away (~20 s), the gap would fall back to the ceiling and an LC every 20 ms run
// together into one request. A hiccup as long as the gaps between requests, known to be work by
// the thread's blocks, is a stray too: only one judged by CPU time may be a tick's misreading.
func TestDelimiterOnCPUHiccup(t *testing.T) {
	for _, tc := range []struct {
		tick    uint64
		strays  bool   // 1.5 ms of CPU work in every other request besides, kept inside by the 4x rule
		hiccup  uint64 // its length (0: 60 ms)
		blocked bool   // the calls carry the thread's blocks
	}{{0, false, 0, false}, {4 * ms, false, 0, false}, {0, true, 0, false}, {4 * ms, false, 13 * ms, true}} {
		tick := tc.tick
		w := newWorkload(14)
		c := newCPUThread(w, true)
		c.tick, c.knowBlocked = tick, tc.blocked
		skip := map[int]bool{} // the hiccups' requests, cut at them, and those run late after them
		for i := range 120 {
			start := 1e9 + uint64(i)*20*ms
			if c.now < start {
				c.wait(start - c.now)
			} else {
				c.run(100 * us) // late: the next one at once, after the app's loop on a CPU
				start, skip[i] = c.now, true
			}
			at, g := 0, cmp.Or(tc.hiccup, 60*ms)
			switch {
			case i%50 == 30:
				at, skip[i], skip[i+1] = 25, true, true // the next one comes soon after it
			case tc.strays && i%2 == 1:
				at, g = 25, 1500*us
			}
			end := c.strayStep(50, at, g, g)
			w.want = append(w.want, request.Request{PID: lcProc.PID, Kind: request.KindRequest, Start: start, End: end, Launches: 50})
		}
		d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
		got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
		if !d.Learnt() {
			t.Fatalf("%+v: gap not learnt (%v) after the hiccups; gaps %+v", tc, d.Gap(), d.Gaps())
		}
		byStart := map[uint64]request.Request{}
		for _, r := range got {
			byStart[r.Start] = r
		}
		for i, want := range w.want[12:] {
			if skip[i+12] {
				continue
			}
			if r, ok := byStart[want.Start]; !ok || r.End != want.End || r.Launches != want.Launches {
				t.Fatalf("%+v: request %d: got %+v (found %v), want %+v", tc, i+12, r, ok, want)
			}
		}
	}
}

// pythonAfter is an eager resnet50 every 20 ms whose app runs post to post+1 ms of Python on a
// CPU after each request before it sleeps to the next arrival: per request 50 launches 20-200 us
// apart on a CPU and a synchronize that sleeps 500 us. The CPU times are read at 4 ms ticks; the
// calls carry the thread's blocks if knowBlocked.
func pythonAfter(n int, knowBlocked bool, post uint64) *workload {
	w := newWorkload(15)
	c := newCPUThread(w, true)
	c.tick, c.knowBlocked = 4*ms, knowBlocked
	w.periodic(n, 20*ms, func(_ int, start uint64) (uint64, int) {
		c.wait(start - c.now)
		end := c.strayStep(50, 0, 0, 0)
		c.run(w.between(post, post+ms))
		return end, 50
	})
	return w
}

// TestDelimiterBlocked: where the calls say how often the thread blocked, a gap it slept in is
// asleep and one it never slept in is work, whatever its CPU time reads. The CPU time lags by up
// to a scheduler tick: an app with about as much Python after a request as it then sleeps reads,
// with a tick's lag, as more than half CPU work in many of its gaps between requests, which
// forbids every split, and its requests run together. A thread preempted in a request (it waits
// for a CPU, never blocked) is inside it: once such a gap is learnt, the quiet gap lies above it
// (the first is cut as the tick finds the process quiet for the gap in force); by CPU time the
// gap reads asleep and cuts every such request.
func TestDelimiterBlocked(t *testing.T) {
	for _, knowBlocked := range []bool{false, true} {
		w := pythonAfter(100, knowBlocked, 6*ms)
		d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
		got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
		if !knowBlocked {
			if d.Learnt() || len(got) >= len(w.want)/2 {
				t.Errorf("by CPU time: learnt %v, %d requests of %d: want the gap lost and the requests run together", d.Learnt(), len(got), len(w.want))
			}
			continue
		}
		if !d.Learnt() || uint64(d.Gap()) <= w.maxInner || uint64(d.Gap()) >= w.minOuter {
			t.Fatalf("by blocks: learnt %v gap %v: want one between %v and %v; gaps %+v", d.Learnt(), d.Gap(),
				time.Duration(w.maxInner), time.Duration(w.minOuter), d.Gaps())
		}
		byStart := map[uint64]request.Request{}
		for _, r := range got {
			byStart[r.Start] = r
		}
		for i, want := range w.want[12:] {
			if r, ok := byStart[want.Start]; !ok || r.End != want.End || r.Launches != want.Launches {
				t.Fatalf("by blocks: request %d: got %+v (found %v), want %+v", i+12, r, ok, want)
			}
		}
	}
	for _, knowBlocked := range []bool{false, true} {
		w := newWorkload(16)
		c := newCPUThread(w, true)
		c.knowBlocked = knowBlocked
		w.periodic(40, 20*ms, func(i int, start uint64) (uint64, int) {
			c.wait(start - c.now)
			for k := range 50 {
				switch {
				case k == 25 && (i == 25 || i == 30):
					c.now += 5 * ms // preempted: no CPU time, no block
				case k > 0:
					c.run(w.between(20*us, 200*us))
				}
				c.call(trace.RoleLaunch, false)
			}
			c.run(100 * us)
			c.call(trace.RoleSync, false)
			c.wait(500 * us)
			c.call(trace.RoleSync, true)
			return c.now, 50
		})
		d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
		got := run(d, w.evs, ms, w.want[len(w.want)-1].End+time2ns(time.Second))
		want := w.want[30]
		var whole bool
		for _, r := range got {
			whole = whole || r.Start == want.Start && r.End == want.End && r.Launches == 50
		}
		if !d.Learnt() || whole != knowBlocked {
			t.Errorf("blocks known %v: learnt %v gap %v, the preempted request whole %v: want it whole only by blocks", knowBlocked, d.Learnt(), d.Gap(), whole)
		}
	}
}
