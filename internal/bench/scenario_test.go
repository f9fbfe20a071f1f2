package bench

import (
	"errors"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
)

func TestParseScenarios(t *testing.T) {
	tests := []struct {
		in      string
		want    []Scenario
		wantErr bool
	}{
		{in: "standalone", want: []Scenario{{Name: "standalone", Kind: KindStandalone, Runtime: RuntimeKernels}}},
		{in: " be-only , defaults ", want: []Scenario{
			{Name: "be-only", Kind: KindBEOnly, Runtime: RuntimeKernels},
			{Name: "defaults", Kind: KindShared, Runtime: RuntimeKernels},
		}},
		{in: "be-200us,be-1us,be-1ms", want: []Scenario{
			{Name: "be-200us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: 200 * time.Microsecond},
			{Name: "be-1us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond},
			{Name: "be-1ms", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Millisecond},
		}},
		{in: "be-ratio:3000us:1000us", want: []Scenario{
			{Name: "be-ratio:3000us:1000us", Kind: KindBERatio, Runtime: RuntimeKernels, Ratio: [2]time.Duration{3 * time.Millisecond, time.Millisecond}},
		}},
		{in: "llm,llm-standalone,llm-gate-be-1us,llm-graph-gate-defaults,llm-graph-be-only,pytorch-eager-gate-be-1us", want: []Scenario{
			{Name: "llm", Kind: KindShared, Runtime: RuntimeLLM},
			{Name: "llm-standalone", Kind: KindStandalone, Runtime: RuntimeLLM},
			{Name: "llm-gate-be-1us", Kind: KindShared, Runtime: RuntimeLLM, BETimeslice: time.Microsecond, Gate: true},
			{Name: "llm-graph-gate-defaults", Kind: KindShared, Runtime: RuntimeLLMGraph, Gate: true},
			{Name: "llm-graph-be-only", Kind: KindBEOnly, Runtime: RuntimeLLMGraph},
			{Name: "pytorch-eager-gate-be-1us", Kind: KindShared, Runtime: RuntimePyTorchEager, BETimeslice: time.Microsecond, Gate: true},
		}},
		{in: "gate-be-1us", wantErr: true},
		{in: "llm-prepreempt-be-1us", wantErr: true},
		{in: "llm-gate-be-only", wantErr: true},
		{in: "slo:llm-be-1us", wantErr: true},
		{in: "pytorch,pytorch-standalone,pytorch-be-1us,pytorch-be-only", want: []Scenario{
			{Name: "pytorch", Kind: KindShared, Runtime: RuntimePyTorch},
			{Name: "pytorch-standalone", Kind: KindStandalone, Runtime: RuntimePyTorch},
			{Name: "pytorch-be-1us", Kind: KindShared, Runtime: RuntimePyTorch, BETimeslice: time.Microsecond},
			{Name: "pytorch-be-only", Kind: KindBEOnly, Runtime: RuntimePyTorch},
		}},
		{in: "be-ratio:be:3:be:1,multi-tenant", want: []Scenario{
			{Name: "be-ratio:be:3:be:1", Kind: KindBERatio, Runtime: RuntimeKernels, Ratio: [2]time.Duration{560 * time.Microsecond, 200 * time.Microsecond},
				Weights: [2]class.Spec{{Name: class.BE, Weight: 3}, {Name: class.BE, Weight: 1}}},
			{Name: "multi-tenant", Kind: KindMultiTenant, Runtime: RuntimeKernels, Ratio: [2]time.Duration{560 * time.Microsecond, 200 * time.Microsecond},
				Weights: [2]class.Spec{{Name: class.BE, Weight: 3}, {Name: class.BE, Weight: 1}}},
		}},
		{in: "multi-tenant:be:2:be:2", want: []Scenario{
			{Name: "multi-tenant:be:2:be:2", Kind: KindMultiTenant, Runtime: RuntimeKernels, Ratio: [2]time.Duration{380 * time.Microsecond, 380 * time.Microsecond},
				Weights: [2]class.Spec{{Name: class.BE, Weight: 2}, {Name: class.BE, Weight: 2}}},
		}},
		{in: "pytorch-eager,pytorch-eager-be-1ms,pytorch-eager-prepreempt-be-1ms", want: []Scenario{
			{Name: "pytorch-eager", Kind: KindShared, Runtime: RuntimePyTorchEager},
			{Name: "pytorch-eager-be-1ms", Kind: KindShared, Runtime: RuntimePyTorchEager, BETimeslice: time.Millisecond},
			{Name: "pytorch-eager-prepreempt-be-1ms", Kind: KindShared, Runtime: RuntimePyTorchEager, BETimeslice: time.Millisecond, Hints: true},
		}},
		{in: "standalone@x2,be-1us@x0.5", want: []Scenario{
			{Name: "standalone@x2", Kind: KindStandalone, Runtime: RuntimeKernels, PeriodFactor: 2},
			{Name: "be-1us@x0.5", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond, PeriodFactor: 0.5},
		}},
		{in: "be-only@x2", wantErr: true},
		{in: "be-1us@x0", wantErr: true},
		{in: "be-1us@xfast", wantErr: true},
		{in: "prepreempt-multi-tenant:lc-only", want: []Scenario{
			{Name: "prepreempt-multi-tenant:lc-only", Kind: KindMultiTenant, Runtime: RuntimeKernels, Hints: true, LCOnly: true},
		}},
		{in: "slo:multi-tenant:lc-only", wantErr: true},
		{in: "multi-tenant:lc-only:be", wantErr: true},
		{in: "prepreempt-multi-tenant:150us:50us", want: []Scenario{
			{Name: "prepreempt-multi-tenant:150us:50us", Kind: KindMultiTenant, Runtime: RuntimeKernels, Hints: true, Ratio: [2]time.Duration{150 * time.Microsecond, 50 * time.Microsecond}},
		}},
		{in: "multi-tenant:150us:0us", wantErr: true},
		{in: "slo:multi-tenant:150us:50us", wantErr: true},
		{in: "multi-tenant:lc:3:be:1", wantErr: true},
		{in: "multi-tenant:be:0:be:1", wantErr: true},
		{in: "multi-tenant:be:3", wantErr: true},
		{in: "pytorch-multi-tenant", wantErr: true},
		{in: "be-ratio:be:3:be", wantErr: true},
		{in: "", wantErr: true},
		{in: "bogus", wantErr: true},
		{in: "be-", wantErr: true},
		{in: "be-0us", wantErr: true},
		{in: "be-100ns", wantErr: true},
		{in: "be-1500ns", wantErr: true},
		{in: "be-6s", wantErr: true},
		{in: "be-ratio:3000us", wantErr: true},
		{in: "be-ratio:3000us:x", wantErr: true},
		{in: "pytorch-be-ratio:1ms:1ms", wantErr: true},
		{in: "standalone,standalone", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseScenarios(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("ParseScenarios(%q) = %v, %v; want ErrInvalidArgument", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("scenario %d = %+v, want %+v", i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestScenarioProperties(t *testing.T) {
	tests := []struct {
		name                 string
		hasLC, needsCtl      bool
		beCount              int
		dir                  string
		baseline, beBaseline string
	}{
		{"standalone", true, false, 0, "standalone", "standalone", "be-only"},
		{"be-only", false, false, 1, "be-only", "standalone", "be-only"},
		{"defaults", true, false, 1, "defaults", "standalone", "be-only"},
		{"be-200us", true, true, 1, "be-200us", "standalone", "be-only"},
		{"be-ratio:3000us:1000us", false, true, 2, "be-ratio_3000us_1000us", "standalone", "be-only"},
		{"pytorch", true, false, 1, "pytorch", "pytorch-standalone", "pytorch-be-only"},
		{"pytorch-be-1us", true, true, 1, "pytorch-be-1us", "pytorch-standalone", "pytorch-be-only"},
		{"pytorch-eager-be-1ms", true, true, 1, "pytorch-eager-be-1ms", "pytorch-eager-standalone", "pytorch-eager-be-only"},
		{"multi-tenant", true, true, 2, "multi-tenant", "standalone", "be-only"},
		{"be-1us@x2", true, true, 1, "be-1us_x2", "standalone@x2", "be-only"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc, err := parseScenario(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if sc.HasLC() != tt.hasLC || sc.NeedsCtl() != tt.needsCtl || sc.BECount() != tt.beCount || sc.Dir() != tt.dir {
				t.Errorf("HasLC %v NeedsCtl %v BECount %d Dir %q", sc.HasLC(), sc.NeedsCtl(), sc.BECount(), sc.Dir())
			}
			if s, b := baselineNames(sc); s != tt.baseline || b != tt.beBaseline {
				t.Errorf("baselines %q %q", s, b)
			}
		})
	}
}
