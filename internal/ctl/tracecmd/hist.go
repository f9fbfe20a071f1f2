package tracecmd

import (
	"io"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// histView is a histogram as -o json prints it; buckets are [lo, hi).
type histView struct {
	Unit    string         `json:"unit"`
	Count   uint64         `json:"count"`
	Mean    float64        `json:"mean"`
	Min     float64        `json:"min"`
	Max     float64        `json:"max"`
	Buckets []stats.Bucket `json:"buckets"`
}

func viewHist(h *stats.Hist, unit string) histView {
	return histView{Unit: unit, Count: h.N, Mean: h.Mean(), Min: h.Min, Max: h.Max, Buckets: h.Buckets()}
}

func writeHist(w io.Writer, h *stats.Hist, unit string) error {
	return stats.WriteHistogram(w, h.Buckets(), unit)
}
