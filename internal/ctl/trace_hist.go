package ctl

import (
	"fmt"
	"io"
	"strings"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// histView is a histogram as -o json prints it.
type histView struct {
	Unit    string             `json:"unit"`
	Count   uint64             `json:"count"`
	Mean    uint64             `json:"mean"`
	Min     uint64             `json:"min"`
	Max     uint64             `json:"max"`
	Buckets []trace.HistBucket `json:"buckets"`
}

func viewHist(h *trace.Hist, unit string) histView {
	return histView{Unit: unit, Count: h.N, Mean: h.Mean(), Min: h.Min, Max: h.Max, Buckets: h.Buckets()}
}

// histBarWidth is the width of the distribution column, as in bcc.
const histBarWidth = 40

// writeHist prints h the way the bcc tools print a log2 histogram
// (print_log2_hist in funclatency, biolatency): a "usecs : count
// distribution" header, then one "low -> high : count |***|" row per
// bucket, so that the output reads like theirs.
func writeHist(w io.Writer, h *trace.Hist, unit string) error {
	buckets := h.Buckets()
	var peak uint64
	for _, b := range buckets {
		peak = max(peak, b.Count)
	}
	if _, err := fmt.Fprintf(w, "%10s%14s : count     distribution\n", unit, ""); err != nil {
		return err
	}
	for _, b := range buckets {
		stars := 0
		if peak > 0 {
			stars = int(b.Count * histBarWidth / peak)
		}
		if _, err := fmt.Fprintf(w, "%10d -> %-10d : %-8d |%-*s|\n", b.Low, b.High, b.Count, histBarWidth, strings.Repeat("*", stars)); err != nil {
			return err
		}
	}
	return nil
}
