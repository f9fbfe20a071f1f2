package slo

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
)

func mustObjective(tb testing.TB, s string) objective.Objective {
	tb.Helper()
	o, err := objective.Parse(s)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

func newController(tb testing.TB, opts Options) *Controller {
	tb.Helper()
	c, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// play runs n windows of w against c on g, each under the arm the last decision chose and with
// BE stopped as it asked; each can change g before it is played.
func play(c *Controller, g *SimGPU, w Workload, obj objective.Objective, n int, each func(i int, g *SimGPU)) []Decision {
	var out []Decision
	prev := c.Arm()
	for i := range n {
		if each != nil {
			each(i, g)
		}
		o := g.WindowArm(w, obj, c.Arm(), prev)
		prev = c.Arm()
		d := c.Observe(o)
		g.Paused = d.PauseBE
		out = append(out, d)
	}
	return out
}

// changes counts the decisions in ds that changed the arm.
func changes(ds []Decision) (n int) {
	for _, d := range ds {
		if d.Changed {
			n++
		}
	}
	return n
}

// slowLLM is an eager decode LC served one request a window: its p50 is that of a few windows.
var slowLLM = Workload{
	Name: "slow-llm", Baseline: 700 * time.Millisecond, Noise: 0.03, ShareNoise: 0.02, Requests: 1,
	Points: []Point{
		{time.Microsecond, 1.02, 0.45, false},
		{200 * time.Microsecond, 1.06, 0.64, false},
		{time.Millisecond, 1.25, 0.85, false},
		{3 * time.Millisecond, 1.6, 0.92, false},
	},
}

func TestSlowLCWindowsAccumulate(t *testing.T) {
	c := newController(t, Options{NoPause: true})
	g := NewSimGPU(1)
	g.Standalone = true
	ds := play(c, g, slowLLM, mustObjective(t, "p50<=1.10x"), 45, nil)
	first := slices.IndexFunc(ds, func(d Decision) bool { return slices.ContainsFunc(d.LC, func(r LCResult) bool { return r.Counted }) })
	// One request a window: the 20th window's request completes the first measurement (the
	// first window is the mode's own, mixing what ran before).
	if first < minSamples-1 || first > minSamples+1 {
		t.Fatalf("first measurement counted in window %d, want about %d", first+1, minSamples)
	}
	if got := ds[first-1].LC[0].Pending; got != first-1 && got != first {
		t.Errorf("window %d: %d samples pending, want them accumulated", first, got)
	}
	if math.IsNaN(ds[len(ds)-1].Worst) {
		t.Errorf("no measurement of the arm in force after %d windows", len(ds))
	}
}

func TestTokensCountWithin20Windows(t *testing.T) {
	// A request a second of 16 tokens, a tpot_ objective: counts within 20 windows, but not
	// before minRequests requests (a request's tokens move together). Where its reference is
	// learnt while BE idles, as under --be-duty 8s on the GPU (3 whole windows of every 8 idle:
	// the idle half is not aligned to the windows; BE seen idling in a lead-in before the LC
	// came), it counts within 20 windows too, whatever the duty's phase: an arm's 10 requests
	// come at 5 a cycle, and a reference of 10 at 3 a cycle would take 27 windows.
	w := slowLLM
	w.Requests, w.PerRequest = 16, true
	w.Baseline = 12 * time.Millisecond
	const leadIn = 16
	for phase := range 9 {
		given := phase == 8
		t.Run(map[bool]string{true: "reference given", false: fmt.Sprintf("duty phase %d", phase)}[given], func(t *testing.T) {
			g := NewSimGPU(2)
			g.Standalone = given
			ds := play(newController(t, Options{}), g, w, mustObjective(t, "tpot_p50<=1.10x"), leadIn+20, func(i int, g *SimGPU) {
				g.Idle, g.Missing = !given && (i+phase)%8 >= 5, i < leadIn
			})[leadIn:]
			first := slices.IndexFunc(ds, func(d Decision) bool { return len(d.LC) > 0 && d.LC[0].Counted })
			if first < 0 {
				t.Fatalf("no window counted in 20 windows of 16 tokens (%s)", ds[len(ds)-1].LC[0].Reference)
			}
			if first < minRequests-1 {
				t.Errorf("counted in window %d, from fewer than %d requests", first+1, minRequests)
			}
			if stopped := slices.ContainsFunc(ds, func(d Decision) bool { return d.PauseBE }); stopped && !given {
				t.Errorf("BE stopped to learn a reference while it idles of its own accord")
			}
		})
	}
}

// perRequestLLM is an eager decode LC pushing its windows: a request a second, 15 token
// intervals each, whose requests differ in speed by ~30% whatever BE does (docs/GPU-FACTS.md),
// while BE moves it by ~10%.
var perRequestLLM = Workload{
	Name: "per-request-llm", Baseline: 13 * time.Millisecond, Noise: 0.3, ShareNoise: 0.03,
	Requests: 15, PerRequest: true, Spread: 0.05,
	Points: []Point{
		{time.Microsecond, 1.02, 0.45, false},
		{200 * time.Microsecond, 1.05, 0.75, false},
		{time.Millisecond, 1.09, 0.85, false},
		{3 * time.Millisecond, 1.25, 0.92, false},
	},
}

// dutyIdle idles BE the second half of every 8 windows, as --be-duty 8s does.
func dutyIdle(i int, g *SimGPU) { g.Idle = i%8 >= 4 }

// dutyInWindows is dutyIdle's duty with its edges inside the daemon's windows, where they fall
// unless BE's clock and the daemon's are aligned: BE begins a quarter into one window and stops a
// fifth into the fifth, each request placed by when it ended and slowed by BE's part of its span.
func dutyInWindows(i int, g *SimGPU) {
	p := i % 8
	g.Spans, g.Idle = true, p >= 5
	g.BEFrom, g.BETo = map[int]float64{0: 0.25}[p], map[int]float64{4: 0.2}[p]
}

// whileBEWorks counts the windows after decisions ds (the first decided in window from) whose
// arm, in force the window after each, misses obj by w's truth, and sums BE's share in them (the
// arm's own), over n windows: every one, or under a duty the four of eight BE works in (all or
// most of: under dutyInWindows not the fifth, a fifth of it).
func whileBEWorks(ds []Decision, from int, duty bool, w Workload, obj objective.Objective) (missing, share, n float64) {
	for i, d := range ds {
		if duty && (from+i+1)%8 >= 4 {
			continue
		}
		r, s := w.AtArm(d.Arm)
		if r > obj.Inflation {
			missing++
		}
		share, n = share+s, n+1
	}
	return missing, share, n
}

// hostModesLLM is an eager decode LC of one request a second whose latency follows its vCPU's
// speed: requests ~12% apart within a mode, 1.6x slower in the slow mode, the mode changing request
// to request with chances 0.25 and 0.45, as a GPT-2 LC's alone was measured (docs/GPU-FACTS.md);
// BE's effect is modelled, the static classes' 200 us meeting a 1.10x objective.
var hostModesLLM = Workload{
	Name: "host-modes-llm", Baseline: 170 * time.Millisecond, ShareNoise: 0.03, Requests: 1, Spread: 0.12,
	HostSlow: 1.6, HostToSlow: 0.25, HostToFast: 0.45,
	Points: []Point{
		{time.Microsecond, 1.02, 0.45, false},
		{50 * time.Microsecond, 1.03, 0.60, false},
		{200 * time.Microsecond, 1.06, 0.78, false},
		{500 * time.Microsecond, 1.14, 0.85, false},
		{time.Millisecond, 1.22, 0.88, false},
		{3 * time.Millisecond, 1.4, 0.92, false},
	},
}

// TestTimeInMissingArms: where measurements are few and noisy, the search holds arms that miss the
// objective (by the workload's truth) only part of BE's working time, and keeps BE what the arms
// that meet allow; an exploration is left for missing on average only on a measurement made in
// it. It fails with the frontier widened through arms not shown to meet (the search walks 500 us,
// 1 ms, 2 ms, 3 ms in turn, each undecided for 60 windows), with an exploration kept after its
// first measurement misses, left on what its arm showed before it, or with an exploration before
// the search converged left out of the budget (a slow LC's, 40 windows, repeated as its back-off
// of 120 ends).
func TestTimeInMissingArms(t *testing.T) {
	tests := []struct {
		w              Workload
		obj            string
		duty           string  // BE's duty, as duties names it
		seeds          uint64  // 24 where 0
		missing, share float64 // the most time in missing arms, the least BE share, over the seeds
	}{
		{hostModesLLM, "p50<=1.10x", "sharp", 0, 0.16, 0.68},
		{perRequestLLM, "tpot_p50<=1.10x", "sharp", 0, 0.10, 0.67}, // judged by the LC alone through each span: 10 alone samples are noisier than a reference where the LC does not drift; 1 ms (0.99 of its objective) read over it is left
		{slowLLM, "p50<=1.10x", "sharp", 0, 0.12, 0.62},
		{slowLLM, "p50<=1.10x", "none", 0, 0.10, 0.62},
		{EagerPyTorchH100, "p50<=1.05x", "none", 0, 0.17, 0.80}, // the hold on an arm meeting on its mean sends one seed down a path two others take anyway: 2 ms, reading as meeting
		// BE's duty with its edges inside windows: the first's time in missing arms scatters
		// widely from one batch of 24 seeds to the next, so 96.
		{hostModesLLM, "p50<=1.10x", "inside", 96, 0.18, 0.68},
		{perRequestLLM, "tpot_p50<=1.10x", "inside", 96, 0.10, 0.69},
		{slowLLM, "p50<=1.10x", "inside", 96, 0.12, 0.62},
	}
	duties := map[string]func(int, *SimGPU){"sharp": dutyIdle, "inside": dutyInWindows, "none": nil}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s %s duty %s", tt.w.Name, tt.obj, tt.duty), func(t *testing.T) {
			obj := mustObjective(t, tt.obj)
			var missing, share, n, scatter, scatters float64
			for seed := uint64(1); seed <= cmp.Or(tt.seeds, 24); seed++ {
				c := newController(t, Options{})
				ds := play(c, NewSimGPU(seed), tt.w, obj, 360, duties[tt.duty])
				for _, x := range c.scatter {
					scatter, scatters = scatter+x.Of(nil, priorScatter, priorWeight), scatters+1
				}
				if d, ok := unmeasuredEnd(ds); ok {
					t.Fatalf("seed %d, window %d: %s, with no measurement since the exploration began", seed, d.Windows, d.Reason)
				}
				m, s, k := whileBEWorks(ds[60:], 60, tt.duty != "none", tt.w, obj) // after the first minute
				missing, share, n = missing+m, share+s, n+k
			}
			if missing /= n; missing > tt.missing {
				t.Errorf("arms that miss held %.0f%% of BE's working windows, want at most %.0f%%", 100*missing, 100*tt.missing)
			}
			if share /= n; share < tt.share {
				t.Errorf("BE share %.3f, want at least %.2f", share, tt.share)
			}
			t.Logf("arms that miss %.1f%% of the time, BE share %.3f; one measurement scatters %.1f%% as learnt", 100*missing, share, 100*scatter/scatters)
		})
	}
}

