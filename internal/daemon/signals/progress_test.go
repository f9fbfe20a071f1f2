package signals

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/attach"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

// progressStep is one 1 s window: the processes in class BE, the launches
// each made in it, whether BE ran alone or stopped, and the share wanted
// (NaN: unknown).
type progressStep struct {
	bes      []policy.ProcRef
	launches map[int]uint64
	alone    bool
	paused   bool
	want     float64
}

var (
	beA  = policy.ProcRef{PID: 10, Start: 1, Comm: "train-a"}
	beB  = policy.ProcRef{PID: 11, Start: 1, Comm: "train-b"}
	beA2 = policy.ProcRef{PID: 10, Start: 2, Comm: "train-a2"} // pid 10 reused
)

// learnt is the window a process is attached in and three windows alone
// making launches each: its rate alone is known after the third.
func learnt(bes []policy.ProcRef, launches map[int]uint64) []progressStep {
	nan := math.NaN()
	return []progressStep{{bes: bes, alone: true, want: nan},
		{bes: bes, launches: launches, alone: true, want: nan},
		{bes: bes, launches: launches, alone: true, want: nan},
		{bes: bes, launches: launches, alone: true, want: 1}}
}

// windows is the window of bes, each alone and stopped as said.
func windows(bes []policy.ProcRef, alone, stopped bool) []signal.BEWindow {
	var ws []signal.BEWindow
	for _, p := range bes {
		ws = append(ws, signal.BEWindow{ProcRef: p, Alone: alone, Stopped: stopped})
	}
	return ws
}

func at(s progressStep) []progressStep { return []progressStep{s} }

func join(parts ...[]progressStep) []progressStep {
	var out []progressStep
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func steps(n int, s progressStep) []progressStep {
	out := make([]progressStep, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestBEProgress(t *testing.T) {
	nan := math.NaN()
	one := []policy.ProcRef{beA}
	two := []policy.ProcRef{beA, beB}
	cases := []struct {
		name  string
		fail  map[int]error
		steps []progressStep
	}{
		{"learnt alone, then beside LC", nil, join(learnt(one, map[int]uint64{10: 1000}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 500}, want: 0.5}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 880}, want: 0.88}))},
		{"too few windows alone: unknown", nil, join(
			at(progressStep{bes: one, alone: true, want: nan}),
			steps(2, progressStep{bes: one, launches: map[int]uint64{10: 1000}, alone: true, want: nan}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 500}, want: nan}))},
		{"never alone: unknown", nil, join(
			at(progressStep{bes: one, want: nan}),
			steps(5, progressStep{bes: one, launches: map[int]uint64{10: 800}, want: nan}))},
		{"stopped windows teach nothing and give no share", nil, join(learnt(one, map[int]uint64{10: 1000}),
			steps(4, progressStep{bes: one, launches: map[int]uint64{10: 0}, alone: true, paused: true, want: nan}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 700}, want: 0.7}))},
		{"one odd window alone does not set the rate alone", nil, join(
			at(progressStep{bes: one, alone: true, want: nan}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 1000}, alone: true, want: nan}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 200}, alone: true, want: nan}),
			steps(2, progressStep{bes: one, launches: map[int]uint64{10: 1000}, alone: true, want: 1}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 900}, want: 0.9}))},
		{"windows alone without a launch do not set the rate alone", nil, join(
			at(progressStep{bes: one, alone: true, want: nan}),
			steps(3, progressStep{bes: one, launches: map[int]uint64{10: 0}, alone: true, want: nan}),
			learnt(one, map[int]uint64{10: 1000})[1:],
			at(progressStep{bes: one, launches: map[int]uint64{10: 500}, want: 0.5}))},
		{"more than alone is a share of 1", nil, join(learnt(one, map[int]uint64{10: 1000}),
			at(progressStep{bes: one, launches: map[int]uint64{10: 1300}, want: 1}))},
		{"two BE: their launches over their launches alone", nil, join(learnt(two, map[int]uint64{10: 3000, 11: 1000}),
			at(progressStep{bes: two, launches: map[int]uint64{10: 600, 11: 200}, want: 0.2}))},
		{"a BE not learnt alone is left out", nil, join(learnt(one, map[int]uint64{10: 1000}),
			at(progressStep{bes: two, launches: map[int]uint64{10: 800}, want: 0.8}),
			at(progressStep{bes: two, launches: map[int]uint64{10: 600, 11: 5000}, want: 0.6}))},
		{"a BE that could not be counted is left out", map[int]error{11: errors.New("uprobe refused")}, join(
			learnt(two, map[int]uint64{10: 1000, 11: 1000}),
			at(progressStep{bes: two, launches: map[int]uint64{10: 500, 11: 1000}, want: 0.5}))},
		{"a new process under a reused pid starts again", nil, join(learnt(one, map[int]uint64{10: 1000}),
			at(progressStep{bes: []policy.ProcRef{beA2}, want: nan}),
			at(progressStep{bes: []policy.ProcRef{beA2}, launches: map[int]uint64{10: 500}, want: nan}))},
		{"a process gone is forgotten", nil, join(learnt(two, map[int]uint64{10: 1000, 11: 1000}),
			at(progressStep{bes: []policy.ProcRef{beB}, launches: map[int]uint64{11: 400}, want: 0.4}),
			// 10 comes back: counted again from zero, left out until learnt
			at(progressStep{bes: two, launches: map[int]uint64{11: 400}, want: 0.4}))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := tracetest.NewLaunches()
			for pid, err := range tc.fail {
				f.Fail[pid] = err
			}
			b := NewBEProgress(f, testlog.New(t))
			b.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
			var now time.Duration
			for i, s := range tc.steps {
				now += time.Second
				for pid, n := range s.launches {
					if f.Attached[pid] {
						f.N[pid] += n
					}
				}
				got, ok := rollShare(b, now, windows(s.bes, s.alone, s.paused))
				if ok != !math.IsNaN(s.want) || ok && math.Abs(got-s.want) > 1e-9 {
					t.Fatalf("window %d: share %v (%v), want %v; status %+v", i+1, got, ok, s.want, b.Status())
				}
				if st := b.Status(); len(st) != len(s.bes) {
					t.Fatalf("window %d: status of %d processes, want %d", i+1, len(st), len(s.bes))
				}
			}
			for pid := range f.Attached {
				if !containsPID(tc.steps[len(tc.steps)-1].bes, pid) {
					t.Errorf("pid %d still counted after it left class BE", pid)
				}
			}
			b.Close()
			if len(f.Attached) != 0 {
				t.Errorf("Close left %v attached", f.Attached)
			}
		})
	}
}

