package prepreempt

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// The request gate: a request-scoped hold for LCs that launch their work
// one kernel at a time (eager PyTorch, LLM decode). Every launch gap of
// such a request lets a waiting BE channel group in, and each of the
// hundreds of gaps then costs the LC a switch (~200 us on an H100). A gated
// request launches the spinner, and the empty kernel queued behind it, at
// Begin and releases it at End: the LC's channel group keeps pending work
// for the whole request, stays resident (its long LC timeslice), and the
// request pays at most one switch in and BE one switch back. The empty
// kernel is what keeps the LC's own other streams running meanwhile
// (docs/GATE.md: a spinner alone starves them under a long LC timeslice).

// GateMode says whether Begin's requests hold the GPU for their whole span.
type GateMode int32

// Gate modes.
const (
	// GateOff: Begin's requests hold nothing (they are counted and timed).
	GateOff GateMode = iota
	// GateOn: every request Begin announces is held until End.
	GateOn
	// GateAuto: a class's requests are held while its recent requests are
	// long enough for launch gaps to cost switches (median span over
	// NoBenefitLead switch estimates; at least 4).
	GateAuto
)

func (m GateMode) String() string {
	switch m {
	case GateOff:
		return "off"
	case GateOn:
		return "on"
	case GateAuto:
		return "auto"
	}
	return fmt.Sprintf("GateMode(%d)", int32(m))
}

// ParseGateMode parses "off", "on" or "auto".
func ParseGateMode(s string) (GateMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "off":
		return GateOff, nil
	case "on":
		return GateOn, nil
	case "auto":
		return GateAuto, nil
	}
	return GateOff, fmt.Errorf("%w: gate mode %q: want off, on or auto", ErrInvalidOption, s)
}

// Bounds and defaults of the gate's options.
const (
	// GateMaxHoldLimit bounds Options.GateMaxHold: a gate holds BE off
	// the GPU for its whole span, and a minute of that is a caller's bug.
	GateMaxHoldLimit = 10 * time.Second
	// DefaultGateMaxHold is Options.GateMaxHold's default.
	DefaultGateMaxHold = 2 * time.Second
	// DefaultGateShare is Options.GateShare's default.
	DefaultGateShare = 0.5
	// gateWindow is the interval GateShare is a fraction of: long enough
	// for a decode request of a second or two to fit the budget.
	gateWindow = 20 * time.Second
)

// SetGate sets the gate mode for Begin's requests from now on (gpreemptd's
// word, passed on by a Reporter, or the application's). It does not touch
// requests already held.
func (e *Engine) SetGate(m GateMode) error {
	if m < GateOff || m > GateAuto {
		return fmt.Errorf("%w: gate mode %d", ErrInvalidOption, m)
	}
	if old := GateMode(e.gate.Swap(int32(m))); old != m {
		e.log.Info("request gate mode changed", "from", old, "to", m)
	}
	return nil
}

// Gate returns the gate mode in force.
func (e *Engine) Gate() GateMode { return GateMode(e.gate.Load()) }

// Begin announces that an LC request starts now and lasts until End (or
// Cancel): the whole span, launches and the host work between them. With
// the gate on (or auto, for a class found launch-bound) the request holds
// the GPU from BE work until End, at most GateMaxHold and within the gate's
// share of the GPU's time (GateShare); otherwise it holds nothing and is
// only counted and timed. Begin returns at once; the hold starts when the
// spinner reaches the GPU, about one switch later.
func (e *Engine) Begin(ctx context.Context, class string) (*Request, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	now := e.clk.now()
	r := &Request{e: e, class: class, start: now, begun: true, dropped: true}
	e.stats.add(func(s *Stats) { s.Begun++ })
	if !e.spans.gated(e.Gate(), class, e.sw.estimate(), e.opts.NoBenefitLead) {
		e.stats.add(func(s *Stats) { s.GateSkipped++ })
		return r, nil
	}
	if e.gateBudget != nil && !e.gateBudget.take(now, e.opts.GateMaxHold) {
		e.stats.add(func(s *Stats) { s.GateThrottled++ })
		return r, nil
	}
	select {
	case r.slot = <-e.free:
	default:
		e.gateBudget.refund(now, e.opts.GateMaxHold)
		e.stats.add(func(s *Stats) { s.Dropped++ })
		return r, nil
	}
	r.dropped, r.gated = false, true
	r.slot.hold = e.opts.GateMaxHold
	r.planned = now
	e.stats.add(func(s *Stats) { s.Gated++ })
	r.launch()
	return r, nil
}

