package trace

import (
	"fmt"
	"time"
)

// Role is what a traced function means for a request's timeline. It travels
// in the top byte of the uprobe's attach cookie.
type Role uint8

const (
	// RoleLaunch: a kernel launch (cuLaunchKernel, cuLaunchKernelEx). The
	// first one opens a request on its thread.
	RoleLaunch Role = iota + 1
	// RoleSync: a synchronization (cuStreamSynchronize,
	// cuEventSynchronize, cuCtxSynchronize). Its return closes the
	// thread's request.
	RoleSync
	// RoleHint: gpreempt_hint, a request announced before its CPU-side
	// preparation (the spinner is launched).
	RoleHint
	// RoleReady: gpreempt_ready, preparation done (the spinner released).
	RoleReady
	// RoleCancel: gpreempt_cancel, the announced request will not come.
	RoleCancel
)

func (r Role) String() string {
	switch r {
	case RoleLaunch:
		return "launch"
	case RoleSync:
		return "sync"
	case RoleHint:
		return "hint"
	case RoleReady:
		return "ready"
	case RoleCancel:
		return "cancel"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// The attach cookie: role << 24 | index of the symbol in the tracer's table.
const (
	cookieRoleShift = 24
	cookieIndexMask = 1<<cookieRoleShift - 1
)

func cookie(role Role, index int) uint64 {
	return uint64(role)<<cookieRoleShift | uint64(index)&cookieIndexMask
}

func threadKey(pid, tid uint32) uint64 { return uint64(pid)<<32 | uint64(tid) }

// Request is one request of a process (Delimiter: a busy period, or a
// step of a process never quiet; RequestTracker: one thread's launches
// and the synchronize after them). Its latency, first launch to the last
// synchronize's return, is what an LC client sees of the GPU.
type Request struct {
	PID  uint32      `json:"pid"`
	TID  uint32      `json:"tid"` // the thread of the synchronize that ended it
	Comm string      `json:"comm"`
	Kind RequestKind `json:"kind"`
	// Start is the first launch's entry (a step: the thread's previous
	// synchronize return).
	Start    uint64 `json:"start_ns"`
	Launches int    `json:"launches"`
	// SyncEnter is when the last synchronize call began (0 if the tracer
	// attached during it); End when it returned.
	SyncEnter uint64 `json:"sync_enter_ns"`
	End       uint64 `json:"end_ns"`
	Sync      string `json:"sync"`
	// Result is the synchronize call's CUresult (0 = CUDA_SUCCESS).
	Result uint32 `json:"result"`
}

// Latency is first launch to the synchronization's return.
func (r Request) Latency() time.Duration { return span(r.Start, r.End) }

func span(from, to uint64) time.Duration {
	if from == 0 || to < from {
		return 0
	}
	return time.Duration(to - from)
}

// RequestTracker turns launch and synchronize calls into per-thread
// pieces: the launches a thread makes until one of its synchronize calls
// returns. That is a call-level view for the tracer's own tests, not an
// LC request: an eager decode synchronizes once a token, and a request is
// what Delimiter delimits. Not safe for concurrent use.
type RequestTracker struct {
	open map[uint64]*Request
}

// NewRequestTracker returns a tracker with no open request.
func NewRequestTracker() *RequestTracker {
	return &RequestTracker{open: map[uint64]*Request{}}
}

// Apply folds one event in and returns the request it completed, if any.
func (t *RequestTracker) Apply(ev Event) (Request, bool) {
	switch e := ev.(type) {
	case *TaskExit:
		t.forget(e.PID)
	case *Call:
		key := threadKey(e.PID, e.TID)
		r := t.open[key]
		switch {
		case e.Role == RoleLaunch && e.Kind == CallEnter:
			if r == nil {
				r = &Request{PID: e.PID, TID: e.TID, Comm: e.Comm, Start: e.At}
				t.open[key] = r
			}
			r.Launches++
		case e.Role == RoleSync && e.Kind == CallEnter && r != nil && r.SyncEnter == 0:
			r.SyncEnter = e.At
		case e.Role == RoleSync && e.Kind == CallReturn && r != nil:
			delete(t.open, key)
			r.End, r.Sync, r.Result = e.At, e.Symbol, uint32(e.Ret)
			return *r, true
		}
	}
	return Request{}, false
}

func (t *RequestTracker) forget(pid uint32) {
	for k := range t.open {
		if uint32(k>>32) == pid {
			delete(t.open, k)
		}
	}
}

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
func (t *HintTracker) Apply(ev Event) (HintTimeline, bool) {
	switch e := ev.(type) {
	case *TaskExit:
		t.forget(e.PID)
	case *Residency:
		if h := t.open[handleKey{e.PID, e.Handle}]; h != nil && h.Resident == 0 {
			h.Resident = e.At
		}
	case *Call:
		return t.call(e)
	}
	return HintTimeline{}, false
}

func (t *HintTracker) call(e *Call) (HintTimeline, bool) {
	thread := threadKey(e.PID, e.TID)
	switch {
	case e.Role == RoleHint && e.Kind == CallEnter:
		t.pending[thread] = &HintTimeline{PID: e.PID, TID: e.TID, Comm: e.Comm, Class: e.Str, ExpectedPrepUs: e.Arg1, Hint: e.At}
	case e.Role == RoleHint && e.Kind == CallReturn:
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
	case e.Role == RoleLaunch && e.Kind == CallEnter:
		if h := t.preparing[thread]; h != nil && h.FirstLaunch == 0 {
			h.FirstLaunch = e.At
		}
	case (e.Role == RoleReady || e.Role == RoleCancel) && e.Kind == CallEnter:
		key := handleKey{e.PID, e.Arg0}
		h := t.open[key]
		if h == nil {
			break
		}
		delete(t.open, key)
		t.unprepare(h)
		if e.Role == RoleCancel {
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
	case e.Role == RoleSync && e.Kind == CallReturn:
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
