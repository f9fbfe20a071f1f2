// Package prepreempt makes a latency-critical (LC) request's channel group
// resident on the GPU before the request's kernels arrive, hiding the
// ~170 us switch from best-effort work (docs/PREPREEMPT.md).
//
// The recipe, measured on an H100 (docs/GPU-FACTS.md): when the request's
// CPU-side preparation is about to end, launch a one-thread spinner that
// polls a flag AND an empty kernel behind it on the same stream, so the LC
// channel group has pending work and stays resident; the app then launches
// its real work on its own stream of the same context and calls Ready,
// which releases the spinner. The spinner is launched about one switch time
// before the predicted end of preparation, not at the request's arrival, so
// the GPU is held from BE work only for the switch's overlap.
//
// An Engine works on a device's primary context: the one the CUDA runtime,
// PyTorch and most frameworks share, so the spinner and the application's
// own kernels are in the same channel groups whatever library launched
// them.
package prepreempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
	"github.com/gpreempt/gpreempt/tsg"
)

// spinWindow is how long before its launch time the launcher stops
// sleeping and spins.
const spinWindow = time.Millisecond

// ErrDone: Ready or Cancel was already called on the request.
var ErrDone = errors.New("request already finished")

// ErrClosed: the engine was closed.
var ErrClosed = errors.New("prepreempt: engine closed")

// slot is one spinner's resources (flag word, stamps, stream, event),
// reused once its work has completed.
type slot struct {
	idx int
	// hold is how long the spinner launched next may run before it exits
	// on its own: MaxHold for a hint, GateMaxHold for a gated request.
	hold time.Duration
}

// spinnerGPU is what the engine needs of the GPU: launch slot's spinner and
// pending kernel, and tell whether they have finished. cudaSpinners is the
// real one; tests drive the engine's state machine with a fake.
type spinnerGPU interface {
	launch(s *slot) error
	finished(s *slot) (bool, error)
	// stamps returns the spinner's %globaltimer start and exit (0 if none).
	stamps(s *slot) (start, end int64)
	clearStamps(s *slot)
	close() error
}

// Engine issues pre-preemption for one device's primary context. It is
// safe for concurrent use.
type Engine struct {
	ctx     *cuda.Context // retained by New, released by Close
	k       *kernels.Set
	opts    Options
	log     *slog.Logger
	clk     hostClock
	flags   flagWords
	gpu     spinnerGPU
	slots   []*slot
	free    chan *slot
	pred    *predictor
	sw      *switchTracker
	stats   statsRecorder
	clock   *gpuClock
	budget  *holdBudget // nil: no duty-cycle cap
	closed  atomic.Bool
	pending atomic.Int64
	// inflight[i] is the request whose spinner holds slot i, for the
	// janitor; a per-request timer would cost Hint a timer insertion (and
	// a netpoller wake-up) on the request's path.
	inflight []atomic.Pointer[Request]
	stop     chan struct{}
	janitor  sync.WaitGroup
	// With the poller launcher: sched[i] is the request whose spinner
	// waits in slot i for its launch time; wake unparks the poller.
	sched    []atomic.Pointer[Request]
	wake     chan struct{}
	lastHint atomic.Int64
	// benefit decides per request class whether spinners pay off.
	benefit *benefit
	// daemonOff: gpreemptd said not to pre-preempt (SetPrepreempt).
	daemonOff atomic.Bool
	// gate is the GateMode for Begin's requests (SetGate).
	gate atomic.Int32
	// gateBudget caps gated holds (nil: GateShare 1 or more); spans
	// decides GateAuto.
	gateBudget *holdBudget
	spans      *spanTracker
	// outlivedWarned: the classes warned of a request that outlived its hold.
	outlivedWarned sync.Map
}

// SetPrepreempt turns spinners on or off for every request: gpreemptd's
// SLO mode says off while BE runs long timeslices (docs/SLO.md), and a
// Reporter passes its word on. Hints keep being counted and predicted.
func (e *Engine) SetPrepreempt(on bool) {
	if e.daemonOff.Swap(!on) != !on {
		e.log.Info("pre-preemption turned by gpreemptd", "on", on)
	}
}

