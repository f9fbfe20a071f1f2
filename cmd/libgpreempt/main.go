// Command libgpreempt is the pre-preemption engine as a C shared library,
// for Python (ctypes), C and C++ applications. Build it with
//
//	go build -buildmode=c-shared -o libgpreempt.so ./cmd/libgpreempt
//
// The API is declared in include/gpreempt.h. One engine per process, on the
// primary context of one device: the context PyTorch and the CUDA runtime
// use, so the spinner and the application's own kernels share one set of
// channel groups.
package main

/*
#include <stdint.h>
#include <stddef.h>
#include <string.h>

// One buffer per thread: gpreempt.h promises that every function is
// thread-safe, and a caller reads the message of its own thread's failure.
// Go runs an exported function on the calling C thread, and the C calls
// it makes from there stay on it, so setting and reading meet.
static __thread char gp_last_error[512];
static void gp_set_error(const char *s) {
	strncpy(gp_last_error, s, sizeof gp_last_error - 1);
	gp_last_error[sizeof gp_last_error - 1] = 0;
}
static const char *gp_get_error(void) { return gp_last_error; }
#include <stdlib.h>
static void free_cstring(char *s) { free(s); }
*/
import "C"

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"github.com/gpreempt/gpreempt/internal/version"
	"github.com/gpreempt/gpreempt/prepreempt"
)

var (
	mu       sync.Mutex
	engine   *prepreempt.Engine
	requests = map[uint64]*prepreempt.Request{}
	nextID   uint64
)

func fail(err error) C.int {
	msg := C.CString(err.Error())
	C.gp_set_error(msg)
	C.free_cstring(msg)
	return -1
}

func main() {}

//export gpreempt_init
func gpreempt_init(device C.int, maxHoldUs C.uint64_t, flags C.uint32_t) C.int {
	mu.Lock()
	defer mu.Unlock()
	if engine != nil {
		return fail(errors.New("gpreempt_init: already initialised"))
	}
	if unknown := uint32(flags) &^ (flagSkipLCClass | flagLauncherPoller | flagGateOn | flagGateAuto); unknown != 0 {
		return fail(fmt.Errorf("gpreempt_init: unknown flags %#x (known: GPREEMPT_SKIP_LC_CLASS, GPREEMPT_LAUNCHER_POLLER, GPREEMPT_GATE_ON, GPREEMPT_GATE_AUTO)", unknown))
	}
	if uint32(flags)&flagGateOn != 0 && uint32(flags)&flagGateAuto != 0 {
		return fail(errors.New("gpreempt_init: GPREEMPT_GATE_ON and GPREEMPT_GATE_AUTO together"))
	}
	// Checked before the multiplication into a Duration, which a large
	// value would overflow into a small or negative one.
	if uint64(maxHoldUs) > maxHoldLimitUs {
		return fail(fmt.Errorf("gpreempt_init: max_hold_us %d exceeds %d (%v, the hold budget)", uint64(maxHoldUs), maxHoldLimitUs, time.Duration(maxHoldLimitUs)*time.Microsecond))
	}
	opts := prepreempt.Options{MaxHold: time.Duration(maxHoldUs) * time.Microsecond}
	if flags&C.uint32_t(flagSkipLCClass) != 0 {
		opts.SkipLCClass = true
	}
	if flags&C.uint32_t(flagLauncherPoller) != 0 {
		opts.Launcher = prepreempt.LauncherPoller
	}
	switch {
	case flags&C.uint32_t(flagGateOn) != 0:
		opts.Gate = prepreempt.GateOn
	case flags&C.uint32_t(flagGateAuto) != 0:
		opts.Gate = prepreempt.GateAuto
	}
	e, err := prepreempt.New(context.Background(), int(device), opts)
	if err != nil {
		return fail(fmt.Errorf("gpreempt_init: %w", err))
	}
	engine = e
	return 0
}

// The bounds of gpreempt.h, in its units.
const (
	// The engine's default hold budget bounds max_hold_us (a spinner
	// reserves it from the budget): DefaultHoldDutyCycle of 1 s.
	maxHoldLimitUs    = uint64(prepreempt.DefaultHoldDutyCycle * float64(time.Second/time.Microsecond))
	maxExpectedPrepUs = uint64(prepreempt.MaxExpectedPrep / time.Microsecond)
)

// The flags of gpreempt.h.
const (
	flagSkipLCClass    = 1 // GPREEMPT_SKIP_LC_CLASS
	flagLauncherPoller = 2 // GPREEMPT_LAUNCHER_POLLER
	flagGateOn         = 4 // GPREEMPT_GATE_ON
	flagGateAuto       = 8 // GPREEMPT_GATE_AUTO
)

// gpreempt_hint, gpreempt_ready and gpreempt_cancel are defined in
// entry.c, which calls these: the C entry points start with a 5-byte NOP,
// on which an x86-64 uprobe (gpreemptctl trace hints) costs a call instead
// of a trap (~0.3 us instead of ~28 us, docs/TRACING.md); cgo's exports
// start with a push.

