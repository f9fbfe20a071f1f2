package request

import (
	"math"
	"time"
)

// GapBucket is one bucket of the gaps a Delimiter learns its quiet gap
// from (Gaps): its lower edge, the gaps in it (halved as they age), those of
// CPU work among them, and their time.
type GapBucket struct {
	LowUs  float64 `json:"low_us"`
	Count  float64 `json:"count"`
	Inside float64 `json:"cpu_work"`
	TimeMs float64 `json:"time_ms"`
}

// Gaps is the histogram the quiet gap is learnt from, its empty buckets
// left out: what `trace requests -o json` shows of why a gap is or is not
// learnt.
func (d *Delimiter) Gaps() []GapBucket {
	var out []GapBucket
	for b := range d.gaps.n {
		if d.gaps.n[b] > 0 {
			out = append(out, GapBucket{LowUs: bucketLow(b) / 1e3, Count: d.gaps.n[b], Inside: d.gaps.inside[b], TimeMs: d.gaps.w[b] / 1e6})
		}
	}
	return out
}

// gapHist is a log-bucketed histogram of recent gaps between busy moments,
// weighted by their time: gaps inside a request are many and short, gaps
// between requests few and long, and by time both weigh. It decays by
// halving whenever recordedDecay of gap time (or decayCount gaps) was
// added since the last halving.
type gapHist struct {
	w, n   [gapBuckets]float64 // time (ns) and count per bucket
	inside [gapBuckets]float64 // count per bucket of gaps of CPU work
	byTime [gapBuckets]float64 // of those, judged by CPU time (open to a tick's lag)
	sinceT float64
	sinceN int
}

const (
	// Buckets of a factor √2 from 1 us: the last starts at 2^23.5 us (~12 s).
	gapBuckets = 48
	gapBase    = float64(time.Microsecond)
	decayTime  = float64(10 * time.Second)
	decayCount = 1 << 20
	heavyShare = 0.01 // a bucket holding less of the gap time is noise
	minSplit   = 16.0 // the least ratio between the clusters' edges
	// The least ratio from the longest gap of CPU work to the shortest
	// asleep gap above it: √minSplit, the margin of the side judged by length.
	minSplitCPU = 4.0
	minQuiet    = 0.2 // the least share of the gap time in the cluster above the split
	minBetween  = 3   // gaps above the split: requests seen to end
	minWithin   = 8   // gaps below it
	// Gaps of CPU work above a split, fewer than this share of those slept through there, are
	// strays (a hiccup), not a decode's sampling between tokens (some of it read as asleep).
	strayShare = 0.1
)

func gapBucket(g time.Duration) int {
	if float64(g) < gapBase {
		return 0
	}
	b := int(2 * math.Log2(float64(g)/gapBase))
	return min(max(b, 0), gapBuckets-1)
}

// bucketLow is the lower edge of bucket b (0 for the first).
func bucketLow(b int) float64 {
	if b == 0 {
		return 0
	}
	return gapBase * math.Pow(2, float64(b)/2)
}

func (h *gapHist) add(g time.Duration, inside, byTime bool) {
	b := gapBucket(g)
	h.w[b] += float64(g)
	h.n[b]++
	if inside {
		h.inside[b]++
	}
	if byTime {
		h.byTime[b]++
	}
	h.sinceT += float64(g)
	h.sinceN++
	if h.sinceT >= decayTime || h.sinceN >= decayCount {
		for i := range h.w {
			h.w[i] /= 2
			h.n[i] /= 2
			h.inside[i] /= 2
			h.byTime[i] /= 2
		}
		h.sinceT, h.sinceN = 0, 0
	}
}