// New creates an engine on the primary context of the CUDA device with the
// given ordinal, retaining that context (without changing its flags) until
// Close: it loads the spinner, sets up flags and slots, calibrates the GPU
// clock against the host's, and (unless SkipLCClass) puts this process's
// channel groups in the LC class. The application launches its own work in
// the same primary context (the CUDA runtime's, PyTorch's), on its own
// streams.
func New(ctx context.Context, device int, opts Options) (_ *Engine, err error) {
	opts = opts.withDefaults()
	if err := opts.check(); err != nil {
		return nil, err
	}
	dev, err := cuda.GetDevice(device)
	if err != nil {
		return nil, fmt.Errorf("prepreempt: %w", err)
	}
	cctx, err := dev.RetainPrimary()
	if err != nil {
		return nil, fmt.Errorf("prepreempt: primary context of device %d: %w", device, err)
	}
	e := &Engine{ctx: cctx, opts: opts, log: opts.Logger, clk: newMonoClock()}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.Close())
		}
	}()
	if e.k, err = kernels.Load(cctx); err != nil {
		return nil, err
	}
	if e.flags, err = openFlags(cctx, opts.Backend, opts.Slots, e.log); err != nil {
		return nil, err
	}
	e.stats.s.Backend = e.flags.name()
	g, err := newCUDASpinners(cctx, e.k, e.flags, opts.Slots, opts.MaxHold)
	if err != nil {
		return nil, err
	}
	e.gpu = g
	e.initSlots()
	if err := e.calibrateClock(); err != nil {
		return nil, err
	}
	if !opts.SkipLCClass {
		if err := classLC(ctx, opts, e.log); err != nil {
			return nil, fmt.Errorf("put this process in the LC class: %w", err)
		}
	}
	return e, nil
}

// newEngine assembles an engine from its parts; New does the CUDA set-up,
// tests pass fakes.
func newEngine(opts Options, clk hostClock, flags flagWords, g spinnerGPU) *Engine {
	e := &Engine{opts: opts, log: opts.Logger, clk: clk, flags: flags, gpu: g}
	e.stats.s.Backend = flags.name()
	e.initSlots()
	return e
}

// initSlots makes the free list, the predictors and the janitor.
func (e *Engine) initSlots() {
	e.inflight = make([]atomic.Pointer[Request], e.opts.Slots)
	e.stop = make(chan struct{})
	e.janitor.Go(e.expireLoop)
	if e.opts.Launcher == LauncherPoller {
		e.sched = make([]atomic.Pointer[Request], e.opts.Slots)
		e.wake = make(chan struct{}, 1)
		e.janitor.Go(e.pollLoop)
	}
	e.free = make(chan *slot, e.opts.Slots)
	for i := range e.opts.Slots {
		s := &slot{idx: i}
		e.slots = append(e.slots, s)
		e.free <- s
	}
	e.pred = newPredictor(e.opts.PrepQuantile, e.opts.Window, 8)
	e.benefit = newBenefit(e.opts)
	e.sw = newSwitchTracker(e.opts.InitialSwitch, e.opts.SwitchQuantile, e.opts.Window)
	e.clock = newGPUClock(e.opts.Window)
	if e.opts.HoldDutyCycle < 1 {
		e.budget = newHoldBudget(e.opts.HoldDutyCycle, budgetWindow, e.clk.now())
	}
	e.gate.Store(int32(e.opts.Gate))
	if e.opts.GateShare < 1 {
		e.gateBudget = newHoldBudget(e.opts.GateShare, gateWindow, e.clk.now())
	}
	e.spans = newSpanTracker(e.opts.Window)
}

