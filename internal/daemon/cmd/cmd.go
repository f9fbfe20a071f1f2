// Package cmd is gpreemptd's command line.
package cmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	// --version as gpreemptctl and gpreempt-bench have it (urfave/cli's
	// version flag and printer are globals that cliutil sets).
	_ "github.com/gpreempt/gpreempt/internal/cliutil"
	"github.com/gpreempt/gpreempt/internal/daemon"
	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/version"
	"github.com/gpreempt/gpreempt/tsg"
)

// Exit codes (docs/DAEMON.md).
const (
	ExitOK             = 0
	ExitFailure        = 1
	ExitBadConfig      = 2
	ExitAlreadyRunning = 3
)

// Version is gpreemptd's version and revision, as every gpreempt binary
// reports them (internal/version).
var Version = version.Get().String()

// Run runs gpreemptd and returns its exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	code := ExitOK
	app := newApp(stdout, stderr, &code)
	if err := app.RunContext(ctx, args); err != nil {
		fmt.Fprintf(stderr, "gpreemptd: %v\n", err)
		if code == ExitOK {
			code = ExitFailure
		}
	}
	return code
}

// checkConfig validates each policy file, says ok or why not for each, and
// sets *code to ExitBadConfig when any is not.
func checkConfig(c *cli.Context, files []string, code *int) error {
	var bad []string
	for _, f := range files {
		p, err := policy.ParseFile(f)
		if err != nil {
			fmt.Fprintf(c.App.ErrWriter, "gpreemptd: %v\n", err)
			bad = append(bad, f)
			continue
		}
		fmt.Fprintf(c.App.Writer, "%s: ok (%d rules, default %s)\n", f, len(p.Rules), p.Default)
		for _, w := range p.Warnings() {
			fmt.Fprintf(c.App.ErrWriter, "gpreemptd: %s: warning: %s\n", f, w)
		}
	}
	if len(bad) > 0 {
		*code = ExitBadConfig
		return fmt.Errorf("%d of %d policy files invalid: %s", len(bad), len(files), strings.Join(bad, ", "))
	}
	return nil
}

