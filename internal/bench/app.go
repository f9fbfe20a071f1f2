// Package bench implements gpreempt-bench, the measurement harness for
// gpreempt: worker processes that put latency-critical (LC) and best-effort
// (BE) load on one GPU, and an orchestrator that runs them in scenarios,
// applies gpreempt's scheduling classes with gpreemptctl, checks that the
// numbers are plausible and reports them.
//
// Workers run as separate processes, as real tenants do: each has its own
// CUDA context and so its own TSGs, which is what the GPU time-slices and
// what gpreemptctl changes.
package bench

import (
	"errors"
	"log/slog"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/cliutil"
	"github.com/gpreempt/gpreempt/internal/version"
)

// Exit codes of gpreempt-bench, set by main from the error.
const (
	ExitOK          = 0
	ExitFailure     = 1 // a worker, gpreemptctl or the run failed
	ExitUsage       = 2 // bad flags or arguments
	ExitNoGPU       = 3 // no driver or no device
	ExitImplausible = 4 // results failed the plausibility checks
	ExitBadResults  = 5 // compare: a results file that cannot be read
	ExitMismatch    = 6 // compare: results of different devices or workloads
)

var deviceFlag = &cli.IntFlag{Name: "device", Usage: "CUDA device ordinal", EnvVars: []string{"GPREEMPT_BENCH_DEVICE"}}

// NewApp builds the gpreempt-bench application.
func NewApp() *cli.App {
	return newApp([]*cli.Command{runCommand, compareCommand, plotCommand, reportCommand, beCommand, lcCommand, versionCommand})
}

// newApp is gpreempt-bench over cmds. Usage errors are gpreemptctl's: the
// error alone, naming the command, wrapped in ErrInvalidArgument (exit
// code 2); help only with --help; arguments a command does not take are
// refused.
func newApp(cmds []*cli.Command) *cli.App {
	app := &cli.App{
		Name:    "gpreempt-bench",
		Usage:   "measure LC latency and BE throughput on a shared GPU, with and without gpreempt",
		Version: version.Get().String(),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "log-level", Value: "info", Usage: "debug, info, warn or error (logs go to stderr)", EnvVars: []string{"GPREEMPT_LOG_LEVEL"}},
		},
		Commands:        cmds,
		HideHelpCommand: true,
		// --lc-env values are kept whole: CUDA_VISIBLE_DEVICES=0,1 is one.
		DisableSliceFlagSeparator: true,
		// main prints the error once, with the exit code it picks.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	cliutil.Strict(app, ErrInvalidArgument)
	return app
}

// versionCommand prints what --version does: the release version and the
// revision, the same as gpreemptctl's and gpreemptd's.
var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print gpreempt-bench's version and revision",
	Action: func(c *cli.Context) error {
		cli.VersionPrinter(c)
		return nil
	},
}

// logger returns the stderr logger for a command, tagged with the
// subcommand so that worker and orchestrator lines can be told apart.
func logger(c *cli.Context) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
		level = slog.LevelInfo
	}
	name := "bench"
	if c.Command != nil && c.Command.Name != "" {
		name = c.Command.Name
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("cmd", name, "pid", os.Getpid())
}

// ExitCode maps an error returned by the app to gpreempt-bench's exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrInvalidArgument):
		return ExitUsage
	case errors.Is(err, ErrNoGPU):
		return ExitNoGPU
	case errors.Is(err, ErrImplausible):
		return ExitImplausible
	case errors.Is(err, ErrBadResults):
		return ExitBadResults
	case errors.Is(err, ErrMismatch):
		return ExitMismatch
	}
	return ExitFailure
}
