package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	pyscripts "github.com/gpreempt/gpreempt/bench/pytorch"
	"github.com/gpreempt/gpreempt/internal/stats"
	gpreemptpy "github.com/gpreempt/gpreempt/python/gpreempt"
)

// runOptions are the orchestrator's parameters.
type runOptions struct {
	// HintLauncher is passed to LC workers of prepreempt-* scenarios.
	HintLauncher string
	// HintPrepQuantile is passed to Go LC workers of prepreempt-*
	// scenarios (0: the engine's default).
	HintPrepQuantile float64
	Scenarios        []Scenario
	Out              string
	Ctl              string
	Device           int
	Duration         time.Duration
	Settle           time.Duration
	ReadyTimeout     time.Duration

	Period        time.Duration
	Prep          PrepDist
	Requests      int
	Warmup        int
	LCIters       uint64
	LCBlocks      int
	LCThreads     int
	LCCalibrateUs float64

	BEIters       uint64
	BEBlocks      int
	BEThreads     int
	BEQueue       int
	BECalibrateMs float64

	Python     string
	PyScripts  string
	PyPeriod   time.Duration
	PyRequests int
	PyWarmup   int
	PyLCModel  string
	PyLCBatch  int
	PyGraph    bool
	PyBEModel  string
	PyBEBatch  int
}

// RunConfig is runOptions as recorded in results.json.
type RunConfig struct {
	Scenarios    []string `json:"scenarios"`
	Out          string   `json:"out"`
	Gpreemptctl  string   `json:"gpreemptctl,omitempty"`
	Device       int      `json:"device"`
	Duration     string   `json:"duration"`
	Settle       string   `json:"settle"`
	Period       string   `json:"period"`
	Prep         string   `json:"prep"`
	Requests     int      `json:"requests"`
	Warmup       int      `json:"warmup"`
	LCIters      uint64   `json:"lc_kernel_iters"`
	LCBlocks     int      `json:"lc_blocks"`
	LCThreads    int      `json:"lc_threads"`
	BEIters      uint64   `json:"be_kernel_iters"`
	BEBlocks     int      `json:"be_blocks"`
	BEThreads    int      `json:"be_threads"`
	BEQueue      int      `json:"be_queue"`
	PyPeriod     string   `json:"pytorch_period,omitempty"`
	PyRequests   int      `json:"pytorch_requests,omitempty"`
	PyLCModel    string   `json:"pytorch_lc_model,omitempty"`
	PyLCBatch    int      `json:"pytorch_lc_batch,omitempty"`
	PyGraph      bool     `json:"pytorch_cuda_graph,omitempty"`
	PyBEModel    string   `json:"pytorch_be_model,omitempty"`
	PyBEBatch    int      `json:"pytorch_be_batch,omitempty"`
	BECalibrated bool     `json:"be_calibrated"`
	LCCalibrated bool     `json:"lc_calibrated"`
}

func (o *runOptions) config() RunConfig {
	names := make([]string, len(o.Scenarios))
	for i, s := range o.Scenarios {
		names[i] = s.Name
	}
	c := RunConfig{
		Scenarios: names, Out: o.Out, Gpreemptctl: o.Ctl, Device: o.Device,
		Duration: fmtDuration(o.Duration), Settle: fmtDuration(o.Settle),
		Period: fmtDuration(o.Period), Prep: o.Prep.String(),
		Requests: o.lcRequests(RuntimeKernels), Warmup: o.Warmup,
		LCIters: o.LCIters, LCBlocks: o.LCBlocks, LCThreads: o.LCThreads,
		BEIters: o.BEIters, BEBlocks: o.BEBlocks, BEThreads: o.BEThreads, BEQueue: o.BEQueue,
		BECalibrated: o.BECalibrateMs > 0, LCCalibrated: o.LCCalibrateUs > 0,
	}
	if o.uses(RuntimePyTorch) {
		c.PyPeriod = fmtDuration(o.PyPeriod)
		c.PyRequests = o.lcRequests(RuntimePyTorch)
		c.PyLCModel, c.PyLCBatch, c.PyGraph = o.PyLCModel, o.PyLCBatch, o.PyGraph
		c.PyBEModel, c.PyBEBatch = o.PyBEModel, o.PyBEBatch
	}
	return c
}

