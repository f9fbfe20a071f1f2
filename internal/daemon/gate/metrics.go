package gate

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/policy"
)

// Stats is what the gate did, for the status and metrics.
type Stats struct {
	Mode string `json:"mode"`
	// Open is how many LC requests hold BE now.
	Open int `json:"open"`
	// Held counts requests that held BE; Closed counts their ends by
	// cause (idle, max_hold, exit, off, stop).
	Held   uint64            `json:"held"`
	Closed map[string]uint64 `json:"closed,omitempty"`
	// Refused: a request began with the share spent; Skipped: auto mode
	// found the LC's requests too short to gate; Steered: SLO mode's arm
	// for the LC's GPUs had the gate off.
	Refused uint64 `json:"refused_budget"`
	Skipped uint64 `json:"skipped_short"`
	Steered uint64 `json:"skipped_slo,omitempty"`
	// HeldSeconds is the time BE was held off, summed over holds.
	HeldSeconds float64 `json:"held_seconds"`
	// BEStopped counts SIGSTOPs sent; Failures the pause calls that failed.
	BEStopped uint64 `json:"be_stopped"`
	Failures  uint64 `json:"failures"`
	// LaunchesHeld counts launches traced while their LC held BE: each a
	// uprobe trap its request paid before its launch probes came off, or
	// with them kept on.
	LaunchesHeld uint64 `json:"launches_held"`
	// LCs is how many LC processes the gate follows; Undelimited, how
	// many of them it does not see requests end for (Delimits).
	LCs         int `json:"lcs"`
	Undelimited int `json:"undelimited,omitempty"`
	// ProbesKept is how many keep their launch probes on through their requests (launch_probes).
	ProbesKept int `json:"launch_probes_kept,omitempty"`
}

// Stats returns what the gate did.
func (g *Gate) Stats() Stats {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.stats
	s.Mode = g.Procs.Policy().Gate.Mode
	s.Open, s.LCs = len(g.open), len(g.lcs)
	for pid, lc := range g.lcs {
		if lc.undelimited() {
			s.Undelimited++
		}
		if g.keepsProbesLocked(pid) && g.launchesWantedLocked(pid) {
			s.ProbesKept++
		}
	}
	if s.Closed != nil {
		s.Closed = make(map[string]uint64, len(g.stats.Closed))
		for k, v := range g.stats.Closed {
			s.Closed[k] = v
		}
	}
	return s
}

// longRequests says whether spans (an LC's recent holds) are long enough
// for launch gaps to cost switches: their median over four switches. With
// fewer than four, yes: the first requests teach it.
func longRequests(spans []time.Duration) bool {
	return len(spans) < 4 || median(spans) > 4*class.SwitchTime
}

// median is the middle of ds (the upper of two).
func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// sharingGPU returns the processes of bes on a GPU lc uses; a BE whose
// GPUs are not known may be on lc's. An LC whose GPUs are not known
// shares with none: it stops nothing until its GPUs are known (one on
// no known GPU stopped BE on every GPU).
func sharingGPU(bes []policy.ProcRef, lc policy.ProcRef) []policy.ProcRef {
	if len(lc.GPUs) == 0 {
		return nil
	}
	var out []policy.ProcRef
	for _, b := range bes {
		if b.PID == lc.PID {
			continue
		}
		if len(b.GPUs) == 0 || slices.ContainsFunc(b.GPUs, func(i int) bool { return slices.Contains(lc.GPUs, i) }) {
			out = append(out, b)
		}
	}
	return out
}

type gateMetrics struct {
	held, refused, failures prometheus.Counter
	closed                  *prometheus.CounterVec
	heldSeconds             prometheus.Counter
}

func newGateMetrics() *gateMetrics {
	return &gateMetrics{
		held: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpreemptd_gate_requests_total",
			Help: "LC requests the request gate held BE for."}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpreemptd_gate_refused_total",
			Help: "LC requests not held: the gate's share of GPU time was spent."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpreemptd_gate_failures_total",
			Help: "Stops or resumes of BE by the gate that failed (the watchdog resumes BE)."}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gpreemptd_gate_closed_total",
			Help: "Gate holds ended, by cause: idle (the request ended), max_hold, exit, off, stop."}, []string{"cause"}),
		heldSeconds: prometheus.NewCounter(prometheus.CounterOpts{Name: "gpreemptd_gate_be_held_seconds_total",
			Help: "Time BE was held off the GPU by the gate, summed over holds."}),
	}
}

func (m *gateMetrics) register(reg prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.held, m.refused, m.failures, m.closed, m.heldSeconds} {
		errs = append(errs, reg.Register(c))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("gate metrics: %w", err)
	}
	return nil
}