// rollShare rolls b's window and gives the share of its BE processes,
// as the SLO loop does for a search.
func rollShare(b *BEProgress, now time.Duration, ws []signal.BEWindow) (float64, bool) {
	var bes []policy.ProcRef
	for _, w := range ws {
		bes = append(bes, w.ProcRef)
	}
	share := signal.BEShare(b.Roll(now, ws), bes)
	return share, !math.IsNaN(share)
}

func containsPID(ps []policy.ProcRef, pid int) bool {
	for _, p := range ps {
		if p.PID == pid {
			return true
		}
	}
	return false
}

// TestBEProgressStatus checks what each BE process's row says, and that a
// process that could not be counted is tried again after attach.Retry.
func TestBEProgressStatus(t *testing.T) {
	f := tracetest.NewLaunches()
	f.Fail[11] = errors.New("uprobe refused")
	b := NewBEProgress(f, testlog.New(t))
	b.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
	two := []policy.ProcRef{beA, beB}
	now := time.Second
	b.Roll(now, windows(two, true, false))
	st := b.Status()
	if st[0].Signal != "counting from this window" || !strings.HasPrefix(st[1].Signal, "not counted: uprobe refused") {
		t.Fatalf("first window: %+v", st)
	}
	for range 3 {
		now += time.Second
		f.N[10] += 2000
		b.Roll(now, windows(two, true, false))
	}
	now += time.Second
	f.N[10] += 1000
	b.Roll(now, windows(two, false, false))
	st = b.Status()
	if a := st[0]; a.LaunchesPerS != 1000 || a.AlonePerS != 2000 || a.Share == nil || *a.Share != 0.5 || a.Signal != "counted" {
		t.Errorf("counted BE: %+v", a)
	}
	if f.Attaches != 2 {
		t.Errorf("%d attaches before the retry time, want 2", f.Attaches)
	}
	delete(f.Fail, 11)
	now += attach.Retry
	b.Roll(now, windows(two, false, false))
	if st := b.Status(); st[1].Signal != "counting from this window" || f.Attaches != 3 {
		t.Errorf("after %v: %+v (%d attaches)", attach.Retry, st[1], f.Attaches)
	}
	now += time.Second
	b.Roll(now, windows(two, false, false))
	if st := b.Status(); !strings.HasPrefix(st[1].Signal, "learning its rate alone (0 of 3") {
		t.Errorf("retried BE: %+v", st[1])
	}
}

// TestBEProgressRecovers checks a count that cannot be read (the process
// is attached again after attach.Retry) and one that went back (a new
// baseline, no rate for that window), and that the status of a BE idle
// through its windows alone encodes (no NaN in it).
func TestBEProgressRecovers(t *testing.T) {
	f := tracetest.NewLaunches()
	b := NewBEProgress(f, testlog.New(t))
	b.Library = func(int) (string, error) { return "/lib/libcuda.so.1", nil }
	one := []policy.ProcRef{beA}
	now := time.Second
	roll := func(launches uint64, alone bool) (float64, bool) {
		now += time.Second
		f.N[10] += launches
		return rollShare(b, now, windows(one, alone, false))
	}
	b.Roll(now, windows(one, true, false))
	for range 3 {
		roll(0, true) // idle alone: loading its data
	}
	if js, err := json.Marshal(b.Status()); err != nil || strings.Contains(string(js), "NaN") {
		t.Fatalf("status of an idle BE: %s, %v", js, err)
	}
	for range 3 {
		roll(1000, true)
	}
	if sh, ok := roll(250, false); !ok || sh != 0.25 {
		t.Fatalf("share %v %v, want 0.25", sh, ok)
	}
	f.N[10] = 10 // counted again from zero by someone
	if _, ok := roll(0, false); ok {
		t.Fatal("a count that went back gave a share")
	}
	if sh, ok := roll(500, false); !ok || sh != 0.5 {
		t.Fatalf("after a new baseline: share %v %v, want 0.5", sh, ok)
	}
	f.Unreadable[10] = true
	if _, ok := roll(500, false); ok || !strings.HasPrefix(b.Status()[0].Signal, "not counted: its count could not be read") {
		t.Fatalf("unreadable count: %+v", b.Status())
	}
	attaches := f.Attaches
	f.Unreadable[10] = false
	now += attach.Retry
	roll(0, false)
	if f.Attaches != attaches+1 || b.Status()[0].Signal != "counting from this window" {
		t.Fatalf("after %v: %d attaches, %+v", attach.Retry, f.Attaches-attaches, b.Status())
	}
}