// newApp is gpreemptd's command line; *code receives the exit code the
// action chose.
func newApp(stdout, stderr io.Writer, code *int) *cli.App {
	return &cli.App{
		Name:  "gpreemptd",
		Usage: "hold a GPU scheduling policy over every CUDA process of this node",
		// Flags only: no commands, so no "command" in the usage and no
		// help command (--help is the flag).
		UsageText:       "gpreemptd [options]\ngpreemptd --check-config FILE [FILE...]",
		HideHelpCommand: true,
		Version:         Version,
		Writer:          stdout,
		ErrWriter:       stderr,
		Flags: append([]cli.Flag{
			&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Value: daemon.DefaultPolicy, Usage: "policy file", EnvVars: []string{"GPREEMPTD_CONFIG"}},
			&cli.StringFlag{Name: "check-config", Usage: "validate this policy file, and every further argument as one more, and exit (0 all valid, 2 not)"},
			&cli.StringFlag{Name: "socket", Value: daemon.DefaultSocket, Usage: "unix socket of the local API (the lock file goes beside it)", EnvVars: []string{"GPREEMPTD_SOCKET"}},
			&cli.StringFlag{Name: "metrics-addr", Value: daemon.DefaultMetricsAddr, Usage: "Prometheus /metrics address (loopback; empty disables)", EnvVars: []string{"GPREEMPTD_METRICS_ADDR"}},
			&cli.BoolFlag{Name: "metrics-pids", Usage: "label per-process metric series with host pids (default: an opaque name per process, so that a scrape does not tell which pid runs in which pod)", EnvVars: []string{"GPREEMPTD_METRICS_PIDS"}},
			&cli.StringFlag{Name: "mode", Value: "auto", Usage: "event source: auto (eBPF, else /proc scan), bpf or scan", EnvVars: []string{"GPREEMPTD_MODE"}},
			&cli.DurationFlag{Name: "scan-interval", Value: daemon.DefaultScanInterval, Usage: "period of the /proc scan in scan mode"},
			&cli.BoolFlag{Name: "trace-requests", Usage: "SLO mode: measure the request latency of LC processes that push none with uprobes on libcuda (first launch to the synchronize call's return)", EnvVars: []string{"GPREEMPTD_TRACE_REQUESTS"}},
			&cli.BoolFlag{Name: "trace-per-cpu", Value: true, Usage: "SLO mode: judge a traced LC whose requests are launch-bound per its CPU's speed for a relative objective (each request over the median CPU work between its launches: its vCPU's speed taken out); false: as measured, where BE's CPU work shares the LC's cores and that cost should count", EnvVars: []string{"GPREEMPTD_TRACE_PER_CPU"}},
			&cli.StringFlag{Name: "libcuda", Usage: "the libcuda --trace-requests and --be-progress probe (--trace-requests: this file for every process that maps it, where by default each LC process that pushes no latency is traced alone, through the libcuda it has mapped; --be-progress counts in the one each BE process has mapped, and in this one where none is found)"},
			&cli.BoolFlag{Name: "be-progress", Value: true, Usage: "SLO mode: measure BE share from the BE processes' kernel launches (uprobes on their libcuda, counted in the kernel); where BPF is refused, BE share stays unknown", EnvVars: []string{"GPREEMPTD_BE_PROGRESS"}},
			&cli.DurationFlag{Name: "resync-interval", Value: 30 * time.Second, Usage: "in bpf mode, scan /proc this often too, for events the ring buffer dropped (negative: never)"},
			&cli.DurationFlag{Name: "debounce", Value: 20 * time.Millisecond, Usage: "class a context this long after its last setup call"},
			&cli.DurationFlag{Name: "max-wait", Value: 500 * time.Millisecond, Usage: "class a context at most this long after its first group appeared"},
			&cli.IntFlag{Name: "drift-burst", Value: 4, Usage: "re-applies of drift a group may have at once"},
			&cli.DurationFlag{Name: "drift-refill", Value: time.Second, Usage: "one more drift re-apply per group per this"},
			&cli.DurationFlag{Name: "policy-poll", Value: 2 * time.Second, Usage: "check the policy file for changes this often (negative: only on SIGHUP)"},
			&cli.IntFlag{Name: "handle-gap", Value: 4096, Usage: "end a client's object scan after this many unused handles (discovery cost; see gpreemptctl --handle-gap)"},
			&cli.BoolFlag{Name: "allow-unsupported-driver", Usage: "use the nearest known RM ABI on a driver version gpreempt does not know"},
			&cli.BoolFlag{Name: "leave-settings", Usage: "on shutdown, leave the groups as classed instead of restoring the driver's defaults"},
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error", EnvVars: []string{"GPREEMPTD_LOG_LEVEL"}},
			&cli.BoolFlag{Name: "nvml", Value: true, Usage: "use NVML's process lists to tell which GPU a process uses"},
		}, kubeFlags...),
		Action: func(c *cli.Context) error {
			if f := c.String("check-config"); f != "" {
				return checkConfig(c, append([]string{f}, c.Args().Slice()...), code)
			}
			// gpreemptd takes flags only: an argument is a mistake, and one
			// before a flag hides that flag from the parser (`--config X
			// extra --check-config Y` would otherwise start the daemon).
			if c.NArg() > 0 {
				*code = ExitBadConfig
				return fmt.Errorf("unexpected argument %q: gpreemptd takes flags only (--check-config FILE... checks policy files)", c.Args().First())
			}
			var level slog.Level
			if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				*code = ExitBadConfig
				return fmt.Errorf("--log-level %q", c.String("log-level"))
			}
			log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
			var info gpu.Info = gpu.Null{}
			if c.Bool("nvml") {
				if g, err := gpu.Open(log); err == nil {
					info = g
					defer g.Close()
				} else {
					log.Info("no NVML; GPUs are told from the /dev/nvidiaN files a process holds", "err", err)
				}
			}
			cfg := daemon.Config{
				PolicyFile: c.String("config"), Socket: c.String("socket"), MetricsAddr: c.String("metrics-addr"), MetricsPIDs: c.Bool("metrics-pids"),
				Mode: c.String("mode"), ScanInterval: c.Duration("scan-interval"), TraceRequests: c.Bool("trace-requests"), TraceAsMeasured: !c.Bool("trace-per-cpu"), LibCUDA: c.String("libcuda"), BEProgress: c.Bool("be-progress"), ResyncInterval: c.Duration("resync-interval"), PolicyPoll: c.Duration("policy-poll"),
				LeaveSettings: c.Bool("leave-settings"), Log: log, GPU: info, Version: Version,
				Scan: tsg.ScanOptions{HandleGap: c.Int("handle-gap"), AllowUnsupportedDriver: c.Bool("allow-unsupported-driver")},
				Reconcile: reconcile.Options{Debounce: c.Duration("debounce"), MaxWait: c.Duration("max-wait"),
					DriftBurst: c.Int("drift-burst"), DriftRefill: c.Duration("drift-refill")},
			}
			kubeStarted, err := startKube(c.Context, c, &cfg, log)
			if err != nil {
				if errors.Is(err, policy.ErrInvalid) {
					*code = ExitBadConfig
				} else {
					*code = ExitFailure
				}
				return err
			}
			d, err := daemon.New(c.Context, cfg)
			switch {
			case errors.Is(err, fs.ErrNotExist) && errors.Is(err, policy.ErrInvalid):
				*code = ExitBadConfig
				return fmt.Errorf("%w; install the example policy with `sudo make install`, or name one with --config (deploy/gpreemptd.yaml; docs/DAEMON.md)", err)
			case errors.Is(err, policy.ErrInvalid), errors.Is(err, tsg.ErrInvalidArgument):
				*code = ExitBadConfig
				return err
			case errors.Is(err, daemon.ErrAlreadyRunning):
				*code = ExitAlreadyRunning
				return err
			case err != nil:
				*code = ExitFailure
				return err
			}
			if kubeStarted != nil {
				kubeStarted(d)
			}
			if err := d.Run(c.Context); err != nil {
				*code = ExitFailure
				return err
			}
			return nil
		},
		ExitErrHandler: func(*cli.Context, error) {},
		OnUsageError: func(c *cli.Context, err error, _ bool) error {
			*code = ExitBadConfig
			return err
		},
	}
}