// TestAtLimitWalksToACloserArm: where no arm meets, the search still walks through arms that miss
// toward the closest: here it lies two rungs from the arm held once the LC's response changes.
// It fails with the frontier widened only through arms shown to meet, at the limit too.
func TestAtLimitWalksToACloserArm(t *testing.T) {
	before := Workload{Name: "closest-200us", Baseline: 10 * time.Millisecond, Noise: 0.03, ShareNoise: 0.02, Requests: 50,
		Points: []Point{{time.Microsecond, 1.40, 0.5, false}, {50 * time.Microsecond, 1.30, 0.6, false}, {200 * time.Microsecond, 1.15, 0.75, false},
			{time.Millisecond, 1.5, 0.87, false}, {3 * time.Millisecond, 1.7, 0.92, false}}}
	after := before
	after.Points = []Point{{time.Microsecond, 1.15, 0.5, false}, {50 * time.Microsecond, 1.30, 0.6, false}, {200 * time.Microsecond, 1.35, 0.75, false},
		{time.Millisecond, 1.5, 0.87, false}, {3 * time.Millisecond, 1.7, 0.92, false}}
	reached := 0
	for seed := uint64(1); seed <= 24; seed++ {
		c, g, obj := newController(t, Options{}), NewSimGPU(seed), mustObjective(t, "p50<=1.10x")
		play(c, g, before, obj, 240, nil)
		if slices.ContainsFunc(play(c, g, after, obj, 480, nil), func(d Decision) bool { return d.Arm.BETimeslice == time.Microsecond }) {
			reached++
		}
	}
	if reached < 18 {
		t.Errorf("1µs, the closest arm after the change, reached in %d of 24 runs, want most", reached)
	}
}

// TestExplorationReplacedArmMeasuredAnew: an arm explored that stops being offered (the gate
// withdrawn) is replaced in the exploration, which then ends for missing on average only on a
// measurement of the replacement.
func TestExplorationReplacedArmMeasuredAnew(t *testing.T) {
	w := EagerPyTorchH100
	w.Gated = w.Points
	obj := mustObjective(t, "p50<=1.05x")
	for seed := uint64(1); seed <= 24; seed++ {
		g := NewSimGPU(seed)
		ds := play(newController(t, Options{}), g, w, obj, 300, func(i int, g *SimGPU) { g.Gate = i < 125 })
		if d, ok := unmeasuredEnd(ds); ok {
			t.Fatalf("seed %d, window %d: %s, with no measurement of the arm since it was replaced", seed, d.Windows, d.Reason)
		}
	}
}

// unmeasuredEnd is the first exploration in ds left for missing on average with no measurement
// counted since it began or its arm was replaced (a start's own measurement is the arm it left).
func unmeasuredEnd(ds []Decision) (Decision, bool) {
	measured := false
	for _, d := range ds {
		counted := slices.ContainsFunc(d.LC, func(r LCResult) bool { return r.Counted })
		measured = !(d.Changed && (d.Cause == CauseExplore || d.Cause == CauseUnavailable)) && (measured || counted)
		if strings.Contains(d.Reason, "misses on average") && !measured {
			return d, true
		}
	}
	return Decision{}, false
}

func TestNoisyRequestsReferenceAndSettle(t *testing.T) {
	// Each request's speed varies by 30%: a reference from one or two requests is off by as
	// much, every ratio with it, and the search chases it. Each of the reference's measurements
	// spans minRequests/2 requests and it goes on learning; the search settles.
	for seed := uint64(1); seed <= 4; seed++ {
		c := newController(t, Options{})
		ds := play(c, NewSimGPU(seed), perRequestLLM, mustObjective(t, "tpot_p50<=1.10x"), 360, dutyIdle)
		var ref *reference
		for _, r := range c.refs {
			ref = r
		}
		if len(c.refs) != 1 || ref.value == 0 {
			t.Fatalf("seed %d: %d references, none learnt", seed, len(c.refs))
		}
		if e := float64(ref.value)/float64(perRequestLLM.Baseline) - 1; math.Abs(e) > 0.1 {
			t.Errorf("seed %d: reference %v, %.0f%% off the LC's %v alone", seed, ref.value, 100*e, perRequestLLM.Baseline)
		}
		if n := changes(ds[len(ds)-180:]); n > 6 {
			t.Errorf("seed %d: %d arm changes in the last 180 windows, want at most one per 30", seed, n)
		}
	}
}

func TestCalibrationBudget(t *testing.T) {
	tests := []struct {
		name    string
		churn   int  // a new LC process every this many windows (0: one)
		deaf    bool // the LC gives no sample while BE is stopped
		escapes bool // BE is never kept stopped
	}{
		{"one LC", 0, false, false},
		{"a new LC every 7 windows", 7, false, false},
		{"an LC silent in every pause", 0, true, false},
		{"BE escapes every pause", 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{})
			g := NewSimGPU(3)
			g.IgnorePause = tt.escapes
			w := slowLLM
			w.Requests = 5
			ds := play(c, g, w, mustObjective(t, "p50<=1.10x"), 600, func(i int, g *SimGPU) {
				if tt.churn > 0 {
					g.Key = "lc" + string(rune('a'+i/tt.churn%26)) + string(rune('a'+i/tt.churn/26))
				}
				g.Missing = tt.deaf && g.Paused
			})
			// At most 10% of any minute (60 one-second windows) stopped.
			for i := 0; i+60 <= len(ds); i++ {
				n := 0
				for _, d := range ds[i : i+60] {
					if d.PauseBE {
						n++
					}
				}
				if n > 6 {
					t.Fatalf("windows %d-%d: BE stopped %d windows of 60", i+1, i+60, n)
				}
			}
			if tt.escapes {
				last := ds[len(ds)-1]
				if last.PausedWindows > 2 || !strings.Contains(last.LC[0].Reference, "beside BE") {
					t.Errorf("BE asked to stop %d windows, reference %q: want two pauses that BE escapes, then the reference learnt beside BE", last.PausedWindows, last.LC[0].Reference)
				}
			}
			if tt.deaf {
				last := ds[len(ds)-1]
				// idleAfter windows alone; a pause's first drains BE's work.
				pauses := (idleAfter + c.opts.PauseMax - 2) / (c.opts.PauseMax - 1)
				if last.PausedWindows > pauses*c.opts.PauseMax {
					t.Errorf("BE stopped %d windows for an LC that gives nothing while it is: want at most %d pauses", last.PausedWindows, pauses)
				}
				if !strings.Contains(last.LC[0].Reference, "beside BE") {
					t.Errorf("reference %q: want it learnt beside BE after %d empty pauses", last.LC[0].Reference, pauses)
				}
			}
		})
	}
}

func TestIdleBETeachesReferencesWithoutStopping(t *testing.T) {
	c := newController(t, Options{})
	g := NewSimGPU(4)
	w := slowLLM // a request a window: a pause's few windows cannot teach its reference
	// BE works 4 windows and idles 4, as the bench's --be-duty.
	ds := play(c, g, w, mustObjective(t, "p50<=1.10x"), 80, dutyIdle)
	for _, d := range ds[6:] { // BE first idles in window 5, in the first pause (6 windows at most)
		if d.PauseBE {
			t.Fatalf("window %d: BE stopped though it idles of its own accord", d.Windows)
		}
	}
	if last := ds[len(ds)-1]; last.LC[0].Target == 0 {
		t.Fatalf("no reference after 80 windows of an idling BE: %q", last.LC[0].Reference)
	}
}

// frontier is a launch-bound LC whose objective the static arm (200us) meets with the most BE of
// the arms that meet it.
var frontier = Workload{
	Name: "frontier", Baseline: 6 * time.Millisecond, Noise: 0.03, ShareNoise: 0.01, Requests: 40,
	Points: []Point{
		{time.Microsecond, 1.0, 0.55, false},
		{50 * time.Microsecond, 1.01, 0.6, false},
		{200 * time.Microsecond, 1.03, 0.7, false},
		{500 * time.Microsecond, 1.3, 0.8, false},
		{3 * time.Millisecond, 1.6, 0.9, false},
	},
	Gated: []Point{{time.Microsecond, 1.0, 0.4, false}, {3 * time.Millisecond, 1.0, 0.5, false}},
}

// playFrontier plays 300 windows of the frontier workload on a ladder without the policy's own 200us: the static arm is offered all the same.
func playFrontier(t *testing.T) (*Controller, []Decision) {
	ladder := []time.Duration{time.Microsecond, 50 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond}
	c := newController(t, Options{NoPause: true, Ladder: ladder, Static: 200 * time.Microsecond, Safe: time.Microsecond})
	g := NewSimGPU(5)
	g.Standalone, g.Gate = true, true
	ds := play(c, g, frontier, mustObjective(t, "p50<=1.10x"), 300, nil)
	return c, ds
}

func TestChoosesStaticWhenBEBest(t *testing.T) {
	c, ds := playFrontier(t)
	if got := c.Arm(); got != (Arm{BETimeslice: 200 * time.Microsecond}) {
		t.Fatalf("settled on %v, want the static arm 200µs (reason %q)", got, ds[len(ds)-1].Reason)
	}
	// Steady once converged: at most one change per 30 windows over the last 180.
	if n := changes(ds[len(ds)-180:]); n > 6 {
		t.Fatalf("%d arm changes in the last 180 windows, want at most 6", n)
	}
	if c := slices.IndexFunc(ds, func(d Decision) bool { return d.Converged }); c < 0 || c > len(ds)-180 || !ds[len(ds)-1].Converged {
		t.Errorf("converged from window %d of %d: want it said before the last 180 and kept", c+1, len(ds))
	}
}

