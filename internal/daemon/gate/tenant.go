package gate

import (
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
)

// tenantsLocked is how many tenants the LCs followed belong to (at least
// one).
func (g *Gate) tenantsLocked() int {
	seen := map[string]bool{}
	for _, lc := range g.lcs {
		seen[lc.tenant] = true
	}
	return max(1, len(seen))
}

// tenantCapacity is one tenant's part of the share's budget.
func (g *Gate) tenantCapacity(pol policy.Gate) time.Duration {
	return time.Duration(pol.Share / float64(g.tenantsLocked()) * float64(policy.GateWindow))
}

// bucketLocked is tenant's part of the budget, made full at its first
// LC. A tenant's part is kept while it is in debt, so that a tenant whose
// LCs come and go pays for its holds.
func (g *Gate) bucketLocked(tenant string, pol policy.Gate) *time.Duration {
	b := g.buckets[tenant]
	if b == nil {
		full := g.tenantCapacity(pol)
		b = &full
		g.buckets[tenant] = b
	}
	return b
}

// pruneBucketsLocked forgets the parts of tenants with no LC followed
// and no debt (a new part would be as full).
func (g *Gate) pruneBucketsLocked(pol policy.Gate) {
	capacity := g.tenantCapacity(pol)
	for t, b := range g.buckets {
		if *b >= capacity && !slices.ContainsFunc(slices.Collect(maps.Values(g.lcs)), func(lc *gateLC) bool { return lc.tenant == t }) {
			delete(g.buckets, t)
		}
	}
}

// UIDTenant is a process's tenant by its real uid (/proc/PID/status);
// "" where it cannot be read.
func UIDTenant(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				return "uid " + f[0]
			}
		}
	}
	return ""
}

// capacity is the share's budget: what the gate may hold BE for within a GateWindow.
func (g *Gate) capacity(p policy.Gate) time.Duration {
	if p.Share >= 1 {
		return time.Duration(1<<62 - 1)
	}
	return time.Duration(p.Share * float64(policy.GateWindow))
}

// refillLocked adds to the share's budget and to each tenant's part what the time since the last
// refill earns them.
func (g *Gate) refillLocked(now time.Duration, pol policy.Gate) {
	if now > g.refill {
		g.tokens = min(g.capacity(pol), g.tokens+time.Duration(float64(now-g.refill)*pol.Share))
		part, capacity := pol.Share/float64(g.tenantsLocked()), g.tenantCapacity(pol)
		for _, b := range g.buckets {
			*b = min(capacity, *b+time.Duration(float64(now-g.refill)*part))
		}
		g.refill = now
	}
}
