package prepreempt

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
)

// Request states.
const (
	statePending int32 = iota
	stateLaunching
	stateLaunched
	stateNoSpinner // Ready came first (late), or no slot
	stateReleased
	stateExpired
	stateCancelled
	stateFailed
)

// Request is one hinted LC request.
type Request struct {
	e     *Engine
	class string
	start int64 // host clock at Hint
	slot  *slot
	state atomic.Int32
	err   error
	// done is closed when the request ends before its scheduled launch,
	// to wake the goroutine waiting to launch it (goroutine launcher only).
	done    chan struct{}
	launchT int64 // host clock at the spinner launch
	// releaseT is when the host released the spinner's flag (0: not by
	// the host), for the GPU clock's online correction.
	releaseT int64
	// planned is when the spinner was meant to be launched (host clock);
	// the launch's lateness against it is a statistic.
	planned int64
	// dropped: no slot was free, or the hold budget was spent; the request
	// runs without a spinner.
	dropped bool
	// finished: Ready or Cancel has run, for requests whose state cannot
	// tell (dropped, expired).
	finished atomic.Bool
	// probe: the request's class does not benefit from spinners, and
	// this one has a spinner to see whether it does again.
	probe bool
	// begun: announced by Begin; gated: it holds the GPU until End.
	begun, gated bool
}

// holdLimit is how long the request's spinner may hold the GPU.
func (r *Request) holdLimit() time.Duration {
	if r.gated {
		return r.e.opts.GateMaxHold
	}
	return r.e.opts.MaxHold
}

// Hint announces that an LC request of class has started preparing its
// input and expects to be ready in about expectedPrep (used until the
// class has history; at most MaxExpectedPrep). It returns at once; the
// spinner is launched later, from another goroutine, unless the predicted
// moment has already come.
func (e *Engine) Hint(ctx context.Context, class string, expectedPrep time.Duration) (*Request, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if expectedPrep < 0 || expectedPrep > MaxExpectedPrep {
		return nil, fmt.Errorf("%w: expected preparation %v: want 0 to %v", ErrInvalidOption, expectedPrep, MaxExpectedPrep)
	}
	now := e.clk.now()
	r := &Request{e: e, class: class, start: now}
	e.stats.add(func(s *Stats) { s.Hints++ })
	if e.daemonOff.Load() {
		r.dropped = true
		e.stats.add(func(s *Stats) { s.SkippedByDaemon++ })
		return r, nil
	}
	spinner, probe := e.benefit.admit(class)
	if !spinner {
		r.dropped = true
		e.stats.add(func(s *Stats) { s.SkippedNoBenefit++ })
		return r, nil
	}
	r.probe = probe
	if e.budget != nil && !e.budget.take(now, e.opts.MaxHold) {
		r.dropped = true
		r.endProbe()
		e.stats.add(func(s *Stats) { s.Throttled++ })
		return r, nil
	}
	select {
	case r.slot = <-e.free:
	default:
		e.refund(r)
		r.dropped = true
		r.endProbe()
		e.stats.add(func(s *Stats) { s.Dropped++ })
		return r, nil
	}
	r.slot.hold = e.opts.MaxHold
	pred, _ := e.pred.predict(class, expectedPrep)
	at := now + int64(pred-e.sw.estimate()-e.opts.Margin)
	r.planned = at
	if now >= at {
		r.launch()
		return r, nil
	}
	if e.sched != nil {
		e.sched[r.slot.idx].Store(r)
		e.lastHint.Store(now)
		select {
		case e.wake <- struct{}{}:
		default:
		}
		return r, nil
	}
	r.done = make(chan struct{})
	e.pending.Add(1)
	go func() {
		defer e.pending.Add(-1)
		// Sleep only the part beyond a millisecond, then spin: Go's
		// timers oversleep by up to hundreds of microseconds on a VM, which
		// would launch a spinner after Ready. The sleep ends early when the
		// request ends or the engine closes, so no goroutine outlives its
		// request.
		if d := time.Duration(at-e.clk.now()) - spinWindow; d > 0 {
			c, stop := e.clk.timer(d)
			select {
			case <-c:
			case <-r.done:
				stop()
				return
			case <-e.stop:
				stop()
			}
		}
		for e.clk.now() < at && r.state.Load() == statePending && !e.closed.Load() {
		}
		r.launch()
	}()
	return r, nil
}

