package prepreempt

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/gpreempt/gpreempt/class"
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
