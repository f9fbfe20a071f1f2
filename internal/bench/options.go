package bench

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/prepreempt"
)

// runOptions are the orchestrator's parameters, from the flags; the same
// value, after calibration, is recorded as results.json's "config".
type runOptions struct {
	Scenarios []Scenario `json:"scenarios"`
	// Repeat runs the whole scenario list this many times, interleaved
	// (ABCD ABCD ...), so that slow drifts (clocks, temperature, other
	// tenants) touch every scenario alike.
	Repeat   int           `json:"repeat"`
	Out      string        `json:"out"`
	Ctl      string        `json:"gpreemptctl,omitempty"`
	Device   int           `json:"device"`
	Duration time.Duration `json:"-"`
	// BEOnlyDuration is how long a be-only scenario measures (0:
	// Duration): a rate, which a shorter run gives too, so that shared
	// runs can measure long within the same time.
	BEOnlyDuration time.Duration `json:"-"`
	Settle         time.Duration `json:"-"`
	ReadyTimeout   time.Duration `json:"-"`
	// Seed drives the bootstrap, so that a report regenerated from the same
	// samples shows the same intervals.
	Seed uint64 `json:"seed"`
	// NVMLInterval is how often the GPU's clocks, power and temperature are
	// read during the run (0: not at all).
	NVMLInterval time.Duration `json:"-"`

	// DaemonPoll and DaemonTimeout pace the read-back of daemon:
	// scenarios' workers until gpreemptd has classed them.
	DaemonPoll    time.Duration `json:"-"`
	DaemonTimeout time.Duration `json:"-"`
	// DaemonSocket is gpreemptd's socket for slo: scenarios (the LC
	// workers push their latency to it; the harness polls its status).
	DaemonSocket string `json:"-"`
	// SLOPoll is how often slo: scenarios read the daemon's status.
	SLOPoll time.Duration `json:"-"`
	// SLOLeadIn is how long the LC of an slo: scenario runs, its latency
	// pushed to gpreemptd, before the measurement starts: the daemon's
	// search from its safe setting is not part of the measured window
	// (the status is recorded through it all).
	SLOLeadIn time.Duration `json:"slo_lead_in,omitempty"`
	// SLOWindow is gpreemptd's SLO window, read from its status before
	// the first slo: scenario: the LC workers push at this period.
	SLOWindow time.Duration `json:"slo_window,omitempty"`
	// SLONoPush: the LC workers of slo: scenarios push nothing; the daemon
	// measures them itself (gpreemptd --trace-requests).
	SLONoPush bool `json:"slo_no_push,omitempty"`
	// DaemonPolicies maps a scenario name (or "default") to the policy
	// file gpreemptd runs it under; DaemonConfig is the daemon's own
	// policy file, which the bench overwrites before asking it to reload.
	DaemonPolicies map[string]string `json:"daemon_policies,omitempty"`
	DaemonConfig   string            `json:"daemon_config,omitempty"`
	// OwnAlone is how many requests in BE's idle halves the LC of a
	// scenario whose policy names @OWN_P50@ (ownAlone) runs before its
	// lead-in.
	OwnAlone int `json:"own_alone,omitempty"`
	ownAlone map[string]bool
	// OwnAlonePolicy is gpreemptd's policy while those requests run, for every such scenario (its
	// SLO mode and window as the scenario's; "": the scenario's own with @OWN_P50@ an hour, where
	// that turns SLO mode off).
	OwnAlonePolicy string `json:"own_alone_policy,omitempty"`

	// LCEnv is added to every LC worker's environment (KEY=VALUE): with
	// CUDA_MPS_PIPE_DIRECTORY, the LCs run as clients of that MPS server
	// (one channel group) while BE workers stay outside it.
	LCEnv []string `json:"lc_env,omitempty"`
	// LCCPUs and BECPUs pin the LC and BE workers (CPU lists, "2-3,8"): an
	// eager LC is CPU-bound Python whose latency moves with where it runs.
	LCCPUs string        `json:"lc_cpus,omitempty"`
	BECPUs string        `json:"be_cpus,omitempty"`
	lcCPUs cpuset.CPUSet // parsed by validate
	beCPUs cpuset.CPUSet

	// HintLauncher is passed to LC workers of prepreempt-* scenarios.
	HintLauncher prepreempt.Launcher `json:"hint_launcher,omitempty"`
	// HintPrepQuantile is passed to Go LC workers of prepreempt-*
	// scenarios (0: the engine's default).
	HintPrepQuantile float64 `json:"hint_prep_quantile,omitempty"`

	Period time.Duration `json:"-"`
	Prep   PrepDist      `json:"prep"`
	// Requests is the measured LC requests per scenario run; 0 on the
	// command line means --duration / --period, and it is resolved to that
	// before anything runs.
	Requests      int     `json:"requests"`
	Warmup        int     `json:"warmup"`
	LCIters       uint64  `json:"lc_kernel_iters"`
	LCBlocks      int     `json:"lc_blocks"`
	LCThreads     int     `json:"lc_threads"`
	LCCalibrateUs float64 `json:"lc_calibrate_us,omitempty"`

	BEIters       uint64  `json:"be_kernel_iters"`
	BEBlocks      int     `json:"be_blocks"`
	BEThreads     int     `json:"be_threads"`
	BEQueue       int     `json:"be_queue"`
	BECalibrateMs float64 `json:"be_calibrate_ms,omitempty"`

	Python     string        `json:"python,omitempty"`
	PyScripts  string        `json:"pytorch_scripts,omitempty"`
	PyPeriod   time.Duration `json:"-"`
	PyRequests int           `json:"pytorch_requests,omitempty"`
	PyWarmup   int           `json:"pytorch_warmup,omitempty"`
	PyLCModel  string        `json:"pytorch_lc_model,omitempty"`
	PyLCBatch  int           `json:"pytorch_lc_batch,omitempty"`
	PyGraph    bool          `json:"pytorch_cuda_graph,omitempty"`
	PyBEModel  string        `json:"pytorch_be_model,omitempty"`
	PyBEBatch  int           `json:"pytorch_be_batch,omitempty"`

	LLMFamily    string        `json:"llm_family,omitempty"`
	LLMPeriod    time.Duration `json:"-"`
	LLMNewTokens int           `json:"llm_new_tokens,omitempty"`
	LLMPrompt    int           `json:"llm_prompt,omitempty"`
	LLMLoop      string        `json:"llm_loop,omitempty"`
	LLMWarmup    int           `json:"llm_warmup,omitempty"`
	LLMBatch     int           `json:"llm_batch,omitempty"`
	// LLMMetricsPort, when not 0, has the i-th LC of an llm- scenario
	// serve its latency histograms under vLLM's names on
	// 127.0.0.1:LLMMetricsPort+i (lc_decode.py --metrics-port), for a
	// daemon that scrapes them.
	LLMMetricsPort int `json:"llm_metrics_port,omitempty"`
	GEMMSize       int `json:"gemm_size,omitempty"`
	// BEDuty: the Python BE (be_gemm.py, be_train.py) works the first
	// half of every BEDuty and idles the second, so that each LC process
	// runs both beside BE and alone: in the llm- and pytorch-eager-
	// scenarios, whose LC's speed moves between processes, and with
	// BEDutyGraph in the pytorch- (CUDA graph) ones too (dutyOf).
	BEDuty      time.Duration `json:"be_duty,omitempty"`
	BEDutyGraph bool          `json:"be_duty_graph,omitempty"`
	// TimeLimit refuses a schedule whose plan outlasts it (0: none): a
	// run stopped at a caller's limit keeps nothing of itself.
	TimeLimit time.Duration `json:"-"`
}