// TestFrontierShowsWhatItKnows: each decision lists the arm in force and every arm known by its
// measurements or backed off, in the ladder's order, with bounds around the mean, BE's share and a
// verdict the workload's truth bears out, and the back-off of an arm left for missing counting down
// window by window from halfLife times a power of two.
func TestFrontierShowsWhatItKnows(t *testing.T) {
	c, ds := playFrontier(t)
	order := func(a Arm) int { return slices.Index(c.set.all(), a) }
	type seen struct{ at, in int }
	backedOff, retry := 0, map[Arm]seen{}
	for i, d := range ds {
		if n := len(slices.DeleteFunc(slices.Clone(d.Arms), func(v ArmView) bool { return v.Arm != d.Arm })); n != 1 {
			t.Fatalf("window %d: the arm in force %v listed %d times in %+v", i+1, d.Arm, n, d.Arms)
		}
		if !slices.IsSortedFunc(d.Arms, func(x, y ArmView) int { return order(x.Arm) - order(y.Arm) }) {
			t.Fatalf("window %d: arms out of the ladder's order: %+v", i+1, d.Arms)
		}
		for _, v := range d.Arms {
			truth, share := frontier.AtArm(v.Arm)
			switch {
			case v.Arm != d.Arm && math.IsNaN(v.Worst) && math.IsNaN(v.BEShare) && v.RetryIn == 0:
				t.Fatalf("window %d: %v listed with nothing measured", i+1, v.Arm)
			case math.Abs(v.BEShare-share) > 0.1: // NaN: not measured
				t.Fatalf("window %d: %v's BE share %.3f, truly %.3f", i+1, v.Arm, v.BEShare, share)
			case !math.IsNaN(v.Worst) && !(v.Lo <= v.Worst && v.Worst <= v.Hi):
				t.Fatalf("window %d: %v's mean %.3f outside its bounds [%.3f, %.3f]", i+1, v.Arm, v.Worst, v.Lo, v.Hi)
			case v.Verdict == "meets" && (v.Hi > 1 || truth > 1.10), v.Verdict == "misses" && (v.Lo <= 1 || truth <= 1.10):
				t.Fatalf("window %d: %v %s, bounds [%.3f, %.3f], truly %.2fx", i+1, v.Arm, v.Verdict, v.Lo, v.Hi, truth)
			}
			switch r, ok := retry[v.Arm]; {
			case v.Arm == d.Arm && v.RetryIn != 0:
				t.Fatalf("window %d: the arm in force %v shows a back-off of %d windows", i+1, v.Arm, v.RetryIn)
			case ok && v.RetryIn <= r.in && v.RetryIn != max(0, r.in-(i-r.at)):
				t.Fatalf("window %d: %v's back-off went from %d to %d windows in %d", i+1, v.Arm, r.in, v.RetryIn, i-r.at)
			case ok && v.RetryIn > r.in && (v.RetryIn%halfLife != 0 || v.RetryIn/halfLife&(v.RetryIn/halfLife-1) != 0): // from the window it begins
				t.Fatalf("window %d: %v backed off %d windows, want halfLife times a power of two", i+1, v.Arm, v.RetryIn)
			}
			if retry[v.Arm] = (seen{i, v.RetryIn}); v.Arm == d.Arm {
				delete(retry, v.Arm) // its back-off runs on unseen
			}
			if v.Verdict == "misses" && v.RetryIn > 0 {
				backedOff++
			}
		}
	}
	if backedOff == 0 {
		t.Errorf("no arm shown missing and backed off: 500µs (1.3x) was left for missing")
	}
	last := ds[len(ds)-1].Arms[slices.IndexFunc(ds[len(ds)-1].Arms, func(v ArmView) bool { return v.Arm == c.Arm() })]
	if last.Verdict != "meets" || !(math.Abs(last.BEShare-0.7) <= 0.05) {
		t.Errorf("the arm held: %+v, want it meeting with BE's share measured near 0.7", last)
	}
	// At the limit the search moves back onto arms it backed off: none shows a back-off while in force.
	for seed := range uint64(4) {
		c := newController(t, Options{NoPause: true})
		g := NewSimGPU(seed)
		g.Standalone = true
		for i, d := range play(c, g, missesAlike, mustObjective(t, "p50<=1.10x"), 600, nil) {
			if j := slices.IndexFunc(d.Arms, func(v ArmView) bool { return v.Arm == d.Arm }); j < 0 || d.Arms[j].RetryIn != 0 {
				t.Fatalf("seed %d window %d: the arm in force %v in %+v: want it listed with no back-off", seed, i+1, d.Arm, d.Arms)
			}
		}
	}
}

// TestFrontierWorstOfTwoObjectives: an arm's bounds in the frontier are the worst of every
// objective's in force, so that "meets" needs each met and "misses" one missed.
func TestFrontierWorstOfTwoObjectives(t *testing.T) {
	c := newController(t, Options{NoPause: true})
	g, g2 := NewSimGPU(3), NewSimGPU(4)
	g.Standalone, g2.Standalone, g2.Key = true, true, "lc2" // a second LC, against a tail bound its p99 meets only on the short rungs
	p50, p99 := mustObjective(t, "p50<=1.10x"), mustObjective(t, "p99<=1.2x")
	prev, checked := c.Arm(), 0
	for i := range 300 {
		o := g.WindowArm(frontier, p50, c.Arm(), prev)
		o.LC = append(o.LC, g2.WindowArm(frontier, p99, c.Arm(), prev).LC...)
		prev = c.Arm()
		for _, v := range c.Observe(o).Arms {
			for k := range c.active {
				if lo, hi := c.lcBounds(v.Arm, k); lo > v.Lo || hi > v.Hi {
					t.Fatalf("window %d: %v's bounds [%.3f, %.3f], %s's own [%.3f, %.3f]: want the worst", i+1, v.Arm, v.Lo, v.Hi, k, lo, hi)
				}
				checked++
			}
		}
	}
	if checked < 300*2 {
		t.Errorf("%d bounds checked, want two objectives' every window", checked)
	}
}

// TestBoundNamedWhenNothingMeets: nothing meets the objective, and the closest arm is held. One
// switch per request is named as what stands in the way where it fills the room the objective
// leaves above the LC alone (a 1.28 ms CUDA-graph LC under 1.05x), and not where that room is
// far larger (a 200 ms LC under 1.10x).
func TestBoundNamedWhenNothingMeets(t *testing.T) {
	pts := []Point{{time.Microsecond, 1.15, 0.7, false}, {3 * time.Millisecond, 2, 0.95, false}}
	tests := []struct {
		name  string
		w     Workload
		obj   string
		named string // what the bound says of the switch; "": none named
	}{
		{"graph", Workload{Name: "graph", Baseline: 1280 * time.Microsecond, Noise: 0.02, Requests: 100, Points: pts}, "p50<=1.05x", "of this LC's 1.28ms alone"},
		{"slow", Workload{Name: "slow", Baseline: 200 * time.Millisecond, Noise: 0.02, Requests: 20,
			Points: []Point{{time.Microsecond, 1.2, 0.7, false}, pts[1]}}, "p50<=1.10x", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{NoPause: true})
			g := NewSimGPU(6)
			g.Standalone = true
			ds := play(c, g, tt.w, mustObjective(t, tt.obj), 200, nil)
			last := ds[len(ds)-1]
			named := strings.Contains(last.Bound, "switch")
			if last.Cause != CauseAtLimit || named != (tt.named != "") || !strings.Contains(last.Bound, tt.named) {
				t.Fatalf("cause %q bound %q: want at_limit, the switch named: %v", last.Cause, last.Bound, tt.named != "")
			}
			if c.Arm().BETimeslice != time.Microsecond {
				t.Errorf("held %v, want the closest, 1µs", c.Arm())
			}
		})
	}
}

// TestBoundNamesAnAbsoluteMissedAlone: an LC that runs over its absolute bound even alone (seen
// while BE idles of its own accord) is at the limit, and the bound says so; BE is never stopped
// to learn it.
func TestBoundNamesAnAbsoluteMissedAlone(t *testing.T) {
	w := Workload{Name: "slow-alone", Baseline: 290 * time.Millisecond, Noise: 0.03, Requests: 20,
		Points: []Point{{time.Microsecond, 1.05, 0.3, false}, {3 * time.Millisecond, 1.3, 0.9, false}}}
	c := newController(t, Options{})
	g := NewSimGPU(3)
	ds := play(c, g, w, mustObjective(t, "p50<=200ms"), 240, dutyIdle)
	last := ds[len(ds)-1]
	if last.Cause != CauseAtLimit || !strings.Contains(last.Bound, "this LC alone runs at 2") || !strings.Contains(last.Bound, "over its objective's 200ms") || strings.Contains(last.Bound, "switch") {
		t.Fatalf("cause %q bound %q: want at_limit naming the LC alone over its bound", last.Cause, last.Bound)
	}
	if last.PausedWindows != 0 {
		t.Errorf("BE stopped for %d windows to learn what only names a bound", last.PausedWindows)
	}
}

// flat is one window of an LC ("lc") against obj: n samples at v, with BE idle through it or
// working (at a share of 0.8).
func flat(obj objective.Objective, v time.Duration, n int, idle bool) Observation {
	s := LCSample{Key: "lc", Objective: obj}
	for range n {
		s.Points = append(s.Points, stats.Weighted{V: v, W: 1})
	}
	return Observation{LC: []LCSample{s}, BEIdle: idle, BEShare: map[bool]float64{true: math.NaN(), false: 0.8}[idle], Aligned: true}
}

func TestArmJudgedByTheReferenceOfItsTime(t *testing.T) {
	// The LC alone at 10 ms, then at 11 ms under the arm (1.00x of p50<=1.10x), then alone at
	// 12 ms: the reference becomes 11 ms, and the arm's measurement stays 1.00x, a ratio to the
	// reference as it stood when the measurement completed (the LC's speed drifts); the next
	// measurement, at 11 ms, is judged by 11 ms.
	// It fails with every estimate re-judged by the latest reference.
	obj := mustObjective(t, "p50<=1.10x")
	window := func(v time.Duration, idle bool) Observation { return flat(obj, v, minSamples, idle) }
	c := newController(t, Options{})
	arm := Arm{BETimeslice: 200 * time.Microsecond}
	for _, o := range []Observation{window(10*time.Millisecond, true), window(11*time.Millisecond, false), window(12*time.Millisecond, true)} {
		c.Observe(o)
	}
	if got := c.worstMean(arm); !(math.Abs(got-1) <= 0.01) {
		t.Errorf("the arm's estimate %.3f after the reference moved to 11ms, want 1.000, its measurement's own", got)
	}
	under := c.Arm() // the search moved on from arm
	c.Observe(window(11*time.Millisecond, false))
	if got, want := c.worstMean(under), 11/(1.1*11.0); under == arm || !(math.Abs(got-want) <= 0.01) || !(math.Abs(c.worstMean(arm)-1) <= 0.01) {
		t.Errorf("%v measured at 11ms: %.3f, want %.3f; %v still %.3f, want 1.000", under, got, want, arm, c.worstMean(arm))
	}
}

