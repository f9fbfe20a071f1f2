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
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/daemon/client"
	"github.com/gpreempt/gpreempt/internal/kernels"
	"github.com/gpreempt/gpreempt/tsg"
)

// Bounds on what callers may ask for. A spinner holds the GPU from every
// other process while it runs, and Close waits up to MaxHold: a minute of
// either is a bug in the caller, not a setting.
const (
	// MaxHoldLimit bounds Options.MaxHold.
	MaxHoldLimit = time.Second
	// DefaultHoldDutyCycle is Options.HoldDutyCycle's default: spinners
	// hold at most a quarter of each second, so MaxHold is at most 250 ms
	// with it.
	DefaultHoldDutyCycle = 0.25
	// MaxExpectedPrep bounds Hint's expectedPrep.
	MaxExpectedPrep = 10 * time.Second
)

// Options tune an Engine. The zero value gives the defaults.
type Options struct {
	// MaxHold bounds how long a spinner may hold the GPU: the kernel exits
	// on its own after it (by %globaltimer), and the engine releases it
	// then if Ready never came. Default 5 ms, at most MaxHoldLimit and at
	// most the hold budget (HoldDutyCycle x 1 s, unless HoldDutyCycle is
	// 1): a spinner reserves MaxHold from it.
	MaxHold time.Duration
	// HoldDutyCycle caps the fraction of the GPU's time spinners may hold:
	// about that fraction of each second (a budget of HoldDutyCycle x 1 s,
	// refilled continuously; each spinner reserves MaxHold until it is
	// released). Hints beyond it run without a spinner and are counted in
	// Stats.Throttled, so back-to-back hints cannot keep best-effort work
	// off the GPU. Default 0.25; 1 or more: no cap.
	HoldDutyCycle float64
	// InitialSwitch is the launch-to-resident time assumed until the
	// spinner's own stamps have measured it. Default 200 us.
	InitialSwitch time.Duration
	// Margin is launched ahead of the predicted moment on top of the
	// switch time. Default 20 us.
	Margin time.Duration
	// PrepQuantile is the quantile of a class's recent preparation times
	// used as its prediction (low: see predictor). Default 0.02.
	PrepQuantile float64
	// SwitchQuantile is the quantile of recent switch-in times used as the
	// launch lead (high). Default 0.9.
	SwitchQuantile float64
	// Window is how many recent samples predictions look at. Default 128.
	Window int
	// Slots bounds concurrent spinners. Default 16.
	Slots int
	// Backend picks the flag backend: "auto" (GDRCopy if available, else
	// host-mapped), "gdrcopy" or "host". Default auto.
	Backend string
	// SkipLCClass leaves the process's channel groups alone; by default the
	// engine puts them in the LC class (class.Defaults()[class.LC]: a long
	// timeslice and HIGH interleave).
	SkipLCClass bool
	// LCTimeslice overrides the LC class's timeslice. Default: the class's
	// (class.DefaultLCTimeslice, 5 s).
	LCTimeslice time.Duration
	// DaemonSocket is gpreemptd's socket, which New asks for the LC class
	// ("": $GPREEMPTD_SOCKET, else /run/gpreempt/gpreemptd.sock).
	DaemonSocket string
	// Launcher picks how scheduled launches happen. Default
	// LauncherGoroutine.
	Launcher Launcher
	// PollerIdle is how long the poller keeps polling after the last hint.
	// Default 20 ms.
	PollerIdle time.Duration
	// NoBenefitLead: a hold whose Ready came more than this many switch
	// estimates after the spinner's launch did not benefit (the request
	// is launch-bound: the spinner held the GPU from BE while the app was
	// still launching). Default 4; negative: every request gets a spinner.
	NoBenefitLead float64
	// NoBenefitShare is the fraction of a class's recent holds (the last
	// 16, at least 8) that, long or expired at MaxHold, stops its
	// spinners. Default 0.5.
	NoBenefitShare float64
	// ReprobeEvery: a class without spinners gets one again after this
	// many hints, to see whether it benefits now; each probe that does not
	// doubles the interval, up to 8x. Default 32.
	ReprobeEvery int
	// Gate is the request gate's mode for Begin's requests (GateOff by
	// default; gpreemptd's word, when a Reporter passes one on, replaces
	// it: SetGate).
	Gate GateMode
	// GateMaxHold bounds how long a gated request may hold the GPU: the
	// spinner exits on its own after it. Default 2 s, at most
	// GateMaxHoldLimit and at most the gate's budget (GateShare x 20 s).
	GateMaxHold time.Duration
	// GateShare caps the fraction of the GPU's time gated requests may
	// hold BE work off it, over a 20 s window (a token bucket charged
	// GateMaxHold at Begin, the unused part refunded at End). Begins past
	// it run ungated and are counted in Stats.GateThrottled. Default 0.5;
	// 1 or more: no cap.
	GateShare float64
	Logger    *slog.Logger
}