// uses reports whether any scenario runs the given runtime's workers.
func (o *runOptions) uses(runtime string) bool {
	return slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.Runtime == runtime })
}

// lcRequests is the measured request count: explicit, or enough to fill the
// scenario duration at the runtime's period.
func (o *runOptions) lcRequests(runtime string) int {
	if runtime == RuntimePyTorch {
		if o.PyRequests > 0 {
			return o.PyRequests
		}
		return max(1, int(o.Duration/o.PyPeriod))
	}
	if o.Requests > 0 {
		return o.Requests
	}
	return max(1, int(o.Duration/o.Period))
}

var runCommand = &cli.Command{
	OnUsageError: usageError,
	Name:         "run",
	Usage:        "run scenarios (LC and BE workers as separate processes) and report",
	Description: "Scenarios (--scenarios, comma-separated):\n" +
		"  standalone             LC worker alone: the latency baseline\n" +
		"  be-only                BE worker alone: the throughput baseline\n" +
		"  defaults               LC + BE at the driver's default timeslices\n" +
		"  be-<ts>                LC + BE; gpreemptctl class --be-timeslice <ts> be / class lc\n" +
		"  be-ratio:<ts1>:<ts2>   two BE workers; gpreemptctl set-timeslice <ts1> / <ts2>\n" +
		"  pytorch-standalone, pytorch-be-only, pytorch (driver defaults), pytorch-be-<ts>:\n" +
		"                         the same with bench/pytorch's lc_infer.py and be_train.py\n" +
		"Each BE worker is started and READY before the LC worker starts; gpreemptctl is\n" +
		"applied once each worker's context exists; the LC worker measures only after\n" +
		"--settle more of saturating BE. Writes results.json, results.md and cdf.png to --out\n" +
		"and every worker's JSON and logs to --out/<scenario>/.",
	Flags: []cli.Flag{
		&cli.StringFlag{Name: "scenarios", Value: DefaultScenarios, Usage: "comma-separated scenarios"},
		&cli.StringFlag{Name: "out", Required: true, Usage: "output directory"},
		&cli.StringFlag{Name: "gpreemptctl", Usage: "gpreemptctl binary (default: next to this binary, then $PATH)", EnvVars: []string{"GPREEMPTCTL"}},
		deviceFlag,
		&cli.DurationFlag{Name: "duration", Value: 20 * time.Second, Usage: "measurement time per scenario"},
		&cli.DurationFlag{Name: "settle", Value: time.Second, Usage: "BE running time after gpreemptctl before measuring"},
		&cli.DurationFlag{Name: "ready-timeout", Value: 120 * time.Second, Usage: "how long a worker may take to print READY"},

		&cli.DurationFlag{Name: "period", Value: 3500 * time.Microsecond, Usage: "LC request period"},
		&cli.DurationFlag{Name: "prep", Usage: "LC fixed preparation time"},
		&cli.StringFlag{Name: "prep-dist", Usage: "LC preparation distribution (overrides --prep): DURATION, fixed:DURATION, uniform:MIN:MAX"},
		&cli.IntFlag{Name: "requests", Usage: "LC measured requests (0: --duration / --period)"},
		&cli.IntFlag{Name: "warmup", Value: 50, Usage: "LC warmup requests"},
		&cli.Uint64Flag{Name: "lc-iters", Value: DefaultLCKernelIters, Usage: "lc_work iterations (used when --lc-calibrate-us is 0)"},
		&cli.Float64Flag{Name: "lc-calibrate-us", Value: 20, Usage: "calibrate lc_work to this many microseconds alone before the scenarios (0: use --lc-iters)"},
		&cli.IntFlag{Name: "lc-blocks", Usage: "lc_work grid (0: SM count)"},
		&cli.IntFlag{Name: "lc-threads", Value: 256, Usage: "lc_work block size"},

		&cli.Uint64Flag{Name: "be-iters", Value: DefaultBEKernelIters, Usage: "be_fma iterations (used when --be-calibrate-ms is 0)"},
		&cli.Float64Flag{Name: "be-calibrate-ms", Value: 2.35, Usage: "calibrate be_fma to this many milliseconds alone before the scenarios (0: use --be-iters)"},
		&cli.IntFlag{Name: "be-blocks", Usage: "be_fma grid (0: 2 x SM count)"},
		&cli.IntFlag{Name: "be-threads", Value: 256, Usage: "be_fma block size"},
		&cli.IntFlag{Name: "be-queue", Value: DefaultBEQueue, Usage: "be_fma kernels in flight"},

		&cli.StringFlag{Name: "python", Value: "python3", Usage: "Python with PyTorch and torchvision, for pytorch scenarios"},
		&cli.StringFlag{Name: "pytorch-scripts", Usage: "directory holding lc_infer.py and be_train.py (default: the copies built into this binary)"},
		&cli.DurationFlag{Name: "pytorch-period", Value: 20 * time.Millisecond, Usage: "lc_infer.py request period"},
		&cli.IntFlag{Name: "pytorch-requests", Usage: "lc_infer.py measured requests (0: --duration / --pytorch-period)"},
		&cli.IntFlag{Name: "pytorch-warmup", Value: 20, Usage: "lc_infer.py warmup requests"},
		&cli.StringFlag{Name: "pytorch-lc-model", Value: "resnet50", Usage: "torchvision model for lc_infer.py"},
		&cli.IntFlag{Name: "pytorch-lc-batch", Value: 1, Usage: "lc_infer.py batch size"},
		&cli.StringFlag{Name: "hint-launcher", Value: "goroutine", Usage: "prepreempt-* scenarios: the engine's launcher, goroutine or poller"},
		&cli.Float64Flag{Name: "hint-prep-quantile", Usage: "prepreempt-* scenarios (Go LC worker): quantile of recent preparation times the engine predicts with (0: its default, 0.02)"},
		&cli.BoolFlag{Name: "pytorch-cuda-graph", Value: true, Usage: "lc_infer.py replays a CUDA graph (false: eager, whose Python launch overhead, ~8 ms for resnet50 on the H100 VM, hides GPU scheduling)"},
		&cli.StringFlag{Name: "pytorch-be-model", Value: "resnet50", Usage: "torchvision model for be_train.py"},
		&cli.IntFlag{Name: "pytorch-be-batch", Value: 64, Usage: "be_train.py batch size"},
	},
	Action: func(c *cli.Context) error {
		o, err := runOptionsFrom(c)
		if err != nil {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("locate own binary to start workers: %w", err)
		}
		env := runEnv{
			self:   []string{self},
			probe:  probeDevice,
			stdout: c.App.Writer,
			log:    logger(c),
		}
		return runAll(c.Context, o, env)
	},
}

