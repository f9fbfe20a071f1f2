package objective

import (
	"errors"
	"math"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Objective
		err  bool
	}{
		{"p99<=1.15x", Objective{Quantile: 0.99, Inflation: 1.15}, false},
		{"p50 <= 1.05x", Objective{Quantile: 0.5, Inflation: 1.05}, false},
		{"P99.9<=2ms", Objective{Quantile: 0.999, Absolute: 2 * time.Millisecond}, false},
		{"tpot_p50<=12ms", Objective{Metric: "tpot", Quantile: 0.5, Absolute: 12 * time.Millisecond}, false},
		{"TTFT_p99 <= 400ms", Objective{Metric: "ttft", Quantile: 0.99, Absolute: 400 * time.Millisecond}, false},
		{"p50<=1.05x@shortest", Objective{Quantile: 0.5, Inflation: 1.05, Reference: Shortest}, false},
		{"p50<=1.05x@Standalone", Objective{Quantile: 0.5, Inflation: 1.05, Reference: Standalone}, false},
		{"p50<=2ms@shortest", Objective{}, true},
		{"p50<=1.05x@alone", Objective{}, true},
		{"p50<=1.05x@", Objective{}, true},
		{"p50<=1.05@shortest", Objective{}, true},
		{"tbt_p50<=12ms", Objective{}, true},
		{"tpot_<=12ms", Objective{}, true},
		{"p99<=0.9x", Objective{}, true},
		{"p100<=2x", Objective{}, true},
		{"p0<=2x", Objective{}, true},
		{"q99<=2x", Objective{}, true},
		{"p99<2x", Objective{}, true},
		{"p99<=-1ms", Objective{}, true},
		{"p99<=fast", Objective{}, true},
		{"", Objective{}, true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.err || math.Abs(got.Quantile-tc.want.Quantile) > 1e-12 ||
			got.Inflation != tc.want.Inflation || got.Absolute != tc.want.Absolute || got.Metric != tc.want.Metric || got.Reference != tc.want.Reference {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, err %v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Parse(%q): %v does not wrap ErrInvalid", tc.in, err)
			}
			continue
		}
		if err := got.Check(); err != nil {
			t.Errorf("Parse(%q) gave an objective Check refuses: %v", tc.in, err)
		}
		if back, err := Parse(got.String()); err != nil || back.String() != got.String() {
			t.Errorf("round trip of %q via %q = %+v, %v", tc.in, got.String(), back, err)
		}
	}
}

func TestParseList(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want "": refused
	}{
		{"p99<=1.15x", "p99<=1.15x"},
		{"p99<=1.15x, p50<=1.05x", "p50<=1.05x, p99<=1.15x"},
		{"p50<=1.05x,p99<=2ms", "p50<=1.05x, p99<=2ms"},
		{"p50<=1.05x, p50<=2ms", ""},
		{"p50<=1.05x,", ""},
		{",", ""},
		{"", ""},
		{"p50<=1.05x, p101<=2x", ""},
		{"tpot_p50<=12ms, p50<=1.05x", "p50<=1.05x, tpot_p50<=12ms"},
		{"tpot_p50<=12ms, tpot_p50<=10ms", ""},
	} {
		got, err := ParseList(tc.in)
		switch {
		case tc.want == "" && (err == nil || !errors.Is(err, ErrInvalid)):
			t.Errorf("ParseList(%q) = %v, %v; want an ErrInvalid", tc.in, got, err)
		case tc.want != "" && (err != nil || got.String() != tc.want):
			t.Errorf("ParseList(%q) = %v, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"p99<=1.15x", "p50<=2ms", "p<=", "p99<=1e308x", "p1e-9<=1x", "p50<=1.05x, p99<=1.15x",
		"tpot_p50<=12ms", "p50<=1.05x@shortest", "ttft_p99<=1.5x@standalone", "_p50<=1x", "tpot_p50<=@x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if os, err := ParseList(s); err == nil {
			if len(os) == 0 {
				t.Fatalf("ParseList(%q) gave none and no error", s)
			}
			back, err := ParseList(os.String())
			if err != nil || back.String() != os.String() {
				t.Fatalf("round trip of %q via %q = %v, %v", s, os, back, err)
			}
		}
		o, err := Parse(s)
		if err != nil {
			return
		}
		if err := o.Check(); err != nil {
			t.Fatalf("Parse(%q) = %+v, which Check refuses: %v", s, o, err)
		}
	})
}

// TestParseObjectiveRefusesNaN: strconv.ParseFloat takes "nan", which
// fails every comparison of a range check written as two refusals.
func TestParseObjectiveRefusesNaN(t *testing.T) {
	for _, s := range []string{"p50<=nanx", "pnan<=1.05x", "pNaN<=2ms"} {
		o, err := Parse(s)
		if err == nil {
			t.Errorf("Parse(%q) = %+v, accepted (Check: %v; Target(1ms) = %v)", s, o, o.Check(), o.Target(time.Millisecond))
		}
	}
	if os, err := ParseList("pnan<=1.05x, pnan<=2ms"); err == nil {
		t.Errorf("two NaN quantiles accepted: %v", os)
	}
}

// TestName: an objective is named, in the status and its keys, as it was
// written, whatever the quantile's float product gives.
func TestName(t *testing.T) {
	for _, tc := range []struct{ in, name, str string }{
		{"p50<=1.05x", "p50", "p50<=1.05x"},
		{"p57<=1ms", "p57", "p57<=1ms"},
		{"p29<=1.1x", "p29", "p29<=1.1x"},
		{"p99.9<=2ms", "p99.9", "p99.9<=2ms"},
		{"p0.1<=1ms", "p0.1", "p0.1<=1ms"},
		{"tpot_p58<=12ms", "tpot_p58", "tpot_p58<=12ms"},
	} {
		o, err := Parse(tc.in)
		if err != nil || o.Name() != tc.name || o.String() != tc.str {
			t.Errorf("Parse(%q) = %+v, %v: name %q, string %q; want %q, %q", tc.in, o, err, o.Name(), o.String(), tc.name, tc.str)
		}
	}
}

// TestCheckRefuses: Check refuses what Parse would, NaN included (an
// Objective built in code or decoded from JSON, not parsed).
func TestCheckRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Objective
	}{
		{"NaN quantile", Objective{Quantile: math.NaN(), Absolute: time.Millisecond}},
		{"quantile 1", Objective{Quantile: 1, Absolute: time.Millisecond}},
		{"no bound", Objective{Quantile: 0.5}},
		{"both bounds", Objective{Quantile: 0.5, Inflation: 1.1, Absolute: time.Millisecond}},
		{"inflation under 1", Objective{Quantile: 0.5, Inflation: 0.9}},
		{"reference on an absolute", Objective{Quantile: 0.5, Absolute: time.Millisecond, Reference: Shortest}},
	} {
		if err := tc.o.Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: Check(%+v) = %v; want ErrInvalid", tc.name, tc.o, err)
		}
	}
}