// optionDurations lists the duration fields with their JSON keys: they are
// written as "3.5ms", as results.json always had them.
func (o *runOptions) optionDurations() map[string]*time.Duration {
	return map[string]*time.Duration{
		"duration": &o.Duration, "be_only_duration": &o.BEOnlyDuration, "settle": &o.Settle, "ready_timeout": &o.ReadyTimeout,
		"nvml_interval": &o.NVMLInterval, "daemon_poll": &o.DaemonPoll, "daemon_timeout": &o.DaemonTimeout, "period": &o.Period, "pytorch_period": &o.PyPeriod, "llm_period": &o.LLMPeriod,
	}
}

// MarshalJSON writes the options with their durations as strings.
func (o runOptions) MarshalJSON() ([]byte, error) {
	type plain runOptions
	b, err := json.Marshal(plain(o))
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k, d := range o.optionDurations() {
		if *d != 0 {
			m[k], _ = json.Marshal(fmtDuration(*d))
		}
	}
	// Not options, but what readers of old files looked for.
	m["be_calibrated"], _ = json.Marshal(o.BECalibrateMs > 0)
	m["lc_calibrated"], _ = json.Marshal(o.LCCalibrateUs > 0)
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes, and the config of results
// written before repetitions existed (the same keys, fewer of them).
func (o *runOptions) UnmarshalJSON(b []byte) error {
	type plain runOptions
	if err := json.Unmarshal(b, (*plain)(o)); err != nil {
		return err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	for k, d := range o.optionDurations() {
		raw, ok := m[k]
		if !ok {
			continue
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return fmt.Errorf("config %s: %w", k, err)
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("config %s: %w", k, err)
		}
		*d = v
	}
	return nil
}

// MarshalText and UnmarshalText let a scenario list be recorded by name.
func (s Scenario) MarshalText() ([]byte, error) { return []byte(s.Name), nil }

func (s *Scenario) UnmarshalText(b []byte) error {
	v, err := parseScenario(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// MarshalText and UnmarshalText record a preparation distribution as
// ParsePrep reads it.
func (p PrepDist) MarshalText() ([]byte, error) { return []byte(p.String()), nil }

func (p *PrepDist) UnmarshalText(b []byte) error {
	v, err := ParsePrep(string(b))
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// minP99Requests is the fewest LC requests per scenario run for which a
// p99 rests on at least 50 requests above it.
const minP99Requests = 5000

var runFlags = []cli.Flag{
	&cli.StringFlag{Name: "scenarios", Value: DefaultScenarios, Usage: "comma-separated scenarios"},
	&cli.StringFlag{Name: "out", Required: true, Usage: "output directory"},
	&cli.StringFlag{Name: "gpreemptctl", Usage: "gpreemptctl binary (default: next to this binary, then $PATH)", EnvVars: []string{"GPREEMPTCTL"}},
	deviceFlag,
	&cli.IntFlag{Name: "repeat", Value: 1, Usage: "run the scenario list this many times, interleaved (ABCD ABCD ...), and report the spread and a bootstrap 95% CI of every ratio"},
	&cli.DurationFlag{Name: "duration", Value: 20 * time.Second, Usage: "measurement time per scenario run (the default gives >= 5000 LC requests at the default --period, so that p99 rests on >= 50 requests above it)"},
	&cli.DurationFlag{Name: "be-only-duration", Usage: "measurement time of the be-only scenarios, the BE rate the others are compared with (default: --duration)"},
	&cli.DurationFlag{Name: "soak", Usage: "long run: one repetition of every scenario for this long (overrides --duration, needs --repeat 1); latency over time goes to timeline.png"},
	&cli.DurationFlag{Name: "time-limit", Usage: "refuse, before anything starts, a schedule whose plan (--plan) outlasts this: a run stopped at a caller's time limit keeps nothing of itself (0: no limit)"},
	&cli.BoolFlag{Name: "plan", Usage: "print each run's planned time (lead-in, settle, measurement and a worker's start) and their total, check --time-limit, and start nothing"},
	&cli.DurationFlag{Name: "settle", Value: time.Second, Usage: "BE running time after gpreemptctl before measuring"},
	&cli.DurationFlag{Name: "ready-timeout", Value: 120 * time.Second, Usage: "how long a worker may take to print READY"},
	&cli.Uint64Flag{Name: "seed", Value: 1, Usage: "seed of the bootstrap resampling"},
	&cli.DurationFlag{Name: "daemon-poll", Value: 20 * time.Millisecond, Usage: "daemon:* scenarios: pause between read-backs (gpreemptctl get-timeslice) of a worker until gpreemptd has classed it"},
	&cli.StringFlag{Name: "daemon-socket", Usage: "slo:* scenarios: gpreemptd's socket (default: $GPREEMPTD_SOCKET, else /run/gpreempt/gpreemptd.sock)"},
	&cli.DurationFlag{Name: "slo-poll", Value: 250 * time.Millisecond, Usage: "slo:* scenarios: how often the daemon's status (the BE timeslice it chose) is recorded"},
	&cli.DurationFlag{Name: "slo-lead-in", Value: 20 * time.Second, Usage: "slo:* scenarios: LC requests run (and pushed to gpreemptd) this long before the measurement, so the measured window shows where the daemon settled, not its search (0: measure from the first request)"},
	&cli.BoolFlag{Name: "slo-push", Value: true, Usage: "slo:* scenarios: the LC workers push their latency windows to gpreemptd (false: they push nothing, for a daemon that traces requests itself, gpreemptd --trace-requests)"},
	&cli.StringSliceFlag{Name: "daemon-policy", Usage: "SCENARIO=FILE (repeatable; default=FILE for the scenarios not named): gpreemptd runs SCENARIO under FILE, written over --daemon-config and reloaded before the scenario starts; @ALONE_P50*F@ in FILE becomes F times the p50 of the last standalone run before it (an absolute objective from this run's LC alone)"},
	&cli.StringFlag{Name: "daemon-config", Usage: "with --daemon-policy: the policy file gpreemptd was started with (its --config), which the bench overwrites"},
	&cli.DurationFlag{Name: "daemon-timeout", Value: 10 * time.Second, Usage: "daemon:* scenarios: fail when a worker's groups do not read back its class this long after READY"},
	&cli.DurationFlag{Name: "nvml-interval", Value: 50 * time.Millisecond, Usage: "how often to read the GPU's SM clock, power, temperature and throttle reasons through NVML (0: never)"},

	&cli.DurationFlag{Name: "period", Value: 3500 * time.Microsecond, Usage: "LC request period"},
	&cli.DurationFlag{Name: "prep", Usage: "LC fixed preparation time"},
	&cli.StringFlag{Name: "prep-dist", Usage: "LC preparation distribution (overrides --prep): DURATION, fixed:DURATION, uniform:MIN:MAX"},
	&cli.IntFlag{Name: "requests", Usage: "LC measured requests per scenario run (0: --duration / --period)"},
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
	&cli.StringSliceFlag{Name: "lc-env", Usage: "KEY=VALUE added to every LC worker's environment (repeatable; the value is taken whole, commas included); CUDA_MPS_PIPE_DIRECTORY=DIR runs the LCs as clients of the MPS control daemon there, the BEs outside it"},
	&cli.StringFlag{Name: "lc-cpus", Usage: "pin every LC worker to these CPUs (a list such as 2-3,8; default: not pinned)"},
	&cli.StringFlag{Name: "be-cpus", Usage: "pin every BE worker to these CPUs (default: not pinned)"},
	&cli.StringFlag{Name: "hint-launcher", Value: string(prepreempt.LauncherGoroutine), Usage: "prepreempt-* scenarios: the engine's launcher, goroutine or poller"},
	&cli.Float64Flag{Name: "hint-prep-quantile", Usage: "prepreempt-* scenarios (Go LC worker): quantile of recent preparation times the engine predicts with (0: its default, 0.02)"},
	&cli.BoolFlag{Name: "pytorch-cuda-graph", Value: true, Usage: "pytorch-* scenarios: lc_infer.py replays a CUDA graph (pytorch-eager-* scenarios never do: their LC is launch-bound)"},
	&cli.StringFlag{Name: "pytorch-be-model", Value: "resnet50", Usage: "torchvision model for be_train.py"},
	&cli.IntFlag{Name: "pytorch-be-batch", Value: 64, Usage: "be_train.py batch size"},
	&cli.StringFlag{Name: "llm-family", Value: "gpt2", Usage: "llm-* scenarios: lc_decode.py's model shape (gpt2: GPT-2 medium, gpt2-small, llama: a 16-layer Llama, llama-330m: 24 layers)"},
	&cli.IntFlag{Name: "llm-batch", Value: 1, Usage: "llm-* eager scenarios: sequences decoded together per request"},
	&cli.IntFlag{Name: "llm-metrics-port", Usage: "llm-* scenarios: the LC serves vLLM-named latency histograms on 127.0.0.1:PORT (the i-th LC on PORT+i; lc_decode.py --metrics-port) for a daemon that scrapes them (0: none)"},
	&cli.DurationFlag{Name: "llm-period", Value: 800 * time.Millisecond, Usage: "llm-* scenarios: time between decode requests"},
	&cli.IntFlag{Name: "llm-new-tokens", Value: 16, Usage: "llm-* scenarios: tokens decoded per request"},
	&cli.IntFlag{Name: "llm-prompt", Value: 64, Usage: "llm-* scenarios: prompt tokens"},
	&cli.StringFlag{Name: "llm-loop", Value: "generate", Usage: "llm-* eager scenarios: generate (transformers' generate()) or lean (a forward loop with one sync a token)"},
	&cli.IntFlag{Name: "llm-warmup", Value: 3, Usage: "llm-* scenarios: warmup requests"},
	&cli.StringFlag{Name: "own-alone-policy", Usage: "gpreemptd's policy while an @OWN_P50@ scenario's LC runs its requests alone, for every such scenario: needed where the scenario's policy turns SLO mode on, with the same SLO mode and window (default: the scenario's own, the placeholder an hour); a one-rung slo.ladder holds that arm meanwhile and starts SLO mode's search afresh once the scenario's own is in"},
	&cli.IntFlag{Name: "own-alone", Value: 20, Usage: "an llm-* scenario whose daemon policy names @OWN_P50*F@: its LC runs requests at its period until this many ran inside BE's idle halves (--be-duty), then F times their p50 (request latency) fills the placeholder and the policy is reloaded before its lead-in (an absolute objective from this LC process alone; until then the placeholder is an hour)"},
	&cli.IntFlag{Name: "gemm-size", Value: 8192, Usage: "llm-* scenarios: be_gemm.py's matrix size (n x n x n fp16)"},
	&cli.DurationFlag{Name: "be-duty", Value: DefaultBEDuty, Usage: "llm-* and pytorch-eager-* scenarios (given explicitly: pytorch-* too): the BE works the first half of every such period (CLOCK_MONOTONIC) and idles the second, and the report compares each LC process's requests of the two halves; a run measures long enough for 30 requests a half (0: BE works throughout)"},
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
		Scenarios: scs, Repeat: c.Int("repeat"), Out: c.String("out"), Ctl: c.String("gpreemptctl"), Device: c.Int("device"),
		Duration: c.Duration("duration"), BEOnlyDuration: c.Duration("be-only-duration"), Settle: c.Duration("settle"), ReadyTimeout: c.Duration("ready-timeout"),
		Seed: c.Uint64("seed"), NVMLInterval: c.Duration("nvml-interval"),
		DaemonPoll: c.Duration("daemon-poll"), DaemonTimeout: c.Duration("daemon-timeout"),
		DaemonSocket: api.SocketPath(c.String("daemon-socket")), SLOPoll: c.Duration("slo-poll"), SLOLeadIn: c.Duration("slo-lead-in"),
		SLONoPush: !c.Bool("slo-push"), Period: c.Duration("period"), Prep: prep, Requests: c.Int("requests"), Warmup: c.Int("warmup"),
		LCIters: c.Uint64("lc-iters"), LCBlocks: c.Int("lc-blocks"), LCThreads: c.Int("lc-threads"), LCCalibrateUs: c.Float64("lc-calibrate-us"),
		BEIters: c.Uint64("be-iters"), BEBlocks: c.Int("be-blocks"), BEThreads: c.Int("be-threads"), BEQueue: c.Int("be-queue"), BECalibrateMs: c.Float64("be-calibrate-ms"),
		Python: c.String("python"), PyScripts: c.String("pytorch-scripts"), PyPeriod: c.Duration("pytorch-period"),
		PyRequests: c.Int("pytorch-requests"), PyWarmup: c.Int("pytorch-warmup"),
		PyLCModel: c.String("pytorch-lc-model"), PyLCBatch: c.Int("pytorch-lc-batch"), PyGraph: c.Bool("pytorch-cuda-graph"),
		PyBEModel: c.String("pytorch-be-model"), PyBEBatch: c.Int("pytorch-be-batch"),
		LLMFamily: c.String("llm-family"), LLMPeriod: c.Duration("llm-period"), LLMNewTokens: c.Int("llm-new-tokens"),
		LLMPrompt: c.Int("llm-prompt"), LLMLoop: c.String("llm-loop"), LLMWarmup: c.Int("llm-warmup"), LLMBatch: c.Int("llm-batch"), LLMMetricsPort: c.Int("llm-metrics-port"), GEMMSize: c.Int("gemm-size"), BEDuty: c.Duration("be-duty"), BEDutyGraph: c.IsSet("be-duty"), TimeLimit: c.Duration("time-limit"),
		HintLauncher: prepreempt.Launcher(c.String("hint-launcher")), HintPrepQuantile: c.Float64("hint-prep-quantile"),
		LCEnv: c.StringSlice("lc-env"), LCCPUs: c.String("lc-cpus"), BECPUs: c.String("be-cpus"),
	}
	if o.DaemonPolicies, o.ownAlone, err = parsePolicies(c.StringSlice("daemon-policy"), scs); err != nil {
		return runOptions{}, err
	}
	if len(o.ownAlone) > 0 {
		o.OwnAlone, o.OwnAlonePolicy = c.Int("own-alone"), c.String("own-alone-policy")
	} else if c.IsSet("own-alone-policy") || c.IsSet("own-alone") {
		return runOptions{}, fmt.Errorf("%w: --own-alone and --own-alone-policy: no scenario's --daemon-policy names @OWN_P50@", ErrInvalidArgument)
	}
	if err := o.checkOwnAlone(); err != nil {
		return runOptions{}, err
	}
	o.DaemonConfig = c.String("daemon-config")
	if soak := c.Duration("soak"); soak != 0 {
		if o.Repeat != 1 {
			return runOptions{}, fmt.Errorf("%w: --soak runs every scenario once, for long: drop --repeat %d", ErrInvalidArgument, o.Repeat)
		}
		if soak < 0 {
			return runOptions{}, fmt.Errorf("%w: --soak %v must be positive", ErrInvalidArgument, soak)
		}
		o.Duration = soak
	}
	return o, o.validate()
}

// benchLCEnv is what the bench itself puts in an LC worker's environment
// (the daemon's classing variables, the Python wrapper's): not for --lc-env.
var benchLCEnv = []string{classEnvVar, workerEnvVar, "PYTHONPATH", "PYTHONUNBUFFERED", "GPREEMPT_LIB"}

func (o *runOptions) validate() error {
	noDuty := slices.IndexFunc(o.Scenarios, func(sc Scenario) bool { return o.ownAlone[sc.Name] && o.dutyOf(sc) <= 0 })
	switch {
	case o.Repeat < 1:
		return fmt.Errorf("%w: --repeat %d: want at least 1", ErrInvalidArgument, o.Repeat)
	case len(o.ownAlone) > 0 && (o.OwnAlone < 1 || o.OwnAlone > 1000):
		return fmt.Errorf("%w: --own-alone %d: a policy names @OWN_P50@, so its LC runs 1-1000 requests alone", ErrInvalidArgument, o.OwnAlone)
	case noDuty >= 0:
		return fmt.Errorf("%w: %s's policy names @OWN_P50@, whose LC alone is taken in BE's idle halves: it needs BE and --be-duty", ErrInvalidArgument, o.Scenarios[noDuty].Name)
	case o.Duration <= 0, o.Period <= 0, o.PyPeriod <= 0, o.LLMPeriod <= 0 && o.usesLLM():
		return fmt.Errorf("%w: --duration, --period, --pytorch-period and --llm-period must be positive", ErrInvalidArgument)
	case o.BEOnlyDuration < 0:
		return fmt.Errorf("%w: --be-only-duration %v: want a positive duration (or none: --duration)", ErrInvalidArgument, o.BEOnlyDuration)
	case o.usesLLM() && !slices.Contains([]string{"gpt2", "gpt2-small", "llama", "llama-330m"}, o.LLMFamily):
		return fmt.Errorf("%w: --llm-family %q: want gpt2, gpt2-small, llama or llama-330m", ErrInvalidArgument, o.LLMFamily)
	case o.usesLLM() && (o.LLMBatch < 1 || o.LLMBatch > 256 || o.LLMMetricsPort < 0 || o.LLMMetricsPort > 65000):
		return fmt.Errorf("%w: --llm-batch 1-256, --llm-metrics-port 0-65000", ErrInvalidArgument)
	case o.LLMBatch > 1 && slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.Runtime == RuntimeLLMGraph }):
		return fmt.Errorf("%w: --llm-batch %d: the llm-graph- scenarios decode one sequence", ErrInvalidArgument, o.LLMBatch)
	case o.usesLLM() && (o.LLMNewTokens < 2 || o.LLMNewTokens > 4096 || o.LLMPrompt < 1 || o.LLMPrompt > 4096 || o.LLMWarmup < 0 || o.GEMMSize < 1 || o.GEMMSize > 32768):
		return fmt.Errorf("%w: --llm-new-tokens 2-4096, --llm-prompt 1-4096, --llm-warmup >= 0, --gemm-size 1-32768", ErrInvalidArgument)
	case o.LLMMetricsPort < 0 || o.LLMMetricsPort > 65535:
		return fmt.Errorf("%w: --llm-metrics-port %d: want 0-65535", ErrInvalidArgument, o.LLMMetricsPort)
	case o.usesLLM() && o.LLMLoop != "generate" && o.LLMLoop != "lean":
		return fmt.Errorf("%w: --llm-loop %q: want generate or lean", ErrInvalidArgument, o.LLMLoop)
	case o.Prep.Max >= o.Period:
		return fmt.Errorf("%w: preparation (up to %v) must be shorter than --period %v", ErrInvalidArgument, o.Prep.Max, o.Period)
	case o.Settle < 0, o.ReadyTimeout <= 0:
		return fmt.Errorf("%w: --settle must not be negative, --ready-timeout must be positive", ErrInvalidArgument)
	case o.SLOPoll < 0, o.SLOLeadIn < 0, o.TimeLimit < 0:
		return fmt.Errorf("%w: --slo-poll, --slo-lead-in and --time-limit must not be negative", ErrInvalidArgument)
	case o.DaemonPoll < 0, o.DaemonTimeout <= 0 && slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.Daemon }):
		return fmt.Errorf("%w: --daemon-poll must not be negative, --daemon-timeout must be positive", ErrInvalidArgument)
	case o.NVMLInterval < 0:
		return fmt.Errorf("%w: --nvml-interval %v must not be negative", ErrInvalidArgument, o.NVMLInterval)
	case o.Requests < 0, o.PyRequests < 0:
		return fmt.Errorf("%w: --requests and --pytorch-requests must not be negative", ErrInvalidArgument)
	case o.LCIters == 0 && o.LCCalibrateUs <= 0, o.BEIters == 0 && o.BECalibrateMs <= 0:
		return fmt.Errorf("%w: kernel iterations must be positive", ErrInvalidArgument)
	case o.BEQueue < 1, o.LCThreads <= 0, o.BEThreads <= 0, o.LCBlocks < 0, o.BEBlocks < 0:
		return fmt.Errorf("%w: --be-queue, --*-threads must be positive, --*-blocks not negative", ErrInvalidArgument)
	case !slices.Contains(prepreempt.Launchers, o.HintLauncher):
		return fmt.Errorf("%w: --hint-launcher %q: want one of %v", ErrInvalidArgument, o.HintLauncher, prepreempt.Launchers)
	case o.HintPrepQuantile < 0 || o.HintPrepQuantile >= 1:
		return fmt.Errorf("%w: --hint-prep-quantile %v: want a value in (0, 1), or 0 for the default", ErrInvalidArgument, o.HintPrepQuantile)
	}
	for _, kv := range o.LCEnv {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return fmt.Errorf("%w: --lc-env %q: want KEY=VALUE", ErrInvalidArgument, kv)
		}
		if slices.Contains(benchLCEnv, k) {
			return fmt.Errorf("%w: --lc-env %q: the bench sets %s itself (one of %v)", ErrInvalidArgument, kv, k, benchLCEnv)
		}
	}
	if len(o.DaemonPolicies) > 0 && o.DaemonConfig == "" {
		return fmt.Errorf("%w: --daemon-policy needs --daemon-config, the policy file gpreemptd was started with", ErrInvalidArgument)
	}
	if err := o.validateDuty(); err != nil {
		return err
	}
	var err error
	if o.lcCPUs, err = parseCPUs("--lc-cpus", o.LCCPUs); err != nil {
		return err
	}
	if o.beCPUs, err = parseCPUs("--be-cpus", o.BECPUs); err != nil {
		return err
	}
	for _, sc := range o.Scenarios {
		if sc.PeriodFactor != 0 && o.Prep.Max >= o.period(sc) {
			return fmt.Errorf("%w: scenario %s: preparation (up to %v) must be shorter than its period %v", ErrInvalidArgument, sc.Name, o.Prep.Max, o.period(sc))
		}
	}
	return nil
}

