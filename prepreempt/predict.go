package prepreempt

import (
	"slices"
	"sync"
	"time"
)

// window keeps the last n durations and answers quantiles over them.
// Quantiles are recomputed (a sort of the window) at most once every
// refresh additions, so that Hint stays cheap on the request's path.
type window struct {
	buf     []time.Duration
	next    int
	full    bool
	added   int
	cachedQ float64
	cached  time.Duration
	valid   bool
}

// refresh is how many additions a cached quantile survives.
const refresh = 16

func newWindow(n int) *window { return &window{buf: make([]time.Duration, n)} }

func (w *window) add(d time.Duration) {
	w.added++
	if w.added >= refresh || !w.full {
		w.valid = false
	}
	w.buf[w.next] = d
	w.next++
	if w.next == len(w.buf) {
		w.next, w.full = 0, true
	}
}

func (w *window) len() int {
	if w.full {
		return len(w.buf)
	}
	return w.next
}

// quantile returns the q-quantile (nearest rank) of the window, false if
// it is empty.
func (w *window) quantile(q float64) (time.Duration, bool) {
	n := w.len()
	if n == 0 {
		return 0, false
	}
	if w.valid && w.cachedQ == q {
		return w.cached, true
	}
	s := slices.Clone(w.buf[:n])
	slices.Sort(s)
	i := int(q*float64(n-1) + 0.5)
	w.cached, w.cachedQ, w.valid, w.added = s[min(max(i, 0), n-1)], q, true, 0
	return w.cached, true
}

// predictor predicts each request class's preparation time from its recent
// history. It uses a LOW quantile: the spinner must be resident by the time
// the shortest preparations end, or those requests pay the whole switch
// (latency); launching for the short ones costs only hold time on the long
// ones, which is bounded by the spread of the distribution.
type predictor struct {
	mu       sync.Mutex
	q        float64
	size     int
	minCount int
	classes  map[string]*window
}

func newPredictor(q float64, size, minCount int) *predictor {
	return &predictor{q: q, size: size, minCount: minCount, classes: map[string]*window{}}
}

// predict returns the predicted preparation time of class; with too little
// history it returns the caller's own estimate (and false).
func (p *predictor) predict(class string, estimate time.Duration) (time.Duration, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.classes[class]
	if w == nil || w.len() < p.minCount {
		return estimate, false
	}
	d, _ := w.quantile(p.q)
	return d, true
}

func (p *predictor) observe(class string, d time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.classes[class]
	if w == nil {
		w = newWindow(p.size)
		p.classes[class] = w
	}
	w.add(d)
}

// switchTracker estimates how long a spinner takes, from its launch call,
// to run on the GPU: an initial value, then the spinner's own %globaltimer
// stamps. A HIGH quantile is used: launching a little early costs a little
// hold time, launching late costs latency.
type switchTracker struct {
	mu  sync.Mutex
	q   float64
	w   *window
	def time.Duration
}

func newSwitchTracker(initial time.Duration, q float64, size int) *switchTracker {
	return &switchTracker{q: q, w: newWindow(size), def: initial}
}

// estimate is the launch lead: the tracked quantile, but never less than
// the configured switch time. The spinner's own start stamp measures when
// the context first runs (~30 us p50 on the H100 under a 1 us BE), which
// is less than what it takes for the context to be resident with the LC
// work's SMs free; launching on the stamp alone left LC p50 at 3.8x
// standalone with a fixed 500 us preparation (docs/PREPREEMPT.md).
func (s *switchTracker) estimate() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d, ok := s.w.quantile(s.q); ok && s.w.len() >= 8 {
		return max(d, s.def)
	}
	return s.def
}

func (s *switchTracker) observe(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.add(max(d, 0))
}