// TestArmJudgedByTheLCAloneThroughItsSpan: the LC alone at 13 ms twice, the reference, then at
// 10 ms within an arm's measurement at 12.5 ms: the measurement is judged by the LC alone through
// its own span, 12.5/(1.1*10) = 1.136, a miss, as the app compares the LC with itself; by the
// reference, 12 ms, it would read 0.947, and by the LC alone since the last measurement 0.874.
// It fails with the measurement judged by the reference, or by alone windows before its first.
func TestArmJudgedByTheLCAloneThroughItsSpan(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	window := func(v time.Duration, idle bool) Observation {
		return flat(obj, v, map[bool]int{true: minSamples, false: minSamples / 2}[idle], idle)
	}
	c := newController(t, Options{})
	var d Decision
	for _, o := range []Observation{window(13*time.Millisecond, true), window(13*time.Millisecond, true), window(12500*time.Microsecond, false),
		window(10*time.Millisecond, true), window(12500*time.Microsecond, false)} {
		d = c.Observe(o)
	}
	if got, want := d.LC[0].Ratio, 12.5/(1.1*10); !d.LC[0].Counted || !(math.Abs(got-want) <= 0.001) {
		t.Errorf("measurement at 12.5ms after the LC alone at 10ms: %.3f (counted %v), want %.3f", got, d.LC[0].Counted, want)
	}
}

// TestBoundFromTheSpansAlone: the LC alone at 13 ms while the reference is learnt, then at 10 ms in
// the idle windows of every measurement at 12.5 ms, each of 5 samples (the reference follows it
// slowly): every arm misses, 1.14x by the span's alone, and the bound named must not read the
// older reference as the LC alone over its objective (11 ms, 1.10 times the span's alone). It
// fails with the bound's LC alone left at the reference.
func TestBoundFromTheSpansAlone(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	window := func(v time.Duration, idle bool) Observation {
		return flat(obj, v, map[bool]int{true: minSamples / 4, false: minSamples / 2}[idle], idle)
	}
	c := newController(t, Options{})
	os := slices.Repeat([]Observation{window(13*time.Millisecond, true)}, 8)
	for range 30 {
		os = append(os, window(12500*time.Microsecond, false), window(10*time.Millisecond, true))
	}
	limit := 0
	for i, o := range os {
		d := c.Observe(o)
		if strings.Contains(d.Bound, "alone runs at") {
			t.Fatalf("window %d: %s", i, d.Bound)
		}
		limit += map[bool]int{true: 1}[d.Bound != ""]
	}
	if limit == 0 {
		t.Fatal("no bound named: every arm misses")
	}
}

// TestMeasurementWaitsForItsSpanAlone: the LC alone at 13 ms, the reference; within an arm's
// measurement at 12.5 ms BE idles of its own accord, the LC at 10 ms, but for 5 samples of the 10
// a span's alone needs when the arm's 20 are in: the measurement waits for the next idle window,
// then reads 12.5/(1.1*10) = 1.136, a miss, where the reference would read 0.874. It fails with
// the measurement judged at once, by the reference.
func TestMeasurementWaitsForItsSpanAlone(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	window := func(v time.Duration, n int, idle bool) Observation { return flat(obj, v, n, idle) }
	c := newController(t, Options{})
	var ds []Decision
	for _, o := range []Observation{window(13*time.Millisecond, minSamples, true), window(13*time.Millisecond, minSamples, true),
		window(12500*time.Microsecond, minSamples/2, false), window(10*time.Millisecond, minSamples/4, true),
		window(12500*time.Microsecond, minSamples/2, false), window(10*time.Millisecond, minSamples/4, true)} {
		ds = append(ds, c.Observe(o))
	}
	if d := ds[4]; d.LC[0].Counted {
		t.Errorf("measured with 5 samples of the LC alone in its span: %.3f", d.LC[0].Ratio)
	}
	if d, want := ds[5], 12.5/(1.1*10); !d.LC[0].Counted || !(math.Abs(d.LC[0].Ratio-want) <= 0.001) {
		t.Errorf("measurement once its span held the LC alone at 10ms: %.3f (counted %v), want %.3f", d.LC[0].Ratio, d.LC[0].Counted, want)
	}
	if got := ds[5].LC[0].Reference; !strings.Contains(got, "standalone through this measurement (BE idle) 10ms, 10 samples") {
		t.Errorf("the status names the reference %q, not the LC alone through the measurement", got)
	}
}

// TestSpanAloneBounds: what the LC alone through a measurement's span may judge it, and how long
// it is waited for. The reference is learnt at 13 ms alone, the arm's samples are 12.5 ms, the LC
// alone in the span 10 ms: judged by the span, 12.5/(1.1*10) = 1.136; by the reference, 0.874.
// Each row fails with its rule removed: the wait's bound of maxAccumulate windows from the first
// sample, the rate it needs, the arm change that starts a span anew, a gate's traps, an absolute
// objective, a reference given.
func TestSpanAloneBounds(t *testing.T) {
	const byRef, bySpan = 12.5 / (1.1 * 13), 12.5 / (1.1 * 10)
	win := func(obj objective.Objective, v time.Duration, n int, idle, traps bool) Observation {
		o := flat(obj, v, n, idle)
		o.LC[0].GateTraps, o.Gate = traps, true // the gate offered: a gate arm may be held
		return o
	}
	rel, abs := mustObjective(t, "p50<=1.10x"), mustObjective(t, "p50<=14.3ms")
	arm := func(obj objective.Objective, n int) Observation {
		return win(obj, 12500*time.Microsecond, n, false, false)
	}
	lead := []Observation{win(rel, 13*time.Millisecond, minSamples, true, false), win(rel, 13*time.Millisecond, minSamples, true, false)}
	given := func(os []Observation) []Observation {
		for _, o := range os {
			o.LC[0].Standalone = 13 * time.Millisecond
		}
		return os
	}
	tests := []struct {
		name    string
		setup   func(c *Controller, i int) // before window i
		windows []Observation
		at      int     // the window the measurement completes in
		ratio   float64 // its ratio
	}{
		// 8 alone samples, then none: their rate would reach 10 within two spans, so it waits,
		// but no longer than maxAccumulate windows from its first sample, then takes the reference.
		{"the wait ends maxAccumulate windows after the first sample", nil,
			slices.Concat(lead, []Observation{arm(rel, 1), win(rel, 10*time.Millisecond, 8, true, false)}, slices.Repeat([]Observation{arm(rel, 1)}, 40)),
			2 + maxAccumulate, byRef},
		// One alone sample by the 20th window of the span: at that rate 10 would take 200.
		{"no wait for alone samples too rare to come", nil,
			slices.Concat(lead, []Observation{arm(rel, 1), win(rel, 10*time.Millisecond, 1, true, false)}, slices.Repeat([]Observation{arm(rel, 1)}, 19)),
			2 + 20, byRef},
		// The LC alone under one arm is no part of the next arm's span.
		{"an arm's change starts the span anew", func(c *Controller, i int) {
			if i == 4 {
				c.to(&Decision{}, CauseExplore, c.set.clamp(Arm{BETimeslice: time.Millisecond}), "")
			}
		}, slices.Concat(lead, []Observation{arm(rel, 1), win(rel, 10*time.Millisecond, 8, true, false), arm(rel, minSamples)}), 4, byRef},
		// Under the gate, a window whose launches trap is not the LC alone.
		{"a gate's traps are not the LC alone", func(c *Controller, i int) {
			if i == 2 {
				c.cur = c.set.clamp(Arm{BETimeslice: 200 * time.Microsecond, Gate: true})
			}
		}, slices.Concat(lead, []Observation{arm(rel, minSamples/2), win(rel, 10*time.Millisecond, minSamples, true, true), arm(rel, minSamples/2)}), 4, byRef},
		// A reference given (Standalone) is the LC alone: the span's does not replace it.
		{"a reference given", nil, given(slices.Concat([]Observation{arm(rel, minSamples/2), win(rel, 10*time.Millisecond, minSamples, true, false)},
			[]Observation{arm(rel, minSamples/2)})), 2, byRef},
		// An absolute objective judges by its own bound: nothing to wait for.
		{"an absolute objective", nil,
			[]Observation{arm(abs, minSamples/2), win(abs, 10*time.Millisecond, 5, true, false), arm(abs, minSamples/2)}, 2, 12.5 / 14.3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{})
			for i, o := range tt.windows {
				if tt.setup != nil {
					tt.setup(c, i)
				}
				d := c.Observe(o)
				if got := d.LC[0]; got.Counted != (i == tt.at) || got.Counted && !(math.Abs(got.Ratio-tt.ratio) <= 0.001) {
					t.Fatalf("window %d: counted %v at %.3f, want a measurement at %.3f in window %d", i, got.Counted, got.Ratio, tt.ratio, tt.at)
				}
				if i == tt.at {
					return
				}
			}
			t.Fatalf("no measurement in %d windows", len(tt.windows))
		})
	}
}

func TestReferenceBesideBEUnderAnotherArm(t *testing.T) {
	// A reference learnt beside BE under the shortest arm, 1us (10 ms), then under 3ms once the
	// floor rises there (10.5 ms): another reference, not the LC's drift, so it starts anew, and
	// the arms judged by the last move once to it. It fails with the two blended and no move.
	obj := mustObjective(t, "p50<=1.10x")
	c := newController(t, Options{NoPause: true, Static: 3 * time.Millisecond})
	var d Decision
	for i := range 20 {
		s := LCSample{Key: "lc", Objective: obj}
		for range minSamples {
			s.Points = append(s.Points, stats.Weighted{V: map[bool]time.Duration{true: 10 * time.Millisecond, false: 10500 * time.Microsecond}[c.Arm().BETimeslice == time.Microsecond], W: 1})
		}
		d = c.Observe(Observation{LC: []LCSample{s}, BEShare: 0.5, Aligned: true, MinBETimeslice: map[bool]time.Duration{true: 3 * time.Millisecond}[i >= 10]})
	}
	if got := d.LC[0].Reference; !strings.HasPrefix(got, "beside BE under 3ms 10.5ms") {
		t.Errorf("reference %q, want beside BE under 3ms, 10.5ms", got)
	}
	if got, want := c.worstMean(Arm{BETimeslice: time.Microsecond}), 10/(1.1*10.5); !(math.Abs(got-want) <= 0.005) {
		t.Errorf("1us, measured at 10ms by the reference under 1us: %.3f, want %.3f by the one under 3ms", got, want)
	}
}

// TestArmsJudgedInTheirTimeThroughDrift: an eager decode LC whose CPU's speed, and so its
// latency alone and beside BE alike, moves 1.5x in modes of about a minute (docs/GPU-FACTS.md),
// under a BE that idles half the time: each arm is judged by the reference of its own time, and the
// search holds arms that miss little of BE's working time. It fails with every arm re-judged by the
// latest reference: an arm measured in one mode then reads the LC's drift since.
func TestArmsJudgedInTheirTimeThroughDrift(t *testing.T) {
	w := hostModesLLM
	w.Name, w.HostSlow, w.HostToSlow, w.HostToFast = "drifting-llm", 1.5, 1.0/60, 1.0/60
	obj := mustObjective(t, "p50<=1.10x")
	var missing, n float64
	for seed := uint64(1); seed <= 24; seed++ {
		m, _, k := whileBEWorks(play(newController(t, Options{}), NewSimGPU(seed), w, obj, 600, dutyIdle)[120:], 120, true, w, obj)
		missing, n = missing+m, n+k
	}
	if missing /= n; missing > 0.09 {
		t.Errorf("arms that miss held %.1f%% of BE's working windows, want at most 9%%", 100*missing)
	}
	t.Logf("arms that miss %.1f%% of BE's working windows", 100*missing)
}

