package daemon

import (
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
)

// TestSLOLoopReloadKeepsBEAlone is what gpreempt-bench's @OWN_P50@ runs rely on: under a one-rung
// ladder and an objective every arm meets, SLO mode holds that rung while the LC runs; a reload to
// another ladder starts the search afresh (no arm measured) and keeps BE's rate alone, learnt
// before the LC came, which it could not learn again beside it; a reload that changes only the
// objective keeps the search and its arms.
func TestSLOLoopReloadKeepsBEAlone(t *testing.T) {
	for _, c := range []struct {
		name, slo, objective string
		afresh               bool
	}{
		{"ladder", "slo: {enabled: true, window: 1s}", "p50<=25ms", true},
		{"objective only", "slo: {enabled: true, window: 1s, ladder: [200us]}", "p50<=25ms", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			held := strings.Replace(strings.Replace(sloPolicy, `objective: "p50<=1.05x"`, `objective: "p50<=1h"`, 1),
				"slo: {enabled: true, window: 1s}", "slo: {enabled: true, window: 1s, ladder: [200us]}", 1)
			s, f := newShareRigOf(t, held)
			s.Tick(s.Start(200, policy.Process{Comm: "trainer"}) + time.Second)
			s.loop.Step(s.Now) // the mode starts
			const alone = 10_000
			s.trainerAlone(f, alone, 4)
			s.Start(100, policy.Process{Comm: "lc-server"})
			s.Tick(s.Now)
			play := func() {
				_, share := slo.EagerPyTorchH100.At(s.beTimeslice())
				f.N[200] += uint64(share * alone)
				s.window(slo.EagerPyTorchH100, false)
			}
			for i := range 30 {
				play()
				if got := s.beTimeslice(); got != 200*time.Microsecond || s.loop.Status().Arm != "200µs" {
					t.Fatalf("window %d under the one-rung ladder: BE at %v, arm %s", i, got, s.loop.Status().Arm)
				}
			}
			pol, err := policy.Parse([]byte(strings.Replace(strings.Replace(sloPolicy, `objective: "p50<=1.05x"`, `objective: "`+c.objective+`"`, 1),
				"slo: {enabled: true, window: 1s}", c.slo, 1)))
			if err != nil {
				t.Fatal(err)
			}
			s.Rec.SetPolicy(pol)
			play()
			st := s.loop.Status()
			if measured := len(st.Searches) == 1 && len(st.Searches[0].Arms) > 0; measured == c.afresh {
				t.Errorf("the window of the reload: searches %+v, want them started afresh: %v", st.Searches, c.afresh)
			}
			play()
			if st := s.loop.Status(); len(st.BE) != 1 || st.BE[0].AlonePerS != alone || st.BEShare == nil {
				t.Errorf("after the reload: BE %+v, share %v: want its rate alone, %d, kept and its share measured", st.BE, st.BEShare, alone)
			}
		})
	}
}