// End says the request's work is complete (after the synchronize that
// returns its results): a gated request releases the GPU; a hinted one
// that has not called Ready does so now. The span Begin/Hint to End is
// what GateAuto judges a class by.
func (r *Request) End() error {
	e := r.e
	span := time.Duration(e.clk.now() - r.start)
	outlived := false
	switch {
	case r.gated:
		if err := r.finish(false); err != nil {
			return err
		}
		if r.state.Load() == stateReleased {
			e.stats.add(func(s *Stats) { s.GateEnded++ })
		} else {
			outlived = true
			e.warnOutlived(r.class)
		}
	case !r.begun:
		// A hinted request that never called Ready does so now.
		if err := r.finish(false); err != nil && !errors.Is(err, ErrDone) {
			return err
		}
	case r.finished.Swap(true):
		return ErrDone
	}
	e.spans.observe(r.class, span, outlived)
	return nil
}

// warnOutlived says, once a class, that a held request outlived its hold:
// the request took over GateMaxHold, or it waited on the hold itself. A
// device-wide synchronize (cuCtxSynchronize, cudaDeviceSynchronize,
// torch.cuda.synchronize()) waits for every stream of the context, the
// gate's included, so inside a held request it returns only at
// GateMaxHold.
func (e *Engine) warnOutlived(class string) {
	if _, seen := e.outlivedWarned.LoadOrStore(class, true); !seen {
		e.log.Warn("request gate: a held request outlived its hold (GateMaxHold); "+
			"a device-wide synchronize inside a held request waits for the hold: synchronize the request's stream",
			"class", class, "max_hold", e.opts.GateMaxHold)
	}
}

// spanTracker keeps each class's recent requests, for GateAuto: their
// spans (Begin or Hint to End), and whether a held one outlived its hold.
type spanTracker struct {
	mu      sync.Mutex
	window  int
	classes map[string][]span
}

type span struct {
	d        time.Duration
	outlived bool
}

func newSpanTracker(window int) *spanTracker {
	return &spanTracker{window: window, classes: map[string][]span{}}
}

func (t *spanTracker) observe(class string, d time.Duration, outlived bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := append(t.classes[class], span{d, outlived})
	t.classes[class] = s[max(0, len(s)-t.window):]
}

// gated decides whether a request of class is held under mode: always
// with GateOn, never with GateOff; with GateAuto when the class's median
// span exceeds lead switch estimates (at least 4: below that a request has
// too few launch gaps for the gate to save more than it costs BE), and
// for a class with no history (its first requests teach the median), but
// not while one of its recent held requests outlived its hold: each such
// request costs BE GateMaxHold, and one that waits on the hold (a
// device-wide synchronize) costs the LC as much.
func (t *spanTracker) gated(mode GateMode, class string, sw time.Duration, lead float64) bool {
	switch mode {
	case GateOn:
		return true
	case GateAuto:
	default:
		return false
	}
	t.mu.Lock()
	var s []time.Duration
	for _, r := range t.classes[class] {
		if r.outlived {
			t.mu.Unlock()
			return false
		}
		s = append(s, r.d)
	}
	t.mu.Unlock()
	if len(s) == 0 {
		return true
	}
	slices.Sort(s)
	return float64(s[len(s)/2]) > max(lead, 4)*float64(sw)
}