func runOptionsFrom(c *cli.Context) (runOptions, error) {
	scs, err := ParseScenarios(c.String("scenarios"))
	if err != nil {
		return runOptions{}, err
	}
	prep := PrepDist{Min: c.Duration("prep"), Max: c.Duration("prep")}
	if c.IsSet("prep-dist") {
		if prep, err = ParsePrep(c.String("prep-dist")); err != nil {
			return runOptions{}, err
		}
	}
	o := runOptions{
		Scenarios: scs, Out: c.String("out"), Ctl: c.String("gpreemptctl"), Device: c.Int("device"),
		Duration: c.Duration("duration"), Settle: c.Duration("settle"), ReadyTimeout: c.Duration("ready-timeout"),
		Period: c.Duration("period"), Prep: prep, Requests: c.Int("requests"), Warmup: c.Int("warmup"),
		LCIters: c.Uint64("lc-iters"), LCBlocks: c.Int("lc-blocks"), LCThreads: c.Int("lc-threads"), LCCalibrateUs: c.Float64("lc-calibrate-us"),
		BEIters: c.Uint64("be-iters"), BEBlocks: c.Int("be-blocks"), BEThreads: c.Int("be-threads"), BEQueue: c.Int("be-queue"), BECalibrateMs: c.Float64("be-calibrate-ms"),
		Python: c.String("python"), PyScripts: c.String("pytorch-scripts"), PyPeriod: c.Duration("pytorch-period"),
		PyRequests: c.Int("pytorch-requests"), PyWarmup: c.Int("pytorch-warmup"),
		PyLCModel: c.String("pytorch-lc-model"), PyLCBatch: c.Int("pytorch-lc-batch"), PyGraph: c.Bool("pytorch-cuda-graph"),
		HintLauncher:     c.String("hint-launcher"),
		HintPrepQuantile: c.Float64("hint-prep-quantile"),
		PyBEModel:        c.String("pytorch-be-model"), PyBEBatch: c.Int("pytorch-be-batch"),
	}
	return o, o.validate()
}

