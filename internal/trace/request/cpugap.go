package request

import (
	"math"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// cpuGaps is the CPU work between one request's launches: each gap from a
// thread's launch to its next with no synchronize entered between them and
// the thread on its CPU throughout (no block counted; where blocks are
// unknown, its CPU time grew by half the gap or more). An eager LC's
// Python work between launches, which its vCPU's speed sets and the GPU
// does not: its median is that speed. Buckets 1% wide from 1 µs to 1 ms
// (the last holds the longer: a median there is none), so memory is bounded
// and the median within 1%.
type cpuGaps struct {
	n     [cpuGapBuckets]uint32
	count int
	last  map[uint32]launchMark // per thread, its last launch since its last synchronize
}

type launchMark struct {
	at      uint64
	cpu     time.Duration
	blocked uint64
}

const (
	cpuGapBuckets = 695 // ln(1000) / ln(1.01) + 1
	cpuGapStep    = 1.01
	// MinCPUGaps is the least gaps a request's median CPU gap is read from.
	MinCPUGaps = 10
)

// launch records thread e's launch at e.At and the gap since its last one, if it was CPU work.
func (c *cpuGaps) launch(e *trace.Call) {
	if c.last == nil {
		c.last = map[uint32]launchMark{}
	}
	m, ok := c.last[e.TID]
	c.last[e.TID] = launchMark{e.At, e.OnCPU, e.Blocked}
	if !ok || e.At <= m.at {
		return
	}
	g := time.Duration(e.At - m.at)
	if on, _ := worked(m.cpu, m.blocked, e, g, true); !on {
		return
	}
	b := 0
	if g > time.Microsecond {
		b = min(int(math.Log(float64(g)/float64(time.Microsecond))/math.Log(cpuGapStep)), cpuGapBuckets-1)
	}
	c.n[b]++
	c.count++
}

// synced forgets thread tid's last launch: a gap across a synchronize holds the GPU's time.
func (c *cpuGaps) synced(tid uint32) { delete(c.last, tid) }

// take returns the median gap since the last take (0: fewer than MinCPUGaps) and starts again.
func (c *cpuGaps) take() time.Duration {
	if c.count < MinCPUGaps {
		c.reset()
		return 0
	}
	half, seen := (c.count+1)/2, 0
	var med time.Duration
	for b, k := range c.n {
		if seen += int(k); seen >= half {
			if b < cpuGapBuckets-1 { // the last holds every longer gap: no median to read there
				med = time.Duration(float64(time.Microsecond) * math.Pow(cpuGapStep, float64(b)+0.5))
			}
			break
		}
	}
	c.reset()
	return med
}

func (c *cpuGaps) reset() {
	if c.count > 0 {
		c.n, c.count = [cpuGapBuckets]uint32{}, 0
	}
}
