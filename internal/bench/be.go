package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/kernels"
)

// DefaultBEKernelIters makes one be_fma kernel (2 blocks per SM x 256
// threads) take about 2.35 ms alone on an H100 80GB HBM3 (132 SMs, 1980 MHz
// boost) with the hand-written kernels.ptx: 12.76 ns per iteration plus
// ~8 us measured 2026-11-21 (100000 iters: 1.284 ms, 300000: 3.835 ms). A
// different GPU, clock or PTX (nvcc's unrolled loop is ~28% faster per
// iteration) changes that: use --calibrate-ms.
const DefaultBEKernelIters = 183600

// DefaultBEQueue is how many BE kernels are kept in flight: enough that the
// GPU never idles while the host notices a completion, few enough that
// stopping takes a few kernel times.
const DefaultBEQueue = 3

type beOptions struct {
	Device        int
	Blocks        int // 0: 2 x SM count
	Threads       int
	Iters         uint64
	CalibrateMs   float64
	CalibrateOnly bool
	Queue         int
	Duration      time.Duration
	Out           string
}

var beCommand = &cli.Command{
	Name:  "be",
	Usage: "best-effort worker: back-to-back fixed-work be_fma kernels",
	Description: "Keeps --queue be_fma kernels in flight for --duration (or until SIGTERM/SIGINT),\n" +
		"prints 'READY pid=<pid>' on stdout once its context exists and a first kernel\n" +
		"has completed, and writes a JSON result (kernels completed, kernels/s, the\n" +
		"completion time of every kernel) to --out.",
	Flags: []cli.Flag{
		deviceFlag,
		&cli.IntFlag{Name: "blocks", Usage: "grid size (0: 2 x SM count, so every SM holds two blocks)"},
		&cli.IntFlag{Name: "threads", Value: 256, Usage: "threads per block"},
		&cli.Uint64Flag{Name: "kernel-iters", Value: DefaultBEKernelIters, Usage: "FMA iterations per thread per kernel (default: ~2.35 ms alone on an H100)"},
		&cli.Float64Flag{Name: "calibrate-ms", Usage: "instead of --kernel-iters, pick the iterations that make one kernel take this long alone (run it on an idle GPU)"},
		&cli.BoolFlag{Name: "calibrate-only", Usage: "with --calibrate-ms: print 'ITERS <n>' and exit"},
		&cli.IntFlag{Name: "queue", Value: DefaultBEQueue, Usage: "kernels kept in flight"},
		&cli.DurationFlag{Name: "duration", Value: 30 * time.Second, Usage: "how long to run (SIGTERM stops it earlier)"},
		&cli.StringFlag{Name: "out", Value: "-", Usage: "result JSON file ('-': stdout)"},
	},
	Action: func(c *cli.Context) error {
		o := beOptions{
			Device:        c.Int("device"),
			Blocks:        c.Int("blocks"),
			Threads:       c.Int("threads"),
			Iters:         c.Uint64("kernel-iters"),
			CalibrateMs:   c.Float64("calibrate-ms"),
			CalibrateOnly: c.Bool("calibrate-only"),
			Queue:         c.Int("queue"),
			Duration:      c.Duration("duration"),
			Out:           c.String("out"),
		}
		return runBE(c.Context, o, c.App.Writer, logger(c))
	},
}

func (o beOptions) validate() error {
	switch {
	case o.Blocks < 0, o.Threads <= 0 || o.Threads > 1024:
		return fmt.Errorf("%w: --blocks %d --threads %d", ErrInvalidArgument, o.Blocks, o.Threads)
	case o.Iters == 0 && o.CalibrateMs <= 0:
		return fmt.Errorf("%w: --kernel-iters must be positive", ErrInvalidArgument)
	case o.Queue < 1:
		return fmt.Errorf("%w: --queue must be at least 1", ErrInvalidArgument)
	case o.Duration <= 0 && !o.CalibrateOnly:
		return fmt.Errorf("%w: --duration must be positive", ErrInvalidArgument)
	case o.CalibrateOnly && o.CalibrateMs <= 0:
		return fmt.Errorf("%w: --calibrate-only needs --calibrate-ms", ErrInvalidArgument)
	}
	return nil
}

