package scrape

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestHist(t *testing.T) {
	inf := math.Inf(1)
	// Bounds 0.1, 0.5, 1, +Inf with 2, 4, 0, 2 values in them.
	h := Hist{Bounds: []float64{0.1, 0.5, 1, inf}, Counts: []float64{2, 6, 6, 8}}
	cases := []struct {
		name string
		h    Hist
		q    float64
		want float64
	}{
		// histogram_quantile: rank q*n, linear within the bucket, from 0
		// below a first positive bound.
		{"in the first bucket, from 0", h, 0.125, 0.05},
		{"the first bucket's top", h, 0.25, 0.1},
		{"within the second", h, 0.5, 0.1 + 0.4*2/4},
		{"in +Inf: the last finite bound", h, 0.99, 1},
		{"the max", h, 1, 1},
		{"a first bound at or under 0", Hist{Bounds: []float64{0, 1, inf}, Counts: []float64{3, 4, 4}}, 0.5, 0},
		{"fractional counts", Hist{Bounds: []float64{1, 2, inf}, Counts: []float64{0.5, 2, 2}}, 0.5, 1 + 0.5/1.5},
	}
	for _, tc := range cases {
		if got := tc.h.Quantile(tc.q); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: q%v = %v, want %v", tc.name, tc.q, got, tc.want)
		}
	}
	if q := (Hist{Bounds: []float64{1, inf}, Counts: []float64{0, 0}}).Quantile(0.5); !math.IsNaN(q) {
		t.Errorf("an empty histogram's median %v, want NaN", q)
	}

	// Values: c values spread evenly inside each bucket, each at the middle of its share of it (a
	// value at its share's top reads high by half a share: a lone value by half a bucket), the
	// +Inf bucket's at the last bound.
	got := h.Values(time.Second, 100)
	want := []time.Duration{25 * time.Millisecond, 75 * time.Millisecond, 150 * time.Millisecond, 250 * time.Millisecond,
		350 * time.Millisecond, 450 * time.Millisecond, time.Second, time.Second}
	if len(got) != len(want) {
		t.Fatalf("values %v, want %v", got, want)
	}
	for i := range got {
		if d := got[i] - want[i]; d < -time.Microsecond || d > time.Microsecond {
			t.Fatalf("values %v, want %v", got, want)
		}
	}
	// Thinned evenly: the same shape, fewer.
	big := Hist{Bounds: []float64{1, 2, 3, inf}, Counts: []float64{1000, 3000, 4000, 4000}}
	thin := big.Values(time.Second, 400)
	if len(thin) != 400 || !slices.IsSorted(thin) {
		t.Fatalf("%d values, sorted %v", len(thin), slices.IsSorted(thin))
	}
	per := [3]int{}
	for _, v := range thin {
		per[min(int(math.Ceil(v.Seconds()))-1, 2)]++
	}
	if per != [3]int{100, 200, 100} {
		t.Errorf("thinned values by bucket %v, want [100 200 100]", per)
	}
}

func TestDelta(t *testing.T) {
	inf := math.Inf(1)
	b := []float64{1, 2, inf}
	cases := []struct {
		name      string
		prev, cur Hist
		ok        bool
		want      []float64
	}{
		{"growth", Hist{Bounds: b, Counts: []float64{1, 2, 3}}, Hist{Bounds: b, Counts: []float64{2, 4, 6}}, true, []float64{1, 2, 3}},
		{"none", Hist{Bounds: b, Counts: []float64{1, 2, 3}}, Hist{Bounds: b, Counts: []float64{1, 2, 3}}, true, []float64{0, 0, 0}},
		{"the count went down", Hist{Bounds: b, Counts: []float64{1, 2, 3}}, Hist{Bounds: b, Counts: []float64{1, 2, 2}}, false, nil},
		{"a bucket went down", Hist{Bounds: b, Counts: []float64{1, 2, 3}}, Hist{Bounds: b, Counts: []float64{0, 2, 3}}, false, nil},
		{"other buckets", Hist{Bounds: b, Counts: []float64{1, 2, 3}}, Hist{Bounds: []float64{1, 3, inf}, Counts: []float64{1, 2, 3}}, false, nil},
		{"a lower bucket grew more than a higher", Hist{Bounds: b, Counts: []float64{0, 5, 5}}, Hist{Bounds: b, Counts: []float64{3, 6, 6}}, false, nil},
	}
	for _, tc := range cases {
		d, ok := Delta(tc.prev, tc.cur)
		if ok != tc.ok || ok && !slices.Equal(d.Counts, tc.want) {
			t.Errorf("%s: %v %v, want %v %v", tc.name, d.Counts, ok, tc.want, tc.ok)
		}
	}
}