// checkTimeLimit refuses a schedule whose plan outlasts --time-limit.
func (o *runOptions) checkTimeLimit() error {
	if o.TimeLimit == 0 {
		return nil
	}
	if total := o.plannedTotal(); total > o.TimeLimit {
		return fmt.Errorf("%w: the schedule needs about %v by its plan (--plan), more than --time-limit %v: its last run would be cut and lost; run fewer scenarios, or shorten --duration, --be-only-duration, --slo-lead-in or --own-alone",
			ErrInvalidArgument, total, o.TimeLimit)
	}
	return nil
}

// parseCPUs parses a CPU list given to flag and asks the kernel whether a
// thread may be pinned to exactly those CPUs (offline ones, or ones outside
// the cgroup's cpuset, would fail only once a worker starts). Empty: not
// pinned.
func parseCPUs(flag, list string) (cpuset.CPUSet, error) {
	if list == "" {
		return cpuset.New(), nil
	}
	bad := fmt.Errorf("%w: %s %q: want a CPU list such as 2-3,8, CPUs below %d", ErrInvalidArgument, flag, list, maxCPUs)
	// Bound every number first: the parser walks each range one CPU at a time.
	for _, f := range strings.FieldsFunc(list, func(r rune) bool { return r == ',' || r == '-' }) {
		if n, err := strconv.Atoi(f); err != nil || n < 0 || n >= maxCPUs {
			return cpuset.New(), bad
		}
	}
	cpus, err := cpuset.Parse(list)
	if err != nil || cpus.IsEmpty() {
		return cpuset.New(), bad
	}
	if err := onCPUs(cpus, func() error { return nil }); err != nil {
		return cpuset.New(), fmt.Errorf("%w: %s %q: %w", ErrInvalidArgument, flag, list, err)
	}
	return cpus, nil
}

