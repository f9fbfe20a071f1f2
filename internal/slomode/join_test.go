package slomode

import (
	"slices"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

// sloPolicy is the policy of internal/daemon's SLO mode tests.
const sloPolicy = `
classes:
  lc: {objective: "p50<=1.05x"}
  be: {timeslice: 200us, min_share: 0.85}
rules:
  - {name: lc, match: {comm: "lc*"}, class: lc, trust_self_set: true}
  - {name: lc-loose, match: {comm: "loose*"}, class: lc, objective: "p99<=50ms", trust_self_set: true}
  - {name: trainer, match: {comm: "train*"}, class: be}
  - {name: bulk, match: {comm: "bulk*"}, class: be:3, trust_self_set: true}
slo: {enabled: true, window: 1s}
`

// TestJoinPlacesBE: GPUs a process is listed on together are one set,
// with a search where an LC is; a BE is beside an LC where its set has
// one. A process on no GPU NVML lists is in no search for its first
// window; past it the node has one search, of every process.
func TestJoinPlacesBE(t *testing.T) {
	pol, err := policy.Parse([]byte(sloPolicy))
	if err != nil {
		t.Fatal(err)
	}
	on := func(pid int, gpus ...int) policy.ProcRef { return policy.ProcRef{PID: pid, Start: 1, GPUs: gpus} }
	for _, tc := range []struct {
		name         string
		bes, lcs     []policy.ProcRef
		wantBeside   []int
		wantSearches []string
		// later: the same processes a window later
		laterBeside   []int
		laterSearches []string
	}{
		{name: "no LC: every BE apart", bes: []policy.ProcRef{on(1, 0), on(2, 3)}},
		{name: "one GPU each", bes: []policy.ProcRef{on(1, 0), on(2, 1)}, lcs: []policy.ProcRef{on(9, 0)}, wantBeside: []int{1}, wantSearches: []string{"0"}},
		{name: "a BE on two GPUs joins them", bes: []policy.ProcRef{on(1, 0, 1), on(2, 2), on(3, 1)}, lcs: []policy.ProcRef{on(9, 1)}, wantBeside: []int{1, 3}, wantSearches: []string{"0,1"}},
		{name: "an LC on two GPUs joins them", bes: []policy.ProcRef{on(1, 0), on(2, 1), on(3, 2)}, lcs: []policy.ProcRef{on(9, 0, 1)}, wantBeside: []int{1, 2}, wantSearches: []string{"0,1"}},
		{name: "two LCs, two sets", bes: []policy.ProcRef{on(1, 0), on(2, 1), on(3, 2)}, lcs: []policy.ProcRef{on(9, 0), on(8, 2)}, wantBeside: []int{1, 3}, wantSearches: []string{"0", "2"}},
		{name: "an LC on no GPU known: none its first window, then one search", bes: []policy.ProcRef{on(1, 0), on(2, 1)}, lcs: []policy.ProcRef{on(9, 0), on(8)},
			wantBeside: []int{1}, wantSearches: []string{"0"}, laterBeside: []int{1, 2}, laterSearches: []string{"all"}},
		{name: "a BE on no GPU known", bes: []policy.ProcRef{on(1), on(2, 1)}, lcs: []policy.ProcRef{on(9, 1)},
			wantBeside: []int{2}, wantSearches: []string{"1"}, laterBeside: []int{1, 2}, laterSearches: []string{"all"}},
		{name: "no GPU known at all (no NVML): one search at once", bes: []policy.ProcRef{on(1), on(2)}, lcs: []policy.ProcRef{on(9), on(8)},
			wantBeside: []int{1, 2}, wantSearches: []string{"all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := &Loop{log: testlog.New(t), searches: map[string]*search{}, conf: sloConf{safe: 200 * time.Microsecond}}
			check := func(when string, beside []int, searches []string) {
				t.Helper()
				var got []int
				var live []string
				for _, b := range tc.bes {
					if l.beSearch[b.Key()] != nil {
						got = append(got, b.PID)
					}
				}
				for _, s := range l.searches {
					if s.live() {
						live = append(live, s.key)
					}
				}
				slices.Sort(live)
				if !slices.Equal(got, beside) || !slices.Equal(live, searches) {
					t.Errorf("%s: beside %v, live searches %v; want %v, %v", when, got, live, beside, searches)
				}
			}
			l.join(pol, tc.lcs, tc.bes)
			check("first window", tc.wantBeside, tc.wantSearches)
			if tc.laterSearches == nil {
				tc.laterBeside, tc.laterSearches = tc.wantBeside, tc.wantSearches
			}
			l.windows++
			l.join(pol, tc.lcs, tc.bes)
			check("a window later", tc.laterBeside, tc.laterSearches)
		})
	}
}