// endProbe ends the request's probe, if it is one, without a verdict.
func (r *Request) endProbe() {
	if r.probe {
		r.e.benefit.inconclusive(r.class)
	}
}

// refund gives the request's unused hold reservation back to the budget.
func (e *Engine) refund(r *Request) {
	b := e.budget
	if r.gated {
		b = e.gateBudget
	}
	if b == nil {
		return
	}
	now := e.clk.now()
	held := time.Duration(0)
	if r.launchT != 0 {
		held = time.Duration(now - r.launchT)
	}
	b.refund(now, r.holdLimit()-held)
}

func (r *Request) launch() {
	e, s := r.e, r.slot
	if e.closed.Load() {
		// Close has swept the slots; a late launcher must not start a
		// spinner nobody will release.
		if r.state.CompareAndSwap(statePending, stateNoSpinner) {
			e.refund(r)
			e.free <- s
		}
		return
	}
	if !r.state.CompareAndSwap(statePending, stateLaunching) {
		return
	}
	e.flags.set(s.idx, 0)
	e.gpu.clearStamps(s)
	r.launchT = e.clk.now()
	e.stats.launchLag(time.Duration(max(r.launchT-r.planned, 0)))
	if err := e.gpu.launch(s); err != nil {
		r.err = err
		r.endProbe()
		// Whatever was queued must not spin: release it, then recycle.
		e.flags.set(s.idx, 1)
		e.refund(r)
		r.state.Store(stateFailed)
		go e.reap(r)
		return
	}
	e.inflight[s.idx].Store(r)
	r.state.Store(stateLaunched)
	// Close may have swept inflight between the check above and the
	// store: then nobody else would release this spinner, Close would wait
	// out its deadline, and a late Ready would write freed memory. Both
	// sides publish before they look (the store above, Close's closed
	// flag), so at least one of them sees the other and expires it.
	if e.closed.Load() {
		r.expire()
	}
}

// pollLoop launches the scheduled spinners on time from one goroutine
// locked to its thread: it polls while hints keep coming and parks on wake
// after PollerIdle without one.
func (e *Engine) pollLoop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-e.stop:
			return
		case <-e.wake:
		}
		for {
			select {
			case <-e.stop:
				return
			default:
			}
			now := e.clk.now()
			waiting := false
			for i := range e.sched {
				r := e.sched[i].Load()
				if r == nil {
					continue
				}
				if r.state.Load() != statePending {
					e.sched[i].CompareAndSwap(r, nil)
					continue
				}
				waiting = true
				if now >= r.planned {
					e.sched[i].CompareAndSwap(r, nil)
					r.launch()
				}
			}
			if !waiting && now-e.lastHint.Load() > int64(e.opts.PollerIdle) {
				break
			}
		}
	}
}

// expireLoop releases, every quarter of MaxHold, the spinners whose
// request has not called Ready within MaxHold. (The spinner also exits on
// its own at MaxHold; this returns its slot and counts it.)
func (e *Engine) expireLoop() {
	period := max(e.opts.MaxHold/4, 100*time.Microsecond)
	for {
		c, stop := e.clk.timer(period)
		select {
		case <-e.stop:
			stop()
			return
		case <-c:
		}
		now := e.clk.now()
		for i := range e.inflight {
			r := e.inflight[i].Load()
			if r != nil && r.state.Load() == stateLaunched && now-r.launchT >= int64(r.holdLimit()) {
				r.expire()
			}
		}
	}
}