func runBE(ctx context.Context, o beOptions, stdout io.Writer, log *slog.Logger) (err error) {
	if err := o.validate(); err != nil {
		return err
	}
	// Sleep in synchronizing calls: the BE's host thread must not take a
	// core from the LC worker, and a few tens of microseconds of wake-up
	// latency do not matter with several kernels queued.
	g, err := openGPU(o.Device, cuda.SchedBlockingSync)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.close()) }()
	if o.Blocks == 0 {
		o.Blocks = 2 * g.info.SMs
	}
	w, err := newBEWork(g, o.Blocks, o.Threads)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, w.close()) }()

	if o.CalibrateMs > 0 {
		target := time.Duration(o.CalibrateMs * float64(time.Millisecond))
		iters, d, err := calibrate(target, 10000, func(iters uint64) (time.Duration, error) {
			return w.timer.time(g.k.BEFMA, w.grid, w.block, 3, w.args(iters)...)
		})
		if err != nil {
			return fmt.Errorf("calibrate be_fma: %w", err)
		}
		log.Info("calibrated be_fma", "target", target, "iters", iters, "measured", d, "grid", o.Blocks, "block", o.Threads)
		o.Iters = iters
		if o.CalibrateOnly {
			_, err := fmt.Fprintf(stdout, "ITERS %d\n", iters)
			return err
		}
	}

	// One kernel to completion before READY: the module is JIT-compiled and
	// loaded, the context's channels exist, and the orchestrator may now
	// change this process's TSGs.
	first, err := w.timer.time(g.k.BEFMA, w.grid, w.block, 1, w.args(o.Iters)...)
	if err != nil {
		return fmt.Errorf("first be_fma: %w", err)
	}
	pid := os.Getpid()
	if _, err := fmt.Fprintf(stdout, "READY pid=%d\n", pid); err != nil {
		return err
	}
	log.Info("be ready", "first_kernel", first, "iters", o.Iters, "grid", o.Blocks, "block", o.Threads)

	// Sized for the expected count so the loop does not reallocate.
	expected := int(o.Duration/max(first, time.Microsecond)) + 16
	start := time.Now()
	completions, err := w.loop(ctx, o.Iters, o.Queue, start.Add(o.Duration), min(expected, 1<<24))
	if err != nil {
		return err
	}
	end := time.Now()
	wall := end.Sub(start).Seconds()
	res := &BEResult{
		Schema: SchemaVersion,
		Worker: "gpreempt-bench be",
		PID:    pid,
		Device: g.info.Name,
		Unit:   "kernels",
		Config: map[string]any{
			"blocks":          o.Blocks,
			"threads":         o.Threads,
			"queue":           o.Queue,
			"duration":        o.Duration.String(),
			"fmas_per_kernel": uint64(o.Blocks*o.Threads) * o.Iters * kernels.FMAsPerIter,
		},
		KernelIters:       o.Iters,
		FirstKernelMs:     float64(first) / float64(time.Millisecond),
		Kernels:           int64(len(completions)),
		KernelsPerSec:     float64(len(completions)) / wall,
		DurationS:         wall,
		StartMonoNs:       monoNs(start),
		EndMonoNs:         monoNs(end),
		CompletionsMonoNs: completions,
	}
	log.Info("be done", "kernels", res.Kernels, "kernels_per_sec", fmt.Sprintf("%.1f", res.KernelsPerSec))
	return writeJSON(o.Out, stdout, res)
}

// beWork is what the BE kernels run with: their output buffer, stream and
// timer.
type beWork struct {
	g           *gpu
	grid, block cuda.Dim3
	out         cuda.DevicePtr
	stream      *cuda.Stream
	timer       *kernelTimer
}

func newBEWork(g *gpu, blocks, threads int) (w *beWork, err error) {
	w = &beWork{g: g, grid: cuda.Dim3{X: uint32(blocks)}, block: cuda.Dim3{X: uint32(threads)}}
	if w.out, err = g.ctx.MemAlloc(uint64(blocks * threads * 4)); err != nil {
		return nil, err
	}
	if w.stream, err = g.ctx.NewStream(cuda.StreamNonBlocking); err != nil {
		return nil, errors.Join(err, g.ctx.MemFree(w.out))
	}
	if w.timer, err = newKernelTimer(g, w.stream); err != nil {
		return nil, errors.Join(err, w.stream.Destroy(), g.ctx.MemFree(w.out))
	}
	return w, nil
}

func (w *beWork) close() error {
	return errors.Join(w.timer.close(), w.stream.Destroy(), w.g.ctx.MemFree(w.out))
}

func (w *beWork) args(iters uint64) []cuda.Arg { return []cuda.Arg{cuda.Ptr(w.out), cuda.U64(iters)} }

// loop keeps queue kernels in flight until deadline or ctx ends, then
// drains them, and returns each kernel's completion time
// (CLOCK_MONOTONIC): kernels already queued still run, and counting them
// keeps the last stretch of the window from being undercounted.
func (w *beWork) loop(ctx context.Context, iters uint64, queue int, deadline time.Time, capacity int) (completions []int64, err error) {
	events := make([]*cuda.Event, queue)
	for i := range events {
		if events[i], err = w.g.ctx.NewEvent(cuda.EventDisableTiming); err != nil {
			return nil, err
		}
		defer func(e *cuda.Event) { err = errors.Join(err, e.Destroy()) }(events[i])
	}
	args := w.args(iters)
	completions = make([]int64, 0, capacity)
	head, inflight := 0, 0
	retire := func() error {
		if err := events[head].Synchronize(); err != nil {
			return fmt.Errorf("be_fma kernel %d: %w", len(completions), err)
		}
		completions = append(completions, monoNs(time.Now()))
		head = (head + 1) % len(events)
		inflight--
		return nil
	}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		for inflight < len(events) {
			if err := w.g.k.BEFMA.Launch(w.grid, w.block, 0, w.stream, args...); err != nil {
				return nil, err
			}
			if err := events[(head+inflight)%len(events)].Record(w.stream); err != nil {
				return nil, err
			}
			inflight++
		}
		if err := retire(); err != nil {
			return nil, err
		}
	}
	for inflight > 0 {
		if err := retire(); err != nil {
			return nil, err
		}
	}
	return completions, nil
}
