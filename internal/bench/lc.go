package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
	"github.com/gpreempt/gpreempt/prepreempt"
)

// DefaultLCKernelIters makes one lc_work kernel (one block per SM x 256
// threads) take about 20 us alone on an H100 80GB HBM3 with the hand-written
// kernels.ptx, timed with CUDA events as the calibration does (2000 iters:
// 20.5 us, measured 2026-11-21; calibration picked 1890-2140 on later runs).
// Events include the launch's front-end cost: the kernel's own %globaltimer
// span (first block start to last block end) is about 14 us.
const DefaultLCKernelIters = 2000

type lcOptions struct {
	Device      int
	Blocks      int // 0: SM count
	Threads     int
	Iters       uint64
	CalibrateUs float64
	// CalibrateOnly prints "ITERS <n>" after calibrating and exits.
	CalibrateOnly bool
	Period        time.Duration
	Prep          PrepDist
	Requests      int
	Warmup        int
	Seed          uint64
	WaitGo        bool
	Out           string
	// Hints: run each request through a prepreempt.Engine (Hint when
	// preparation starts, Ready right after the launch).
	Hints    bool
	MaxHold  time.Duration
	Launcher prepreempt.Launcher
	// PrepQuantile: prepreempt.Options.PrepQuantile (0: its default).
	PrepQuantile float64
	// PushLatency, when set, is gpreemptd's socket: each measured
	// request's latency is pushed to it in one window a PushPeriod
	// (prepreempt.Reporter), for the daemon's SLO mode.
	PushLatency string
	// SwitchAfter, when > 0, is the measured request from which requests
	// arrive every SwitchPeriod instead of every Period (a rate change
	// half-way through a run).
	SwitchAfter  int
	SwitchPeriod time.Duration
	PushPeriod   time.Duration
	// LeadIn, when > 0, is how long requests run after the go line and
	// before the measurement, at Period, their latency pushed (with
	// PushLatency) but not kept: the time gpreemptd's SLO mode has to
	// settle before the measured window.
	LeadIn time.Duration
}

