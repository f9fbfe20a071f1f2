package slo

import (
	"slices"
	"time"
)

// Arm is what the controller chooses for a GPU: a BE timeslice (a rung of the ladder), the request gate, pre-preemption by hint engines.
type Arm struct {
	BETimeslice time.Duration
	Gate        bool
	Prepreempt  bool
}

func (a Arm) String() string {
	return a.BETimeslice.String() + map[bool]string{true: "+gate"}[a.Gate] + map[bool]string{true: "+prepreempt"}[a.Prepreempt]
}

// arms is what may be chosen now: rungs from lo of the ladder, the gate where the daemon has one for these LCs, pre-preemption
// up to a timeslice where an LC has a hint engine (0: none), and the static arm (the policy's own classes), always offered.
type arms struct {
	ladder     []time.Duration
	lo         int
	gate       bool
	prepreempt time.Duration
	static     Arm
}

func (s arms) rung(a Arm) int { return slices.Index(s.ladder, a.BETimeslice) }

func (s arms) allowed(a Arm) bool {
	return a == s.static || s.rung(a) >= s.lo && (!a.Gate || s.gate) && (!a.Prepreempt || a.BETimeslice <= s.prepreempt)
}

// all lists the arms allowed now, in a fixed order.
func (s arms) all() (out []Arm) {
	for _, ts := range s.ladder {
		out = append(out, Arm{ts, false, false}, Arm{ts, false, true}, Arm{ts, true, false}, Arm{ts, true, true})
	}
	return slices.DeleteFunc(out, func(a Arm) bool { return !s.allowed(a) })
}

// clamp is the allowed arm nearest a: its rung lo at least, the gate and pre-preemption where allowed.
func (s arms) clamp(a Arm) Arm {
	if s.allowed(a) {
		return a
	}
	t := s.ladder[max(s.rung(a), s.lo)]
	return Arm{t, a.Gate && s.gate, a.Prepreempt && t <= s.prepreempt}
}

// neighbours are the allowed arms one step from a: a rung either way, the gate or pre-preemption switched.
func (s arms) neighbours(a Arm) []Arm {
	i := s.rung(a)
	return slices.DeleteFunc([]Arm{
		{s.ladder[max(i-1, 0)], a.Gate, a.Prepreempt}, {s.ladder[min(i+1, len(s.ladder)-1)], a.Gate, a.Prepreempt},
		{a.BETimeslice, !a.Gate, a.Prepreempt}, {a.BETimeslice, a.Gate, !a.Prepreempt},
	}, func(b Arm) bool { return b == a || !s.allowed(b) })
}

// priorShare is what an arm is expected to leave BE until measured, only its order mattering: a longer BE timeslice costs BE
// fewer switches; the gate holds BE through every LC request; a spinner takes a little (no share of its own, only its place: better).
func (s arms) priorShare(a Arm) float64 {
	return float64(s.rung(a)+1) / float64(len(s.ladder)+1) * map[bool]float64{true: gateShare, false: 1}[a.Gate]
}

// protects: b gives BE less than a (a shorter timeslice, the gate on, pre-preemption on, none the other way), expected to help the LC.
func protects(s arms, a, b Arm) bool {
	more := s.rung(b) < s.rung(a) || b.Gate && !a.Gate || b.Prepreempt && !a.Prepreempt
	less := s.rung(b) > s.rung(a) || !b.Gate && a.Gate || !b.Prepreempt && a.Prepreempt
	return more && !less
}
