package cuda

/*
#cgo noescape gp_stream_synchronize
#cgo nocallback gp_stream_synchronize
#cgo noescape gp_stream_query
#cgo nocallback gp_stream_query
#cgo noescape gp_event_record
#cgo nocallback gp_event_record
#cgo noescape gp_event_query
#cgo nocallback gp_event_query
#cgo noescape gp_event_synchronize
#cgo nocallback gp_event_synchronize
#cgo noescape gp_event_elapsed
#cgo nocallback gp_event_elapsed
#include "shim.h"
*/
import "C"

import (
	"errors"
	"time"
)

// StreamFlags are CUstream_flags.
type StreamFlags uint32

// Stream flags. Values from cuda.h.
const (
	// StreamDefault streams synchronize with the legacy default stream.
	StreamDefault StreamFlags = 0
	// StreamNonBlocking streams run concurrently with the legacy default
	// stream; what gpreempt's workers use, so that nothing implicit orders
	// their work.
	StreamNonBlocking StreamFlags = 1
)

// Stream is a CUDA stream. A nil *Stream passed to Launch or Record means the
// legacy default stream.
type Stream struct {
	ctx *Context
	h   C.CUstream
}

// NewStream creates a stream of default priority.
func (c *Context) NewStream(flags StreamFlags) (*Stream, error) {
	return c.NewStreamWithPriority(flags, 0)
}

// NewStreamWithPriority creates a stream with a scheduling priority within
// the context (see [Context.StreamPriorityRange]; lower is higher). Stream
// priority orders work between streams of one context only; it does not
// change how the GPU time-slices contexts against each other.
func (c *Context) NewStreamWithPriority(flags StreamFlags, priority int) (*Stream, error) {
	var h C.CUstream
	if err := check("cuStreamCreateWithPriority", C.gp_stream_create(c.h, &h, C.uint(flags), C.int(priority))); err != nil {
		return nil, err
	}
	return &Stream{ctx: c, h: h}, nil
}

// Destroy destroys the stream. Work already queued still completes.
func (s *Stream) Destroy() error {
	return check("cuStreamDestroy_v2", C.gp_stream_destroy(s.ctx.h, s.h))
}

// Synchronize waits until all work queued on the stream has completed. How
// the thread waits (spin, yield, sleep) follows the context's flags.
func (s *Stream) Synchronize() error {
	return check("cuStreamSynchronize", C.gp_stream_synchronize(s.ctx.h, s.h))
}

// Query reports whether all work queued on the stream has completed, without
// waiting.
func (s *Stream) Query() (bool, error) {
	return ready("cuStreamQuery", C.gp_stream_query(s.ctx.h, s.h))
}

// WaitEvent makes future work on s wait until e has completed, without
// blocking the host.
func (s *Stream) WaitEvent(e *Event) error {
	return check("cuStreamWaitEvent", C.gp_stream_wait_event(s.ctx.h, s.h, e.h))
}

// ready maps CUDA_ERROR_NOT_READY to (false, nil).
func ready(op string, r C.CUresult) (bool, error) {
	switch Result(r) {
	case ResultSuccess:
		return true, nil
	case ResultNotReady:
		return false, nil
	default:
		return false, &Error{Op: op, Code: Result(r)}
	}
}

// EventFlags are CUevent_flags.
type EventFlags uint32

// Event flags. Values from cuda.h.
const (
	EventDefault EventFlags = 0
	// EventBlockingSync makes Synchronize on this event sleep rather than
	// spin, whatever the context's flags: for waiters that must not take a
	// core from latency-critical work.
	EventBlockingSync EventFlags = 1
	// EventDisableTiming makes the event cheaper; ElapsedTime then fails.
	EventDisableTiming EventFlags = 2
)

// Event is a CUDA event.
type Event struct {
	ctx *Context
	h   C.CUevent
}

// NewEvent creates an event.
func (c *Context) NewEvent(flags EventFlags) (*Event, error) {
	var h C.CUevent
	if err := check("cuEventCreate", C.gp_event_create(c.h, &h, C.uint(flags))); err != nil {
		return nil, err
	}
	return &Event{ctx: c, h: h}, nil
}

// Destroy destroys the event.
func (e *Event) Destroy() error {
	return check("cuEventDestroy_v2", C.gp_event_destroy(e.ctx.h, e.h))
}

// Record captures the work queued on s so far (nil: the legacy default
// stream); the event completes when that work has.
func (e *Event) Record(s *Stream) error {
	var stream C.CUstream
	if s != nil {
		stream = s.h
	}
	return check("cuEventRecord", C.gp_event_record(e.ctx.h, e.h, stream))
}

// Query reports whether the event has completed, without waiting.
func (e *Event) Query() (bool, error) {
	return ready("cuEventQuery", C.gp_event_query(e.ctx.h, e.h))
}

// Synchronize waits until the event has completed.
func (e *Event) Synchronize() error {
	return check("cuEventSynchronize", C.gp_event_synchronize(e.ctx.h, e.h))
}

// ElapsedTime returns the GPU time between two completed events that were
// created without EventDisableTiming. The driver's resolution is about
// 0.5 us.
func ElapsedTime(start, end *Event) (time.Duration, error) {
	if start == nil || end == nil {
		return 0, errors.New("elapsed time: nil event")
	}
	var ms C.float
	if err := check("cuEventElapsedTime", C.gp_event_elapsed(start.ctx.h, &ms, start.h, end.h)); err != nil {
		return 0, err
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
