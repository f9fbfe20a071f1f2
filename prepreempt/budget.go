package prepreempt

import (
	"sync"
	"time"
)

// holdBudget caps the GPU time spinners may hold, so that back-to-back
// hints (a flood of requests, or a caller that never calls Ready) cannot
// keep best-effort work off the GPU: a token bucket of duty x 1 s, refilled
// continuously at duty. A spinner reserves MaxHold when its request is
// hinted (the most it can hold) and gives back what it did not use when
// it is released, so the cap holds even for spinners that are never
// released. Over any interval T, spinners hold at most duty x (T + 1 s).
type holdBudget struct {
	mu     sync.Mutex
	duty   float64
	cap    int64 // ns
	tokens int64 // ns
	last   int64 // host clock of the last refill
}

// budgetWindow is the interval the duty cycle is a fraction of.
const budgetWindow = time.Second

func newHoldBudget(duty float64, window time.Duration, now int64) *holdBudget {
	c := int64(duty * float64(window))
	return &holdBudget{duty: duty, cap: c, tokens: c, last: now}
}

func (b *holdBudget) refill(now int64) {
	if now > b.last {
		b.tokens = min(b.cap, b.tokens+int64(float64(now-b.last)*b.duty))
		b.last = now
	}
}

// take reserves d, or reports that the budget cannot cover it.
func (b *holdBudget) take(now int64, d time.Duration) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	if b.tokens < int64(d) {
		return false
	}
	b.tokens -= int64(d)
	return true
}

// refund returns the unused part of a reservation.
func (b *holdBudget) refund(now int64, d time.Duration) {
	if b == nil || d <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refill(now)
	b.tokens = min(b.cap, b.tokens+int64(d))
}