// missesAlike: every arm misses 1.10x by as much, 3ms giving BE the most.
var missesAlike = Workload{Name: "misses-alike", Baseline: time.Millisecond, Noise: 0.15, Requests: 50,
	Points: []Point{{time.Microsecond, 1.3, 0.6, false}, {3 * time.Millisecond, 1.3, 0.9, false}}}

func TestAtLimitHoldsThroughNoise(t *testing.T) {
	// Every arm misses by about as much: one window's noise reorders them, and the closest by
	// mean flips from window to window; the held arm moves only for one closer beyond both
	// intervals.
	w := missesAlike
	for seed := uint64(1); seed <= 8; seed++ {
		c := newController(t, Options{NoPause: true})
		g := NewSimGPU(seed)
		g.Standalone = true
		ds := play(c, g, w, mustObjective(t, "p50<=1.10x"), 360, nil)
		if last := ds[len(ds)-1]; last.Cause != CauseAtLimit {
			t.Fatalf("seed %d: cause %q, want at_limit", seed, last.Cause)
		}
		if n := changes(ds[len(ds)-180:]); n > 6 {
			t.Errorf("seed %d: %d arm changes in the last 180 windows at the limit, want at most one per 30", seed, n)
		}
		if share := c.share(c.Arm()); share < 0.7 {
			t.Errorf("seed %d: held %v with BE at %.0f%%, where 3ms misses as little with 90%%", seed, c.Arm(), 100*share)
		}
	}
}

func TestMinShareIsEnforced(t *testing.T) {
	// Only the gate or 1us meet the objective; the policy's min_share rules both out.
	w := frontier
	w.Points = []Point{{time.Microsecond, 1.0, 0.3, false}, {200 * time.Microsecond, 1.3, 0.7, false}, {3 * time.Millisecond, 1.6, 0.9, false}}
	c := newController(t, Options{NoPause: true})
	g := NewSimGPU(7)
	g.Standalone = true
	var ds []Decision
	prev := c.Arm()
	for range 300 {
		o := g.WindowArm(w, mustObjective(t, "p50<=1.10x"), c.Arm(), prev)
		o.MinBEShare = 0.5
		prev = c.Arm()
		ds = append(ds, c.Observe(o))
	}
	for _, d := range ds[len(ds)-60:] {
		if d.Arm.BETimeslice < 50*time.Microsecond {
			t.Fatalf("window %d: held %v, which gives BE 30%% under a min_share of 50%%", d.Windows, d.Arm)
		}
	}
}

func TestPauseBudgetSharedByOwners(t *testing.T) {
	// Tenant A starts a new LC process every 7 windows; tenant B has one. B's LC is still learnt
	// alone, and BE is stopped no more than 10% of any minute for both together.
	c := newController(t, Options{})
	a, b := NewSimGPU(8), NewSimGPU(9)
	a.Owner, b.Owner, b.Key = "uid:1000", "uid:2000", "b"
	w := slowLLM
	w.Requests = 5
	obj := mustObjective(t, "p50<=1.10x")
	prev := c.Arm()
	paused := false
	var ds []Decision
	for i := range 300 {
		a.Key = fmt.Sprintf("a%d", i/7)
		a.Paused, b.Paused = paused, paused
		oa, ob := a.WindowArm(w, obj, c.Arm(), prev), b.WindowArm(w, obj, c.Arm(), prev)
		oa.LC = append(oa.LC, ob.LC...)
		prev = c.Arm()
		d := c.Observe(oa)
		paused = d.PauseBE
		ds = append(ds, d)
	}
	n := 0
	for _, d := range ds {
		if d.PauseBE {
			n++
		}
	}
	if n > 30 {
		t.Errorf("BE stopped %d of 300 windows, want at most 10%%", n)
	}
	last := ds[len(ds)-1]
	i := slices.IndexFunc(last.LC, func(r LCResult) bool { return r.Key == "b" })
	if i < 0 || last.LC[i].Target == 0 {
		t.Fatalf("tenant B's LC has no reference after 300 windows: %+v", last.LC)
	}
}

func TestLongWindowLearnsBesideBE(t *testing.T) {
	// A 10 s window leaves the pause budget (10% of a minute) no room for a drain window and one
	// to learn in: references are learnt beside BE, never with BE stopped.
	c := newController(t, Options{Window: 10 * time.Second})
	g := NewSimGPU(10)
	ds := play(c, g, frontier, mustObjective(t, "p50<=1.10x"), 30, nil)
	for _, d := range ds {
		if d.PauseBE {
			t.Fatalf("window %d: BE stopped with no budget for a pause", d.Windows)
		}
	}
	if last := ds[len(ds)-1].LC[0]; last.Target == 0 || !strings.Contains(last.Reference, "beside BE") {
		t.Fatalf("reference %q target %v: want it learnt beside BE", last.Reference, last.Target)
	}
}

func TestUndecidedMissIsLeft(t *testing.T) {
	// The static arm misses by 3% on average, never by its lower bound: it is left toward the LC
	// within two measurements' span of windows, not held for good.
	w := frontier
	w.Noise = 0.15
	w.Points = []Point{{time.Microsecond, 0.95, 0.5, false}, {200 * time.Microsecond, 1.13, 0.7, false}, {3 * time.Millisecond, 1.6, 0.9, false}}
	c := newController(t, Options{NoPause: true})
	g := NewSimGPU(11)
	g.Standalone = true
	ds := play(c, g, w, mustObjective(t, "p50<=1.10x"), 3*maxAccumulate, nil)
	if !slices.ContainsFunc(ds, func(d Decision) bool { return d.Changed && d.Arm.BETimeslice < 200*time.Microsecond }) {
		t.Fatalf("held %v for %d windows at 1.03x its objective", c.Arm(), len(ds))
	}
}

// steadyLLM is an LC judged per its CPU's speed (a measurement scatters 2%, as reps 60-64's did on the
// H200) whose 200 us and 500 us arms both meet, 500 us at 0.95 of its objective with BE half again.
var steadyLLM = Workload{
	Name: "steady-llm", Baseline: 170 * time.Millisecond, ShareNoise: 0.03, Requests: 1, Spread: 0.047, HostSlow: 1,
	Points: []Point{
		{time.Microsecond, 1.00, 0.10, false},
		{50 * time.Microsecond, 1.01, 0.18, false},
		{200 * time.Microsecond, 1.035, 0.31, false},
		{500 * time.Microsecond, 1.045, 0.50, false},
		{time.Millisecond, 1.15, 0.56, false},
		{3 * time.Millisecond, 1.35, 0.65, false},
	},
}

// TestScatterFromMeasurements: bounds as wide as a measurement's own error (from its samples, pooled with how
// far measurements fell apart) decide an arm at 0.95 of its objective in one exploration, where the prior's
// 10% leaves it undecided each time (BE 0.336, every seed on 200 us). It fails with the prior in the bounds.
func TestScatterFromMeasurements(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	var missing, share, n float64
	for seed := uint64(1); seed <= 24; seed++ {
		ds := play(newController(t, Options{}), NewSimGPU(seed), steadyLLM, obj, 360, dutyIdle)
		m, s, k := whileBEWorks(ds[60:], 60, true, steadyLLM, obj)
		missing, share, n = missing+m, share+s, n+k
	}
	if missing, share = missing/n, share/n; missing > 0.10 || share < 0.42 {
		t.Errorf("arms that miss %.1f%% of BE's working windows (want at most 10%%), BE share %.3f (want at least 0.42)", 100*missing, share)
	} else {
		t.Logf("arms that miss %.1f%% of the time, BE share %.3f", 100*missing, share)
	}
}

// TestLongRun: over 20 minutes (1200 windows, BE idle half of every 8, 24 seeds) no seed's LC averages over its
// objective through BE's working windows, early (60-360) or late (360-1200), and BE keeps at least its floor late.
// Each row's figures are logged (the docs cite them). It fails with the prior's 10% in the bounds (host modes: 3
// seeds over early; the steady LC: BE 0.323 late).
func TestLongRun(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	quiet := hostModesLLM
	quiet.Name, quiet.HostSlow, quiet.Spread = "host-modes-cancelled", 1, 0.047 // one measurement scatters 2%
	for _, tt := range []struct {
		w    Workload
		late float64 // BE's least share over 360-1200
	}{{steadyLLM, 0.46}, {hostModesLLM, 0.61}, {quiet, 0.77}, {slowLLM, 0.64}} {
		t.Run(tt.w.Name, func(t *testing.T) {
			for _, span := range [][2]int{{60, 360}, {360, 1200}} {
				var n, missing, share, over float64
				for seed := uint64(1); seed <= 24; seed++ {
					ds := play(newController(t, Options{}), NewSimGPU(seed), tt.w, obj, 1200, dutyIdle)
					m, s, k := whileBEWorks(ds[span[0]:span[1]], span[0], true, tt.w, obj)
					var r float64 // the LC's true ratio over its objective, averaged over BE's working windows
					for i, d := range ds[span[0]:span[1]] {
						if (span[0]+i+1)%8 < 4 {
							x, _ := tt.w.AtArm(d.Arm)
							r += x / obj.Inflation
						}
					}
					if missing, share, n = missing+m, share+s, n+k; r/k > 1 {
						over++
					}
				}
				t.Logf("windows %d-%d: arms that miss %.1f%% of the time, BE share %.3f, seeds over their objective %.0f of 24", span[0], span[1], 100*missing/n, share/n, over)
				if late := span[0] == 360; over > 0 || late && share/n < tt.late {
					t.Errorf("windows %d-%d: %.0f seeds over their objective (want none), BE share %.3f%s", span[0], span[1], over, share/n, map[bool]string{true: fmt.Sprintf(" (want at least %.2f)", tt.late)}[late])
				}
			}
		})
	}
}

