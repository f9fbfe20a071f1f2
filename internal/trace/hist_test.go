package trace

import (
	"reflect"
	"testing"
)

func TestHist(t *testing.T) {
	var h Hist
	if h.Buckets() != nil || h.Mean() != 0 {
		t.Fatal("empty histogram has rows")
	}
	for _, v := range []uint64{0, 1, 2, 3, 300, 310, 290, 1000} {
		h.Add(v)
	}
	want := []HistBucket{
		{0, 1, 2}, {2, 3, 2}, {4, 7, 0}, {8, 15, 0}, {16, 31, 0}, {32, 63, 0},
		{64, 127, 0}, {128, 255, 0}, {256, 511, 3}, {512, 1023, 1},
	}
	if got := h.Buckets(); !reflect.DeepEqual(got, want) {
		t.Errorf("buckets %v", got)
	}
	if h.N != 8 || h.Min != 0 || h.Max != 1000 || h.Mean() != 1906/8 {
		t.Errorf("%+v", h)
	}
	var top Hist
	top.Add(^uint64(0))
	if b := top.Buckets(); len(b) != 64 || b[63].High != ^uint64(0) || b[63].Count != 1 {
		t.Errorf("top bucket %v", b[len(b)-1])
	}
}