var lcCommand = &cli.Command{
	Name:  "lc",
	Usage: "latency-critical worker: periodic lc_work requests, latency per request",
	Description: "Every --period: busy-waits the preparation time (--prep / --prep-dist), launches\n" +
		"lc_work on its own stream and synchronizes. Records the host latency (launch call\n" +
		"to synchronize return, CLOCK_MONOTONIC) and the kernel's %globaltimer start/end.\n" +
		"Prints 'READY pid=<pid>' after context creation and --warmup requests; with\n" +
		"--wait-go it then waits for a line on stdin before measuring.",
	Flags: []cli.Flag{
		deviceFlag,
		&cli.DurationFlag{Name: "period", Value: 3500 * time.Microsecond, Usage: "time between request arrivals"},
		&cli.DurationFlag{Name: "prep", Usage: "fixed CPU-side preparation time before each launch (busy-wait)"},
		&cli.StringFlag{Name: "prep-dist", Usage: "preparation time distribution, overrides --prep: DURATION, fixed:DURATION or uniform:MIN:MAX"},
		&cli.IntFlag{Name: "blocks", Usage: "grid size (0: SM count, one block on every SM)"},
		&cli.IntFlag{Name: "threads", Value: 256, Usage: "threads per block"},
		&cli.Uint64Flag{Name: "kernel-iters", Value: DefaultLCKernelIters, Usage: "FMA iterations per thread (default: ~20 us alone on an H100)"},
		&cli.Float64Flag{Name: "calibrate-us", Usage: "instead of --kernel-iters, pick the iterations that make the kernel take this long alone (CUDA-event time; the %globaltimer span is ~6 us shorter)"},
		&cli.BoolFlag{Name: "calibrate-only", Usage: "with --calibrate-us: print 'ITERS <n>' and exit"},
		&cli.IntFlag{Name: "requests", Value: 1000, Usage: "measured requests"},
		&cli.IntFlag{Name: "warmup", Value: 50, Usage: "requests run and discarded before READY"},
		&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed for --prep-dist"},
		&cli.BoolFlag{Name: "wait-go", Usage: "after READY, wait for a line on stdin before measuring (used by 'run')"},
		&cli.StringFlag{Name: "out", Value: "-", Usage: "result JSON file ('-': stdout)"},
		&cli.BoolFlag{Name: "hints", Usage: "pre-preemption: Hint each request when its preparation starts, Ready right after its launch"},
		&cli.DurationFlag{Name: "max-hold", Value: 5 * time.Millisecond, Usage: "with --hints: longest a spinner may hold the GPU"},
		&cli.StringFlag{Name: "hint-launcher", Value: string(prepreempt.LauncherGoroutine), Usage: "with --hints: goroutine or poller (prepreempt.Options.Launcher)"},
		&cli.IntFlag{Name: "switch-after", Usage: "from this measured request on, requests arrive every --switch-period (0: never)"},
		&cli.DurationFlag{Name: "switch-period", Usage: "with --switch-after: the period after the switch"},
		&cli.StringFlag{Name: "push-latency", Usage: "push the measured requests' latency windows to gpreemptd at this socket (its SLO mode)"},
		&cli.DurationFlag{Name: "push-period", Value: time.Second, Usage: "with --push-latency: one window this long (the daemon's slo.window)"},
		&cli.Float64Flag{Name: "hint-prep-quantile", Usage: "with --hints: prepreempt.Options.PrepQuantile, in (0, 1) (0: the engine's default)"},
		&cli.DurationFlag{Name: "lead-in", Usage: "after the go line, run requests this long before measuring (pushed with --push-latency, not kept)"},
	},
	Action: func(c *cli.Context) error {
		prep := PrepDist{Min: c.Duration("prep"), Max: c.Duration("prep")}
		if c.IsSet("prep-dist") {
			var err error
			if prep, err = ParsePrep(c.String("prep-dist")); err != nil {
				return err
			}
		}
		launcher, err := prepreempt.ParseLauncher(c.String("hint-launcher"))
		if err != nil {
			return fmt.Errorf("%w: --hint-launcher: %w", ErrInvalidArgument, err)
		}
		o := lcOptions{
			Device:        c.Int("device"),
			Blocks:        c.Int("blocks"),
			Threads:       c.Int("threads"),
			Iters:         c.Uint64("kernel-iters"),
			CalibrateUs:   c.Float64("calibrate-us"),
			CalibrateOnly: c.Bool("calibrate-only"),
			Period:        c.Duration("period"),
			Prep:          prep,
			Requests:      c.Int("requests"),
			Warmup:        c.Int("warmup"),
			Seed:          c.Uint64("seed"),
			WaitGo:        c.Bool("wait-go"),
			Out:           c.String("out"),
			Hints:         c.Bool("hints"),
			MaxHold:       c.Duration("max-hold"),
			Launcher:      launcher,
			PrepQuantile:  c.Float64("hint-prep-quantile"),
			PushLatency:   c.String("push-latency"),
			PushPeriod:    c.Duration("push-period"),
			SwitchAfter:   c.Int("switch-after"),
			SwitchPeriod:  c.Duration("switch-period"),
			LeadIn:        c.Duration("lead-in"),
		}
		return runLC(c.Context, o, os.Stdin, c.App.Writer, logger(c))
	},
}

func (o lcOptions) validate() error {
	switch {
	case o.Blocks < 0, o.Threads <= 0 || o.Threads > 1024:
		return fmt.Errorf("%w: --blocks %d --threads %d", ErrInvalidArgument, o.Blocks, o.Threads)
	case o.Iters == 0 && o.CalibrateUs <= 0:
		return fmt.Errorf("%w: --kernel-iters must be positive", ErrInvalidArgument)
	case o.Period <= 0:
		return fmt.Errorf("%w: --period must be positive", ErrInvalidArgument)
	case o.Requests <= 0 || o.Warmup < 0 || o.LeadIn < 0:
		return fmt.Errorf("%w: --requests must be positive, --warmup and --lead-in not negative", ErrInvalidArgument)
	case o.SwitchAfter < 0, o.SwitchAfter > 0 && (o.SwitchPeriod <= o.Prep.Max || o.SwitchAfter >= o.Requests):
		return fmt.Errorf("%w: --switch-after %d --switch-period %v: want a request before --requests and a period longer than the preparation", ErrInvalidArgument, o.SwitchAfter, o.SwitchPeriod)
	case o.Prep.Max >= o.Period:
		return fmt.Errorf("%w: preparation (up to %v) must be shorter than the period %v", ErrInvalidArgument, o.Prep.Max, o.Period)
	case o.CalibrateOnly && o.CalibrateUs <= 0:
		return fmt.Errorf("%w: --calibrate-only needs --calibrate-us", ErrInvalidArgument)
	case o.PrepQuantile < 0 || o.PrepQuantile >= 1:
		return fmt.Errorf("%w: --hint-prep-quantile %v: want a value in (0, 1), or 0 for the default", ErrInvalidArgument, o.PrepQuantile)
	}
	return nil
}