// validateDuty checks --be-duty against the scenarios it applies to.
func (o *runOptions) validateDuty() error {
	if o.BEDuty == 0 {
		return nil
	}
	if o.BEDuty < minBEDuty || o.BEDuty%time.Millisecond != 0 {
		return fmt.Errorf("%w: --be-duty %v: want whole milliseconds, at least %v (each half must hold requests that start %v into it)", ErrInvalidArgument, o.BEDuty, minBEDuty, dutyGuard)
	}
	applies := false
	for _, sc := range o.Scenarios {
		if o.dutyOf(sc) == 0 {
			continue
		}
		applies = true
		if p := o.period(sc); sc.HasLC() && dutyPerHalf(o.BEDuty, p) < 1 {
			return fmt.Errorf("%w: --be-duty %v: %s's requests every %v do not fit a half past its %v guard; want a period of at least %v", ErrInvalidArgument, o.BEDuty, sc.Name, p, dutyGuard, 2*(2*p+dutyGuard))
		}
	}
	if !applies && o.BEDutyGraph {
		return fmt.Errorf("%w: --be-duty: no scenario runs a BE that can idle (the Python BE of the llm-* and pytorch-* scenarios)", ErrInvalidArgument)
	}
	return nil
}

// dutyOf is the BE duty period of sc's runs (0: BE works throughout). The
// kernel BE (be_fma) never idles; the CUDA-graph PyTorch LC is steady
// between processes, so its scenarios take a duty only when asked.
func (o *runOptions) dutyOf(sc Scenario) time.Duration {
	if o.BEDuty <= 0 || sc.BECount() == 0 {
		return 0
	}
	switch {
	case sc.Runtime.LLM(), sc.Runtime == RuntimePyTorchEager:
		return o.BEDuty
	case sc.Runtime == RuntimePyTorch && o.BEDutyGraph:
		return o.BEDuty
	}
	return 0
}

