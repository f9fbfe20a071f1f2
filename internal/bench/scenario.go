package bench

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/tsg"
)

// ErrInvalidArgument marks usage errors.
var ErrInvalidArgument = errors.New("invalid argument")

// Kind is what a scenario runs.
type Kind string

// Scenario kinds.
const (
	// KindStandalone: the LC worker alone (the latency baseline).
	KindStandalone Kind = "standalone"
	// KindBEOnly: the BE worker alone (the throughput baseline).
	KindBEOnly Kind = "be-only"
	// KindShared: LC and BE together, with or without gpreempt classes.
	KindShared Kind = "shared"
	// KindBERatio: two BE workers with different timeslices (throughput
	// share follows the timeslice ratio).
	KindBERatio Kind = "be-ratio"
)

// Runtimes: which workers a scenario starts.
const (
	RuntimeKernels = "kernels" // gpreempt-bench's own be/lc workers
	RuntimePyTorch = "pytorch" // bench/pytorch's be_train.py / lc_infer.py
)

// Scenario is one parsed entry of --scenarios.
type Scenario struct {
	Name    string
	Kind    Kind
	Runtime string
	// BETimeslice, for KindShared, is the BE class timeslice applied with
	// "gpreemptctl class" (0: leave the driver's defaults, no gpreemptctl).
	BETimeslice time.Duration
	// Hints: the LC worker uses pre-preemption (prepreempt.Engine).
	Hints bool
	// Ratio, for KindBERatio, is the two BE processes' timeslices.
	Ratio [2]time.Duration
}

// DefaultScenarios is the default matrix.
const DefaultScenarios = "standalone,defaults,be-200us,be-1us,be-only"

// ParseScenarios parses a comma-separated scenario list:
//
//	standalone               LC alone
//	be-only                  BE alone
//	defaults                 LC + BE, driver-default timeslices
//	be-<DURATION>            LC + BE, gpreemptctl class: BE at DURATION, LC as lc
//	be-ratio:<D1>:<D2>       two BEs, gpreemptctl set-timeslice D1 and D2
//	pytorch-standalone, pytorch-be-only, pytorch (= pytorch-defaults),
//	pytorch-be-<DURATION>    the same with the PyTorch workers
func ParseScenarios(list string) ([]Scenario, error) {
	var out []Scenario
	seen := map[string]bool{}
	for name := range strings.SplitSeq(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		sc, err := parseScenario(name)
		if err != nil {
			return nil, err
		}
		if seen[sc.Name] {
			return nil, fmt.Errorf("%w: scenario %q listed twice", ErrInvalidArgument, sc.Name)
		}
		seen[sc.Name] = true
		out = append(out, sc)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: no scenarios", ErrInvalidArgument)
	}
	return out, nil
}

func parseScenario(name string) (Scenario, error) {
	sc := Scenario{Name: name, Runtime: RuntimeKernels}
	rest := name
	if rest == "pytorch" {
		rest = "pytorch-defaults"
	}
	if r, ok := strings.CutPrefix(rest, "pytorch-"); ok {
		sc.Runtime = RuntimePyTorch
		rest = r
	}
	if r, ok := strings.CutPrefix(rest, "prepreempt-"); ok {
		sc.Hints = true
		rest = r
	}
	bad := func(why string) (Scenario, error) {
		return Scenario{}, fmt.Errorf("%w: scenario %q: %s (known: standalone, be-only, defaults, be-<timeslice>, be-ratio:<ts1>:<ts2>, pytorch[-standalone|-be-only|-defaults|-be-<timeslice>], [pytorch-]prepreempt-{standalone|defaults|be-<timeslice>})", ErrInvalidArgument, name, why)
	}
	switch {
	case rest == "standalone":
		sc.Kind = KindStandalone
	case rest == "be-only":
		sc.Kind = KindBEOnly
	case rest == "defaults":
		sc.Kind = KindShared
	case strings.HasPrefix(rest, "be-ratio:"):
		if sc.Runtime != RuntimeKernels {
			return bad("be-ratio runs the kernel workers only")
		}
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return bad("want be-ratio:<ts1>:<ts2>")
		}
		for i, p := range parts[1:] {
			d, err := tsg.ParseTimeslice(p) // what the gpreemptctl it drives accepts
			if err != nil {
				return bad(err.Error())
			}
			sc.Ratio[i] = d
		}
		sc.Kind = KindBERatio
	case strings.HasPrefix(rest, "be-"):
		d, err := tsg.ParseTimeslice(strings.TrimPrefix(rest, "be-"))
		if err != nil {
			return bad(err.Error())
		}
		sc.Kind = KindShared
		sc.BETimeslice = d
	default:
		return bad("unknown scenario")
	}
	if sc.Hints && !sc.HasLC() {
		return bad("pre-preemption needs an LC worker")
	}
	return sc, nil
}

func usArg(d time.Duration) string { return fmt.Sprintf("%dus", d/time.Microsecond) }

// HasLC reports whether the scenario measures an LC worker.
func (s Scenario) HasLC() bool { return s.Kind == KindStandalone || s.Kind == KindShared }

// BECount is how many BE workers the scenario runs.
func (s Scenario) BECount() int {
	switch s.Kind {
	case KindBEOnly, KindShared:
		return 1
	case KindBERatio:
		return 2
	}
	return 0
}

// NeedsCtl reports whether the scenario calls gpreemptctl.
func (s Scenario) NeedsCtl() bool {
	return s.Kind == KindBERatio || (s.Kind == KindShared && s.BETimeslice > 0)
}

// Dir is the scenario's subdirectory of the output directory.
func (s Scenario) Dir() string { return strings.ReplaceAll(s.Name, ":", "_") }

// baselineNames returns the names of the same runtime's LC and BE
// baselines.
func baselineNames(runtime string) (standalone, beOnly string) {
	if runtime == RuntimePyTorch {
		return "pytorch-standalone", "pytorch-be-only"
	}
	return "standalone", "be-only"
}