// lcRequester runs single requests. It holds everything a request touches,
// preallocated, so that a request allocates nothing.
type lcRequester struct {
	g           *gpu
	stream      *cuda.Stream
	grid, block cuda.Dim3
	stamps      cuda.DevicePtr
	host        []uint64
	args        [2]cuda.Arg
}

func (r *lcRequester) do(hint *prepreempt.Request) (LCSample, error) {
	var s LCSample
	t0 := time.Now()
	if err := r.g.k.LCWork.Launch(r.grid, r.block, 0, r.stream, r.args[:]...); err != nil {
		if hint != nil {
			err = errors.Join(err, hint.Cancel())
		}
		return s, err
	}
	if hint != nil {
		// Right after the LC work is queued: release the spinner.
		if err := hint.Ready(); err != nil {
			return s, fmt.Errorf("prepreempt ready: %w", err)
		}
	}
	t1 := time.Now()
	if err := r.stream.Synchronize(); err != nil {
		return s, fmt.Errorf("lc_work: %w", err)
	}
	t2 := time.Now()
	// Off the measured path: fetch the kernel's own stamps.
	if err := cuda.CopyToHost(r.g.ctx, r.host, r.stamps); err != nil {
		return s, err
	}
	s.LaunchCallNs = int64(t1.Sub(t0))
	s.LatencyNs = int64(t2.Sub(t0))
	s.GPUStartNs = r.host[kernels.LCStampStart]
	s.GPUEndNs = r.host[kernels.LCStampEnd]
	s.GPUNs = int64(s.GPUEndNs - s.GPUStartNs)
	return s, nil
}

// newLCRequester allocates what a request touches: its stream and the
// kernel's stamp buffer.
func newLCRequester(g *gpu, blocks, threads int) (r *lcRequester, err error) {
	r = &lcRequester{
		g:     g,
		grid:  cuda.Dim3{X: uint32(blocks)},
		block: cuda.Dim3{X: uint32(threads)},
		host:  make([]uint64, kernels.LCStampWords),
	}
	if r.stream, err = g.ctx.NewStream(cuda.StreamNonBlocking); err != nil {
		return nil, err
	}
	if r.stamps, err = g.ctx.MemAlloc(kernels.LCStampWords * 8); err != nil {
		return nil, errors.Join(err, r.stream.Destroy())
	}
	if err := g.ctx.MemsetD8(r.stamps, 0, kernels.LCStampWords*8); err != nil {
		return nil, errors.Join(err, r.close())
	}
	return r, nil
}

func (r *lcRequester) close() error {
	return errors.Join(r.g.ctx.MemFree(r.stamps), r.stream.Destroy())
}

// measureLC runs o.Requests requests, one every o.Period (a request that
// arrives while the previous one still runs starts late and is counted),
// and returns their samples and the measurement's bounds.
func measureLC(ctx context.Context, o lcOptions, rng *rand.Rand, request func(time.Duration) (LCSample, error)) (samples []LCSample, late int, start, end time.Time, err error) {
	samples = make([]LCSample, 0, o.Requests)
	// The measurement loop allocates nothing; a collection during it would
	// only add pauses to some requests.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))

	start = time.Now()
	for i := range o.Requests {
		if err := ctx.Err(); err != nil {
			return nil, 0, start, start, fmt.Errorf("interrupted after %d requests: %w", i, err)
		}
		arrival, period := start.Add(o.arrivalOffset(i)), o.periodAt(i)
		now := time.Now()
		if now.Before(arrival) {
			sleepUntil(arrival)
		} else if now.Sub(arrival) > period {
			late++
		}
		prep := o.Prep.Sample(rng)
		s, err := request(prep)
		if err != nil {
			return nil, 0, start, start, fmt.Errorf("request %d: %w", i, err)
		}
		s.ArrivalMonoNs = monoNs(arrival)
		s.PrepNs = int64(prep)
		samples = append(samples, s)
	}
	return samples, late, start, time.Now(), nil
}

