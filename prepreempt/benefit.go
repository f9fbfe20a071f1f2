package prepreempt

import (
	"sync"
	"time"
)

// Modes of a request class, as Stats.Classes reports them.
const (
	// ModeHold: the class's requests get a spinner.
	ModeHold = "hold"
	// ModeSkip: they do not (they did not benefit); one in a while is
	// probed with a spinner.
	ModeSkip = "skip"
)

// benefit decides, per request class, whether spinners pay off. A
// spinner is worth its GPU time when it is released about one switch
// after its launch: the LC work follows it onto a resident channel group.
// Two kinds of request do not benefit, and each of their spinners holds
// the GPU from BE for nothing:
//   - launch-bound requests (eager PyTorch: ~6 ms of Python launches per
//     request), whose Ready comes long after the predicted end of
//     preparation: measured on an H100 beside a trainer, hints held the
//     spinner p50 2 ms and BE kept 66.7%, against 87.1% with no hints and
//     a 1 ms BE timeslice at a better LC p50;
//   - requests that keep hitting MaxHold (Ready never comes in time).
//
// A class whose recent holds are mostly of either kind goes to ModeSkip.
// While skipped, one hint in probeEvery is given a spinner anyway; a
// probe that benefits puts the class back to ModeHold with a fresh
// history, one that does not doubles the interval to the next probe (up
// to 8x), so a class that stays launch-bound costs less and less.
type benefit struct {
	mu sync.Mutex
	// leadFactor: a hold is long when Ready came more than leadFactor
	// switch estimates after the spinner's launch.
	leadFactor float64
	// longShare: the fraction of a class's recent holds that, long or
	// expired, sends it to ModeSkip.
	longShare  float64
	window     int
	minSamples int
	probeEvery int
	classes    map[string]*classBenefit
}

type classBenefit struct {
	long    []bool // recent holds: long or expired
	skip    bool
	skipped int // hints skipped since the last probe
	backoff int // probe interval multiplier
	probing bool
}

func newBenefit(o Options) *benefit {
	return &benefit{leadFactor: o.NoBenefitLead, longShare: o.NoBenefitShare, window: 16, minSamples: 8,
		probeEvery: o.ReprobeEvery, classes: map[string]*classBenefit{}}
}

// admit says whether a hint of class gets a spinner, and whether it is a
// probe of a skipped class.
func (b *benefit) admit(class string) (spinner, probe bool) {
	if b.leadFactor <= 0 {
		return true, false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.classes[class]
	if c == nil || !c.skip {
		return true, false
	}
	if c.probing {
		return false, false // one probe at a time
	}
	c.skipped++
	if c.skipped >= b.probeEvery*c.backoff {
		c.skipped, c.probing = 0, true
		return true, true
	}
	return false, false
}

// record folds in the outcome of a hold of class: how long after its
// launch Ready came (lead; ignored when expired) against the switch
// estimate of the moment.
func (b *benefit) record(class string, lead, switchEst time.Duration, expired, probe bool) {
	if b.leadFactor <= 0 {
		return
	}
	long := expired || float64(lead) > b.leadFactor*float64(switchEst)
	b.mu.Lock()
	defer b.mu.Unlock()
	c := b.classes[class]
	if c == nil {
		c = &classBenefit{backoff: 1}
		b.classes[class] = c
	}
	if probe {
		c.probing = false
		if !long {
			*c = classBenefit{backoff: 1}
			return
		}
		c.backoff = min(c.backoff*2, 8)
		return
	}
	if c.skip {
		return // a hold admitted before the class was skipped
	}
	if len(c.long) == b.window {
		// Shift in place: re-slicing the front off would shrink the
		// capacity and make append reallocate every window holds, on
		// Ready's path.
		copy(c.long, c.long[1:])
		c.long[len(c.long)-1] = long
	} else {
		c.long = append(c.long, long)
	}
	if len(c.long) >= b.minSamples {
		n := 0
		for _, l := range c.long {
			if l {
				n++
			}
		}
		if float64(n) >= b.longShare*float64(len(c.long)) {
			c.skip, c.skipped, c.long = true, 0, nil
		}
	}
}

// modes reports each class's mode.
func (b *benefit) modes() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	for k, c := range b.classes {
		out[k] = ModeHold
		if c.skip {
			out[k] = ModeSkip
		}
	}
	return out
}

// inconclusive ends a probe that got no hold to judge (no slot, over
// budget, Ready before the launch, cancelled): the next hint may probe.
func (b *benefit) inconclusive(class string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c := b.classes[class]; c != nil {
		c.probing = false
		c.skipped = b.probeEvery * c.backoff
	}
}
