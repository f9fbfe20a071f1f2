package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"
)

var runCommand = &cli.Command{
	Name:  "run",
	Usage: "run scenarios (LC and BE workers as separate processes) and report",
	Description: "Scenarios (--scenarios, comma-separated):\n" +
		"  standalone             LC worker alone: the latency baseline\n" +
		"  be-only                BE worker alone: the throughput baseline\n" +
		"  defaults               LC + BE at the driver's default timeslices\n" +
		"  be-<ts>                LC + BE; gpreemptctl class --be-timeslice <ts> be / class lc\n" +
		"  be-ratio:<ts1>:<ts2>   two BE workers; gpreemptctl set-timeslice <ts1> / <ts2>\n" +
		"  be-ratio:be:<w1>:be:<w2>  two BE workers in class be with weights w1, w2\n" +
		"  multi-tenant[:be:<w1>:be:<w2>]  two LC workers in class lc, two BE workers in\n" +
		"                         class be with weights w1, w2 (default 3 and 1)\n" +
		"  multi-tenant:<ts1>:<ts2>  the same, the BE workers in class be at ts1 and ts2\n" +
		"  multi-tenant:lc-only     the two LC workers in class lc, no BE\n" +
		"  prepreempt-<LC scenario>  the LC worker uses pre-preemption hints\n" +
		"  pytorch-standalone, pytorch-be-only, pytorch (driver defaults), pytorch-be-<ts>:\n" +
		"                         the same with bench/pytorch's lc_infer.py and be_train.py\n" +
		"  pytorch-eager-...      the same with an eager (launch-bound) lc_infer.py\n" +
		"  <LC scenario>@x<F>     the LC request period times F (rate sweep; compared\n" +
		"                         with standalone@x<F>)\n" +
		"  daemon:<be-<ts> scenario>  the same, but gpreemptd classes the workers (started\n" +
		"                         with GPREEMPT_CLASS=be / lc; no gpreemptctl class): the\n" +
		"                         harness polls gpreemptctl get-timeslice until BE reads\n" +
		"                         back <ts> and LC 5s (--daemon-poll, --daemon-timeout)\n" +
		"  slo:<scenario>         defaults (pytorch, pytorch-eager, prepreempt-defaults,\n" +
		"                         multi-tenant...) classed by gpreemptd in SLO mode: the LC\n" +
		"                         workers push their latency windows (--push-latency) to\n" +
		"                         --daemon-socket, the daemon chooses the BE timeslice, and\n" +
		"                         its status is recorded every --slo-poll (results.json \"slo\")\n" +
		"With --repeat N the list runs N times, interleaved (ABCD ABCD ...); the report gives\n" +
		"each repetition's ratios and, per scenario, their median and range and a bootstrap\n" +
		"95% CI of the ratio on the pooled requests. Each BE worker is started and READY\n" +
		"before the LC worker starts; gpreemptctl is applied once each worker's context\n" +
		"exists; the LC worker measures only after --settle more of saturating BE. Writes\n" +
		"results.json, results.md, cdf.png, timeline.png (and slo.png) to --out and every worker's JSON\n" +
		"and logs to --out/<scenario>[/rep<i>]/.",
	Flags: runFlags,
	Action: func(c *cli.Context) error {
		o, err := runOptionsFrom(c)
		if err != nil {
			return err
		}
		if c.Bool("plan") {
			if err := o.writePlan(c.App.Writer); err != nil {
				return err
			}
		}
		if err := o.checkTimeLimit(); err != nil || c.Bool("plan") {
			return err
		}
		self, err := os.Executable()
		if err != nil {
			return fmt.Errorf("locate own binary to start workers: %w", err)
		}
		env := runEnv{
			self:      []string{self},
			probe:     probeDevice,
			telemetry: openTelemetry,
			stdout:    c.App.Writer,
			log:       logger(c),
		}
		return runAll(c.Context, o, env)
	},
}

// runEnv is what the orchestrator needs from the outside world; tests
// replace the workers with scripts, the GPU probe with a stub and NVML
// with a mock.
type runEnv struct {
	// self is the argv prefix that runs this binary (its be and lc
	// subcommands are appended).
	self  []string
	probe func(ordinal int) (DeviceInfo, error)
	// telemetry opens the GPU's clock and power readings; nil or an error
	// leaves them out of the report.
	telemetry func(log *slog.Logger) (telemetrySource, error)
	stdout    io.Writer
	log       *slog.Logger
}

type runner struct {
	o       runOptions
	env     runEnv
	ctl     *ctlRunner
	scripts string
	sampler *sampler
	// stopSampling ends the sampler and closes NVML.
	stopSampling func()
	log          *slog.Logger
	// reload asks gpreemptd to re-read its policy; policyText is the
	// policy last written for it (--daemon-policy).
	reload     func(context.Context) error
	policyText string
}

// slot is one scenario run of the schedule.
type slot struct {
	Rep      int // 1-based
	Scenario Scenario
}

// schedule interleaves the repetitions: every scenario once, in the order
// given, then again, so that a drift over the run (clocks, temperature,
// other tenants) spreads over all scenarios instead of biasing one.
func schedule(scs []Scenario, repeat int) []slot {
	out := make([]slot, 0, len(scs)*repeat)
	for rep := 1; rep <= repeat; rep++ {
		for _, sc := range scs {
			out = append(out, slot{Rep: rep, Scenario: sc})
		}
	}
	return out
}