// TestSafeArmMissingNarrowly: hostModesLLM with its static (safe) 200 us at 1.12x, 2% over its objective, as
// the static classes' processes ran it on the GPU where another process ran it at 1.07x: the search starts on it and must
// leave it on its mean, not wait for its interval. Over windows 60-360 of 24 seeds at most 3 end over their
// objective and at most 45% of BE's working windows are in missing arms (1 and 39.7% under the rule in force). It
// fails with an undecided arm left only once its lower bound at half a standard error misses (11 seeds, 58.2%).
func TestSafeArmMissingNarrowly(t *testing.T) {
	obj := mustObjective(t, "p50<=1.10x")
	w := hostModesLLM
	w.Name, w.Points = "host-modes-static-misses", slices.Clone(hostModesLLM.Points)
	w.Points[2].LCRatio = 1.12
	var n, missing, over float64
	for seed := uint64(1); seed <= 24; seed++ {
		ds := play(newController(t, Options{}), NewSimGPU(seed), w, obj, 360, dutyIdle)
		m, _, k := whileBEWorks(ds[60:], 60, true, w, obj)
		var r float64 // the LC's true ratio over its objective, averaged over BE's working windows
		for i, d := range ds[60:] {
			if (60+i+1)%8 < 4 {
				x, _ := w.AtArm(d.Arm)
				r += x / obj.Inflation
			}
		}
		if n, missing = n+k, missing+m; r/k > 1 {
			over++
		}
	}
	if over > 3 || missing/n > 0.45 {
		t.Errorf("windows 60-360: %.0f of 24 seeds over their objective (want at most 3), %.1f%% of BE's working windows in missing arms (want at most 45%%)", over, 100*missing/n)
	}
}

// TestBoundsOwnErrorPerArm: an arm's bounds take its own measurements' error where they gave one: a
// steady arm's 1% does not decide an arm whose one measurement (0.96) has 6% of its own. It fails with
// every arm judged by the LC's pooled error.
func TestBoundsOwnErrorPerArm(t *testing.T) {
	c := newController(t, Options{})
	k := "1/1 p50<=1.1x"
	c.scatter[k] = &stats.Scatter{}
	steady, noisy := Arm{BETimeslice: 200 * time.Microsecond}, Arm{BETimeslice: 500 * time.Microsecond}
	measure := func(arm Arm, x, se float64) { c.record(k, arm, x, se) }
	for _, x := range []float64{0.92, 0.93, 0.92, 0.93, 0.92, 0.93} {
		measure(steady, x, 0.01)
	}
	measure(noisy, 0.96, 0.06)
	if _, hi := c.lcBounds(steady, k); hi > 1 {
		t.Errorf("the steady arm at 0.925: upper bound %.3f, want it decided", hi)
	}
	if _, hi := c.lcBounds(noisy, k); hi <= 1 {
		t.Errorf("the noisy arm's one measurement at 0.96 with 6%% its own error: upper bound %.3f, want it undecided", hi)
	}
}

// TestAbsoluteTakesNoReferenceError: an absolute objective's measurement is its latency over a fixed bound; the
// reference learnt beside it while BE idles (passive, ±40%) adds nothing to its own error. It fails with the
// reference's error added to every measurement.
func TestAbsoluteTakesNoReferenceError(t *testing.T) {
	c := newController(t, Options{NoPause: true})
	obj := mustObjective(t, "p50<=20ms")
	pts := func(spread float64) (ws []stats.Weighted) {
		for i := range 25 {
			ws = append(ws, stats.Weighted{V: time.Duration((1 + spread*(float64(i%5)-2)/2) * float64(10*time.Millisecond)), W: 1})
		}
		return ws
	}
	for w := range 6 { // BE idle 3 windows (the reference learnt from ±40%), then an arm's measurements of ±1%, one a window
		c.Observe(Observation{BEIdle: w < 3, BEShare: 0.5, Aligned: true, LC: []LCSample{{Key: "1/1", Owner: "0", Objective: obj, Points: pts(map[bool]float64{true: 0.4, false: 0.01}[w < 3])}}})
	}
	sc, own := c.scatter["1/1 "+obj.String()], stats.QuantileSE(pts(0.01), 0.5, 25)
	if sc == nil || sc.Own.W == 0 {
		t.Fatal("no measurement's own error recorded")
	}
	if got := math.Sqrt(sc.Own.Mean()); math.Abs(got-own) > 1e-9 {
		t.Errorf("own error %.4f, its samples give %.4f", got, own)
	}
}

// TestOwnErrorsFade: an arm's own measurements' errors fade with its estimates: 10% two half-lives ago and 1% now
// weigh a quarter to one. It fails with them kept at full weight.
func TestOwnErrorsFade(t *testing.T) {
	c := newController(t, Options{NoPause: true})
	k, arm := "1/1 p50<=1.1x", Arm{BETimeslice: 200 * time.Microsecond}
	e := c.est(arm)
	e.own[k], e.lc[k] = &stats.Forgetting{}, &stats.Forgetting{}
	e.own[k].Add(0.1 * 0.1)
	e.lc[k].Add(1)
	c.decay(aged(2 * halfLife))
	e.own[k].Add(0.01 * 0.01)
	if got, want := e.own[k].Mean(), (0.25*0.01+0.0001)/1.25; math.Abs(got-want) > 1e-9 {
		t.Errorf("the arm's own squared error %.5f, want %.5f", got, want)
	}
}

// TestScatterOutlivesQuietLC: how far an LC's measurements fell apart is kept as long as its arms' estimates, through
// a quiet spell that ends its accumulation (40 windows): an arm left undecided by it stays undecided. It fails with the
// scatter dropped with the accumulation (the arm's own 1% alone would decide it).
func TestScatterOutlivesQuietLC(t *testing.T) {
	c := newController(t, Options{NoPause: true})
	k := "1/1 p50<=1.1x"
	c.scatter[k] = &stats.Scatter{}
	noisy, arm := Arm{BETimeslice: 200 * time.Microsecond}, Arm{BETimeslice: 500 * time.Microsecond}
	for _, m := range []struct {
		arm Arm
		x   float64
	}{{noisy, 0.80}, {noisy, 0.95}, {noisy, 0.80}, {noisy, 0.95}, {noisy, 0.80}, {noisy, 0.95}, {arm, 0.95}} { // 9% apart, 1% each its own
		c.record(k, m.arm, m.x, 0.01)
	}
	c.active[k], c.acc[k] = c.tick, &accum{} // the LC was measuring: quiet idleAfter+maxAccumulate windows, its accumulation ends
	for range idleAfter + maxAccumulate + 1 {
		c.Observe(Observation{BEShare: 0.5, Aligned: true})
	}
	if c.acc[k] != nil {
		t.Fatal("the quiet LC's accumulation was not ended")
	}
	if _, hi := c.lcBounds(arm, k); hi <= 1 {
		t.Errorf("after a quiet spell the arm at 0.95 reads decided (upper bound %.3f): its LC's scatter was forgotten", hi)
	}
}

func TestUndecidedMissWaitsForTwoMeasurements(t *testing.T) {
	// A slow LC: a request every 4 windows, so one measurement of 20 takes 77 windows, longer
	// than the 60 an undecided arm is held. Its first reads 1.01x its objective, within its own error: one measurement
	// is no average, and the arm is kept for a second, then left only if the two miss on average.
	// Its second objective's measurements of the same requests, or another LC's, are not its own.
	obj, p90 := mustObjective(t, "p50<=1.10x"), mustObjective(t, "p90<=3.00x")
	at := func(ratio float64) time.Duration { return time.Duration(ratio * 1.1 * float64(100*time.Millisecond)) }
	for _, tt := range []struct {
		name   string
		second float64 // the second measurement, of the objective
		leftAt int     // the window the arm is left in for a violation; 0: never
		p90    bool    // the LC has a second objective, met
		fast   bool    // a second LC, of many requests a window, meets it
	}{
		{"second under", 0.95, 0, false, false},
		{"second over", 1.03, 157, false, false},
		{"second objective", 0.95, 0, true, false},
		{"a fast LC beside", 0.95, 0, false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{NoPause: true})
			static := c.Arm()
			left := 0
			for w := 1; w <= 170 && left == 0; w++ {
				o := Observation{BEShare: 0.7, Aligned: true}
				slow := func(o objective.Objective, v time.Duration) LCSample {
					return LCSample{Key: "1/1", Owner: "0", Objective: o, Points: []stats.Weighted{{V: v, W: 1}}, Standalone: 100 * time.Millisecond}
				}
				if w%4 == 1 { // from the first window: the slow LC is known to be there; its requests spread ±10% (a measurement's own error 5%)
					v := time.Duration(float64(at(map[bool]float64{true: 1.01, false: tt.second}[w <= 80])) * []float64{0.9, 0.95, 1, 1.05, 1.1}[w/4%5])
					if o.LC = []LCSample{slow(obj, v)}; tt.p90 {
						o.LC = append(o.LC, slow(p90, v))
					}
				}
				if tt.fast {
					o.LC = append(o.LC, LCSample{Key: "2/1", Owner: "0", Objective: obj, Points: []stats.Weighted{{V: at(0.9), W: 25}}, Standalone: 100 * time.Millisecond})
				}
				if d := c.Observe(o); d.Changed && d.Cause == CauseViolation {
					left = w
				} else if w <= 80 && d.Arm != static {
					t.Fatalf("window %d: %v, %s (%s), before a measurement of %v", w, d.Arm, d.Cause, d.Reason, static)
				}
			}
			if left != tt.leftAt {
				t.Errorf("left %v for a violation in window %d, want %d", static, left, tt.leftAt)
			}
		})
	}
}

func TestShortestArmKeepsMinShare(t *testing.T) {
	// References learnt beside BE (10 s windows leave no pause budget) are learnt under the
	// shortest arm BE's minimum allows: once 1us is known to give BE 30% under a min_share of 50%,
	// a new LC's reference is learnt at a longer rung, not there.
	w := frontier
	w.Points = []Point{{time.Microsecond, 1.0, 0.3, false}, {50 * time.Microsecond, 1.01, 0.6, false}, {3 * time.Millisecond, 1.6, 0.9, false}}
	c := newController(t, Options{Window: 10 * time.Second})
	g := NewSimGPU(12)
	obj := mustObjective(t, "p50<=1.10x")
	prev := c.Arm()
	short := 0
	for i := range 60 {
		if i == 20 {
			g.Key = "second" // a new LC process, whose reference is to learn
		}
		o := g.WindowArm(w, obj, c.Arm(), prev)
		o.MinBEShare = 0.5
		prev = c.Arm()
		d := c.Observe(o)
		if i < 20 {
			continue
		}
		if d.Cause == CauseCalibrate && d.Arm.BETimeslice == time.Microsecond {
			short++
		}
	}
	if !c.short(Arm{BETimeslice: time.Microsecond, Prepreempt: true}) && !c.short(Arm{BETimeslice: time.Microsecond}) {
		t.Fatal("1us was never measured short: the test shows nothing")
	}
	if short > 0 {
		t.Errorf("%d windows learnt the new LC's reference under 1us, which gives BE under its minimum", short)
	}
}