func (o *runOptions) validate() error {
	switch {
	case o.Duration <= 0, o.Period <= 0, o.PyPeriod <= 0:
		return fmt.Errorf("%w: --duration, --period and --pytorch-period must be positive", ErrInvalidArgument)
	case o.Prep.Max >= o.Period:
		return fmt.Errorf("%w: preparation (up to %v) must be shorter than --period %v", ErrInvalidArgument, o.Prep.Max, o.Period)
	case o.Settle < 0, o.ReadyTimeout <= 0:
		return fmt.Errorf("%w: --settle must not be negative, --ready-timeout must be positive", ErrInvalidArgument)
	case o.LCIters == 0 && o.LCCalibrateUs <= 0, o.BEIters == 0 && o.BECalibrateMs <= 0:
		return fmt.Errorf("%w: kernel iterations must be positive", ErrInvalidArgument)
	case o.BEQueue < 1, o.LCThreads <= 0, o.BEThreads <= 0, o.LCBlocks < 0, o.BEBlocks < 0:
		return fmt.Errorf("%w: --be-queue, --*-threads must be positive, --*-blocks not negative", ErrInvalidArgument)
	case o.HintLauncher != "goroutine" && o.HintLauncher != "poller":
		return fmt.Errorf("%w: --hint-launcher %q: want goroutine or poller", ErrInvalidArgument, o.HintLauncher)
	case o.HintPrepQuantile < 0 || o.HintPrepQuantile >= 1:
		return fmt.Errorf("%w: --hint-prep-quantile %v: want a value in (0, 1), or 0 for the default", ErrInvalidArgument, o.HintPrepQuantile)
	}
	return nil
}

// runEnv is what the orchestrator needs from the outside world; tests
// replace the workers with scripts and the GPU probe with a stub.
type runEnv struct {
	// self is the argv prefix that runs this binary (its be and lc
	// subcommands are appended).
	self   []string
	probe  func(ordinal int) (DeviceInfo, error)
	stdout io.Writer
	log    *slog.Logger
}

type runner struct {
	o       runOptions
	env     runEnv
	ctl     *ctlRunner
	scripts string
	log     *slog.Logger
}

