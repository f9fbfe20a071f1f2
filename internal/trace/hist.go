package trace

import "math/bits"

// Hist is a log2 histogram as the bcc tools keep them (funclatency,
// biolatency): constant memory whatever the number of samples, which is what
// a tracer left running needs. Bucket k counts the values v with
// bits.Len64(v) == k: 0, 1, 2-3, 4-7, ...
type Hist struct {
	Counts [65]uint64
	N      uint64
	Sum    uint64
	Min    uint64
	Max    uint64
}

// HistBucket is one printed row: values in [Low, High].
type HistBucket struct {
	Low   uint64 `json:"low"`
	High  uint64 `json:"high"`
	Count uint64 `json:"count"`
}

// Add counts one value.
func (h *Hist) Add(v uint64) {
	h.Counts[bits.Len64(v)]++
	if h.N == 0 || v < h.Min {
		h.Min = v
	}
	h.Max = max(h.Max, v)
	h.N++
	h.Sum += v
}

// Mean is the average value (0 when empty).
func (h *Hist) Mean() uint64 {
	if h.N == 0 {
		return 0
	}
	return h.Sum / h.N
}

// Buckets returns the rows bcc prints: from "0 -> 1" up to the highest
// non-empty bucket, empty ones in between included so that gaps show.
func (h *Hist) Buckets() []HistBucket {
	top := 0
	for k := len(h.Counts) - 1; k > 0; k-- {
		if h.Counts[k] != 0 {
			top = k
			break
		}
	}
	if h.N == 0 {
		return nil
	}
	top = max(top, 1)
	out := make([]HistBucket, 0, top)
	out = append(out, HistBucket{Low: 0, High: 1, Count: h.Counts[0] + h.Counts[1]})
	for k := 2; k <= top; k++ {
		high := uint64(1)<<k - 1
		if k == 64 {
			high = ^uint64(0)
		}
		out = append(out, HistBucket{Low: 1 << (k - 1), High: high, Count: h.Counts[k]})
	}
	return out
}