// TestObjectiveChangedOnALiveLC: an LC's objective turned from an absolute bound to a relative
// one on the same quantile, or back, is learnt as the new one asks: the relative one's reference
// with BE stopped, the absolute one's never.
func TestObjectiveChangedOnALiveLC(t *testing.T) {
	pauses := func(ds []Decision) (n int) {
		for _, d := range ds {
			n += map[bool]int{true: 1}[d.PauseBE]
		}
		return n
	}
	c := newController(t, Options{})
	g := NewSimGPU(5)
	play(c, g, frontier, mustObjective(t, "p50<=20ms"), 30, nil)
	if ds := play(c, g, frontier, mustObjective(t, "p50<=1.10x"), 200, nil); ds[len(ds)-1].LC[0].Target == 0 || pauses(ds) == 0 {
		t.Errorf("absolute then relative: target %v after 200 windows, %d paused: want the reference learnt with BE stopped", ds[len(ds)-1].LC[0].Target, pauses(ds))
	}
	w := slowLLM
	w.Requests = 1
	c = newController(t, Options{})
	g = NewSimGPU(5)
	play(c, g, w, mustObjective(t, "p50<=1.10x"), 3, nil)
	if ds := play(c, g, w, mustObjective(t, "p50<=800ms"), 300, nil); pauses(ds[20:]) > 0 {
		t.Errorf("relative then absolute: BE stopped %d windows for the absolute objective", pauses(ds[20:]))
	}
}

// TestUnmeasuredArmsInOrder: until measured, a spinner takes BE a little and the gate more: an arm
// with either is not expected to give BE more than the arm without it, which is expected to give
// more; so too where only the spinner's arm is measured, and nothing else tells the two apart.
func TestUnmeasuredArmsInOrder(t *testing.T) {
	c := newController(t, Options{})
	c.offer(Observation{Gate: true, Prepreempt: time.Millisecond})
	bare := Arm{BETimeslice: 200 * time.Microsecond}
	spin, gate := bare, bare
	spin.Prepreempt, gate.Gate = true, true
	check := func(when string) {
		t.Helper()
		for _, tt := range []struct {
			a, b Arm
			want bool
		}{{bare, spin, true}, {spin, bare, false}, {spin, gate, true}, {gate, spin, false}, {bare, gate, true}, {gate, bare, false}} {
			if got := c.better(tt.a, tt.b); got != tt.want {
				t.Errorf("%s: better(%v, %v) = %v, want %v", when, tt.a, tt.b, got, tt.want)
			}
		}
	}
	check("none measured")
	c.est(spin).share.Add(0.8)
	check(fmt.Sprintf("%v measured", spin))
}

func TestAtLimitKeepsAnArmMeasuredAnew(t *testing.T) {
	// At the limit, an arm in force whose estimate aged out is being measured anew: it is kept for
	// that measurement's span, not left at once for the closest by an older estimate.
	held, closer := Arm{BETimeslice: time.Millisecond}, Arm{BETimeslice: 50 * time.Microsecond}
	const k = "lc p50<=1.1x"
	setup := func(measured bool) *Controller {
		c := newController(t, Options{})
		c.active[k] = 0
		c.est(closer).lc[k] = &stats.Forgetting{}
		c.est(closer).lc[k].Add(0.98)
		c.est(closer).lc[k].Add(1.02)
		if measured { // once at 0.91x, a little over a half-life ago
			c.est(held).lc[k] = &stats.Forgetting{}
			c.est(held).lc[k].Add(0.91)
			c.est(held).lc[k].Decay(aged(halfLife + 3))
		}
		c.phase, c.cur, c.moved, c.tick = Phase{Kind: Settled, Limit: true}, held, 3, 6
		return c
	}
	c := setup(true)
	var d Decision
	if c.atLimit(&d); d.Changed || c.cur != held || !strings.Contains(d.Bound, "measured anew") {
		t.Fatalf("left %v for %v 3 windows after moving to it: %s", held, c.cur, d.Bound)
	}
	c.tick = c.moved + 2*maxAccumulate // its measurement never came in two spans
	var again Decision
	if c.atLimit(&again); !again.Changed || c.cur != closer {
		t.Errorf("held %v with no estimate after two measurements' span, want %v", c.cur, closer)
	}
	// An arm never measured (reached by a clamp) is no arm measured anew: the closer one at once.
	c = setup(false)
	var never Decision
	if c.atLimit(&never); !never.Changed || c.cur != closer {
		t.Errorf("held the never-measured %v, want %v: %s", c.cur, closer, never.Bound)
	}
}

// TestHoldKeepsAnArmMeetingOnItsMean: once converged, within stableGap of a change, an arm whose
// interval straddles the objective while its mean meets is kept, where a known better arm would
// have taken the LC off it, and the next measurement might well take it back; it is left where
// its mean misses, past stableGap, or at the limit, for the closest arm (here the one known to
// meet). It fails without the hold, with it on a mean that misses, or past stableGap.
func TestHoldKeepsAnArmMeetingOnItsMean(t *testing.T) {
	cur, known := Arm{BETimeslice: 200 * time.Microsecond}, Arm{BETimeslice: 500 * time.Microsecond}
	const k = "lc p50<=1.1x"
	tests := []struct {
		name     string
		measured []float64 // the arm in force's measurements, ratios to the target
		limit    bool
		since    int // windows since the last change
		leaves   bool
	}{
		{"meets on its mean, within 30 s", []float64{0.78, 1.12}, false, 10, false},
		{"misses on its mean", []float64{0.90, 1.20}, false, 10, true},
		{"meets on its mean, at the limit", []float64{0.78, 1.12}, true, 10, true},
		{"meets on its mean, past 30 s", []float64{0.78, 1.12}, false, 30, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{})
			c.active[k] = 0
			for a, ms := range map[Arm][]float64{cur: tt.measured, known: {0.8, 0.8, 0.8, 0.8}} {
				c.est(a).lc[k] = &stats.Forgetting{}
				for _, m := range ms {
					c.est(a).lc[k].Add(m)
				}
			}
			if f := c.feasibility(cur); f != possible || c.feasibility(known) != feasible {
				t.Fatalf("feasibility %v of the arm in force, want it undecided, the other known to meet", f)
			}
			c.phase, c.cur, c.tick, c.nextExplore = Phase{Kind: Settled, Limit: tt.limit}, cur, 100, 1000 // converged
			c.moved = c.tick - tt.since
			var d Decision
			if c.settled(&d); d.Changed != tt.leaves || tt.leaves && c.cur != known {
				t.Errorf("in force %v (changed %v: %s), want it left for %v: %v", c.cur, d.Changed, d.Reason, known, tt.leaves)
			}
		})
	}
}

func TestSteadyChangesApartButForViolations(t *testing.T) {
	// Must-show 5 in the simulator: once converged (from the first decision that says so), an arm
	// change within 30 windows of the last comes only to protect the LC: an exploration whose arm
	// misses by its interval is left at once, one that misses on its mean alone, meets with less
	// BE, or is undecided is held stableGap, and no exploration or move to a known better arm comes
	// sooner. At the limit, where every arm misses, its moves are outside this. Over 48 seeds of
	// 1200 windows of each workload of TestTimeInMissingArms, the frontier and every arm missing alike.
	runs := convergedRuns(t)
	swaps := 0 // moves back to a known better arm left within 60 windows, as if nothing new were known of it
	for name, run := range runs {
		pairs := 0 // runs with two changes within 30 windows (docs/SLO.md quotes it: go test -v)
		for seed := uint64(1); seed <= 48; seed++ {
			ds := run(seed)
			tail := ds[max(0, slices.IndexFunc(ds, func(d Decision) bool { return d.Converged })):]
			var at []int
			for i, d := range tail {
				if d.Changed {
					at = append(at, i)
				}
			}
			paired := false
			for j := 1; j < len(at); j++ {
				first, second := tail[at[j-1]], tail[at[j]]
				paired = paired || at[j]-at[j-1] < 30
				if back := j >= 2 && second.Arm == tail[at[j-1]-1].Arm; back && second.Cause == CauseKnownBetter && at[j]-at[j-1] <= 60 {
					swaps++
				}
				if at[j]-at[j-1] < 30 && !protective(second) {
					t.Errorf("%s, seed %d: changes %d windows apart: %s (%s), then %s (%s)", name, seed, at[j]-at[j-1],
						first.Cause, first.Reason, second.Cause, second.Reason)
				}
			}
			if paired {
				pairs++
			}
		}
		t.Logf("%s: %d of 48 converged runs have two changes within 30 windows, the second protecting the LC", name, pairs)
	}
	t.Logf("%d moves back to a known better arm left within 60 windows", swaps)
}

// convergedRuns: each workload of TestTimeInMissingArms with its objective, BE's duty or not, the
// frontier and every arm missing alike, as runs of 1200 windows by seed.
func convergedRuns(t *testing.T) map[string]func(seed uint64) []Decision {
	ladder := []time.Duration{time.Microsecond, 50 * time.Microsecond, 500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond}
	runs := map[string]func(seed uint64) []Decision{
		"every arm missing alike": func(seed uint64) []Decision {
			g := NewSimGPU(seed)
			g.Standalone = true
			return play(newController(t, Options{NoPause: true}), g, missesAlike, mustObjective(t, "p50<=1.10x"), 1200, nil)
		},
		"frontier": func(seed uint64) []Decision {
			g := NewSimGPU(seed)
			g.Standalone, g.Gate = true, true
			c := newController(t, Options{NoPause: true, Ladder: ladder, Static: 200 * time.Microsecond, Safe: time.Microsecond})
			return play(c, g, frontier, mustObjective(t, "p50<=1.10x"), 1200, nil)
		},
	}
	for _, x := range []struct {
		w    Workload
		obj  string
		duty bool
	}{{hostModesLLM, "p50<=1.10x", true}, {perRequestLLM, "tpot_p50<=1.10x", true}, {slowLLM, "p50<=1.10x", true}, {slowLLM, "p50<=1.10x", false}, {EagerPyTorchH100, "p50<=1.05x", false}} {
		runs[fmt.Sprintf("%s %s duty %v", x.w.Name, x.obj, x.duty)] = func(seed uint64) []Decision {
			each := func(int, *SimGPU) {}
			if x.duty {
				each = dutyIdle
			}
			return play(newController(t, Options{}), NewSimGPU(seed), x.w, mustObjective(t, x.obj), 1200, each)
		}
	}
	for name, run := range runs {
		runs[name] = func(seed uint64) []Decision {
			ds, _ := convergedMemo.LoadOrStore(fmt.Sprint(name, seed), sync.OnceValue(func() []Decision { return run(seed) }))
			return ds.(func() []Decision)()
		}
	}
	return runs
}

// convergedMemo holds convergedRuns' decisions by run and seed: the simulator is deterministic, and
// three tests read the same runs (read only).
var convergedMemo sync.Map