// measureDuration is how long one run of sc measures: --duration (a
// be-only one's --be-only-duration), raised under a BE duty until each half
// holds minDutyRequests of the LC's requests (dutyLength).
func (o *runOptions) measureDuration(sc Scenario) time.Duration {
	base := o.Duration
	if sc.Kind == KindBEOnly && o.BEOnlyDuration > 0 {
		base = o.BEOnlyDuration
	}
	d := o.dutyOf(sc)
	if d == 0 {
		return base
	}
	return max(base, dutyLength(d, o.period(sc), sc.HasLC()))
}

// maxCPUs is the most CPUs a mask holds (the kernel's CPU_SETSIZE).
const maxCPUs = len(unix.CPUSet{}) * 64

// usesLLM reports whether any scenario runs the LLM decode worker.
func (o *runOptions) usesLLM() bool {
	return slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.Runtime.LLM() })
}

// usesPython reports whether any scenario runs the Python workers.
func (o *runOptions) usesPython() bool {
	return slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.Runtime.Python() })
}

// period is the LC request period of sc: the runtime's, times the
// scenario's rate-sweep factor.
func (o *runOptions) period(sc Scenario) time.Duration {
	p := o.Period
	switch {
	case sc.Runtime.LLM():
		p = o.LLMPeriod
	case sc.Runtime.Python():
		p = o.PyPeriod
	}
	if sc.PeriodFactor > 0 {
		p = time.Duration(float64(p) * sc.PeriodFactor)
	}
	return p
}

// lcRequests is the measured request count of one run of sc: explicit, or
// enough to fill the scenario duration at its period.
func (o *runOptions) lcRequests(sc Scenario) int {
	if sc.Runtime.Python() {
		// A Python LC at tens of milliseconds a request cannot reach
		// minP99Requests in a sensible time: the report warns instead.
		fill := func() int { return max(1, int(o.measureDuration(sc)/o.period(sc))) }
		if o.PyRequests > 0 && sc.PeriodFactor == 0 && !sc.Runtime.LLM() {
			if o.dutyOf(sc) > 0 {
				return max(o.PyRequests, fill())
			}
			return o.PyRequests
		}
		return fill()
	}
	if o.Requests > 0 && sc.PeriodFactor == 0 {
		return o.Requests
	}
	return max(minP99Requests, int(o.Duration/o.period(sc)))
}
