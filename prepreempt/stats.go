package prepreempt

import (
	"math/bits"
	"sync"
	"time"
)

// Stats are an engine's counters since it was created.
type Stats struct {
	// Backend names the flag backend in use ("gdrcopy" or "host-mapped").
	Backend string `json:"backend"`
	Hints   uint64 `json:"hints"`
	// Early: the spinner was launched before Ready (the intended case).
	Early uint64 `json:"early"`
	// Late: Ready came before the predicted launch time; no spinner ran.
	Late uint64 `json:"late"`
	// Cancelled: Cancel was called.
	Cancelled uint64 `json:"cancelled"`
	// Expired: Ready never came and the engine released the spinner after
	// MaxHold.
	Expired uint64 `json:"expired"`
	// TimedOut: the spinner exited on its own at MaxHold before the host
	// released it (the request is also counted as early, cancelled or
	// expired: this is not an outcome but a warning).
	TimedOut uint64 `json:"timed_out"`
	// Dropped: no free spinner slot; the request ran without one.
	Dropped uint64 `json:"dropped"`
	// Throttled: spinners had used up their share of the GPU's time
	// (Options.HoldDutyCycle); the request ran without one.
	Throttled uint64 `json:"throttled"`
	// SkippedNoBenefit: the request's class did not benefit from spinners
	// (launch-bound, or holds hitting MaxHold); it ran without one.
	SkippedNoBenefit uint64 `json:"skipped_no_benefit"`
	// SkippedByDaemon: gpreemptd said not to pre-preempt; the request ran
	// without a spinner.
	SkippedByDaemon uint64 `json:"skipped_by_daemon"`
	// Prepreempt: spinners are on (false: gpreemptd turned them off).
	Prepreempt bool `json:"prepreempt"`
	// The request gate (Begin/End): Begun requests, of which Gated held
	// the GPU, GateSkipped did not (gate off, or auto and the class not
	// launch-bound) and GateThrottled found the gate's share spent;
	// GateEnded released at End, GateExpired at GateMaxHold; GateHeldNs
	// sums their spinners' GPU time. Gate is the mode in force.
	Begun         uint64 `json:"begun"`
	Gated         uint64 `json:"gated"`
	GateSkipped   uint64 `json:"gate_skipped"`
	GateThrottled uint64 `json:"gate_throttled"`
	GateEnded     uint64 `json:"gate_ended"`
	GateExpired   uint64 `json:"gate_expired"`
	GateHeldNs    uint64 `json:"gate_held_ns"`
	Gate          string `json:"gate"`
	// Classes is each request class's mode: ModeHold or ModeSkip.
	Classes map[string]string `json:"classes,omitempty"`
	// HeldNs is the spinner's GPU time, start to exit, summed.
	HeldNs uint64 `json:"held_ns"`
	// Held and SwitchIn are log2 histograms (bucket i counts values in
	// [2^i, 2^(i+1)) microseconds; bucket 0 also holds values under 1 us).
	Held     [24]uint64 `json:"held_us_log2"`
	SwitchIn [24]uint64 `json:"switch_in_us_log2"`
	// HeldSamples and SwitchInSamples keep the last samples (ns) for
	// percentiles.
	HeldSamples     []int64 `json:"held_ns_samples,omitempty"`
	SwitchInSamples []int64 `json:"switch_in_ns_samples,omitempty"`
	// LaunchLagSamples: how late each spinner launch was against its
	// planned time (ns; 0 when the plan was already due at Hint).
	LaunchLagSamples []int64 `json:"launch_lag_ns_samples,omitempty"`
	// ReadyLeadSamples: for early requests, Ready's time minus the
	// spinner's launch (ns): the lead the spinner actually had.
	ReadyLeadSamples []int64 `json:"ready_lead_ns_samples,omitempty"`
	// SwitchEstimateNs is the current launch lead.
	SwitchEstimateNs int64 `json:"switch_estimate_ns"`
}

const keepSamples = 1 << 14

// maxWindowHolds bounds the spinner holds an engine keeps for its next
// push (Engine.TakeWindow); beyond it a uniform sample of them is kept.
const maxWindowHolds = 1 << 12

