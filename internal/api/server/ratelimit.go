package server

import (
	"fmt"
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// ErrTooMany is a class change refused by the change limit
// (requests.changes_per_second, requests.burst): answered 429 with
// Retry-After.
type ErrTooMany struct {
	Who   string
	Retry time.Duration
}

func (e *ErrTooMany) Error() string {
	return fmt.Sprintf("%s asked for more class changes than the policy allows (requests.changes_per_second, requests.burst): retry in %v", e.Who, e.Retry.Round(time.Millisecond))
}

// changeLimiter is one token bucket of class changes per asker (a uid; a
// container's uid and cgroup for requests the pod check decides). Each
// change it admits is a control call per channel group, a firmware round
// trip made under the reconciler's lock, which every other process's
// classing waits on.
type changeLimiter struct {
	mu      sync.Mutex
	buckets map[string]*rate.Limiter
}

// maxBuckets bounds the buckets kept: past it, full ones (an asker idle
// long enough to be owed its whole burst) are dropped, which forgets
// nothing a new bucket would not give.
const maxBuckets = 1024

// admit takes one change from who's bucket at now, under the bound given
// (per second, burst); else it says how long until one is due.
func (l *changeLimiter) admit(who string, now time.Time, perSecond float64, burst int) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buckets == nil {
		l.buckets = map[string]*rate.Limiter{}
	}
	b := l.buckets[who]
	if b == nil {
		if len(l.buckets) >= maxBuckets {
			l.prune(now)
		}
		b = rate.NewLimiter(rate.Limit(perSecond), burst)
		// A new bucket is full as of now, not as of the zero time.
		b.AllowN(now, 0)
		l.buckets[who] = b
	}
	// A reload may have changed the bound: a bucket keeps its tokens.
	if b.Limit() != rate.Limit(perSecond) {
		b.SetLimitAt(now, rate.Limit(perSecond))
	}
	if b.Burst() != burst {
		b.SetBurstAt(now, burst)
	}
	if b.AllowN(now, 1) {
		return nil
	}
	need := 1 - b.TokensAt(now)
	wait := time.Duration(math.Ceil(need / perSecond * float64(time.Second)))
	return &ErrTooMany{Who: who, Retry: wait}
}

func (l *changeLimiter) prune(now time.Time) {
	for k, b := range l.buckets {
		if b.TokensAt(now) >= float64(b.Burst()) {
			delete(l.buckets, k)
		}
	}
}