func runAll(ctx context.Context, o runOptions, env runEnv) error {
	log := env.log
	// Fail before starting anything on what would fail later anyway: no
	// GPU, no gpreemptctl, no output directory.
	info, err := env.probe(o.Device)
	if err != nil {
		return err
	}
	log.Info("device", "name", info.Name, "sms", info.SMs, "cc", info.CC, "driver", info.Driver)
	r := &runner{o: o, env: env, log: log}
	if slices.ContainsFunc(o.Scenarios, Scenario.NeedsCtl) {
		path, err := resolveCtl(o.Ctl)
		if err != nil {
			return err
		}
		r.o.Ctl = path
		r.ctl = &ctlRunner{path: path, log: log}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	if r.o.uses(RuntimePyTorch) {
		if r.scripts, err = r.pytorchScripts(); err != nil {
			return err
		}
	}

	host, _ := os.Hostname()
	res := &Results{
		Schema: SchemaVersion, Tool: "gpreempt-bench", StartedAt: time.Now().UTC(),
		Host: host, Device: info, Calibrated: map[string]uint64{},
	}
	finish := func(runErr error) error {
		if runErr != nil {
			res.Error = runErr.Error()
		}
		res.Config = r.o.config()
		if err := r.writeReports(res); err != nil {
			return errors.Join(runErr, err)
		}
		return runErr
	}

	if err := r.calibrate(ctx, res); err != nil {
		return finish(err)
	}
	for i, sc := range r.o.Scenarios {
		log.Info("scenario", "n", fmt.Sprintf("%d/%d", i+1, len(r.o.Scenarios)), "name", sc.Name)
		sr, err := r.runScenario(ctx, sc)
		res.Scenarios = append(res.Scenarios, sr)
		if err != nil {
			sr.Error = err.Error()
			return finish(fmt.Errorf("scenario %s: %w", sc.Name, err))
		}
	}
	return finish(nil)
}

// calibrate sizes the kernels once, alone on the GPU, before any scenario,
// so that every scenario runs the same work whatever the GPU's clocks and
// the PTX in the binary.
func (r *runner) calibrate(ctx context.Context, res *Results) error {
	if !r.o.uses(RuntimeKernels) {
		return nil
	}
	if r.o.BECalibrateMs > 0 && slices.ContainsFunc(r.o.Scenarios, func(s Scenario) bool { return s.Runtime == RuntimeKernels && s.BECount() > 0 }) {
		n, err := r.calibrateOne(ctx, "be", "--calibrate-ms", strconv.FormatFloat(r.o.BECalibrateMs, 'f', -1, 64),
			"--blocks", strconv.Itoa(r.o.BEBlocks), "--threads", strconv.Itoa(r.o.BEThreads))
		if err != nil {
			return fmt.Errorf("calibrate be_fma: %w", err)
		}
		r.o.BEIters = n
		res.Calibrated["be_kernel_iters"] = n
	}
	if r.o.LCCalibrateUs > 0 && slices.ContainsFunc(r.o.Scenarios, func(s Scenario) bool { return s.Runtime == RuntimeKernels && s.HasLC() }) {
		n, err := r.calibrateOne(ctx, "lc", "--calibrate-us", strconv.FormatFloat(r.o.LCCalibrateUs, 'f', -1, 64),
			"--blocks", strconv.Itoa(r.o.LCBlocks), "--threads", strconv.Itoa(r.o.LCThreads))
		if err != nil {
			return fmt.Errorf("calibrate lc_work: %w", err)
		}
		r.o.LCIters = n
		res.Calibrated["lc_kernel_iters"] = n
	}
	return nil
}

// calibrateOne runs "<self> <cmd> --calibrate-only ..." and parses its
// "ITERS <n>" line.
func (r *runner) calibrateOne(ctx context.Context, cmd string, args ...string) (uint64, error) {
	argv := r.calibrateArgv(cmd, args...)
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w: %s: %w\n%s", ErrWorker, strings.Join(argv, " "), err, indent(strings.TrimSpace(stderr.String())))
	}
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ITERS "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil || n == 0 {
				return 0, fmt.Errorf("%w: %s printed %q", ErrWorker, cmd, sc.Text())
			}
			r.log.Info("calibrated", "kernel", cmd, "iters", n)
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s --calibrate-only printed no ITERS line", ErrWorker, cmd)
}

func (r *runner) calibrateArgv(cmd string, args ...string) []string {
	argv := append(slices.Clone(r.env.self), cmd, "--device", strconv.Itoa(r.o.Device), "--calibrate-only")
	return append(argv, args...)
}

// pytorchScripts returns the directory holding the Python workers: the
// flag's, or the embedded copies written under the output directory (so the
// scripts that produced a result are kept beside it).
func (r *runner) pytorchScripts() (string, error) {
	if r.o.PyScripts != "" {
		for _, f := range []string{"lc_infer.py", "be_train.py"} {
			if _, err := os.Stat(filepath.Join(r.o.PyScripts, f)); err != nil {
				return "", fmt.Errorf("--pytorch-scripts: %w", err)
			}
		}
		return r.o.PyScripts, nil
	}
	dir := filepath.Join(r.o.Out, "pytorch-scripts")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	for _, f := range []string{"lc_infer.py", "be_train.py"} {
		b, err := pyscripts.FS.ReadFile(f)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return "", err
		}
	}
	// The libgpreempt wrapper, for the pytorch-prepreempt scenarios.
	if err := os.MkdirAll(filepath.Join(dir, "gpreempt"), 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(dir, "gpreempt", "__init__.py"), gpreemptpy.Init, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}