// lcClass is the class the engine puts its process in.
func lcClass() class.Class { return class.Defaults()[class.LC] }

func (o Options) withDefaults() Options {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.MaxHold, 5*time.Millisecond)
	def(&o.InitialSwitch, class.SwitchTime)
	def(&o.Margin, 20*time.Microsecond)
	def(&o.LCTimeslice, lcClass().Timeslice)
	def(&o.PollerIdle, 20*time.Millisecond)
	if o.NoBenefitLead == 0 {
		o.NoBenefitLead = 4
	}
	if o.NoBenefitShare <= 0 || o.NoBenefitShare > 1 {
		o.NoBenefitShare = 0.5
	}
	if o.ReprobeEvery <= 0 {
		o.ReprobeEvery = 32
	}
	if o.HoldDutyCycle <= 0 {
		o.HoldDutyCycle = DefaultHoldDutyCycle
	}
	if o.Launcher == "" {
		o.Launcher = LauncherGoroutine
	}
	if o.PrepQuantile <= 0 || o.PrepQuantile >= 1 {
		o.PrepQuantile = 0.02
	}
	if o.SwitchQuantile <= 0 || o.SwitchQuantile >= 1 {
		o.SwitchQuantile = 0.9
	}
	if o.Window <= 0 {
		o.Window = 128
	}
	if o.Slots <= 0 {
		o.Slots = 16
	}
	if o.Backend == "" {
		o.Backend = "auto"
	}
	def(&o.GateMaxHold, DefaultGateMaxHold)
	if o.GateShare <= 0 {
		o.GateShare = DefaultGateShare
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// check validates options after withDefaults.
func (o Options) check() error {
	if err := o.Launcher.check(); err != nil {
		return err
	}
	if o.MaxHold > MaxHoldLimit {
		return fmt.Errorf("%w: MaxHold %v exceeds %v", ErrInvalidOption, o.MaxHold, MaxHoldLimit)
	}
	if o.HoldDutyCycle < 1 && float64(o.MaxHold) > o.HoldDutyCycle*float64(budgetWindow) {
		return fmt.Errorf("%w: MaxHold %v exceeds the hold budget (HoldDutyCycle %v of %v), so no spinner could ever be launched",
			ErrInvalidOption, o.MaxHold, o.HoldDutyCycle, budgetWindow)
	}
	if o.Gate < GateOff || o.Gate > GateAuto {
		return fmt.Errorf("%w: Gate %d: want GateOff, GateOn or GateAuto", ErrInvalidOption, o.Gate)
	}
	if o.GateMaxHold > GateMaxHoldLimit {
		return fmt.Errorf("%w: GateMaxHold %v exceeds %v", ErrInvalidOption, o.GateMaxHold, GateMaxHoldLimit)
	}
	if o.GateShare < 1 && float64(o.GateMaxHold) > o.GateShare*float64(gateWindow) {
		return fmt.Errorf("%w: GateMaxHold %v exceeds the gate's budget (GateShare %v of %v), so no request could ever be gated",
			ErrInvalidOption, o.GateMaxHold, o.GateShare, gateWindow)
	}
	if err := tsg.CheckTimeslice(o.LCTimeslice); err != nil {
		return fmt.Errorf("%w: LCTimeslice: %w", ErrInvalidOption, err)
	}
	return nil
}

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
// within what the node's policy allows; only where no daemon answers, or
// as root where it refuses, does it set its own groups (the timeslice,
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
	case errors.Is(err, client.ErrForbidden) && geteuid() != 0:
		// The node's policy decides this process's class; one set by
		// hand would be drift the daemon reverts.
		log.Warn("gpreemptd refused the LC class; the node's policy decides this process's class", "err", err)
		return nil
	case errors.Is(err, client.ErrForbidden):
		// Root, as before there was a daemon: where the daemon classes
		// this process it reverts this as drift; where its policy leaves
		// the process alone, this holds.
		log.Warn("gpreemptd refused the LC class; setting it here as root", "err", err)
	case !errors.Is(err, client.ErrUnavailable):
		log.Warn("asking gpreemptd for the LC class failed; setting the timeslice here", "err", err)
	}
	return selfClassLC(ctx, opts.LCTimeslice, log)
}

