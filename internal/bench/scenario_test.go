package bench

import (
	"errors"
	"testing"
	"time"
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
		{in: "pytorch,pytorch-standalone,pytorch-be-1us,pytorch-be-only", want: []Scenario{
			{Name: "pytorch", Kind: KindShared, Runtime: RuntimePyTorch},
			{Name: "pytorch-standalone", Kind: KindStandalone, Runtime: RuntimePyTorch},
			{Name: "pytorch-be-1us", Kind: KindShared, Runtime: RuntimePyTorch, BETimeslice: time.Microsecond},
			{Name: "pytorch-be-only", Kind: KindBEOnly, Runtime: RuntimePyTorch},
		}},
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
