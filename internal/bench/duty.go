package bench

import (
	"math"
	"time"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// With --be-duty D, be_gemm.py launches while CLOCK_MONOTONIC / (D/2) is
// even and idles while it is odd, so that one LC process is measured both
// beside BE and alone. An eager LC's speed moves by tens of percent from
// one process to the next; within a process, the two halves share it.

// beWorks reports whether be_gemm.py launches at CLOCK_MONOTONIC t (ns)
// with half-periods of half ns: in the even ones.
func beWorks(t, half int64) bool { return (t/half)%2 == 0 }

// dutyGuard is how far into a half a request must start to count for it:
// BE's queued work drains and a power-capped clock recovers within ~50 ms
// of a stop, and a restart takes a product or two.
const dutyGuard = 100 * time.Millisecond

// minBEDuty leaves each half a second past its guard.
const minBEDuty = 2 * (time.Second + dutyGuard)

// minDutyRequests is the fewest requests a half needs for its median.
const minDutyRequests = 3

// DutySplit compares one LC process's requests that ran while BE worked
// with those that ran while it idled.
type DutySplit struct {
	// WithBE and Alone are the two halves' latency summaries (us).
	WithBE *stats.Summary `json:"with_be_us,omitempty"`
	Alone  *stats.Summary `json:"alone_us,omitempty"`
	// P50Ratio is WithBE's p50 over Alone's (0: a half had fewer than
	// minDutyRequests requests).
	P50Ratio float64 `json:"p50_ratio,omitempty"`
	// TPOTRatio is the same for an LLM LC's time per output token.
	TPOTRatio float64 `json:"tpot_p50_ratio,omitempty"`
}

// splitByDuty sorts lc's requests into BE's working and idle halves of
// period: a request counts when it starts dutyGuard or more into a half and
// ends within it (its preparation included). A request starts when it is
// due or, if the one before ran past that, when that one ended.
func splitByDuty(lc *LCResult, period time.Duration) *DutySplit {
	half := int64(period / 2)
	if lc == nil || half <= 0 {
		return nil
	}
	var lat, tpot [2][]float64 // [0]: with BE, [1]: alone
	prevEnd := int64(math.MinInt64)
	for _, s := range lc.Samples {
		start := max(s.ArrivalMonoNs, prevEnd)
		end := start + s.PrepNs + s.LatencyNs
		prevEnd = end
		k := start / half
		if start < 0 || start-k*half < int64(dutyGuard) || end >= (k+1)*half {
			continue
		}
		i := k % 2 // 0: BE working
		lat[i] = append(lat[i], float64(s.LatencyNs)/1e3)
		if s.TPOTNs > 0 {
			tpot[i] = append(tpot[i], float64(s.TPOTNs)/1e3)
		}
	}
	d := &DutySplit{}
	if len(lat[0]) > 0 {
		w := stats.Summarize(lat[0])
		d.WithBE = &w
	}
	if len(lat[1]) > 0 {
		a := stats.Summarize(lat[1])
		d.Alone = &a
	}
	if len(lat[0]) >= minDutyRequests && len(lat[1]) >= minDutyRequests {
		d.P50Ratio = stats.Median(lat[0]) / stats.Median(lat[1])
		if len(tpot[0]) >= minDutyRequests && len(tpot[1]) >= minDutyRequests {
			d.TPOTRatio = stats.Median(tpot[0]) / stats.Median(tpot[1])
		}
	}
	return d
}

// dutyCount is what a duty-cycled BE completed in the working halves of
// (start, end] and the working time those hold: its rate while it worked,
// whichever way the window falls on the cycle.
func dutyCount(completions []int64, start, end int64, period time.Duration) (n int64, working time.Duration) {
	half := int64(period / 2)
	if half <= 0 || end <= start {
		return 0, 0
	}
	for _, t := range completions {
		if t > start && t <= end && beWorks(t, half) {
			n++
		}
	}
	for k := start / half; k*half < end; k++ {
		if beWorks(k*half, half) {
			working += time.Duration(min(end, (k+1)*half) - max(start, k*half))
		}
	}
	return n, working
}
