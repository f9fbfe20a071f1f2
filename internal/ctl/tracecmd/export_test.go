package tracecmd

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/trace"
)

// TraceTick in FakeTrace.Events stands for one --interval tick, delivered
// after the events before it were handled.
type TraceTick struct{}

func (TraceTick) Time() uint64 { return 0 }

// FakeTrace stands in for the tracer in the trace commands' tests: a
// recorded event sequence, delivered in order, then the end of tracing.
type FakeTrace struct {
	Record  []trace.Event
	StartNs uint64
	// EndNs is when tracing stopped (a live trace's): 0, unknown, as a
	// recording replayed.
	EndNs uint64
	LostN uint64
	Skip  []trace.Skipped
	// OpenErr fails the open; LibErr the library lookup.
	OpenErr, LibErr error
	// Opts is what the command asked the tracer for.
	Opts trace.Options

	mu     sync.Mutex
	events chan trace.Event
	ticks  chan time.Time
}

func (f *FakeTrace) Start() uint64              { return f.StartNs }
func (f *FakeTrace) End() uint64                { return f.EndNs }
func (f *FakeTrace) Lost() uint64               { return f.LostN }
func (f *FakeTrace) Err() error                 { return nil }
func (f *FakeTrace) Skipped() []trace.Skipped   { return f.Skip }
func (f *FakeTrace) Close() error               { return nil }
func (f *FakeTrace) Events() <-chan trace.Event { return f.events }

// UseFakeTrace makes the trace commands read f for the rest of the test.
func UseFakeTrace(tb testing.TB, f *FakeTrace) {
	tb.Helper()
	saved := traceHooks
	tb.Cleanup(func() { traceHooks = saved })
	f.ticks = make(chan time.Time)
	traceHooks.open = func(ctx context.Context, opts trace.Options) (traceSource, error) {
		f.mu.Lock()
		f.Opts = opts
		f.mu.Unlock()
		if f.OpenErr != nil {
			return nil, f.OpenErr
		}
		// Unbuffered, so that a tick is received only after every event
		// before it was handled.
		f.events = make(chan trace.Event)
		go func() {
			defer close(f.events)
			for _, ev := range f.Record {
				if _, ok := ev.(TraceTick); ok {
					f.ticks <- time.Time{}
					continue
				}
				f.events <- ev
			}
		}()
		return f, nil
	}
	traceHooks.ticker = func(time.Duration) (<-chan time.Time, func()) { return f.ticks, func() {} }
	traceHooks.now = func() uint64 { return 0 } // the events' own times
	traceHooks.findLibrary = func(name, explicit string, pid int) (string, error) {
		if f.LibErr != nil {
			return "", f.LibErr
		}
		if explicit != "" {
			return explicit, nil
		}
		return "/usr/lib/x86_64-linux-gnu/" + name, nil
	}
}

// Options returns what the command asked the tracer for.
func (f *FakeTrace) Options() trace.Options {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.Opts
}