// beArgv and lcArgv build the worker command lines.
func (r *runner) beArgv(sc Scenario, out string) ([]string, []string) {
	// The BE is stopped with SIGTERM when the window ends; its own limit is
	// only a backstop against a lost orchestrator.
	backstop := 10*r.o.Duration + r.lcTimeout(sc) + 10*time.Minute
	if sc.Runtime == RuntimePyTorch {
		return []string{r.o.Python, "-u", filepath.Join(r.scripts, "be_train.py"),
			"--duration", fmtDuration(backstop), "--model", r.o.PyBEModel,
			"--batch", strconv.Itoa(r.o.PyBEBatch), "--device", strconv.Itoa(r.o.Device), "--out", out}, pythonEnv
	}
	return append(slices.Clone(r.env.self), "be",
		"--device", strconv.Itoa(r.o.Device),
		"--blocks", strconv.Itoa(r.o.BEBlocks), "--threads", strconv.Itoa(r.o.BEThreads),
		"--kernel-iters", strconv.FormatUint(r.o.BEIters, 10), "--queue", strconv.Itoa(r.o.BEQueue),
		"--duration", fmtDuration(backstop), "--out", out), nil
}

func (r *runner) lcArgv(sc Scenario, out string) ([]string, []string) {
	if sc.Runtime == RuntimePyTorch {
		argv := []string{r.o.Python, "-u", filepath.Join(r.scripts, "lc_infer.py"),
			"--period", fmtDuration(r.o.PyPeriod), "--requests", strconv.Itoa(r.o.lcRequests(sc.Runtime)),
			"--warmup", strconv.Itoa(r.o.PyWarmup), "--prep", r.o.Prep.String(),
			"--model", r.o.PyLCModel, "--batch", strconv.Itoa(r.o.PyLCBatch),
			"--device", strconv.Itoa(r.o.Device), "--wait-go", "--out", out}
		if r.o.PyGraph {
			argv = append(argv, "--cuda-graph")
		}
		if sc.Hints {
			// The wrapper is written beside the scripts; the library is
			// found next to this binary unless GPREEMPT_LIB says otherwise.
			env := append(slices.Clone(pythonEnv), "PYTHONPATH="+r.scripts)
			if os.Getenv("GPREEMPT_LIB") == "" && len(r.env.self) > 0 {
				env = append(env, "GPREEMPT_LIB="+filepath.Join(filepath.Dir(r.env.self[0]), "libgpreempt.so"))
			}
			return append(argv, "--hints", "--hint-launcher", r.o.HintLauncher), env
		}
		return argv, pythonEnv
	}
	argv := append(slices.Clone(r.env.self), "lc",
		"--device", strconv.Itoa(r.o.Device),
		"--period", fmtDuration(r.o.Period), "--prep-dist", r.o.Prep.String(),
		"--blocks", strconv.Itoa(r.o.LCBlocks), "--threads", strconv.Itoa(r.o.LCThreads),
		"--kernel-iters", strconv.FormatUint(r.o.LCIters, 10),
		"--requests", strconv.Itoa(r.o.lcRequests(sc.Runtime)), "--warmup", strconv.Itoa(r.o.Warmup),
		"--wait-go", "--out", out)
	if sc.Hints {
		argv = append(argv, "--hints", "--hint-launcher", r.o.HintLauncher)
		if r.o.HintPrepQuantile != 0 {
			argv = append(argv, "--hint-prep-quantile", strconv.FormatFloat(r.o.HintPrepQuantile, 'g', -1, 64))
		}
	}
	return argv, nil
}

// pythonEnv makes Python flush READY at once even if -u were dropped.
var pythonEnv = []string{"PYTHONUNBUFFERED=1"}

// lcTimeout bounds an LC worker's measurement: its nominal length three
// times over (requests can run late under contention) plus slack.
func (r *runner) lcTimeout(sc Scenario) time.Duration {
	period := r.o.Period
	if sc.Runtime == RuntimePyTorch {
		period = r.o.PyPeriod
	}
	return 3*time.Duration(r.o.lcRequests(sc.Runtime))*period + 2*time.Minute
}

