package request_test

import (
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
)

func TestThreadTracker(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	lc := tracetest.Process{PID: 10, TID: 11, Comm: "lc"}
	lc2 := tracetest.Process{PID: 10, TID: 12, Comm: "lc"}
	rt := request.NewThreadTracker()
	apply := func(evs ...trace.Event) []request.Request {
		var out []request.Request
		for _, ev := range evs {
			if r, ok := rt.Apply(ev); ok {
				out = append(out, r)
			}
		}
		return out
	}
	// A synchronize with nothing launched is not a request.
	if got := apply(tracetest.Call(lc, trace.RoleSync, "cuCtxSynchronize", 4, false, 0, &clock, 0),
		tracetest.Call(lc, trace.RoleSync, "cuCtxSynchronize", 4, true, 0, &clock, time.Millisecond)); len(got) != 0 {
		t.Errorf("sync alone made %+v", got)
	}
	got := apply(tracetest.Request(lc, 3, 40*time.Microsecond, &clock)...)
	if len(got) != 1 || got[0].Launches != 3 || got[0].Latency() != 40*time.Microsecond || got[0].Sync != "cuStreamSynchronize" || got[0].SyncEnter == 0 {
		t.Fatalf("request %+v", got)
	}
	// Threads are apart: a launch on another thread does not join.
	evs := tracetest.Request(lc, 1, 100*time.Microsecond, &clock)
	mixed := append([]trace.Event{evs[0], tracetest.Call(lc2, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, &clock, 0)}, evs[1:]...)
	if got := apply(mixed...); len(got) != 1 || got[0].Launches != 1 || got[0].TID != 11 {
		t.Errorf("mixed threads: %+v", got)
	}
	// The other thread's request is dropped when its process exits.
	apply(&trace.TaskExit{PID: 10, At: clock.Now})
	if got := apply(tracetest.Call(lc2, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, &clock, 0)); len(got) != 0 {
		t.Errorf("request survived its process: %+v", got)
	}
}

func TestHintTracker(t *testing.T) {
	clock := tracetest.Clock{Now: 1e9}
	lc := tracetest.Process{PID: 10, TID: 11, Comm: "lc"}
	worker := tracetest.Process{PID: 10, TID: 12, Comm: "lc"}
	ht := request.NewHintTracker()
	apply := func(evs ...trace.Event) []request.HintTimeline {
		var out []request.HintTimeline
		for _, ev := range evs {
			if h, ok := ht.Apply(ev); ok {
				out = append(out, h)
			}
		}
		return out
	}
	us := time.Microsecond
	sync := func(p tracetest.Process, d time.Duration) []trace.Event {
		return []trace.Event{
			tracetest.Call(p, trace.RoleSync, "cuStreamSynchronize", 2, false, 0, &clock, d),
			tracetest.Call(p, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, &clock, 35*us),
		}
	}
	var evs []trace.Event
	hintAt := clock.Now
	evs = append(evs, tracetest.Hint(lc, "infer", 500, 7, &clock, 0)...)
	evs = append(evs, &request.Residency{PID: 10, Handle: 7, At: hintAt + uint64(180*us)}) // stamped by the spinner
	evs = append(evs, tracetest.Call(lc, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, &clock, 399*us))
	evs = append(evs, tracetest.Ready(lc, 7, &clock, 100*us))
	// A synchronize that returns after the release ends it.
	evs = append(evs, sync(lc, 5*us)...)
	got := apply(evs...)
	if len(got) != 1 {
		t.Fatalf("timelines %+v", got)
	}
	h := got[0]
	if h.Class != "infer" || h.ExpectedPrepUs != 500 || h.Handle != 7 || h.HintToResident() != 180*us ||
		h.Preparation() != 500*us || h.ReleaseToComplete() != 40*us || h.Total() != 540*us ||
		h.FirstLaunch-h.Hint != uint64(400*us) || h.Canceled {
		t.Errorf("timeline %+v", h)
	}

	// Hinted on one thread, released on another: the releasing thread's
	// synchronization completes it; one before the release does not.
	evs = tracetest.Hint(lc, "infer", 500, 8, &clock, 0)
	evs = append(evs, sync(worker, us)...)
	evs = append(evs, tracetest.Ready(worker, 8, &clock, 10*us))
	evs = append(evs, sync(lc, us)...)
	evs = append(evs, sync(worker, us)...)
	if got := apply(evs...); len(got) != 1 || got[0].Handle != 8 || got[0].Complete != clock.Now {
		t.Errorf("released elsewhere: %+v", got)
	}

	// Cancelled; a failed hint; a release of an unknown handle.
	evs = tracetest.Hint(lc, "warmup", 9, 9, &clock, 0)
	evs = append(evs, tracetest.Cancel(lc, 9, &clock, 12*us))
	evs = append(evs, tracetest.Hint(lc, "x", 1, 0, &clock, 0)...)
	evs = append(evs, tracetest.Ready(lc, 42, &clock, us))
	if got := apply(evs...); len(got) != 1 || !got[0].Canceled || got[0].Release != 0 || got[0].Total() != 13*us || ht.Failed != 1 {
		t.Errorf("cancelled %+v, failed %d", got, ht.Failed)
	}

	// Without synchronize calls traced, the release ends a timeline.
	ht.EndAtRelease = true
	evs = tracetest.Hint(lc, "infer", 500, 10, &clock, 0)
	evs = append(evs, tracetest.Ready(lc, 10, &clock, 7*us))
	if got := apply(evs...); len(got) != 1 || got[0].Preparation() != 8*us || got[0].Complete != 0 || got[0].ReleaseToComplete() != 0 {
		t.Errorf("ended at release: %+v", got)
	}

	// A process's end drops its open hints.
	apply(tracetest.Hint(lc, "infer", 500, 11, &clock, 0)...)
	apply(&trace.TaskExit{PID: 10, At: clock.Now})
	if got := apply(tracetest.Ready(lc, 11, &clock, us)); len(got) != 0 {
		t.Errorf("a hint survived its process: %+v", got)
	}
}
