package bench

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/class"
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
	// KindMultiTenant: two LC workers in class lc and two BE workers in
	// class be with different weights.
	KindMultiTenant Kind = "multi-tenant"
)

// Runtime is which workers a scenario starts.
type Runtime string

// Runtimes.
const (
	RuntimeKernels Runtime = "kernels" // gpreempt-bench's own be/lc workers
	RuntimePyTorch Runtime = "pytorch" // bench/pytorch's be_train.py / lc_infer.py (CUDA graph unless --pytorch-cuda-graph=false)
	// RuntimePyTorchEager is lc_infer.py without a CUDA graph: every
	// request is some hundred kernel launches from Python, so the LC is
	// launch-bound and trickles kernels in.
	RuntimePyTorchEager Runtime = "pytorch-eager"
	// RuntimeLLM is bench/pytorch's lc_decode.py, eager: LLM decode with
	// the KV cache from Python, hundreds of launches a token, beside
	// be_gemm.py (an fp16 GEMM loop).
	RuntimeLLM Runtime = "llm"
	// RuntimeLLMGraph is lc_decode.py with each decode step a CUDA graph.
	RuntimeLLMGraph Runtime = "llm-graph"
)

// Python reports whether the runtime's workers are the Python scripts.
func (r Runtime) Python() bool {
	return r == RuntimePyTorch || r == RuntimePyTorchEager || r.LLM()
}

// LLM reports whether the runtime's LC is the LLM decode worker.
func (r Runtime) LLM() bool { return r == RuntimeLLM || r == RuntimeLLMGraph }

// Scenario is one parsed entry of --scenarios.
type Scenario struct {
	Name    string
	Kind    Kind
	Runtime Runtime
	// BETimeslice, for KindShared, is the BE class timeslice applied with
	// "gpreemptctl class" (0: leave the driver's defaults, no gpreemptctl).
	BETimeslice time.Duration
	// Hints: the LC worker uses pre-preemption (prepreempt.Engine).
	Hints bool
	// Gate ("gate-" prefix): the LC worker holds each whole request in the
	// engine's request gate (prepreempt.Engine.Begin/End).
	Gate bool
	// Daemon ("daemon:" prefix): gpreemptd classes the workers, from
	// GPREEMPT_CLASS in their environment, instead of gpreemptctl; the
	// harness waits until their groups read back the class.
	Daemon bool
	// SLO ("slo:" prefix): a daemon: scenario whose BE timeslice gpreemptd
	// chooses in its SLO mode; the LC workers push their latency windows
	// to the daemon and the harness records its status over the run.
	SLO bool
	// Switch ("@switch" suffix, slo: scenarios): the LC changes half-way
	// through each run: the PyTorch LC from a CUDA graph to eager, the
	// kernel LC to 5 times its request rate.
	Switch bool
	// Ratio, for KindBERatio and KindMultiTenant, is the two BE processes'
	// timeslices.
	Ratio [2]time.Duration
	// Weights, when the BE timeslices were given as class weights, are
	// those (Ratio is then what the default be class gives each weight,
	// class.Class.TimesliceFor).
	Weights [2]class.Spec
	// LCOnly, for KindMultiTenant ("multi-tenant:lc-only"): the two LC
	// workers without BE, what they get from each other alone.
	LCOnly bool
	// PeriodFactor, when not 0, multiplies the LC request period (the "@xN"
	// suffix of a rate sweep): the baseline is the standalone scenario with
	// the same suffix.
	PeriodFactor float64
}

// DefaultScenarios is the default matrix: timeslice control on the
// synthetic kernels, and a launch-bound PyTorch LC (eager resnet50) against
// training, with BE at 1 ms (the best setting measured for that LC).
const DefaultScenarios = "standalone,defaults,be-200us,be-1us,be-only,pytorch-eager-standalone,pytorch-eager-be-1ms,pytorch-eager-be-only"

