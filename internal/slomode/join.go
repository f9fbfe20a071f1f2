package slomode

import (
	"maps"
	"path/filepath"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
)

// join puts each process of lcs and all in the search of the set of GPUs
// it is on (GPUs are in one set when a process is listed on both),
// starting one at the safe setting for a set with an LC that has none,
// and gives each search its LC and BE processes. While a process is on no
// GPU NVML lists, past the first window it was seen so (NVML lists a
// context ~80 ms after its channel groups appear, after it was classed;
// at once where NVML lists no process at all),
// there is one search for the node (allGPUs), of every process: it may
// share a GPU with any, and no BE is then set by two searches, each
// judging it by a setting not in force. A process in its first window
// unlisted is in no search (a BE gets the shortest timeslice of all:
// assign). A search that had no LC and has again starts its window anew,
// as a new one.
func (l *Loop) join(pol *policy.Policy, lcs, all []policy.ProcRef) {
	procs := slices.Concat(lcs, all)
	// Where NVML lists no process at all (no NVML), there is nothing to
	// wait for.
	listing := slices.ContainsFunc(procs, func(p policy.ProcRef) bool { return len(p.GPUs) > 0 })
	seen := map[string]int{}
	node := false
	for _, p := range procs {
		if len(p.GPUs) > 0 {
			continue
		}
		k := p.Key()
		first, ok := l.unlisted[k]
		if !ok && listing {
			first = l.windows
		} else if !ok {
			first = -1
		}
		seen[k] = first
		node = node || first < l.windows
	}
	l.unlisted = seen
	// The sets: GPUs joined by the processes listed on them.
	root := map[int]int{}
	var find func(int) int
	find = func(g int) int {
		if r, ok := root[g]; ok && r != g {
			r = find(r)
			root[g] = r
			return r
		}
		root[g] = g
		return g
	}
	for _, p := range procs {
		for _, g := range p.GPUs {
			if a, b := find(p.GPUs[0]), find(g); a != b {
				root[max(a, b)] = min(a, b)
			}
		}
	}
	sets := map[int][]int{} // by their smallest GPU, the root
	for g := range root {
		sets[find(g)] = append(sets[find(g)], g)
	}
	for _, gs := range sets {
		slices.Sort(gs)
	}
	// setOf names the search of p: by the GPUs of its set, nil for the
	// node's; false for a process in its first window unlisted, in none.
	setOf := func(p policy.ProcRef) ([]int, bool) {
		switch {
		case node && (len(p.GPUs) > 0 || seen[p.Key()] < l.windows):
			return nil, true
		case len(p.GPUs) == 0:
			return nil, false
		}
		return sets[find(p.GPUs[0])], true
	}
	for _, s := range l.searches {
		s.started = !s.live() // it had no LC last window
		s.lcs, s.bes = nil, nil
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
			c, err := slo.New(l.options(pol, l.conf))
			if err != nil { // New took these options when the mode came on
				l.log.Error("slo: controller refused the policy's settings", "err", err)
				continue
			}
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
		if !s.live() {
			s.started = false
		}
	}
}

// sorted lists the searches by their GPUs (allGPUs first).
func (l *Loop) sorted() []*search {
	out := slices.Collect(maps.Values(l.searches))
	slices.SortFunc(out, func(a, b *search) int { return slices.Compare(a.gpus, b.gpus) })
	return out
}

// assign gives each BE process of all the BE timeslice chosen by the
// live search it is in (the policy's where it is in none), and one that
// starts before the next window, or is in its first window on no GPU NVML
// lists, the shortest of every live search: until NVML lists it, it may
// share a GPU with any LC. It returns the timeslice each one is given, by
// ProcRef.Key (0: the policy's).
func (l *Loop) assign(all []policy.ProcRef) map[string]time.Duration {
	var def time.Duration
	for _, s := range l.searches {
		if c := s.ctl.Arm().BETimeslice; s.live() && (def == 0 || c < def) {
			def = c
		}
	}
	per := make(map[string]time.Duration, len(all))
	for _, b := range all {
		switch s := l.beSearch[b.Key()]; {
		case s != nil:
			per[b.Key()] = s.ctl.Arm().BETimeslice
		case len(b.GPUs) > 0:
			per[b.Key()] = 0 // in no live search: the policy's
		case def > 0:
			per[b.Key()] = def // unlisted, in its first window
		}
	}
	l.rec.SetBETimeslices(def, per)
	return per
}

// sharedFloor is the shortest BE timeslice search s may choose: two BE
// processes on one GPU switch between each other at the BE timeslice,
// and below the shared floor they spend the GPU on restoring each other's
// contexts and their weights stop splitting their progress
// (slo.Observation.MinBETimeslice).
func (l *Loop) sharedFloor(s *search) time.Duration {
	if slices.ContainsFunc(s.bes, func(b policy.ProcRef) bool {
		return slices.ContainsFunc(s.bes, func(o policy.ProcRef) bool { return o.Key() != b.Key() && shareGPU(b, o) })
	}) {
		return l.conf.floor
	}
	return 0
}

// shareGPU says whether a and b may share a GPU: one of them is listed on
// no GPU (NVML did not list it yet, or does not list it at all) or they
// are listed on one GPU.
func shareGPU(a, b policy.ProcRef) bool {
	return a.GPUs == nil || b.GPUs == nil || slices.ContainsFunc(a.GPUs, func(g int) bool { return slices.Contains(b.GPUs, g) })
}

// An MPS server is the executable nvidia-cuda-mps-server; where its path
// could not be read, the command name, which the kernel cuts to 15
// characters (the control daemon shares it, but holds no channel group, so
// it is not a GPU process the daemon knows).
const (
	mpsServerExe  = "nvidia-cuda-mps-server"
	mpsServerComm = "nvidia-cuda-mps"
)

// isMPSServer says whether p is an MPS server: every channel group it
// holds runs its clients' work.
func isMPSServer(p policy.ProcRef) bool {
	if p.Exe != "" {
		return filepath.Base(p.Exe) == mpsServerExe
	}
	return p.Comm == mpsServerComm
}