// daemonTimeout bounds the request to gpreemptd at New.
const daemonTimeout = 2 * time.Second

// Seams for tests: who we are, the daemon, and classing ourselves.
var (
	geteuid      = os.Geteuid
	requestClass = client.RequestClass
	selfClassLC  = applyLCClass
)

// applyLCClass gives this process's channel groups the LC class, with
// timeslice ts. Setting a timeslice is NON_PRIVILEGED in RM; the
// interleave level needs root, and without it the timeslice alone is
// applied.
func applyLCClass(ctx context.Context, ts time.Duration, log *slog.Logger) error {
	lc := lcClass()
	lc.Timeslice = ts
	settings, err := lc.Settings(class.DefaultWeight)
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

// Request states.
const (
	statePending int32 = iota
	stateLaunching
	stateLaunched
	stateNoSpinner // Ready came first (late), or no slot
	stateReleased
	stateExpired
	stateCancelled
	stateFailed
)

// Request is one hinted LC request.
type Request struct {
	e     *Engine
	class string
	start int64 // host clock at Hint
	slot  *slot
	state atomic.Int32
	err   error
	// done is closed when the request ends before its scheduled launch,
	// to wake the goroutine waiting to launch it (goroutine launcher only).
	done    chan struct{}
	launchT int64 // host clock at the spinner launch
	// releaseT is when the host released the spinner's flag (0: not by
	// the host), for the GPU clock's online correction.
	releaseT int64
	// planned is when the spinner was meant to be launched (host clock);
	// the launch's lateness against it is a statistic.
	planned int64
	// dropped: no slot was free, or the hold budget was spent; the request
	// runs without a spinner.
	dropped bool
	// finished: Ready or Cancel has run, for requests whose state cannot
	// tell (dropped, expired).
	finished atomic.Bool
	// probe: the request's class does not benefit from spinners, and
	// this one has a spinner to see whether it does again.
	probe bool
	// begun: announced by Begin; gated: it holds the GPU until End.
	begun, gated bool
}

// holdLimit is how long the request's spinner may hold the GPU.
func (r *Request) holdLimit() time.Duration {
	if r.gated {
		return r.e.opts.GateMaxHold
	}
	return r.e.opts.MaxHold
}

// Hint announces that an LC request of class has started preparing its
// input and expects to be ready in about expectedPrep (used until the
// class has history; at most MaxExpectedPrep). It returns at once; the
// spinner is launched later, from another goroutine, unless the predicted
// moment has already come.
func (e *Engine) Hint(ctx context.Context, class string, expectedPrep time.Duration) (*Request, error) {
	if e.closed.Load() {
		return nil, ErrClosed
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if expectedPrep < 0 || expectedPrep > MaxExpectedPrep {
		return nil, fmt.Errorf("%w: expected preparation %v: want 0 to %v", ErrInvalidOption, expectedPrep, MaxExpectedPrep)
	}
	now := e.clk.now()
	r := &Request{e: e, class: class, start: now}
	e.stats.add(func(s *Stats) { s.Hints++ })
	if e.daemonOff.Load() {
		r.dropped = true
		e.stats.add(func(s *Stats) { s.SkippedByDaemon++ })
		return r, nil
	}
	spinner, probe := e.benefit.admit(class)
	if !spinner {
		r.dropped = true
		e.stats.add(func(s *Stats) { s.SkippedNoBenefit++ })
		return r, nil
	}
	r.probe = probe
	if e.budget != nil && !e.budget.take(now, e.opts.MaxHold) {
		r.dropped = true
		r.endProbe()
		e.stats.add(func(s *Stats) { s.Throttled++ })
		return r, nil
	}
	select {
	case r.slot = <-e.free:
	default:
		e.refund(r)
		r.dropped = true
		r.endProbe()
		e.stats.add(func(s *Stats) { s.Dropped++ })
		return r, nil
	}
	r.slot.hold = e.opts.MaxHold
	pred, _ := e.pred.predict(class, expectedPrep)
	at := now + int64(pred-e.sw.estimate()-e.opts.Margin)
	r.planned = at
	if now >= at {
		r.launch()
		return r, nil
	}
	if e.sched != nil {
		e.sched[r.slot.idx].Store(r)
		e.lastHint.Store(now)
		select {
		case e.wake <- struct{}{}:
		default:
		}
		return r, nil
	}
	r.done = make(chan struct{})
	e.pending.Add(1)
	go func() {
		defer e.pending.Add(-1)
		// Sleep only the part beyond a millisecond, then spin: Go's
		// timers oversleep by up to hundreds of microseconds on a VM
		// (measured on the H100 machine: most spinners launched after
		// Ready with a 150 us spin margin). The sleep ends early when the
		// request ends or the engine closes, so no goroutine outlives its
		// request.
		if d := time.Duration(at-e.clk.now()) - spinWindow; d > 0 {
			c, stop := e.clk.timer(d)
			select {
			case <-c:
			case <-r.done:
				stop()
				return
			case <-e.stop:
				stop()
			}
		}
		for e.clk.now() < at && r.state.Load() == statePending && !e.closed.Load() {
		}
		r.launch()
	}()
	return r, nil
}

// endProbe ends the request's probe, if it is one, without a verdict.
func (r *Request) endProbe() {
	if r.probe {
		r.e.benefit.inconclusive(r.class)
	}
}

// refund gives the request's unused hold reservation back to the budget.
func (e *Engine) refund(r *Request) {
	b := e.budget
	if r.gated {
		b = e.gateBudget
	}
	if b == nil {
		return
	}
	now := e.clk.now()
	held := time.Duration(0)
	if r.launchT != 0 {
		held = time.Duration(now - r.launchT)
	}
	b.refund(now, r.holdLimit()-held)
}

func (r *Request) launch() {
	e, s := r.e, r.slot
	if e.closed.Load() {
		// Close has swept the slots; a late launcher must not start a
		// spinner nobody will release.
		if r.state.CompareAndSwap(statePending, stateNoSpinner) {
			e.refund(r)
			e.free <- s
		}
		return
	}
	if !r.state.CompareAndSwap(statePending, stateLaunching) {
		return
	}
	e.flags.set(s.idx, 0)
	e.gpu.clearStamps(s)
	r.launchT = e.clk.now()
	e.stats.launchLag(time.Duration(max(r.launchT-r.planned, 0)))
	if err := e.gpu.launch(s); err != nil {
		r.err = err
		r.endProbe()
		// Whatever was queued must not spin: release it, then recycle.
		e.flags.set(s.idx, 1)
		e.refund(r)
		r.state.Store(stateFailed)
		go e.reap(r)
		return
	}
	e.inflight[s.idx].Store(r)
	r.state.Store(stateLaunched)
	// Close may have swept inflight between the check above and the
	// store: then nobody else would release this spinner, Close would wait
	// out its deadline, and a late Ready would write freed memory. Both
	// sides publish before they look (the store above, Close's closed
	// flag), so at least one of them sees the other and expires it.
	if e.closed.Load() {
		r.expire()
	}
}

// pollLoop launches the scheduled spinners on time from one goroutine
// locked to its thread: it polls while hints keep coming and parks on wake
// after PollerIdle without one.
func (e *Engine) pollLoop() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for {
		select {
		case <-e.stop:
			return
		case <-e.wake:
		}
		for {
			select {
			case <-e.stop:
				return
			default:
			}
			now := e.clk.now()
			waiting := false
			for i := range e.sched {
				r := e.sched[i].Load()
				if r == nil {
					continue
				}
				if r.state.Load() != statePending {
					e.sched[i].CompareAndSwap(r, nil)
					continue
				}
				waiting = true
				if now >= r.planned {
					e.sched[i].CompareAndSwap(r, nil)
					r.launch()
				}
			}
			if !waiting && now-e.lastHint.Load() > int64(e.opts.PollerIdle) {
				break
			}
		}
	}
}

// expireLoop releases, every quarter of MaxHold, the spinners whose
// request has not called Ready within MaxHold. (The spinner also exits on
// its own at MaxHold; this returns its slot and counts it.)
func (e *Engine) expireLoop() {
	period := max(e.opts.MaxHold/4, 100*time.Microsecond)
	for {
		c, stop := e.clk.timer(period)
		select {
		case <-e.stop:
			stop()
			return
		case <-c:
		}
		now := e.clk.now()
		for i := range e.inflight {
			r := e.inflight[i].Load()
			if r != nil && r.state.Load() == stateLaunched && now-r.launchT >= int64(r.holdLimit()) {
				r.expire()
			}
		}
	}
}

// expire releases a spinner whose request never called Ready.
func (r *Request) expire() {
	if r.state.CompareAndSwap(stateLaunched, stateExpired) {
		r.releaseT = r.e.clk.now()
		r.e.flags.set(r.slot.idx, 1)
		r.e.refund(r)
		if r.gated {
			r.e.stats.add(func(s *Stats) { s.GateExpired++ })
			go r.e.reap(r)
			return
		}
		r.e.stats.add(func(s *Stats) { s.Expired++ })
		if !r.e.closed.Load() {
			r.e.benefit.record(r.class, 0, 0, true, r.probe)
		}
		go r.e.reap(r)
	}
}

// Ready tells the engine that the request's LC work has been enqueued: the
// spinner is released at once. If the spinner was not launched yet (the
// preparation ended earlier than predicted), none is launched. It returns
// the CUDA error of a failed spinner launch, if any.
//
// A gated request (Begin) keeps its hold past Ready, until End.
func (r *Request) Ready() error {
	if r.gated {
		return nil
	}
	return r.finish(false)
}

// Cancel drops the request: its spinner, if any, is released.
func (r *Request) Cancel() error { return r.finish(true) }

func (r *Request) finish(cancel bool) error {
	e := r.e
	if r.dropped {
		if r.finished.Swap(true) {
			return ErrDone
		}
		if !cancel {
			e.pred.observe(r.class, time.Duration(e.clk.now()-r.start))
		}
		return nil
	}
	for {
		switch st := r.state.Load(); st {
		case statePending:
			if !r.state.CompareAndSwap(statePending, stateNoSpinner) {
				continue
			}
			if r.done != nil {
				close(r.done)
			}
			r.endProbe()
			e.refund(r)
			e.free <- r.slot
			e.stats.add(func(s *Stats) {
				if cancel {
					s.Cancelled++
				} else {
					s.Late++
				}
			})
		case stateLaunching:
			continue // a launch call is in flight; it takes microseconds
		case stateLaunched:
			next := stateReleased
			if cancel {
				next = stateCancelled
			}
			if !r.state.CompareAndSwap(stateLaunched, next) {
				continue
			}
			r.releaseT = e.clk.now()
			e.flags.set(r.slot.idx, 1)
			e.refund(r)
			if r.gated {
				if cancel {
					e.stats.add(func(s *Stats) { s.Cancelled++ })
				}
				go e.reap(r)
				return nil
			}
			if !cancel {
				lead := time.Duration(r.releaseT - r.launchT)
				e.stats.readyLead(lead)
				e.benefit.record(r.class, lead, e.sw.estimate(), false, r.probe)
			} else {
				r.endProbe()
			}
			e.stats.add(func(s *Stats) {
				if cancel {
					s.Cancelled++
				} else {
					s.Early++
				}
			})
			go e.reap(r)
		case stateFailed:
			return r.err
		case stateExpired:
			// The engine released the spinner after MaxHold; the request
			// itself is fine, once.
			if r.finished.Swap(true) {
				return ErrDone
			}
		default:
			return ErrDone
		}
		if !cancel {
			e.pred.observe(r.class, time.Duration(e.clk.now()-r.start))
		}
		return nil
	}
}

// reap waits for the spinner and its pending kernel to finish, accounts
// their stamps and returns the slot.
func (e *Engine) reap(r *Request) {
	s := r.slot
	for {
		ok, err := e.gpu.finished(s)
		if err != nil {
			e.log.Error("spinner completion", "err", err)
			break
		}
		if ok {
			break
		}
		e.clk.sleep(20 * time.Microsecond)
	}
	e.inflight[s.idx].CompareAndSwap(r, nil)
	start, end := e.gpu.stamps(s)
	if start != 0 && end >= start {
		held := time.Duration(end - start)
		if r.releaseT != 0 && held < r.holdLimit() {
			e.clock.released(r.releaseT, end)
		}
		switchIn := time.Duration(start - e.clock.get() - r.launchT)
		if r.gated {
			e.stats.add(func(s *Stats) { s.GateHeldNs += uint64(held) })
		} else {
			e.stats.held(held)
		}
		e.stats.switchIn(switchIn)
		e.sw.observe(switchIn)
		if held >= r.holdLimit() {
			e.stats.add(func(s *Stats) { s.TimedOut++ })
		}
	}
	e.free <- s
}

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