//export gpreempt_go_hint
func gpreempt_go_hint(class *C.char, expectedPrepUs C.uint64_t) C.uint64_t {
	if uint64(expectedPrepUs) > maxExpectedPrepUs {
		fail(fmt.Errorf("gpreempt_hint: expected_prep_us %d exceeds %d (%v)", uint64(expectedPrepUs), maxExpectedPrepUs, prepreempt.MaxExpectedPrep))
		return 0
	}
	e, err := current("gpreempt_hint")
	if err != nil {
		fail(err)
		return 0
	}
	r, err := e.Hint(context.Background(), C.GoString(class), time.Duration(expectedPrepUs)*time.Microsecond)
	if err != nil {
		fail(err)
		return 0
	}
	return C.uint64_t(keep(r))
}

//export gpreempt_go_begin
func gpreempt_go_begin(class *C.char) C.uint64_t {
	e, err := current("gpreempt_begin")
	if err != nil {
		fail(err)
		return 0
	}
	r, err := e.Begin(context.Background(), C.GoString(class))
	if err != nil {
		fail(err)
		return 0
	}
	return C.uint64_t(keep(r))
}

//export gpreempt_go_end
func gpreempt_go_end(h C.uint64_t) C.int {
	r, err := take(h)
	if err == nil {
		err = r.End()
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

//export gpreempt_set_gate
func gpreempt_set_gate(mode C.int) C.int {
	e, err := current("gpreempt_set_gate")
	if err != nil {
		return fail(err)
	}
	if err := e.SetGate(prepreempt.GateMode(mode)); err != nil {
		return fail(fmt.Errorf("gpreempt_set_gate: %w", err))
	}
	return 0
}

// keep registers a request and returns its handle.
func keep(r *prepreempt.Request) uint64 {
	mu.Lock()
	defer mu.Unlock()
	nextID++
	requests[nextID] = r
	return nextID
}

// current is the engine gpreempt_init made, or an error naming fn.
func current(fn string) (*prepreempt.Engine, error) {
	mu.Lock()
	defer mu.Unlock()
	if engine == nil {
		return nil, fmt.Errorf("%s: not initialised", fn)
	}
	return engine, nil
}

func take(h C.uint64_t) (*prepreempt.Request, error) {
	mu.Lock()
	defer mu.Unlock()
	r := requests[uint64(h)]
	if r == nil {
		return nil, errors.New("unknown request handle")
	}
	delete(requests, uint64(h))
	return r, nil
}

//export gpreempt_go_ready
func gpreempt_go_ready(h C.uint64_t) C.int {
	r, err := take(h)
	if err == nil {
		err = r.Ready()
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

//export gpreempt_go_cancel
func gpreempt_go_cancel(h C.uint64_t) C.int {
	r, err := take(h)
	if err == nil {
		err = r.Cancel()
	}
	if err != nil {
		return fail(err)
	}
	return 0
}

//export gpreempt_stats_json
func gpreempt_stats_json(buf *C.char, n C.size_t) C.int {
	e, err := current("gpreempt_stats_json")
	if err != nil {
		return fail(err)
	}
	st := e.Stats()
	// spinning: what a push to gpreemptd says of the engine (Stats.Spinning).
	return copyJSON(struct {
		prepreempt.Stats
		Spinning bool `json:"spinning"`
	}{st, st.Spinning()}, buf, n)
}

// copyJSON writes v as JSON into buf (NUL-terminated) if it fits in n
// bytes, and returns its length.
func copyJSON(v any, buf *C.char, n C.size_t) C.int {
	b, err := json.Marshal(v)
	if err != nil {
		return fail(err)
	}
	if buf != nil && uint64(n) > uint64(len(b)) {
		dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), len(b)+1)
		copy(dst, b)
		dst[len(b)] = 0
	}
	return C.int(len(b))
}

//export gpreempt_window_json
func gpreempt_window_json(buf *C.char, n C.size_t) C.int {
	e, err := current("gpreempt_window_json")
	if err != nil {
		return fail(err)
	}
	if buf == nil || n < windowJSONMax {
		return fail(fmt.Errorf("gpreempt_window_json: a buffer of %d bytes: want at least %d", n, windowJSONMax))
	}
	return copyJSON(e.TakeWindow(), buf, n)
}

// windowJSONMax is GPREEMPT_WINDOW_JSON_MAX: a window's JSON is shorter
// (three counters, a bool and six quantiles).
const windowJSONMax = 512

//export gpreempt_set_prepreempt
func gpreempt_set_prepreempt(on C.int) C.int {
	e, err := current("gpreempt_set_prepreempt")
	if err != nil {
		return fail(err)
	}
	e.SetPrepreempt(on != 0)
	return 0
}

// versionString is made once and never freed: gpreempt.h promises a string
// valid for the life of the process.
var versionString = sync.OnceValue(func() *C.char { return C.CString(version.Get().String()) })

//export gpreempt_version
func gpreempt_version() *C.char { return versionString() }

//export gpreempt_last_error
func gpreempt_last_error() *C.char { return C.gp_get_error() }

//export gpreempt_shutdown
func gpreempt_shutdown() C.int {
	mu.Lock()
	defer mu.Unlock()
	if engine == nil {
		return 0
	}
	err := engine.Close()
	engine = nil
	clear(requests)
	if err != nil {
		return fail(err)
	}
	return 0
}
