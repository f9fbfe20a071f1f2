package prepreempt

import (
	"context"
	"testing"
	"time"
)

func TestBenefitDecision(t *testing.T) {
	const sw = 200 * time.Microsecond
	type hold struct {
		lead    time.Duration
		expired bool
	}
	short, long, expired := hold{250 * time.Microsecond, false}, hold{2 * time.Millisecond, false}, hold{0, true}
	rep := func(h hold, n int) []hold {
		out := make([]hold, n)
		for i := range out {
			out[i] = h
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		holds []hold
		opts  Options
		want  string
	}{
		{"short holds", rep(short, 16), Options{}, ModeHold},
		{"launch-bound", rep(long, 8), Options{}, ModeSkip},
		{"too few to judge", rep(long, 7), Options{}, ModeHold},
		{"hitting MaxHold", rep(expired, 8), Options{}, ModeSkip},
		{"half long, half expired", append(rep(long, 4), rep(expired, 4)...), Options{}, ModeSkip},
		{"a few long among short", append(rep(short, 12), rep(long, 4)...), Options{}, ModeHold},
		{"long only just over the factor", rep(hold{801 * time.Microsecond, false}, 8), Options{}, ModeSkip},
		{"at the factor", rep(hold{800 * time.Microsecond, false}, 8), Options{}, ModeHold},
		{"a looser factor", rep(long, 8), Options{NoBenefitLead: 20}, ModeHold},
		{"a stricter share", append(rep(short, 12), rep(long, 4)...), Options{NoBenefitShare: 0.25}, ModeSkip},
		{"disabled", rep(long, 16), Options{NoBenefitLead: -1}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBenefit(tc.opts.withDefaults())
			for _, h := range tc.holds {
				b.record("c", h.lead, sw, h.expired, false)
			}
			if got := b.modes()["c"]; got != tc.want {
				t.Errorf("mode %q, want %q", got, tc.want)
			}
		})
	}
}

func TestBenefitReprobesWithBackoff(t *testing.T) {
	const sw = 200 * time.Microsecond
	b := newBenefit(Options{ReprobeEvery: 4}.withDefaults())
	for range 8 {
		b.record("c", 2*time.Millisecond, sw, false, false)
	}
	// admits returns the hint numbers (from 1) that got a spinner, and
	// judges each probe as long or not.
	admits := func(n int, long bool) []int {
		var got []int
		for i := 1; i <= n; i++ {
			ok, probe := b.admit("c")
			if ok != probe {
				t.Fatalf("hint %d: spinner %v but probe %v in skip mode", i, ok, probe)
			}
			if ok {
				got = append(got, i)
				lead := 2 * time.Millisecond
				if !long {
					lead = 100 * time.Microsecond
				}
				b.record("c", lead, sw, false, true)
			}
		}
		return got
	}
	if got := admits(12, true); len(got) != 2 || got[0] != 4 || got[1] != 12 {
		t.Fatalf("probes at %v, want 4 then 12 (interval doubled after a long probe)", got)
	}
	if got := admits(16, true); len(got) != 1 || got[0] != 16 {
		t.Fatalf("probes at %v, want 16 (interval 16)", got)
	}
	// Capped at 8x.
	if got := admits(64, true); len(got) != 2 || got[0] != 32 || got[1] != 64 {
		t.Fatalf("probes at %v, want 32 and 64 (interval capped at 8 x 4)", got)
	}
	// An inconclusive probe lets the next hint probe.
	for range 31 {
		b.admit("c")
	}
	if ok, probe := b.admit("c"); !ok || !probe {
		t.Fatal("no probe when due")
	}
	b.inconclusive("c")
	if ok, probe := b.admit("c"); !ok || !probe {
		t.Fatal("no probe after an inconclusive one")
	}
	// A probe that benefits: back to holding, with a fresh history.
	b.record("c", 100*time.Microsecond, sw, false, true)
	if m := b.modes()["c"]; m != ModeHold {
		t.Fatalf("mode %q after a good probe", m)
	}
	for range 7 {
		b.record("c", 2*time.Millisecond, sw, false, false)
	}
	if m := b.modes()["c"]; m != ModeHold {
		t.Fatal("history not fresh after a good probe")
	}
}

// TestEngineSkipsLaunchBoundClass drives the engine on the simulated GPU
// and fake clock: a launch-bound class (Ready 2 ms after the spinner's
// launch, ten switch estimates) stops getting spinners after 8 holds,
// is probed, and comes back when its requests turn short; another class
// is not affected; gpreemptd can turn every spinner off.
func TestEngineSkipsLaunchBoundClass(t *testing.T) {
	e, clk, _ := simEngine(t, Options{InitialSwitch: 200 * time.Microsecond, ReprobeEvery: 4}, 0, 50*time.Microsecond, 0)
	ctx := context.Background()
	// request hints class with nothing to predict from (the spinner goes
	// at once), holds it lead, calls Ready and waits for its slot.
	request := func(class string, lead time.Duration) {
		t.Helper()
		r, err := e.Hint(ctx, class, 0)
		if err != nil {
			t.Fatal(err)
		}
		clk.advance(lead)
		if err := r.Ready(); err != nil {
			t.Fatal(err)
		}
		waitStats(t, e, func(Stats) bool { return len(e.free) == e.opts.Slots })
	}
	for range 8 {
		request("graph", 250*time.Microsecond)
		request("eager", 2*time.Millisecond)
	}
	s := e.Stats()
	if s.Early != 16 || s.SkippedNoBenefit != 0 || s.Classes["eager"] != ModeSkip || s.Classes["graph"] != ModeHold || !s.Prepreempt {
		t.Fatalf("after 8 holds each: %+v", s)
	}
	// Short preparations among the long: the predictor's low quantile
	// launches the probe at its hint.
	for range 3 {
		request("eager", 100*time.Microsecond)
	}
	if s := e.Stats(); s.SkippedNoBenefit != 3 || s.Early != 16 {
		t.Fatalf("skipped hints: %+v", s)
	}
	request("eager", 100*time.Microsecond) // the probe, short now
	if s := e.Stats(); s.Early != 17 || s.Classes["eager"] != ModeHold {
		t.Fatalf("after a short probe: %+v", s)
	}
	e.SetPrepreempt(false)
	request("graph", 250*time.Microsecond)
	if s := e.Stats(); s.SkippedByDaemon != 1 || s.Early != 17 || s.Prepreempt {
		t.Fatalf("with gpreemptd's word off: %+v", s)
	}
	e.SetPrepreempt(true)
	request("new", 250*time.Microsecond) // no history: launched at its hint
	if s := e.Stats(); s.Early != 18 {
		t.Fatalf("back on: %+v", s)
	}
}
