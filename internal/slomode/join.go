package slomode

import (
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/tsg"
)

// join gives each search of a set of GPUs (those one process is on are one set) its LC and BE processes, starting one for a set
// with an LC. A process NVML lists on no GPU is in no search its first window so (NVML lists a context ~80 ms after its channel
// groups appear; no wait where it lists none), then the node has one search ("all") of every process: no BE is set by two.
func (l *Loop) join(pol *policy.Policy, lcs, all []policy.ProcRef) {
	procs := slices.Concat(lcs, all)
	listing := slices.ContainsFunc(procs, func(p policy.ProcRef) bool { return len(p.GPUs) > 0 })
	seen, node := map[string]int{}, false
	var sets [][]int // disjoint, each sorted
	for _, p := range procs {
		if len(p.GPUs) == 0 {
			first, ok := l.unlisted[p.Key()]
			if !ok {
				first = map[bool]int{true: l.windows, false: -1}[listing]
			}
			seen[p.Key()], node = first, node || first < l.windows
			continue
		}
		set := slices.Clone(p.GPUs)
		sets = slices.DeleteFunc(sets, func(s []int) bool {
			joined := slices.ContainsFunc(s, func(g int) bool { return slices.Contains(p.GPUs, g) })
			if joined {
				set = append(set, s...)
			}
			return joined
		})
		slices.Sort(set)
		sets = append(sets, slices.Compact(set))
	}
	l.unlisted = seen
	setOf := func(p policy.ProcRef) ([]int, bool) { // p's search by its GPUs, nil for the node's; false: in none
		switch {
		case node && (len(p.GPUs) > 0 || seen[p.Key()] < l.windows):
			return nil, true
		case len(p.GPUs) == 0:
			return nil, false
		}
		return sets[slices.IndexFunc(sets, func(s []int) bool { return slices.Contains(s, p.GPUs[0]) })], true
	}
	for _, s := range l.searches {
		s.started, s.lcs, s.bes, s.decided = !s.live(), nil, nil, nil // started: it had no LC last window
	}
	l.beSearch = map[string]*search{}
	for _, p := range lcs {
		gs, ok := setOf(p)
		if !ok {
			continue
		}
		k := api.GPUList(gs)
		s := l.searches[k]
		if s == nil {
			c, _ := slo.New(l.options(pol, l.conf)) // Step took these options when the mode came on
			s = &search{key: k, gpus: gs, ctl: c, started: true}
			l.searches[k] = s
			if l.windows > 0 || len(l.searches) > 1 {
				l.log.Info("slo: an LC on GPUs without a search: their BE at the safe timeslice until LC latency is known", "gpus", k, "be_timeslice", c.Arm().BETimeslice)
			}
		}
		s.lcs = append(s.lcs, p)
	}
	for _, b := range all {
		gs, ok := setOf(b)
		if s := l.searches[api.GPUList(gs)]; ok && s != nil && s.live() {
			s.bes = append(s.bes, b)
			l.beSearch[b.Key()] = s
		}
	}
	for _, s := range l.searches {
		s.started = s.started && s.live() // an idle search starts nothing
	}
}

// sorted lists the searches by their GPUs (the node's first).
func (l *Loop) sorted() []*search {
	out := slices.Collect(maps.Values(l.searches))
	slices.SortFunc(out, func(a, b *search) int { return slices.Compare(a.gpus, b.gpus) })
	return out
}

// assign gives each BE its live search's BE timeslice (in none, the policy's), the shortest to one new or unlisted (it may be beside any LC).
func (l *Loop) assign(all []policy.ProcRef) map[string]tsg.Opt[time.Duration] {
	def, per := tsg.Opt[time.Duration]{}, make(map[string]tsg.Opt[time.Duration], len(all))
	for _, s := range l.searches {
		if c := s.ctl.Arm().BETimeslice; s.live() && (!def.Set || c < def.V) {
			def = tsg.Some(c)
		}
	}
	for _, b := range all {
		switch s := l.beSearch[b.Key()]; {
		case s != nil:
			per[b.Key()] = tsg.Some(s.ctl.Arm().BETimeslice)
		case len(b.GPUs) > 0:
			per[b.Key()] = tsg.Opt[time.Duration]{} // in no live search: the policy's
		case def.Set:
			per[b.Key()] = def // unlisted, in its first window
		}
	}
	l.rec.SetBETimeslices(def, per)
	return per
}

// sharedFloor is the shortest BE timeslice s may choose: below it two BE on one GPU spend it restoring each other's contexts.
func (l *Loop) sharedFloor(s *search) time.Duration {
	shared := slices.ContainsFunc(s.bes, func(b policy.ProcRef) bool {
		return slices.ContainsFunc(s.bes, func(o policy.ProcRef) bool { return o.Key() != b.Key() && shareGPU(b, o) })
	})
	return map[bool]time.Duration{true: l.conf.floor}[shared]
}

// shareGPU says whether a and b may share a GPU: one is listed on none yet, or both on one.
func shareGPU(a, b policy.ProcRef) bool {
	return a.GPUs == nil || b.GPUs == nil || slices.ContainsFunc(a.GPUs, func(g int) bool { return slices.Contains(b.GPUs, g) })
}

// isMPSServer: p is an MPS server (its groups run its clients' work), by its executable, else its comm (15 characters; the control daemon holds none).
func isMPSServer(p policy.ProcRef) bool {
	if p.Exe != "" {
		return filepath.Base(p.Exe) == "nvidia-cuda-mps-server"
	}
	return p.Comm == "nvidia-cuda-mps"
}
