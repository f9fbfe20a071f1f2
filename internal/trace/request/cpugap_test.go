package request_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

// TestCPUGapIsTheRequestsCPUSpeed: 24 requests of an eager decode 800 ms apart, each at its CPU's speed (1, or
// 1.6 in stretches: a vCPU's modes), 12 tokens of 50 launches 18-22 µs apart times the speed, a synchronize asleep
// 3 ms after each token and 1 ms of sampling on the CPU between tokens; with naps, 3 of each 5 launch gaps also hold
// 100 µs asleep (a wait off the CPU). Each request's CPUGap must be 20 µs times its speed within 2% where the
// thread's blocks or its exact CPU time are read: gaps across a synchronize (the GPU's time) or a sleep are no CPU
// work's. With neither known, or a launch a token (no gap without a synchronize in it, asleep or spinning on the
// CPU), no CPU gap is read.
// (Gaps of one request's 600 launches fill the buckets of a histogram 1% wide: the median within 1%.)
func TestCPUGapIsTheRequestsCPUSpeed(t *testing.T) {
	for _, tc := range []struct {
		name               string
		known, knowBlocked bool
		tick               uint64 // CPU time read at ticks (0: exact)
		launches           int    // a token's
		naps, read         bool
		spin               bool // its synchronizes spin on the CPU, never blocking
	}{
		{"blocks counted, CPU time at ticks", true, true, 4 * ms, 50, false, true, false},
		{"blocks counted, CPU time at ticks, naps", true, true, 4 * ms, 50, true, true, false},
		{"CPU time exact, no blocks, naps", true, false, 0, 50, true, true, false},
		{"blocks counted, no CPU time, naps", false, true, 0, 50, true, true, false},
		{"neither: none read", false, false, 0, 50, false, false, false},
		{"a launch a token: none read", true, true, 0, 1, false, false, false},
		{"a launch a token, synchronizes spinning: none read", true, true, 0, 1, false, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkload(3)
			c := newCPUThread(w, tc.known)
			c.tick, c.knowBlocked = tc.tick, tc.knowBlocked
			speeds := map[int]float64{}
			for i := range 24 {
				speed := map[bool]float64{true: 1.6, false: 1}[(i/3+i/5)%3 == 0]
				speeds[i] = speed
				c.wait(1e9 + uint64(i)*800*ms - c.now)
				for tok := range 12 {
					if tok > 0 {
						c.run(uint64(float64(ms) * speed))
					}
					for k := range tc.launches {
						if k > 0 {
							c.run(uint64(float64(w.between(18*us, 22*us)) * speed))
							if tc.naps && k%5 < 3 {
								c.wait(100 * us)
							}
						}
						c.call(trace.RoleLaunch, false)
					}
					c.call(trace.RoleSync, false)
					if tc.spin {
						c.run(3 * ms)
					} else {
						c.wait(3 * ms)
					}
					c.call(trace.RoleSync, true)
				}
			}
			d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
			var got []request.Request
			for _, ev := range w.evs {
				if r, ok := d.Apply(ev); ok {
					got = append(got, r)
				}
			}
			if r, ok := d.Tick(c.now + uint64(time.Second)); ok {
				got = append(got, r)
			}
			if len(got) != 24 && tc.read || len(got) == 0 { // with nothing of the CPU known, the sampling may split a request
				t.Fatalf("%d requests, want 24", len(got))
			}
			for i, r := range got {
				want := time.Duration(20 * float64(time.Microsecond) * speeds[i])
				switch {
				case !tc.read && r.CPUGap != 0:
					t.Errorf("request %d: CPU gap %v, want none read", i, r.CPUGap)
				case tc.read && math.Abs(float64(r.CPUGap)/float64(want)-1) > 0.02:
					t.Errorf("request %d at speed %v: CPU gap %v, want %v within 2%%", i, speeds[i], r.CPUGap, want)
				}
			}
		})
	}
}

// TestCPUGapPerThread: two threads launching in turn, each its own launches 20 µs apart, 10 µs after the other's:
// a gap is from a thread's launch to its own next, never the other's.
func TestCPUGapPerThread(t *testing.T) {
	w := newWorkload(5)
	a, b := newCPUThread(w, true), newCPUThread(w, true)
	a.knowBlocked, b.knowBlocked = true, true
	b.p.TID = lcProc.TID + 1
	b.now = a.now + 10*us
	for range 40 {
		a.call(trace.RoleLaunch, false)
		a.run(20 * us)
		b.call(trace.RoleLaunch, false)
		b.run(20 * us)
	}
	b.call(trace.RoleSync, false)
	b.wait(ms)
	b.call(trace.RoleSync, true)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	for _, ev := range w.evs {
		d.Apply(ev)
	}
	r, ok := d.Tick(b.now + uint64(time.Second))
	if got := fmt.Sprint(r.CPUGap.Round(time.Microsecond)); !ok || got != "20µs" {
		t.Errorf("request %v %+v: CPU gap %s, want 20µs (each thread's own)", ok, r, got)
	}
}

// TestCPUGapOfCutRequestsAndTenGaps: an exact program of 21 launches 20 µs apart and a synchronize asleep 500 µs,
// 40 requests 20 ms apart, then 6 run back to back, their launches 20 µs apart times 1 or 2 in turn: each request cut
// apart as it runs has its own CPU gap, none the next's. Then requests of 11 and 10 launches alone: 10 gaps read, 9 not.
func TestCPUGapOfCutRequestsAndTenGaps(t *testing.T) {
	w := newWorkload(9)
	c := newCPUThread(w, true)
	c.knowBlocked = true
	req := func(n int, speed float64) {
		for k := range n {
			if k > 0 {
				c.run(uint64(20 * speed * float64(us)))
			}
			c.call(trace.RoleLaunch, false)
		}
		c.run(20 * us)
		c.call(trace.RoleSync, false)
		c.wait(500 * us)
		c.call(trace.RoleSync, true)
	}
	for i := range 40 {
		c.wait(1e9 + uint64(i)*20*ms - c.now)
		req(21, 1)
	}
	c.wait(20 * ms)
	cutFrom := c.now
	for i := range 6 {
		req(21, float64(1+i%2))
		c.run(100 * us) // the next input's Python, no quiet gap
	}
	c.wait(100 * ms)
	req(11, 1)
	c.wait(100 * ms)
	req(10, 1)
	d := request.NewDelimiter(lcProc.PID, request.DelimiterConfig{})
	got := run(d, w.evs, ms, c.now+uint64(time.Second))
	var cut, alone []request.Request
	for _, r := range got {
		switch {
		case r.Start >= cutFrom && r.Cut > 0:
			cut = append(cut, r)
		case r.Start >= cutFrom && r.Cut == 0:
			alone = append(alone, r)
		}
	}
	if len(cut) != 6 || len(alone) != 2 {
		t.Fatalf("%d requests cut apart, %d alone (want 6 and 2): %+v", len(cut), len(alone), got)
	}
	for i, r := range cut {
		if want := time.Duration(20 * float64(1+i%2) * float64(time.Microsecond)); math.Abs(float64(r.CPUGap)/float64(want)-1) > 0.02 {
			t.Errorf("cut request %d: CPU gap %v, want %v", i, r.CPUGap, want)
		}
	}
	if g := alone[0].CPUGap.Round(time.Microsecond); g != 20*time.Microsecond || alone[1].CPUGap != 0 {
		t.Errorf("11 launches: CPU gap %v (want 20µs), 10 launches: %v (want none)", g, alone[1].CPUGap)
	}
}