func (r *runner) runScenario(ctx context.Context, sc Scenario) (sr *ScenarioResult, err error) {
	started := time.Now()
	sr = &ScenarioResult{Name: sc.Name, Kind: sc.Kind, Runtime: sc.Runtime, StartedAt: started.UTC()}
	if sc.BETimeslice > 0 {
		sr.BETimeslice = usArg(sc.BETimeslice)
	}
	dir := filepath.Join(r.o.Out, sc.Dir())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return sr, err
	}
	var all []*worker
	defer func() {
		// On any error, no worker outlives its scenario.
		for _, w := range all {
			w.kill()
		}
		sr.WallS = time.Since(started).Seconds()
	}()

	// BE workers first, all READY (context, channels and kernels exist, the
	// GPU is busy) before anything is changed or measured.
	var bes []*worker
	var beLabels []string
	for i := range sc.BECount() {
		label := "be"
		if sc.BECount() > 1 {
			label = fmt.Sprintf("be%d", i+1)
		}
		argv, env := r.beArgv(sc, filepath.Join(dir, label+".json"))
		w, err := startWorker(label, dir, argv, env, r.log)
		if err != nil {
			return sr, err
		}
		all = append(all, w)
		bes = append(bes, w)
		beLabels = append(beLabels, label)
	}
	for _, w := range bes {
		if err := w.waitReady(ctx, r.o.ReadyTimeout); err != nil {
			return sr, err
		}
	}
	beTimeslices := make([]string, len(bes))
	switch {
	case sc.Kind == KindShared && sc.BETimeslice > 0:
		beTimeslices[0] = usArg(sc.BETimeslice)
		if err := r.ctlCall(ctx, sr, "class", "--pid", strconv.Itoa(bes[0].pid()), "--be-timeslice", usArg(sc.BETimeslice), "be"); err != nil {
			return sr, err
		}
	case sc.Kind == KindBERatio:
		for i, w := range bes {
			beTimeslices[i] = usArg(sc.Ratio[i])
			if err := r.ctlCall(ctx, sr, "set-timeslice", "--pid", strconv.Itoa(w.pid()), usArg(sc.Ratio[i])); err != nil {
				return sr, err
			}
		}
	}

	if sc.HasLC() {
		lcOut := filepath.Join(dir, "lc.json")
		argv, env := r.lcArgv(sc, lcOut)
		lc, err := startWorker("lc", dir, argv, env, r.log)
		if err != nil {
			return sr, err
		}
		all = append(all, lc)
		if err := lc.waitReady(ctx, r.o.ReadyTimeout); err != nil {
			return sr, err
		}
		if sc.Kind == KindShared && sc.BETimeslice > 0 {
			// After READY: libcuda sets its own timeslice on the compute TSG
			// during context setup, which would overwrite an earlier policy.
			if err := r.ctlCall(ctx, sr, "class", "--pid", strconv.Itoa(lc.pid()), "lc"); err != nil {
				return sr, err
			}
		}
		if len(bes) > 0 {
			if err := sleepWatching(ctx, r.o.Settle, bes...); err != nil {
				return sr, err
			}
		}
		if err := lc.sendGo(); err != nil {
			return sr, err
		}
		if err := lc.wait(ctx, r.lcTimeout(sc), bes...); err != nil {
			return sr, err
		}
		var lr LCResult
		if err := readJSON(lcOut, &lr); err != nil {
			return sr, fmt.Errorf("%w: lc result: %w", ErrWorker, err)
		}
		sr.LC = &lr
		sr.WindowStartMonoNs, sr.WindowEndMonoNs = lr.MeasureStartMonoNs, lr.MeasureEndMonoNs
	} else {
		if err := sleepWatching(ctx, r.o.Settle, bes...); err != nil {
			return sr, err
		}
		sr.WindowStartMonoNs = monoNs(time.Now())
		if err := sleepWatching(ctx, r.o.Duration, bes...); err != nil {
			return sr, err
		}
		sr.WindowEndMonoNs = monoNs(time.Now())
	}

	for _, w := range bes {
		if err := w.stop(30 * time.Second); err != nil {
			return sr, err
		}
	}
	window := time.Duration(sr.WindowEndMonoNs - sr.WindowStartMonoNs)
	var errs []error
	for i, label := range beLabels {
		var br BEResult
		if err := readJSON(filepath.Join(dir, label+".json"), &br); err != nil {
			return sr, fmt.Errorf("%w: %s result: %w", ErrWorker, label, err)
		}
		if err := checkBE(label, &br); err != nil {
			errs = append(errs, err)
		}
		if br.EndMonoNs < sr.WindowEndMonoNs {
			errs = append(errs, fmt.Errorf("%w: %s stopped before the measurement window ended", ErrImplausible, label))
		}
		sh := BEShare{Label: label, Timeslice: beTimeslices[i], Result: &br}
		sh.WindowKernels = br.CountIn(sr.WindowStartMonoNs, sr.WindowEndMonoNs)
		if window > 0 {
			sh.WindowPerSec = float64(sh.WindowKernels) / window.Seconds()
		}
		if err := checkShare(sh, window); err != nil {
			errs = append(errs, err)
		}
		// The aggregate keeps rates; per-kernel times stay in the worker's
		// own file.
		trimmed := br
		trimmed.CompletionsMonoNs = nil
		sh.Result = &trimmed
		sr.BE = append(sr.BE, sh)
		sr.BEPerSec += sh.WindowPerSec
	}
	if sr.LC != nil {
		if err := checkLC(sr.LC, r.o.lcRequests(sc.Runtime)); err != nil {
			errs = append(errs, err)
		}
		summarizeLC(sr)
	}
	return sr, errors.Join(errs...)
}