// ParseScenarios parses a comma-separated scenario list:
//
//	standalone               LC alone
//	be-only                  BE alone
//	defaults                 LC + BE, driver-default timeslices
//	be-<DURATION>            LC + BE, gpreemptctl class: BE at DURATION, LC as lc
//	be-ratio:<D1>:<D2>       two BEs, gpreemptctl set-timeslice D1 and D2
//	be-ratio:be:<W1>:be:<W2> two BEs in class be with weights W1 and W2
//	multi-tenant[:be:<W1>:be:<W2>]  two LCs in class lc, two BEs in class be
//	                         with weights W1 and W2 (default 3 and 1)
//	multi-tenant:<D1>:<D2>   the same, the BEs in class be at D1 and D2
//	multi-tenant:lc-only     the two LCs in class lc without BE
//	prepreempt-<LC scenario> the LC uses pre-preemption hints
//	pytorch-standalone, pytorch-be-only, pytorch (= pytorch-defaults),
//	pytorch-be-<DURATION>    the same with the PyTorch workers
//	pytorch-eager-...        the same, the LC without a CUDA graph
//	llm-..., llm-graph-...   the same with an LLM decode LC (lc_decode.py,
//	                         eager or a CUDA graph a step) beside a GEMM BE
//	gate-<LC scenario>       the LC holds each whole request in the
//	                         request gate (Python workers)
//	<LC scenario>@x<F>       LC request period times F (a rate sweep)
//	daemon:<be-<DURATION> scenario>  the same, classed by gpreemptd from
//	                         GPREEMPT_CLASS=be / lc in the workers' environment
//	slo:<defaults scenario>  classed by gpreemptd in SLO mode (slo:defaults,
//	slo:pytorch, slo:pytorch-eager, slo:prepreempt-defaults, slo:multi-tenant
//	[:be:W1:be:W2], with @xF): the LC workers push their latency windows,
//	the daemon chooses the BE timeslice, the harness records its status;
//	slo:pytorch-eager-gate-defaults, slo:llm-gate-defaults: the LC gates
//	its own requests, and SLO mode steers its engine's gate
//	slo:pytorch@switch, slo:[prepreempt-]defaults@switch  the LC changes
//	                         half-way: graph to eager, or 5x its rate
//	<scenario>#<tag>         the same scenario under a name of its own (its
//	                         own --daemon-policy): slo:llm-defaults#abs
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

const knownScenarios = "standalone, be-only, defaults, be-<timeslice>, {pytorch[-eager]|llm[-graph]}-gate-{standalone|defaults|be-<timeslice>}, llm[-graph][-standalone|-be-only|-defaults|-be-<timeslice>], be-ratio:<ts1>:<ts2>, be-ratio:be:<w1>:be:<w2>, multi-tenant[:be:<w1>:be:<w2>|:<ts1>:<ts2>|:lc-only], pytorch[-eager][-standalone|-be-only|-defaults|-be-<timeslice>], [pytorch[-eager]-]prepreempt-{standalone|defaults|be-<timeslice>}, any LC scenario with @x<factor>, daemon:[prepreempt-]be-<timeslice>, daemon:<any standalone scenario>, slo:[pytorch[-eager]-][prepreempt-|gate-]defaults, slo:llm[-graph]-[gate-]defaults, slo:multi-tenant[:be:<w1>:be:<w2>], slo:pytorch@switch, slo:[prepreempt-]defaults@switch, any of these with #<tag>"