type statsRecorder struct {
	mu    sync.Mutex
	s     Stats
	holds reservoir // the holds since the last TakeWindow (made at the first)
}

func log2Bucket(d time.Duration) int {
	us := uint64(d / time.Microsecond)
	if us == 0 {
		return 0
	}
	return min(bits.Len64(us)-1, 23)
}

func (r *statsRecorder) add(f func(*Stats)) {
	r.mu.Lock()
	f(&r.s)
	r.mu.Unlock()
}

func (r *statsRecorder) held(d time.Duration) {
	r.add(func(s *Stats) {
		s.HeldNs += uint64(max(d, 0))
		s.Held[log2Bucket(d)]++
		if len(s.HeldSamples) < keepSamples {
			s.HeldSamples = append(s.HeldSamples, int64(d))
		}
		if r.holds.max == 0 { // every constructor's engine, the zero value's too
			r.holds = newReservoir(maxWindowHolds)
		}
		r.holds.add(d)
	})
}

func (r *statsRecorder) switchIn(d time.Duration) {
	r.add(func(s *Stats) {
		s.SwitchIn[log2Bucket(d)]++
		if len(s.SwitchInSamples) < keepSamples {
			s.SwitchInSamples = append(s.SwitchInSamples, int64(d))
		}
	})
}

func (r *statsRecorder) launchLag(d time.Duration) {
	r.add(func(s *Stats) {
		if len(s.LaunchLagSamples) < keepSamples {
			s.LaunchLagSamples = append(s.LaunchLagSamples, int64(d))
		}
	})
}

func (r *statsRecorder) readyLead(d time.Duration) {
	r.add(func(s *Stats) {
		if len(s.ReadyLeadSamples) < keepSamples {
			s.ReadyLeadSamples = append(s.ReadyLeadSamples, int64(d))
		}
	})
}

func (r *statsRecorder) snapshot() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.s
	s.HeldSamples = append([]int64(nil), r.s.HeldSamples...)
	s.SwitchInSamples = append([]int64(nil), r.s.SwitchInSamples...)
	s.LaunchLagSamples = append([]int64(nil), r.s.LaunchLagSamples...)
	s.ReadyLeadSamples = append([]int64(nil), r.s.ReadyLeadSamples...)
	return s
}

// Window is what an engine did over one interval: what a push to gpreemptd
// carries of it (Reporter, gpreempt_window_json in C, Engine.window in
// Python).
type Window struct {
	// Spinning is Stats.Spinning at the window's end.
	Spinning bool `json:"spinning"`
	// SkippedNoBenefit and Expired count from the engine's start, as in
	// Stats.
	SkippedNoBenefit uint64 `json:"skipped_no_benefit"`
	Expired          uint64 `json:"expired"`
	// Holds is how many spinners finished in the window; HoldUs the
	// quantiles of their GPU hold ("p50", "p90", "p99", "p999", "max",
	// "mean"), in us, over up to 4096 of them (a uniform sample beyond);
	// nil when none finished.
	Holds  uint64             `json:"holds"`
	HoldUs map[string]float64 `json:"hold_us,omitempty"`
}

// TakeWindow returns what the engine did since the last call (since it
// started, for the first) and starts the next window. One caller per
// engine: a Reporter calls it on each push.
func (e *Engine) TakeWindow() Window {
	e.stats.mu.Lock()
	holds, n := e.stats.holds.take()
	w := Window{SkippedNoBenefit: e.stats.s.SkippedNoBenefit, Expired: e.stats.s.Expired, Holds: uint64(n)}
	e.stats.mu.Unlock()
	w.Spinning = Stats{Prepreempt: !e.daemonOff.Load(), Classes: e.benefit.modes()}.Spinning()
	if len(holds) > 0 {
		w.HoldUs = quantilesUs(holds)
	}
	return w
}

// Spinning says whether the engine launches spinners: gpreemptd allows
// them (Prepreempt) and some request class is held, or none is known yet.
// An engine whose classes are all skipped (ModeSkip) launches none but a
// rare probe.
func (s Stats) Spinning() bool {
	if !s.Prepreempt {
		return false
	}
	for _, m := range s.Classes {
		if m == ModeHold {
			return true
		}
	}
	return len(s.Classes) == 0
}