// threshold splits the gaps in two clusters and returns a gap between them
// (0: no split yet). A bucket counts if it holds at least heavyShare of
// the gaps or of the gap time (the many short gaps inside requests, the
// few long ones between them); a stray gap is noise. Counted buckets whose
// edges are at least minSplit apart are in different clusters (a clear
// split). A split between two clusters needs at least minWithin gaps below
// it and minBetween above, and the cluster just above it must hold at
// least minQuiet of the gap time: the time between requests is most of the
// time an LC is not busy, while a decode's sampling between tokens, though
// it may be a cluster of its own, is a few percent of it. The lowest such
// split wins: a rare long pause (traffic that stops for seconds) above the
// gaps that end every request does not hide them. The threshold is the
// geometric mean of its edges: the top of the cluster below and the bottom
// of the one above. A gap of CPU work (one not yet halved away) is inside
// a request, whatever its length: the threshold lies above the longest
// below the split, and a split with gaps of CPU work above it (a decode's
// sampling between tokens) is no split. A stray one too rare to count (a
// thread preempted, or Python's collector, in one request of many) raises
// the threshold if below the split. Above it, strays (a hiccup of tens of
// milliseconds on a CPU) do not forbid the split, and their own requests
// are cut there; else they would hold the gap at the ceiling until halved
// away (~20 s), running an LC's requests together. Strays are fewer than
// strayShare of the gaps slept through above the split, and none judged by
// CPU time shares its bucket with more gaps read as asleep: those are CPU
// work a coarse tick misread (a busy decode's sampling, a fraction of it
// flagged), not strays. Gaps of CPU work are kept inside by their CPU time, not their
// length, so the first counted bucket above the longest of them below it
// (asleep gaps only) is a cluster of its own once it starts at least
// minSplitCPU (4x, √minSplit) above it: only the asleep side needs a
// margin by length, and strays frequent enough to count, which would merge
// the launch gaps' cluster into the gaps between requests, do not hide the
// split. Above that boundary, and where no gap of CPU work is known (the
// CPU time unknown), clusters are as minSplit makes them. Tick-quantized
// CPU time (where blocks are unknown) misflags a gap shorter than two ticks now and then: a CPU-work
// bucket with none of its gaps flagged is judged by length (a gap's chance
// of showing a tick grows with its length, so one 4x above flagged ones
// rarely shows none), and an asleep gap flagged raises the longest, which
// only makes the split harder, until halved away. The price: a request's
// own asleep pause 4-16x above its CPU work (waiting on another thread)
// may be split from it, as one 16x above is. Without such a split the
// gap stays the ceiling, the safe default: a request with a
// pause of its own (CPU work between two GPU phases) is not cut there.
func (h *gapHist) threshold() time.Duration {
	var totalW, totalN float64
	for b := range h.w {
		totalW, totalN = totalW+h.w[b], totalN+h.n[b]
	}
	if totalW <= 0 {
		return 0
	}
	// Clusters: runs of counted buckets, [first, last], and the longest gap of CPU work below first.
	type cluster struct{ first, last, cpuBelow int }
	var cs []cluster
	cpuTop := -1 // the longest gap of CPU work below b
	for b := range h.w {
		if b > 0 && h.inside[b-1] >= 1 {
			cpuTop = b - 1
		}
		if h.w[b] < heavyShare*totalW && h.n[b] < heavyShare*totalN {
			continue
		}
		n := len(cs)
		// Apart by length alone, or b is the first asleep bucket clear of the CPU work.
		apart := n == 0 || bucketLow(b) >= minSplit*bucketLow(cs[n-1].last+1) ||
			cs[n-1].last <= cpuTop && bucketLow(b) >= minSplitCPU*bucketLow(cpuTop+1)
		if !apart {
			cs[n-1].last = b
			continue
		}
		cs = append(cs, cluster{b, b, cpuTop})
	}
	var below float64
	j := 0
	for i := 0; i+1 < len(cs); i++ {
		for ; j <= cs[i].last; j++ {
			below += h.n[j]
		}
		// The CPU work above the split and the gaps slept through there.
		var cpuAbove, asleepAbove float64
		for b := cs[i+1].first; b < gapBuckets; b++ {
			switch {
			case h.byTime[b] >= 1 && h.n[b]-h.inside[b] > h.inside[b]:
				// CPU work by CPU time among more gaps of its length read as asleep: CPU work a
				// tick misread (a decode's sampling), no stray.
				cpuAbove = math.Inf(1)
			default:
				cpuAbove, asleepAbove = cpuAbove+h.inside[b], asleepAbove+h.n[b]-h.inside[b]
			}
		}
		if cpuAbove >= 1 && cpuAbove >= strayShare*asleepAbove {
			continue // CPU work above, not strays among the gaps slept through: pauses inside requests
		}
		var upW float64
		for b := cs[i+1].first; b <= cs[i+1].last; b++ {
			upW += h.w[b]
		}
		if below >= minWithin && totalN-below >= minBetween && upW >= minQuiet*totalW {
			return time.Duration(math.Sqrt(bucketLow(max(cs[i].last, cs[i+1].cpuBelow)+1) * bucketLow(cs[i+1].first)))
		}
	}
	return 0
}