// ctlCall runs gpreemptctl and records the call in the scenario.
func (r *runner) ctlCall(ctx context.Context, sr *ScenarioResult, args ...string) error {
	call, err := r.ctl.run(ctx, args...)
	sr.Ctl = append(sr.Ctl, call)
	return err
}

// summarizeLC fills in the LC statistics from the samples.
func summarizeLC(sr *ScenarioResult) {
	lat := make([]float64, len(sr.LC.Samples))
	gpu := make([]float64, len(sr.LC.Samples))
	var held int64
	for i, s := range sr.LC.Samples {
		lat[i] = float64(s.LatencyNs) / 1e3
		gpu[i] = float64(s.GPUNs) / 1e3
		held += s.GPUNs
	}
	ls, gs := stats.Summarize(lat), stats.Summarize(gpu)
	sr.LCLatencyUs, sr.LCGPUUs = &ls, &gs
	sr.LCHistogramUs = stats.Log2Histogram(lat)
	if w := sr.LC.MeasureEndMonoNs - sr.LC.MeasureStartMonoNs; w > 0 {
		sr.LCGPUHeldShare = float64(held) / float64(w)
	}
}

// computeRatios relates every scenario to its runtime's baselines.
func computeRatios(res *Results) {
	byName := map[string]*ScenarioResult{}
	for _, sr := range res.Scenarios {
		byName[sr.Name] = sr
	}
	for _, sr := range res.Scenarios {
		standalone, beOnly := baselineNames(sr.Runtime)
		if b := byName[standalone]; b != nil && b.LCLatencyUs != nil && sr.LCLatencyUs != nil && b.LCLatencyUs.P50 > 0 {
			sr.LCP50VsStandalone = sr.LCLatencyUs.P50 / b.LCLatencyUs.P50
			sr.LCP99VsStandalone = sr.LCLatencyUs.P99 / b.LCLatencyUs.P99
		}
		if b := byName[beOnly]; b != nil && b.BEPerSec > 0 && len(sr.BE) > 0 {
			sr.BEVsBEOnly = sr.BEPerSec / b.BEPerSec
		}
		sr.Warnings = scenarioWarnings(sr)
	}
}

// writeReports writes results.json, results.md and cdf.png, and prints the
// Markdown table.
func (r *runner) writeReports(res *Results) error {
	computeRatios(res)
	var errs []error
	if err := writeJSON(filepath.Join(r.o.Out, "results.json"), nil, res); err != nil {
		errs = append(errs, err)
	}
	var md bytes.Buffer
	if err := WriteMarkdown(&md, res); err != nil {
		errs = append(errs, err)
	} else {
		if err := os.WriteFile(filepath.Join(r.o.Out, "results.md"), md.Bytes(), 0o644); err != nil {
			errs = append(errs, err)
		}
		_, _ = r.env.stdout.Write(md.Bytes())
	}
	if err := PlotCDF(filepath.Join(r.o.Out, "cdf.png"), res); err != nil {
		errs = append(errs, fmt.Errorf("cdf.png: %w", err))
	}
	r.log.Info("wrote", "dir", r.o.Out)
	return errors.Join(errs...)
}
