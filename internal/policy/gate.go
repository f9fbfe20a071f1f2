package policy

import (
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Gate is the policy's request gate: for an LC process that launches its
// work one kernel at a time (eager PyTorch, LLM decode) and does not hold
// the gate itself (libgpreempt's request()), gpreemptd holds BE processes
// on the LC's GPUs stopped from the LC's first launch after idle until it
// has been idle for Idle, so the LC's request pays at most one switch in
// (docs/GATE.md).
type Gate struct {
	// Mode: GateOff (default), GateOn, or GateAuto (held while the LC's
	// recent requests are long enough for launch gaps to cost switches).
	Mode string
	// Idle ends a request: no thread of the LC waits in a synchronize and
	// it has made no traced call for this long. Within a request only its
	// synchronizations are traced (its launches only between requests: a
	// uprobe on every launch costs an eager LC microseconds each), so Idle
	// must exceed the longest host-side gap between a synchronize's return
	// and the next one's entry (a decode step's launches). Default 25 ms.
	Idle time.Duration
	// MaxHold bounds one request's hold: BE is resumed then, by the daemon
	// or, if it is gone, by its watchdog. Default 2 s.
	MaxHold time.Duration
	// Share caps the fraction of the GPU's time BE may be held off over a
	// 20 s window; opens past it are refused and counted. Default 0.5.
	Share float64
	// LaunchProbes: LaunchProbesBetween attaches the LC's launch probes
	// between its requests and detaches them for each request;
	// LaunchProbesAlways keeps them attached: a trap a launch instead of a
	// detach and an attach a request; LaunchProbesAuto (default) keeps them
	// for an LC whose requests end before a detach would (docs/GATE.md).
	LaunchProbes string
}

// Gate modes.
const (
	GateOff  = "off"
	GateOn   = "on"
	GateAuto = "auto"
)

// Gate launch probe modes.
const (
	LaunchProbesBetween = "between"
	LaunchProbesAlways  = "always"
	LaunchProbesAuto    = "auto"
)

// Gate defaults and bounds.
const (
	DefaultGateIdle    = 25 * time.Millisecond
	DefaultGateMaxHold = 2 * time.Second
	DefaultGateShare   = 0.5
	minGateIdle        = 100 * time.Microsecond
	maxGateIdle        = time.Second
	maxGateHold        = 10 * time.Second
)

// DefaultGate is the gate when the policy has no gate section: off.
func DefaultGate() Gate {
	return Gate{Mode: GateOff, Idle: DefaultGateIdle, MaxHold: DefaultGateMaxHold, Share: DefaultGateShare, LaunchProbes: LaunchProbesAuto}
}

func parseGate(n *yaml.Node) (Gate, error) {
	g := DefaultGate()
	fs, err := fields(n, "gate", "mode", "idle", "max_hold", "share", "launch_probes")
	if err != nil {
		return g, err
	}
	if v := fs["mode"]; v != nil {
		m, err := keyword(v, "gate.mode")
		if err != nil {
			return g, err
		}
		switch m {
		case GateOff, GateOn, GateAuto:
			g.Mode = m
		default:
			return g, fieldErr(v, "gate.mode", "%q: want off, on or auto", v.Value)
		}
	}
	if v := fs["launch_probes"]; v != nil {
		m, err := keyword(v, "gate.launch_probes")
		if err != nil {
			return g, err
		}
		if m != LaunchProbesBetween && m != LaunchProbesAlways && m != LaunchProbesAuto {
			return g, fieldErr(v, "gate.launch_probes", "%q: want auto, between or always", v.Value)
		}
		g.LaunchProbes = m
	}
	dur := func(key string, lo, hi time.Duration, d *time.Duration) error {
		v := fs[key]
		if v == nil {
			return nil
		}
		s, err := scalar(v, "gate."+key)
		if err != nil {
			return err
		}
		x, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || x < lo || x > hi {
			return fieldErr(v, "gate."+key, "%q: want a duration from %v to %v", s, lo, hi)
		}
		*d = x
		return nil
	}
	if err := dur("idle", minGateIdle, maxGateIdle, &g.Idle); err != nil {
		return g, err
	}
	if err := dur("max_hold", time.Millisecond, maxGateHold, &g.MaxHold); err != nil {
		return g, err
	}
	if v := fs["share"]; v != nil {
		s, err := scalar(v, "gate.share")
		if err != nil {
			return g, err
		}
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || !(x > 0 && x <= 1) {
			return g, fieldErr(v, "gate.share", "%q: want a fraction in (0, 1]", s)
		}
		g.Share = x
	}
	if g.Share < 1 && float64(g.MaxHold) > g.Share*float64(GateWindow) {
		return g, fieldErr(n, "gate.max_hold", "%v exceeds the gate's budget (share %v of %v): no request could be held", g.MaxHold, g.Share, GateWindow)
	}
	return g, nil
}

// GateWindow is the interval Gate.Share is a fraction of.
const GateWindow = 20 * time.Second
