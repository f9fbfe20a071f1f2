package request

import (
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// Residency is the moment a hinted request's spinner kernel found its
// channel group resident on the GPU. The spinner stamps it (in GPU-written
// host memory, not visible to BPF); this event is how that stamp will enter
// a HintTimeline, matched by the request's handle.
type Residency struct {
	PID    uint32
	Handle uint64
	At     uint64
}

func (e *Residency) Time() uint64 { return e.At }

var _ trace.Event = (*Residency)(nil)

// HintTimeline is one hinted request of the hint API (include/gpreempt.h):
// gpreempt_hint, the spinner's GPU residency, gpreempt_ready (release),
// and completion (the return of the first synchronization, on the
// releasing thread, after the release). Zero times were not seen.
type HintTimeline struct {
	PID  uint32 `json:"pid"`
	TID  uint32 `json:"tid"` // the hinting thread
	Comm string `json:"comm"`
	// Handle is what gpreempt_hint returned (0: it failed).
	Handle uint64 `json:"handle"`
	// Class and ExpectedPrepUs are gpreempt_hint's arguments.
	Class          string `json:"class"`
	ExpectedPrepUs uint64 `json:"expected_prep_us"`
	Hint           uint64 `json:"hint_ns"`
	// Resident is filled by a Residency event (0 until the spinner
	// reports it).
	Resident    uint64 `json:"resident_ns"`
	FirstLaunch uint64 `json:"first_launch_ns"`
	Release     uint64 `json:"release_ns"`
	Complete    uint64 `json:"complete_ns"`
	Canceled    bool   `json:"canceled"`
}

// HintToResident is how long the spinner took to get the GPU.
func (h HintTimeline) HintToResident() time.Duration { return span(h.Hint, h.Resident) }

// Preparation is hint to release: the request's CPU-side preparation.
func (h HintTimeline) Preparation() time.Duration { return span(h.Hint, h.Release) }

// ReleaseToComplete is what the GPU added after the preparation: the
// latency pre-preemption aims to bring down to the standalone one.
func (h HintTimeline) ReleaseToComplete() time.Duration { return span(h.Release, h.Complete) }

// Total is hint to completion (or to cancellation).
func (h HintTimeline) Total() time.Duration { return span(h.Hint, h.Complete) }

type handleKey struct {
	pid    uint32
	handle uint64
}

// HintTracker turns hint API calls (and launches and synchronize returns)
// into HintTimelines. A hint's entry opens a timeline on its thread; its
// return names it by the handle that gpreempt_ready and gpreempt_cancel
// take, from any thread; the releasing thread's next synchronize return
// completes it. Not safe for concurrent use.
type HintTracker struct {
	// pending: hints entered, not yet returned, per thread.
	pending map[uint64]*HintTimeline
	// open: hints returned, per handle, not yet released or cancelled.
	open map[handleKey]*HintTimeline
	// preparing: per thread, the last hint it made that is still open,
	// whose first launch is the thread's next one.
	preparing map[uint64]*HintTimeline
	// released: per releasing thread, the timeline its next synchronize
	// return completes.
	released map[uint64]*HintTimeline

	// EndAtRelease ends a timeline at its release, for when synchronize
	// calls are not traced (Complete stays 0).
	EndAtRelease bool
	// Failed counts hints that returned no handle; Superseded, released
	// timelines dropped because their thread released another before
	// synchronizing.
	Failed, Superseded int
}

// NewHintTracker returns a tracker with no open hint.
func NewHintTracker() *HintTracker {
	return &HintTracker{
		pending:   map[uint64]*HintTimeline{},
		open:      map[handleKey]*HintTimeline{},
		preparing: map[uint64]*HintTimeline{},
		released:  map[uint64]*HintTimeline{},
	}
}

// Apply folds one event in and returns the timeline it ended (completed or
// cancelled), if any.
func (t *HintTracker) Apply(ev trace.Event) (HintTimeline, bool) {
	switch e := ev.(type) {
	case *trace.TaskExit:
		t.forget(e.PID)
	case *Residency:
		if h := t.open[handleKey{e.PID, e.Handle}]; h != nil && h.Resident == 0 {
			h.Resident = e.At
		}
	case *trace.Call:
		return t.call(e)
	}
	return HintTimeline{}, false
}

func (t *HintTracker) call(e *trace.Call) (HintTimeline, bool) {
	thread := threadKey(e.PID, e.TID)
	switch {
	case e.Role == trace.RoleHint && e.Kind == trace.CallEnter:
		t.pending[thread] = &HintTimeline{PID: e.PID, TID: e.TID, Comm: e.Comm, Class: e.Str, ExpectedPrepUs: e.Arg1, Hint: e.At}
	case e.Role == trace.RoleHint && e.Kind == trace.CallReturn:
		h := t.pending[thread]
		if h == nil {
			break
		}
		delete(t.pending, thread)
		if e.Ret == 0 {
			t.Failed++
			break
		}
		h.Handle = e.Ret
		t.open[handleKey{e.PID, e.Ret}] = h
		t.preparing[thread] = h
	case e.Role == trace.RoleLaunch && e.Kind == trace.CallEnter:
		if h := t.preparing[thread]; h != nil && h.FirstLaunch == 0 {
			h.FirstLaunch = e.At
		}
	case (e.Role == trace.RoleReady || e.Role == trace.RoleCancel) && e.Kind == trace.CallEnter:
		key := handleKey{e.PID, e.Arg0}
		h := t.open[key]
		if h == nil {
			break
		}
		delete(t.open, key)
		t.unprepare(h)
		if e.Role == trace.RoleCancel {
			h.Canceled, h.Complete = true, e.At
			return *h, true
		}
		h.Release = e.At
		if t.EndAtRelease {
			return *h, true
		}
		if t.released[thread] != nil {
			t.Superseded++
		}
		t.released[thread] = h
	case e.Role == trace.RoleSync && e.Kind == trace.CallReturn:
		h := t.released[thread]
		if h == nil {
			break
		}
		delete(t.released, thread)
		h.Complete = e.At
		return *h, true
	}
	return HintTimeline{}, false
}

// unprepare stops h collecting its thread's launches.
func (t *HintTracker) unprepare(h *HintTimeline) {
	thread := threadKey(h.PID, h.TID)
	if t.preparing[thread] == h {
		delete(t.preparing, thread)
	}
}

func (t *HintTracker) forget(pid uint32) {
	for k := range t.pending {
		if uint32(k>>32) == pid {
			delete(t.pending, k)
		}
	}
	for k := range t.open {
		if k.pid == pid {
			delete(t.open, k)
		}
	}
	for k := range t.preparing {
		if uint32(k>>32) == pid {
			delete(t.preparing, k)
		}
	}
	for k := range t.released {
		if uint32(k>>32) == pid {
			delete(t.released, k)
		}
	}
}