// TestSettledExplorationBudget: once converged, exploration takes at most a tenth of the windows:
// at each exploration's start, the windows explored since convergence are at most budget of
// those gone by (one that took n windows is followed by 9n before the next), over 24 seeds of
// 1200 windows of each of convergedRuns.
func TestSettledExplorationBudget(t *testing.T) {
	for name, run := range convergedRuns(t) {
		most := 0.0 // the highest share at an exploration's start, over every seed
		for seed := uint64(1); seed <= 24; seed++ {
			ds := run(seed)
			tail := ds[max(0, slices.IndexFunc(ds, func(d Decision) bool { return d.Converged })):]
			explored := 0
			for i, d := range tail {
				if d.Phase != Exploring.String() {
					continue
				}
				if i == 0 || tail[i-1].Phase != Exploring.String() {
					share := float64(explored) / float64(max(i, 1))
					if most = max(most, share); share > budget {
						t.Errorf("%s, seed %d: an exploration begins %d windows after convergence with %d explored (%.1f%%, want at most %.0f%%)", name, seed, i, explored, 100*share, 100*budget)
					}
				}
				explored++
			}
		}
		t.Logf("%s: at most %.1f%% of the windows since convergence explored at an exploration's start", name, 100*most)
	}
}

// protective: d changed the arm to protect the LC, not for BE: off an arm that misses (by its interval, or on average
// once held and measured: not an exploration's mean) or is not known to meet and misses on its mean (or has none); or at
// the limit, where every arm misses.
func protective(d Decision) bool {
	var mean float64
	_, after, unknown := strings.Cut(d.Reason, "not known to meet every objective (LC at ")
	if n, _ := fmt.Sscanf(after, "%fx)", &mean); n == 1 {
		unknown = !(mean <= 1) // NaN: no mean
	}
	return d.Cause == CauseViolation && !strings.Contains(d.Reason, "misses on average") || d.Cause == CauseAtLimit ||
		d.Cause == CauseKnownBetter && unknown
}

// gatedDecode is a CUDA-graph decode LC whose hundreds of launches a request each trap under
// the gate's launch probes: alone under the gate it runs 1.15x its alone, and beside BE under
// the gate 1.16x. No arm meets 1.10x; an alone learnt under the gate would have the gate arms meet.
var gatedDecode = Workload{
	Name: "gated-decode", Baseline: 40 * time.Millisecond, Noise: 0.02, ShareNoise: 0.01, Requests: 20,
	Points: []Point{
		{time.Microsecond, 1.22, 0.8, false},
		{200 * time.Microsecond, 1.3, 0.96, false},
		{3 * time.Millisecond, 1.6, 0.98, false},
	},
	Gated:      []Point{{time.Microsecond, 1.16, 0.85, false}, {3 * time.Millisecond, 1.16, 0.94, false}},
	GatedAlone: 1.15,
}

// TestGateCostNotInReference: an LC's alone is learnt without the gate's launch probes, whose
// traps are a cost of sharing: from BE's idle windows under arms without the gate, and through a
// pause taken under a gate arm (for an LC that appears then) with the gate off, also where BE's
// idling under the gate arm would otherwise have held every pause back.
func TestGateCostNotInReference(t *testing.T) {
	tests := []struct {
		name string
		each func(i int, g *SimGPU)
		key  string // the LC whose reference is checked
	}{
		{"BE idles half of every 8 windows", dutyIdle, "lc"},
		{"a new LC paused for under a gate arm", func(i int, g *SimGPU) {
			if i == 150 {
				g.Key = "lc2"
			}
		}, "lc2"},
		{"a new LC under a gate arm while BE idles half of every 8 windows", func(i int, g *SimGPU) {
			g.Idle = i%8 >= 4
			if i == 150 {
				g.Key = "lc2"
			}
		}, "lc2"},
		{"the same, the LC giving no sample in the first idle window of each", func(i int, g *SimGPU) {
			g.Idle, g.Missing = i%8 >= 4, i%8 == 4 // a window without its sample says nothing of how it runs under the gate
			if i == 150 {
				g.Key = "lc2"
			}
		}, "lc2"},
		{"the same, its sample there empty", func(i int, g *SimGPU) {
			g.Idle, g.Empty = i%8 >= 4, i%8 == 4
			if i == 150 {
				g.Key = "lc2"
			}
		}, "lc2"},
	}
	obj := mustObjective(t, "p50<=1.10x")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newController(t, Options{})
			g := NewSimGPU(11)
			g.Gate = true
			var gated, pausedGated int
			ds := play(c, g, gatedDecode, obj, 300, func(i int, g *SimGPU) {
				if c.Arm().Gate {
					gated++
					pausedGated += map[bool]int{true: 1}[g.Paused]
				}
				tt.each(i, g)
			})
			if gated < 50 {
				t.Fatalf("%d windows under a gate arm: the test needs the gate tried", gated)
			}
			if pausedGated > 0 {
				t.Errorf("BE stopped to learn an alone through %d windows under a gate arm", pausedGated)
			}
			want := time.Duration(1.1 * float64(gatedDecode.Baseline))
			last := ds[len(ds)-1].LC[0]
			if cmp.Or(g.Key, "lc") != tt.key || last.Target < want*95/100 || last.Target > want*105/100 {
				t.Fatalf("LC %s: target %v (%s), want %v within 5%%: 1.10x the LC alone without the gate", g.Key, last.Target, last.Reference, want)
			}
		})
	}
}

// TestReferenceSaysItsAge: the status gives how long ago a reference last learnt, since under a gate
// arm whose probes trap, or beside a BE that never idles once it is learnt, it learns nothing and an LC that drifts is
// judged against an older self. It fails with the age left out or counted from another window.
func TestReferenceSaysItsAge(t *testing.T) {
	tests := []struct {
		name     string
		each     func(i int, g *SimGPU)
		min, max time.Duration
	}{
		{"BE idles half of every 8 windows", dutyIdle, 4 * time.Second, 4 * time.Second}, // the last window, 299, is 4 past the last idle one
		{"BE never idles", nil, time.Minute, 4 * time.Minute},                            // learnt in pauses (20 requests, 5 a pause, a pause a minute), then never
	}
	obj := mustObjective(t, "p50<=1.10x")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ds := play(newController(t, Options{}), NewSimGPU(3), slowLLM, obj, 300, tt.each)
			ref := ds[len(ds)-1].LC[0].Reference
			_, after, ok := strings.Cut(ref, "its last sample ")
			age, err := time.ParseDuration(strings.TrimSuffix(after, " ago"))
			if !ok || err != nil || age < tt.min || age > tt.max {
				t.Fatalf("reference %q: want its last sample %v-%v ago", ref, tt.min, tt.max)
			}
		})
	}
}

// TestReferenceLearntUnderGateWhereProbesComeOff: an LC whose launch probes come off for each of
// its requests runs as alone under a gate arm, so its reference learns there from BE's idle
// windows and follows the LC's own drift (15% slower alone from window 150), where one frozen
// since the last arm without the gate would read the drift as BE's doing. It fails with the
// reference learnt under arms without the gate only (frozen minutes old, 13% under the LC alone).
func TestReferenceLearntUnderGateWhereProbesComeOff(t *testing.T) {
	w := Workload{
		Name: "probes-off-decode", Baseline: 40 * time.Millisecond, Noise: 0.05, ShareNoise: 0.01, Requests: 20,
		Points: []Point{{time.Microsecond, 1.22, 0.8, false}, {200 * time.Microsecond, 1.3, 0.96, false}, {3 * time.Millisecond, 1.6, 0.98, false}},
		Gated:  []Point{{time.Microsecond, 1.04, 0.85, false}, {3 * time.Millisecond, 1.06, 0.94, false}},
	}
	for seed := uint64(1); seed <= 4; seed++ {
		c := newController(t, Options{})
		g := NewSimGPU(seed)
		g.Gate = true
		var gated int
		each := func(i int, g *SimGPU) { dutyIdle(i, g); gated += map[bool]int{true: 1}[c.Arm().Gate] }
		obj := mustObjective(t, "p50<=1.10x")
		play(c, g, w, obj, 150, each)
		slow := w
		slow.Baseline = w.Baseline * 115 / 100
		ds := play(c, g, slow, obj, 250, each)
		if gated < 300 {
			t.Fatalf("seed %d: %d windows of 400 under a gate arm: the test needs the search there", seed, gated)
		}
		ref := ds[len(ds)-1].LC[0].Reference
		v, _, _ := strings.Cut(strings.TrimPrefix(ref, "standalone (BE stopped or idle) "), ",")
		got, err := time.ParseDuration(v)
		if err != nil || !strings.HasSuffix(ref, "its last sample 2s ago") || math.Abs(float64(got)/float64(slow.Baseline)-1) > 0.05 {
			t.Errorf("seed %d: reference %q, want the LC alone, %v within 5%%, learnt 2 s ago (the duty's last idle window)", seed, ref, slow.Baseline)
		}
	}
}

// TestExploresAfterTheLCSpeedsUp: an LC that turns fast just after the search converged (the
// 700 ms LC under the duty, then 20 requests a window, every arm meeting) is explored toward
// more BE within the budget: the last exploration before convergence counts, so the first
// after it waits up to nine times that one (docs/SLO.md quotes the figures: go test -v). It
// fails with explorations held back for good once converged.
func TestExploresAfterTheLCSpeedsUp(t *testing.T) {
	fast := slowLLM
	fast.Requests, fast.Baseline = 20, 20*time.Millisecond
	fast.Points = []Point{{time.Microsecond, 1.0, 0.45, false}, {200 * time.Microsecond, 1.01, 0.64, false},
		{time.Millisecond, 1.03, 0.85, false}, {3 * time.Millisecond, 1.05, 0.92, false}}
	obj := mustObjective(t, "p50<=1.10x")
	var reached []int
	var share, n float64
	for seed := uint64(1); seed <= 24; seed++ {
		c, g := newController(t, Options{}), NewSimGPU(seed)
		play(c, g, slowLLM, obj, 100, dutyIdle)
		ds := play(c, g, fast, obj, 900, func(i int, g *SimGPU) { dutyIdle(i+100, g) })
		at := slices.IndexFunc(ds, func(d Decision) bool { return d.Arm.BETimeslice >= time.Millisecond && d.Phase == Settled.String() })
		if at < 0 {
			t.Fatalf("seed %d: never settled on 1 ms or more in 900 windows after the LC sped up", seed)
		}
		reached = append(reached, at)
		_, s, k := whileBEWorks(ds, 100, true, fast, obj)
		share, n = share+s, n+k
	}
	slices.Sort(reached)
	t.Logf("settled on 1 ms or more %d windows after the LC sped up (median; %d-%d), BE share %.3f over the 900", reached[12], reached[0], reached[23], share/n)
}