// runLeadIn runs requests every Period for o.LeadIn and discards them
// (request may still report each one, to the latency pusher). It returns
// how many ran.
func runLeadIn(ctx context.Context, o lcOptions, rng *rand.Rand, request func(time.Duration) (LCSample, error)) (int, error) {
	if o.LeadIn <= 0 {
		return 0, nil
	}
	start := time.Now()
	n := 0
	for arrival := start; arrival.Sub(start) < o.LeadIn; arrival = arrival.Add(o.Period) {
		if err := ctx.Err(); err != nil {
			return n, fmt.Errorf("interrupted in the lead-in after %d requests: %w", n, err)
		}
		if now := time.Now(); now.Before(arrival) {
			sleepUntil(arrival)
		}
		if _, err := request(o.Prep.Sample(rng)); err != nil {
			return n, fmt.Errorf("lead-in request %d: %w", n, err)
		}
		n++
	}
	return n, nil
}

func runLC(ctx context.Context, o lcOptions, stdin io.Reader, stdout io.Writer, log *slog.Logger) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	// One OS thread for the whole measurement: CUDA's current context is
	// per thread, and a migrating goroutine would add a context switch to
	// some requests.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	// Spin in synchronize: the LC's latency includes the wake-up, and this
	// is what a latency-sensitive server does.
	g, err := openGPU(o.Device, cuda.SchedSpin)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.close()) }()
	if o.Blocks == 0 {
		o.Blocks = g.info.SMs
	}
	req, err := newLCRequester(g, o.Blocks, o.Threads)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, req.close()) }()
	stream, stamps := req.stream, req.stamps

	if o.CalibrateUs > 0 {
		timer, err := newKernelTimer(g, stream)
		if err != nil {
			return err
		}
		target := time.Duration(o.CalibrateUs * float64(time.Microsecond))
		iters, d, err := calibrate(target, 1000, func(iters uint64) (time.Duration, error) {
			return timer.time(g.k.LCWork, req.grid, req.block, 5, cuda.Ptr(stamps), cuda.U64(iters))
		})
		err = errors.Join(err, timer.close())
		if err != nil {
			return fmt.Errorf("calibrate lc_work: %w", err)
		}
		log.Info("calibrated lc_work", "target", target, "iters", iters, "measured", d)
		o.Iters = iters
		if o.CalibrateOnly {
			_, err := fmt.Fprintf(stdout, "ITERS %d\n", iters)
			return err
		}
	}
	req.args = [2]cuda.Arg{cuda.Ptr(stamps), cuda.U64(o.Iters)}

	var eng *prepreempt.Engine
	if o.Hints {
		// After the LC kernels' module and stream exist, so the LC class
		// the engine applies covers every channel group of the context.
		// The engine joins the same primary context (g.ctx is the device's
		// primary context too), so its spinners share our channel groups.
		if eng, err = prepreempt.New(ctx, o.Device, prepreempt.Options{MaxHold: o.MaxHold, Launcher: o.Launcher, PrepQuantile: o.PrepQuantile, Logger: log}); err != nil {
			return fmt.Errorf("pre-preemption engine: %w", err)
		}
		defer func() { err = errors.Join(err, eng.Close()) }()
		log.Info("pre-preemption", "backend", eng.Stats().Backend)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x9e3779b97f4a7c15))
	// request runs one request: Hint at the start of preparation, the
	// preparation (CPU busy-wait), then the launch.
	request := func(prep time.Duration) (LCSample, error) {
		var hint *prepreempt.Request
		start := time.Now()
		if eng != nil {
			var err error
			if hint, err = eng.Hint(ctx, "lc", o.Prep.Mean()); err != nil {
				return LCSample{}, err
			}
		}
		spinUntil(start.Add(prep))
		return req.do(hint)
	}

	for i := range max(o.Warmup, 1) {
		if _, err := request(o.Prep.Sample(rng)); err != nil {
			return fmt.Errorf("warmup request %d: %w", i, err)
		}
		time.Sleep(time.Millisecond)
	}
	pid := os.Getpid()
	if _, err := fmt.Fprintf(stdout, "READY pid=%d\n", pid); err != nil {
		return err
	}
	if o.WaitGo {
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("waiting for the go line on stdin: %w", err)
		}
	}
	log.Info("lc measuring", "requests", o.Requests, "period", o.Period, "prep", o.Prep, "iters", o.Iters, "grid", o.Blocks, "block", o.Threads)

	if o.PushLatency != "" {
		rep := prepreempt.NewReporter(eng, prepreempt.ReporterOptions{Socket: o.PushLatency, Period: o.PushPeriod, Logger: log})
		pushCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = rep.Run(pushCtx) }()
		defer func() { stop(); <-done }()
		request = recordLatency(request, rep.Record)
		log.Info("pushing latency windows", "socket", o.PushLatency, "period", o.PushPeriod)
	}
	// The lead-in draws its preparation times from its own stream, so the
	// measured requests' are the same with or without it.
	leadIn, err := runLeadIn(ctx, o, rand.New(rand.NewPCG(o.Seed, 0x6c656164)), request)
	if err != nil {
		return err
	}
	samples, late, start, end, err := measureLC(ctx, o, rng, request)
	if err != nil {
		return err
	}

	res := &LCResult{
		Schema:    SchemaVersion,
		Worker:    "gpreempt-bench lc",
		PID:       pid,
		Device:    g.info.Name,
		GPUStamps: true,
		Config: map[string]any{
			"blocks":       o.Blocks,
			"threads":      o.Threads,
			"kernel_iters": o.Iters,
			"period":       fmtDuration(o.Period),
			"prep":         o.Prep.String(),
			"seed":         o.Seed,
		},
		Requested:          o.Requests,
		Warmup:             o.Warmup,
		MeasureStartMonoNs: monoNs(start),
		MeasureEndMonoNs:   monoNs(end),
		Late:               late,
		Samples:            samples,
	}
	if o.LeadIn > 0 {
		res.Config["lead_in"] = fmtDuration(o.LeadIn)
		res.Config["lead_in_requests"] = leadIn
	}
	if o.SwitchAfter > 0 {
		res.Config["switch_after"] = o.SwitchAfter
		res.Config["switch_period"] = fmtDuration(o.SwitchPeriod)
	}
	if eng != nil {
		st := eng.Stats()
		res.Prepreempt = &st
		res.Config["hints"] = true
		res.Config["hint_launcher"] = o.Launcher
		if o.PrepQuantile != 0 {
			res.Config["hint_prep_quantile"] = o.PrepQuantile
		}
	}
	log.Info("lc done", "requests", len(samples), "late", late)
	return writeJSON(o.Out, stdout, res)
}

// recordLatency wraps request so that each request's latency is also
// given to record (the latency-window reporter).
func recordLatency(request func(time.Duration) (LCSample, error), record func(time.Duration)) func(time.Duration) (LCSample, error) {
	return func(prep time.Duration) (LCSample, error) {
		s, err := request(prep)
		if err == nil {
			record(time.Duration(s.LatencyNs))
		}
		return s, err
	}
}

// periodAt is the period of measured request i: Period, or SwitchPeriod
// from SwitchAfter on.
func (o lcOptions) periodAt(i int) time.Duration {
	if o.SwitchAfter > 0 && i >= o.SwitchAfter {
		return o.SwitchPeriod
	}
	return o.Period
}

// arrivalOffset is when measured request i arrives, from the start.
func (o lcOptions) arrivalOffset(i int) time.Duration {
	if o.SwitchAfter > 0 && i > o.SwitchAfter {
		return time.Duration(o.SwitchAfter)*o.Period + time.Duration(i-o.SwitchAfter)*o.SwitchPeriod
	}
	return time.Duration(i) * o.Period
}