func openFlags(cctx *cuda.Context, backend string, slots int, log *slog.Logger) (flagWords, error) {
	gdr := func() (flagWords, error) {
		return newGDRFlags(&cgoGDR{}, slots, func(size uint64) (uint64, func() error, error) {
			p, err := cctx.MemAlloc(size)
			if err != nil {
				return 0, nil, err
			}
			return uint64(p), func() error { return cctx.MemFree(p) }, nil
		})
	}
	switch backend {
	case "gdrcopy":
		return gdr()
	case "host":
		return newHostFlags(cctx, slots)
	case "auto":
		f, err := gdr()
		if err == nil {
			return f, nil
		}
		log.Info("GDRCopy flags unavailable, using host-mapped memory", "reason", err)
		return newHostFlags(cctx, slots)
	}
	return nil, fmt.Errorf("%w: flag backend %q: want auto, gdrcopy or host", ErrInvalidOption, backend)
}

// classLC puts this process in the LC class. It asks gpreemptd first,
// root or not (a class set by hand under a running daemon would be drift
// it reverts), which sets the whole class, interleave level included,
// within what the node's policy allows; only where no daemon answers, the
// request fails otherwise, or as root where it refuses, does it set its own groups (the timeslice,
// which RM lets any process set on its own; the interleave level as
// root).
func classLC(ctx context.Context, opts Options, log *slog.Logger) error {
	ctx2, cancel := context.WithTimeout(ctx, daemonTimeout)
	err := requestClass(ctx2, opts.DaemonSocket, string(class.LC))
	cancel()
	switch {
	case err == nil:
		log.Debug("LC class set by gpreemptd")
		return nil
	case errors.Is(err, api.ErrForbidden) && geteuid() != 0:
		// The node's policy decides this process's class; one set by
		// hand would be drift the daemon reverts.
		log.Warn("gpreemptd refused the LC class; the node's policy decides this process's class", "err", err)
		return nil
	case errors.Is(err, api.ErrForbidden):
		// Root, as before there was a daemon: where the daemon classes
		// this process it reverts this as drift; where its policy leaves
		// the process alone, this holds.
		log.Warn("gpreemptd refused the LC class; setting it here as root", "err", err)
	case !errors.Is(err, api.ErrUnavailable):
		log.Warn("asking gpreemptd for the LC class failed; setting the timeslice here", "err", err)
	}
	return selfClassLC(ctx, opts.LCTimeslice, log)
}

// daemonTimeout bounds the request to gpreemptd at New.
const daemonTimeout = 2 * time.Second

// Seams for tests: who we are, the daemon, and classing ourselves.
var (
	geteuid      = os.Geteuid
	requestClass = api.RequestClass
	selfClassLC  = applyLCClass
)

// applyLCClass gives this process's channel groups the LC class, with
// timeslice ts. Setting a timeslice is NON_PRIVILEGED in RM; the
// interleave level needs root, and without it the timeslice alone is
// applied.
func applyLCClass(ctx context.Context, ts time.Duration, log *slog.Logger) error {
	settings, err := lcClass().SettingsAt(ts, class.DefaultWeight)
	if err != nil {
		return err
	}
	p, err := tsg.NewAttachSource(tsg.ProcHost{}, tsg.ScanOptions{Logger: log}).Discover(ctx, os.Getpid())
	if err != nil {
		return err
	}
	defer p.Close()
	err = p.Apply(ctx, p.Groups, settings)
	if err != nil && errors.Is(err, tsg.ErrInvalidArgument) {
		return err
	}
	if err != nil {
		log.Warn("LC interleave level not applied; timeslice only", "err", err)
		return p.Apply(ctx, p.Groups, tsg.Settings{Timeslice: settings.Timeslice})
	}
	return nil
}