func parseScenario(name string) (Scenario, error) {
	sc := Scenario{Name: name, Runtime: RuntimeKernels}
	bad := func(why string) (Scenario, error) {
		return Scenario{}, fmt.Errorf("%w: scenario %q: %s (known: %s)", ErrInvalidArgument, name, why, knownScenarios)
	}
	rest := name
	if base, tag, ok := strings.Cut(rest, tagSep); ok {
		if !tagRE.MatchString(tag) {
			return bad(fmt.Sprintf("tag %q: want lower-case letters, digits and '-', up to 32", tag))
		}
		rest = base
	}
	if r, ok := strings.CutPrefix(rest, daemonPrefix); ok {
		sc.Daemon = true
		rest = r
	} else if r, ok := strings.CutPrefix(rest, sloPrefix); ok {
		sc.Daemon, sc.SLO = true, true
		rest = r
	}
	if r, ok := strings.CutSuffix(rest, switchSuffix); ok {
		sc.Switch = true
		rest = r
	}
	if base, factor, ok := strings.Cut(rest, "@x"); ok {
		f, err := strconv.ParseFloat(factor, 64)
		if err != nil || !(f > 0) || f > 1000 {
			return bad(fmt.Sprintf("rate factor %q: want a number in (0, 1000]", factor))
		}
		sc.PeriodFactor = f
		rest = base
	}
	switch rest {
	case "pytorch":
		rest = "pytorch-defaults"
	case "pytorch-eager":
		rest = "pytorch-eager-defaults"
	case "llm":
		rest = "llm-defaults"
	case "llm-graph":
		rest = "llm-graph-defaults"
	}
	if r, ok := strings.CutPrefix(rest, "llm-graph-"); ok {
		sc.Runtime = RuntimeLLMGraph
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "llm-"); ok {
		sc.Runtime = RuntimeLLM
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "pytorch-eager-"); ok {
		sc.Runtime = RuntimePyTorchEager
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "pytorch-"); ok {
		sc.Runtime = RuntimePyTorch
		rest = r
	}
	if r, ok := strings.CutPrefix(rest, "prepreempt-"); ok {
		sc.Hints = true
		rest = r
	} else if r, ok := strings.CutPrefix(rest, "gate-"); ok {
		sc.Gate = true
		rest = r
	}
	switch {
	case rest == "standalone":
		sc.Kind = KindStandalone
	case rest == "be-only":
		sc.Kind = KindBEOnly
	case rest == "defaults":
		sc.Kind = KindShared
	case rest == "multi-tenant" || strings.HasPrefix(rest, "multi-tenant:"):
		if sc.Runtime != RuntimeKernels {
			return bad("multi-tenant runs the kernel workers only")
		}
		sc.Kind = KindMultiTenant
		spec := strings.TrimPrefix(strings.TrimPrefix(rest, "multi-tenant"), ":")
		if spec == "" {
			spec = "be:3:be:1"
		}
		if spec == "lc-only" {
			sc.LCOnly = true
			break
		}
		parts := strings.Split(spec, ":")
		if len(parts) == 2 {
			// The two BE timeslices themselves (class be, each its own).
			if err := sc.parseRatio(parts); err != nil {
				return bad(err.Error())
			}
			break
		}
		if err := sc.parseWeights(parts); err != nil {
			return bad(err.Error())
		}
	case strings.HasPrefix(rest, "be-ratio:"):
		if sc.Runtime != RuntimeKernels {
			return bad("be-ratio runs the kernel workers only")
		}
		sc.Kind = KindBERatio
		parts := strings.Split(rest, ":")[1:]
		switch len(parts) {
		case 2:
			if err := sc.parseRatio(parts); err != nil {
				return bad(err.Error())
			}
		case 4:
			if err := sc.parseWeights(parts); err != nil {
				return bad(err.Error())
			}
		default:
			return bad("want be-ratio:<ts1>:<ts2> or be-ratio:be:<w1>:be:<w2>")
		}
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
	if (sc.Hints || sc.Gate) && !sc.HasLC() {
		return bad("pre-preemption and the gate need an LC worker")
	}
	if sc.Gate && !sc.Runtime.Python() {
		return bad("the gate- scenarios run the Python LC workers (pytorch-, llm-)")
	}
	if sc.Hints && sc.Runtime.LLM() {
		return bad("an LLM decode request is launch-bound: use gate-, not prepreempt-")
	}
	if sc.PeriodFactor != 0 && !sc.HasLC() {
		return bad("a rate factor needs an LC worker")
	}
	if sc.Switch && !(sc.SLO && sc.Kind == KindShared && (sc.Runtime == RuntimePyTorch || sc.Runtime == RuntimeKernels)) {
		return bad("@switch takes slo:pytorch (graph to eager) or slo:[prepreempt-]defaults (rate 5x)")
	}
	if sc.SLO {
		if !(sc.Kind == KindShared && sc.BETimeslice == 0) && !(sc.Kind == KindMultiTenant && sc.Weights[0].Weight > 0) {
			return bad("slo: takes an LC + BE scenario without a BE timeslice (the daemon chooses it), such as slo:pytorch-eager, slo:defaults or slo:multi-tenant")
		}
		return sc, nil
	}
	// An LC alone under the daemon (daemon:llm-standalone) is what its
	// tracing costs the LC, against the plain standalone run.
	if sc.Daemon && sc.Kind != KindStandalone && (sc.Kind != KindShared || sc.BETimeslice == 0) {
		return bad("daemon: takes an LC + BE scenario with a BE class timeslice, such as daemon:be-1us or daemon:prepreempt-be-1us, or an LC alone, such as daemon:llm-standalone")
	}
	return sc, nil
}

// parseRatio parses two BE timeslices, as the gpreemptctl the harness
// drives accepts them.
func (sc *Scenario) parseRatio(parts []string) error {
	for i, p := range parts {
		d, err := tsg.ParseTimeslice(p)
		if err != nil {
			return err
		}
		sc.Ratio[i] = d
	}
	return nil
}

// parseWeights reads two class specs ("be", "3", "be", "1") into Weights
// and the timeslices they map to under the default class table.
func (sc *Scenario) parseWeights(parts []string) error {
	if len(parts) != 4 {
		return fmt.Errorf("want two class:weight pairs, such as be:3:be:1")
	}
	table := class.Defaults()
	for i := range 2 {
		spec, err := class.ParseSpec(parts[2*i] + ":" + parts[2*i+1])
		if err != nil {
			return err
		}
		if spec.Name != class.BE {
			return fmt.Errorf("weight %s: BE workers take class be", spec)
		}
		st, err := table.Settings(spec.Name, spec.Weight)
		if err != nil {
			return err
		}
		sc.Weights[i], sc.Ratio[i] = spec, st.Timeslice.V
	}
	return nil
}

func usArg(d time.Duration) string { return fmt.Sprintf("%dus", d/time.Microsecond) }

// HasLC reports whether the scenario measures an LC worker.
func (s Scenario) HasLC() bool { return s.LCCount() > 0 }

// LCCount is how many LC workers the scenario runs.
func (s Scenario) LCCount() int {
	switch s.Kind {
	case KindStandalone, KindShared:
		return 1
	case KindMultiTenant:
		return 2
	}
	return 0
}

// BECount is how many BE workers the scenario runs.
func (s Scenario) BECount() int {
	switch s.Kind {
	case KindBEOnly, KindShared:
		return 1
	case KindBERatio:
		return 2
	case KindMultiTenant:
		if s.LCOnly {
			return 0
		}
		return 2
	}
	return 0
}

// NeedsCtl reports whether the scenario calls gpreemptctl (daemon:
// scenarios to read back what the daemon set).
func (s Scenario) NeedsCtl() bool {
	return s.Daemon || s.Kind == KindBERatio || s.Kind == KindMultiTenant || (s.Kind == KindShared && s.BETimeslice > 0)
}

// Dir is the scenario's subdirectory of the output directory.
func (s Scenario) Dir() string {
	return strings.NewReplacer(":", "_", "@", "_", tagSep, "_").Replace(s.Name)
}

// suffix is the rate-sweep part of the name ("@x2"), "" for none.
func (s Scenario) suffix() string {
	if _, f, ok := strings.Cut(s.Name, "@x"); ok {
		return "@x" + f
	}
	return ""
}

// baselineNames returns the names of the scenario's LC and BE baselines:
// the same runtime's, at the same rate for the LC.
func baselineNames(sc Scenario) (standalone, beOnly string) {
	prefix := ""
	if sc.Runtime != RuntimeKernels {
		prefix = string(sc.Runtime) + "-"
	}
	return prefix + "standalone" + sc.suffix(), prefix + "be-only"
}