// The plan's allowances beyond each run's lead-in, settle and measurement,
// set above what runs took (docs/BENCHMARKS.md): a Python LC's start (a
// model built, warm-up requests) and stop; an slo: run's wait for gpreemptd
// to learn BE's rate alone more; a worker with no model to build; and the
// schedule's own setup (the device probe, NVML, gpreemptd's window read,
// kernel calibration).
const (
	pythonLCStart = 25 * time.Second
	sloWait       = 5 * time.Second
	workerStart   = 5 * time.Second
	scheduleSetup = 10 * time.Second
)

// measured is how long one run of sc measures: its LC's requests at its
// period where they outlast measureDuration (a kernel LC's 5000, --requests).
func (o *runOptions) measured(sc Scenario) time.Duration {
	m := o.measureDuration(sc)
	if sc.HasLC() {
		m = max(m, satMul(o.lcRequests(sc), o.period(sc)))
	}
	return m
}

// ownAloneOf is how long sc's LC takes by the plan to run its --own-alone requests in BE's idle
// halves: as many a duty period as fit a half past its guard (dutyPerHalf), and a duty period more
// to reach the first idle half.
func (o *runOptions) ownAloneOf(sc Scenario) time.Duration {
	d, p := o.dutyOf(sc), o.period(sc)
	if !o.ownAlone[sc.Name] || d <= 0 || p <= 0 {
		return 0
	}
	perDuty := max(1, int(dutyPerHalf(d, p)))
	return satMul((o.OwnAlone+perDuty-1)/perDuty+1, d)
}

// startOf is the plan's allowance for sc's workers' start and stop.
func (o *runOptions) startOf(sc Scenario) time.Duration {
	d := workerStart
	if sc.HasLC() && sc.Runtime.Python() {
		d = pythonLCStart
	}
	if sc.SLO {
		d += sloWait
	}
	return d
}

// planned is how long one run of sc takes by the plan.
func (o *runOptions) planned(sc Scenario) time.Duration {
	return satAdd(satAdd(satAdd(o.ownAloneOf(sc), o.leadIn(sc)), o.Settle), satAdd(o.measured(sc), o.startOf(sc)))
}

// plannedTotal is the whole schedule's planned time.
func (o *runOptions) plannedTotal() time.Duration {
	total := scheduleSetup
	for _, s := range schedule(o.Scenarios, o.Repeat) {
		total = satAdd(total, o.planned(s.Scenario))
	}
	return total
}

// satMul is n times d (both non-negative), held at the largest duration: a plan past any limit,
// not one wrapped round to a short one.
func satMul(n int, d time.Duration) time.Duration {
	if d > 0 && time.Duration(n) > math.MaxInt64/d {
		return math.MaxInt64
	}
	return time.Duration(n) * d
}

// satAdd is a + b of two non-negative durations, held at the largest one.
func satAdd(a, b time.Duration) time.Duration {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// writePlan prints each run's planned time and the total (--plan).
func (o *runOptions) writePlan(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "rep\tscenario\talone\tlead-in\tsettle\tmeasures\tstart\tplanned")
	for _, s := range schedule(o.Scenarios, o.Repeat) {
		sc := s.Scenario
		fmt.Fprintf(tw, "%d\t%s\t%v\t%v\t%v\t%v\t%v\t%v\n", s.Rep, sc.Name, o.ownAloneOf(sc), o.leadIn(sc), o.Settle, o.measured(sc), o.startOf(sc), o.planned(sc))
	}
	limit := "none"
	if o.TimeLimit > 0 {
		limit = o.TimeLimit.String()
	}
	fmt.Fprintf(tw, "total\t\t\t\t\t\t\t%v (with %v to set up; --time-limit %s)\n", o.plannedTotal(), scheduleSetup, limit)
	return tw.Flush()
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
	r := &runner{o: o, env: env, log: log, reload: reloadDaemon(o.DaemonSocket)}
	if slices.ContainsFunc(o.Scenarios, Scenario.NeedsCtl) {
		path, err := resolveCtl(o.Ctl)
		if err != nil {
			return err
		}
		r.o.Ctl = path
		r.ctl = &ctlRunner{path: path, log: log}
	}
	if slices.ContainsFunc(o.Scenarios, func(s Scenario) bool { return s.SLO }) && len(o.DaemonPolicies) == 0 {
		// LC workers push one latency window per observation. (Under
		// --daemon-policy the window is read after each policy is in.)
		if r.o.SLOWindow, err = sloWindow(ctx, fetchStatus(o.DaemonSocket), sloPatience); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return err
	}
	if r.o.usesPython() {
		if r.scripts, err = r.pytorchScripts(); err != nil {
			return err
		}
	}
	r.startTelemetry(ctx)
	defer r.stopTelemetry()

	host, _ := os.Hostname()
	res := &Results{
		Schema: ResultsSchemaVersion, Tool: "gpreempt-bench", StartedAt: time.Now().UTC(),
		Host: host, Device: info, Calibrated: map[string]uint64{},
	}
	finish := func(runErr error) error {
		if runErr != nil {
			res.Error = runErr.Error()
		}
		res.Config = r.o
		if err := r.writeReports(res); err != nil {
			return errors.Join(runErr, err)
		}
		return runErr
	}

	if err := r.calibrate(ctx, res); err != nil {
		return finish(err)
	}
	plan := schedule(r.o.Scenarios, r.o.Repeat)
	for i, s := range plan {
		log.Info("scenario", "n", fmt.Sprintf("%d/%d", i+1, len(plan)), "name", s.Scenario.Name, "rep", s.Rep)
		sr, err := r.runScenario(ctx, s, res.Scenarios)
		res.Scenarios = append(res.Scenarios, sr)
		if err != nil {
			sr.Error = err.Error()
			return finish(fmt.Errorf("scenario %s (repetition %d): %w", s.Scenario.Name, s.Rep, err))
		}
	}
	return finish(nil)
}
