package stats

import (
	"math"
	"testing"
)

func TestForgetting(t *testing.T) {
	var e Forgetting
	for _, x := range []float64{1, 2, 3, math.NaN(), math.Inf(1)} {
		e.Add(x)
	}
	if e.W != 3 || e.Mean() != 2 {
		t.Fatalf("after 1, 2, 3 and two ignored: %+v, mean %v", e, e.Mean())
	}
	// Sample variance about the mean: (1+0+1)/3; with no prior weight.
	if sd := e.SD(0, 0); math.Abs(sd-math.Sqrt(2.0/3)) > 1e-12 {
		t.Errorf("SD %v", sd)
	}
	// A prior of 10% scatter weighted as 3 observations widens it.
	if sd := e.SD(0.1, 3); math.Abs(sd-math.Sqrt((2+3*0.04)/6)) > 1e-12 {
		t.Errorf("SD with prior %v", sd)
	}
	lo, hi := e.Bounds(2, 0, 0)
	if se := math.Sqrt(2.0/3) / math.Sqrt(3); math.Abs(lo-(2-2*se)) > 1e-12 || math.Abs(hi-(2+2*se)) > 1e-12 {
		t.Errorf("bounds %v %v", lo, hi)
	}
	e.Decay(0.5)
	if e.W != 1.5 || e.Mean() != 2 {
		t.Errorf("decay: %+v", e)
	}
	sd := e.SD(0, 0)
	e.Scale(2) // every observation doubled: the mean and the scatter, not the weight
	if e.W != 1.5 || e.Mean() != 4 || math.Abs(e.SD(0, 0)-2*sd) > 1e-12 {
		t.Errorf("scale: %+v, SD %v, want %v", e, e.SD(0, 0), 2*sd)
	}
}

func TestMostDeviant(t *testing.T) {
	for _, tc := range []struct {
		z    float64
		n    int
		want float64
	}{
		{2, 1, 2},
		{-2, 1, -2},
		{0, 8, 0},
		// The most deviant of 8 at 2.0 is as likely as one at ~1.01.
		{2, 8, 1.0131},
		{-3, 4, -2.5505},
	} {
		if got := MostDeviant(tc.z, tc.n); math.Abs(got-tc.want) > 1e-3 {
			t.Errorf("MostDeviant(%v, %d) = %v, want %v", tc.z, tc.n, got, tc.want)
		}
	}
	if !math.IsInf(MostDeviant(40, 8), 1) {
		t.Error("a deviate whose chance underflows is not +Inf")
	}
}

func TestScatter(t *testing.T) {
	steady := &Forgetting{}
	steady.Add(1)
	tests := []struct {
		name string
		adds [][2]float64 // each measurement and its own standard error, each after the one before (the first has none)
		want float64      // Of(0.1, 2)
	}{
		{"none: the prior", nil, 0.1},
		{"one: its own error", [][2]float64{{1, 0.02}}, 0.02},
		{"apart by more than their own", [][2]float64{{1, 0.02}, {1.2, 0.02}}, math.Sqrt((0.2*0.2*0.5 + 2*0.0004) / 3)},
		{"apart as their own", [][2]float64{{1, 0.02}, {1.02, 0.02}}, math.Sqrt((0.02*0.02*0.5 + 2*0.0004) / 3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s Scatter
			var before *Forgetting
			for _, a := range tt.adds {
				s.Add(a[0], a[1], before, 0.5)
				before = &Forgetting{}
				before.Add(a[0])
			}
			if got := s.Of(nil, 0.1, 2); math.Abs(got-tt.want) > 1e-12 {
				t.Errorf("Of = %v, want %v", got, tt.want)
			}
			own := &Forgetting{}
			if own.Add(0.05 * 0.05); len(tt.adds) > 0 && math.Abs(s.Of(own, 0.1, 2)-math.Sqrt((s.Off.Sxx+2*0.0025)/(s.Off.W+2))) > 1e-12 {
				t.Errorf("Of with its own error 5%% = %v", s.Of(own, 0.1, 2))
			}
		})
	}
	var s Scatter
	s.Add(1.2, 0.02, &Forgetting{W: 0.3, Sx: 0.3}, 0.5) // a mean of less weight than least is none to fall from
	if s.Off.W != 0 {
		t.Errorf("a residual from an estimate under the least weight: %+v", s.Off)
	}
}
