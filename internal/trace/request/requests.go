package request

import (
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// threadKey is a thread's key in the trackers' maps.
func threadKey(pid, tid uint32) uint64 { return uint64(pid)<<32 | uint64(tid) }

// Request is one request of a process (Delimiter: a busy period, or a
// step of a process never quiet; ThreadTracker: one thread's launches
// and the synchronize after them). Its latency, first launch to the last
// synchronize's return, is what an LC client sees of the GPU.
type Request struct {
	PID  uint32 `json:"pid"`
	TID  uint32 `json:"tid"` // the thread of the synchronize that ended it
	Comm string `json:"comm"`
	Kind Kind   `json:"kind"`
	// Start is the first launch's entry (a step: the thread's previous
	// synchronize return); First the function it was (a Delimiter's request).
	Start    uint64 `json:"start_ns"`
	First    string `json:"first,omitempty"`
	Launches int    `json:"launches"`
	// Requests is how many requests a busy period held, where requests
	// ran back to back with no quiet gap between them and its launches
	// are that many of the process's requests (Delimiter); 0: one.
	Requests int `json:"requests,omitempty"`
	// Cut is its place among the requests its busy period was cut into by
	// the process's program as they ran (one exact program known: each from
	// its first call to the last synchronize return before the next's);
	// 0: the busy period was not cut.
	Cut int `json:"cut,omitempty"`
	// SyncEnter is when the last synchronize call began (0 if the tracer
	// attached during it); End when it returned.
	SyncEnter uint64 `json:"sync_enter_ns"`
	End       uint64 `json:"end_ns"`
	Sync      string `json:"sync"`
	// Result is the synchronize call's CUresult (0 = CUDA_SUCCESS).
	Result uint32 `json:"result"`
	// CPUGap is the median CPU work between its launches (a Delimiter's; 0: fewer than
	// MinCPUGaps): its thread's CPU speed while it ran, where its launches are CPU-bound.
	CPUGap time.Duration `json:"cpu_gap_ns,omitempty"`
}

// Latency is first launch to the synchronization's return.
func (r Request) Latency() time.Duration { return span(r.Start, r.End) }

func span(from, to uint64) time.Duration {
	if from == 0 || to < from {
		return 0
	}
	return time.Duration(to - from)
}

// ThreadTracker turns launch and synchronize calls into per-thread
// pieces: the launches a thread makes until one of its synchronize calls
// returns. That is a call-level view (what one thread waited for), not an
// LC request: an eager decode synchronizes once a token, and a request is
// what Delimiter delimits. Not safe for concurrent use.
type ThreadTracker struct {
	open map[uint64]*Request
}

// NewThreadTracker returns a tracker with no open request.
func NewThreadTracker() *ThreadTracker {
	return &ThreadTracker{open: map[uint64]*Request{}}
}

// Apply folds one event in and returns the request it completed, if any.
func (t *ThreadTracker) Apply(ev trace.Event) (Request, bool) {
	switch e := ev.(type) {
	case *trace.TaskExit:
		t.forget(e.PID)
	case *trace.Call:
		key := threadKey(e.PID, e.TID)
		r := t.open[key]
		switch {
		case e.Role == trace.RoleLaunch && e.Kind == trace.CallEnter:
			if r == nil {
				r = &Request{PID: e.PID, TID: e.TID, Comm: e.Comm, Start: e.At}
				t.open[key] = r
			}
			r.Launches++
		case e.Role == trace.RoleSync && e.Kind == trace.CallEnter && r != nil && r.SyncEnter == 0:
			r.SyncEnter = e.At
		case e.Role == trace.RoleSync && e.Kind == trace.CallReturn && r != nil:
			delete(t.open, key)
			r.End, r.Sync, r.Result = e.At, e.Symbol, uint32(e.Ret)
			return *r, true
		}
	}
	return Request{}, false
}

func (t *ThreadTracker) forget(pid uint32) {
	for k := range t.open {
		if uint32(k>>32) == pid {
			delete(t.open, k)
		}
	}
}