// calibrateClock bounds %globaltimer's offset from the host clock from
// both sides (gpuClock) with spinners the host watches start and releases,
// and keeps the tightest bounds of a few rounds.
func (e *Engine) calibrateClock() error {
	s := <-e.free
	defer func() { e.free <- s }()
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	for range 16 {
		e.flags.set(s.idx, 0)
		e.gpu.clearStamps(s)
		if err := e.gpu.launch(s); err != nil {
			return fmt.Errorf("calibrate: %w", err)
		}
		// The start stamp is read before the host clock: the spinner
		// started before the host looked.
		var start, seen int64
		deadline := e.clk.now() + int64(calibrateStartTimeout)
		for start == 0 {
			start, _ = e.gpu.stamps(s)
			seen = e.clk.now()
			if start == 0 && seen > deadline {
				e.flags.set(s.idx, 1)
				return fmt.Errorf("calibrate: the spinner did not start within %v", calibrateStartTimeout)
			}
		}
		// The host clock is read before the release: the spinner exits
		// after it.
		released := e.clk.now()
		e.flags.set(s.idx, 1)
		for {
			ok, err := e.gpu.finished(s)
			if err != nil {
				return fmt.Errorf("calibrate: %w", err)
			}
			if ok {
				break
			}
		}
		_, end := e.gpu.stamps(s)
		if end < start || time.Duration(end-start) >= e.opts.MaxHold {
			continue // exited on its own (the host was descheduled): no upper bound
		}
		lo, hi = max(lo, start-seen), min(hi, end-released)
	}
	if lo == math.MinInt64 || hi == math.MaxInt64 || lo > hi {
		return fmt.Errorf("calibrate: no consistent bounds on the GPU clock (%d..%d ns)", lo, hi)
	}
	e.clock.calibrated(lo, hi)
	e.log.Debug("calibrated GPU clock", "offset_ns", e.clock.get(), "error_ns", (hi-lo)/2)
	return nil
}

// calibrateStartTimeout bounds how long calibration waits for a spinner to
// be scheduled (behind a BE load it takes a switch, ~170 us).
const calibrateStartTimeout = time.Second

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	s := e.stats.snapshot()
	s.SwitchEstimateNs = int64(e.sw.estimate())
	s.Prepreempt = !e.daemonOff.Load()
	s.Gate = e.Gate().String()
	s.Classes = e.benefit.modes()
	return s
}

// closeGrace is how long Close waits beyond MaxHold for the spinners to
// finish.
const closeGrace = 100 * time.Millisecond

// Close releases outstanding spinners, waits for them (at most MaxHold and
// a little more), frees the engine's resources and releases the primary
// context. Requests must not be used afterwards. When a spinner is still
// outstanding at the deadline (a GPU that stopped making progress), Close
// frees nothing — a late Ready, or the engine's own completion check,
// would touch freed memory — and says so in its error.
func (e *Engine) Close() error {
	if e.closed.Swap(true) {
		return nil
	}
	var errs []error
	// Stop the janitor and the poller first, so nothing launches behind
	// the two sweeps below; goroutine launchers wake up on stop too.
	if e.stop != nil {
		close(e.stop)
		e.janitor.Wait()
	}
	// Scheduled spinners are not launched any more: their requests run
	// without one.
	for i := range e.sched {
		if r := e.sched[i].Swap(nil); r != nil && r.state.CompareAndSwap(statePending, stateNoSpinner) {
			e.refund(r)
			e.free <- r.slot
		}
	}
	// Release spinners whose request never finished, so their slots come
	// back.
	for i := range e.inflight {
		if r := e.inflight[i].Load(); r != nil {
			r.expire()
		}
	}
	if e.free != nil {
		deadline := e.clk.now() + int64(e.opts.MaxHold+closeGrace)
		for len(e.free) < len(e.slots) || e.pending.Load() > 0 {
			if e.clk.now() > deadline {
				return fmt.Errorf("prepreempt: close: %d of %d spinners and %d scheduled launches still outstanding after %v; their flags, streams and events are left allocated",
					len(e.slots)-len(e.free), len(e.slots), e.pending.Load(), e.opts.MaxHold+closeGrace)
			}
			for _, s := range e.slots {
				e.flags.set(s.idx, 1)
			}
			e.clk.sleep(100 * time.Microsecond)
		}
	}
	if e.gpu != nil {
		errs = append(errs, e.gpu.close())
	}
	if e.flags != nil {
		errs = append(errs, e.flags.close())
	}
	if e.k != nil {
		errs = append(errs, e.k.Unload())
	}
	if e.ctx != nil {
		errs = append(errs, e.ctx.Release())
	}
	return errors.Join(errs...)
}