// expire releases a spinner whose request never called Ready.
func (r *Request) expire() {
	if r.state.CompareAndSwap(stateLaunched, stateExpired) {
		r.releaseT = r.e.clk.now()
		r.e.flags.set(r.slot.idx, 1)
		r.e.refund(r)
		if r.gated {
			r.e.stats.add(func(s *Stats) { s.GateExpired++ })
			go r.e.reap(r)
			return
		}
		r.e.stats.add(func(s *Stats) { s.Expired++ })
		if !r.e.closed.Load() {
			r.e.benefit.record(r.class, 0, 0, true, r.probe)
		}
		go r.e.reap(r)
	}
}

// Ready tells the engine that the request's LC work has been enqueued: the
// spinner is released at once. If the spinner was not launched yet (the
// preparation ended earlier than predicted), none is launched. It returns
// the CUDA error of a failed spinner launch, if any.
//
// A gated request (Begin) keeps its hold past Ready, until End.
func (r *Request) Ready() error {
	if r.gated {
		return nil
	}
	return r.finish(false)
}

// Cancel drops the request: its spinner, if any, is released.
func (r *Request) Cancel() error { return r.finish(true) }

func (r *Request) finish(cancel bool) error {
	e := r.e
	if r.dropped {
		if r.finished.Swap(true) {
			return ErrDone
		}
		if !cancel {
			e.pred.observe(r.class, time.Duration(e.clk.now()-r.start))
		}
		return nil
	}
	for {
		switch st := r.state.Load(); st {
		case statePending:
			if !r.state.CompareAndSwap(statePending, stateNoSpinner) {
				continue
			}
			if r.done != nil {
				close(r.done)
			}
			r.endProbe()
			e.refund(r)
			e.free <- r.slot
			e.stats.add(func(s *Stats) {
				if cancel {
					s.Cancelled++
				} else {
					s.Late++
				}
			})
		case stateLaunching:
			continue // a launch call is in flight; it takes microseconds
		case stateLaunched:
			next := stateReleased
			if cancel {
				next = stateCancelled
			}
			if !r.state.CompareAndSwap(stateLaunched, next) {
				continue
			}
			r.releaseT = e.clk.now()
			e.flags.set(r.slot.idx, 1)
			e.refund(r)
			if r.gated {
				if cancel {
					e.stats.add(func(s *Stats) { s.Cancelled++ })
				}
				go e.reap(r)
				return nil
			}
			if !cancel {
				lead := time.Duration(r.releaseT - r.launchT)
				e.stats.readyLead(lead)
				e.benefit.record(r.class, lead, e.sw.estimate(), false, r.probe)
			} else {
				r.endProbe()
			}
			e.stats.add(func(s *Stats) {
				if cancel {
					s.Cancelled++
				} else {
					s.Early++
				}
			})
			go e.reap(r)
		case stateFailed:
			return r.err
		case stateExpired:
			// The engine released the spinner after MaxHold; the request
			// itself is fine, once.
			if r.finished.Swap(true) {
				return ErrDone
			}
		default:
			return ErrDone
		}
		if !cancel {
			e.pred.observe(r.class, time.Duration(e.clk.now()-r.start))
		}
		return nil
	}
}

// reap waits for the spinner and its pending kernel to finish, accounts
// their stamps and returns the slot.
func (e *Engine) reap(r *Request) {
	s := r.slot
	for {
		ok, err := e.gpu.finished(s)
		if err != nil {
			e.log.Error("spinner completion", "err", err)
			break
		}
		if ok {
			break
		}
		e.clk.sleep(20 * time.Microsecond)
	}
	e.inflight[s.idx].CompareAndSwap(r, nil)
	start, end := e.gpu.stamps(s)
	if start != 0 && end >= start {
		held := time.Duration(end - start)
		if r.releaseT != 0 && held < r.holdLimit() {
			e.clock.released(r.releaseT, end)
		}
		switchIn := time.Duration(start - e.clock.get() - r.launchT)
		if r.gated {
			e.stats.add(func(s *Stats) { s.GateHeldNs += uint64(held) })
		} else {
			e.stats.held(held)
		}
		e.stats.switchIn(switchIn)
		e.sw.observe(switchIn)
		if held >= r.holdLimit() {
			e.stats.add(func(s *Stats) { s.TimedOut++ })
		}
	}
	e.free <- s
}
