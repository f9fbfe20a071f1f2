// Package ctl implements gpreemptctl: one file per subcommand, all printing
// through the app's writer so tests can capture output against golden files.
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/cliutil"
	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/ctl/daemoncmd"
	"github.com/gpreempt/gpreempt/internal/ctl/tracecmd"
	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/version"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// Env is what the commands reach the world through; tests replace it.
type Env struct {
	// Host is where processes and their control files are found.
	Host tsg.Host
	// GPU opens NVML.
	GPU func(*slog.Logger) (gpu.Info, error)
	// Comm names a process ("" if unknown).
	Comm func(pid int) string
	// Stdout and Stderr receive output and diagnostics.
	Stdout, Stderr io.Writer
	// Version is the binary's version; version.Get when nil.
	Version func() version.Info
}

// DefaultEnv is the real machine.
func DefaultEnv() Env {
	return Env{
		Host: tsg.ProcHost{},
		GPU:  gpu.Open,
		Comm: func(pid int) string {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
			if err != nil {
				return ""
			}
			return strings.TrimSpace(string(b))
		},
		Stdout: os.Stdout,
		Stderr: os.Stderr,
	}
}

// ErrInvalidArgument marks usage errors (exit code 2).
var ErrInvalidArgument = cmdutil.ErrInvalidArgument

// Exit codes, documented in docs/CLI.md.
const (
	ExitOK           = 0
	ExitFailure      = 1
	ExitUsage        = 2
	ExitNoDriver     = 3
	ExitNoProcess    = 4
	ExitPermission   = 5
	ExitUnsupported  = 6
	ExitNoGPUContext = 7
	ExitNoTracing    = 8
	ExitNoLibrary    = 9
)

// ExitCode maps an error to gpreemptctl's exit code.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrInvalidArgument), errors.Is(err, tsg.ErrNoSuchGroup):
		return ExitUsage
	case errors.Is(err, ioctl.ErrNoDriver), errors.Is(err, gpu.ErrNoDriver):
		return ExitNoDriver
	case errors.Is(err, ioctl.ErrNoSuchProcess):
		return ExitNoProcess
	case errors.Is(err, ioctl.ErrPermission), errors.Is(err, ioctl.NV_ERR_INSUFFICIENT_PERMISSIONS):
		return ExitPermission
	case errors.Is(err, ioctl.ErrUnsupportedDriver), errors.Is(err, ioctl.ErrNoGpreemptEscapes), errors.Is(err, tsg.ErrNotSupported):
		return ExitUnsupported
	case errors.Is(err, tsg.ErrNoGPUContext):
		return ExitNoGPUContext
	case errors.Is(err, trace.ErrBPFUnavailable), errors.Is(err, trace.ErrNoTracefs):
		return ExitNoTracing
	case errors.Is(err, trace.ErrNoLibrary), errors.Is(err, trace.ErrNoSymbols):
		return ExitNoLibrary
	}
	// urfave/cli's own errors (help for an unknown topic) are usage errors.
	var exit cli.ExitCoder
	if errors.As(err, &exit) {
		return ExitUsage
	}
	return ExitFailure
}

// runtime is the per-invocation state the commands share.
type runtime struct {
	env    Env
	log    *slog.Logger
	source tsg.Source
	closer io.Closer
	json   bool
}

// newSource builds the --source the user chose. auto probes the driver
// once, on first use, for gpreempt's escapes (docs/PATCHES.md).
func newSource(c *cli.Context, host tsg.Host, opts tsg.ScanOptions) (tsg.Source, io.Closer, error) {
	attach := tsg.NewAttachSource(host, opts)
	escape := func() *tsg.EscapeSource {
		return tsg.NewEscapeSource(host, tsg.EscapeOptions{
			AllowUnsupportedDriver: opts.AllowUnsupportedDriver,
			NoAttachFallback:       c.Bool("no-attach-fallback"),
			Logger:                 opts.Logger,
		})
	}
	switch c.String("source") {
	case "attach":
		return attach, nil, nil
	case "escape":
		e := escape()
		return e, e, nil
	case "auto":
		a := tsg.NewAutoSource(escape(), attach, tsg.AutoOptions{Logger: opts.Logger})
		return a, a, nil
	}
	return nil, nil, fmt.Errorf("%w: --source %q: want auto, attach or escape", ErrInvalidArgument, c.String("source"))
}

func rt(c *cli.Context) *runtime { return c.App.Metadata["rt"].(*runtime) }

// NewApp builds the gpreemptctl application over env.
func NewApp(env Env) *cli.App {
	app := &cli.App{
		Name:  "gpreemptctl",
		Usage: "see and change how the GPU schedules CUDA processes' channel groups",
		Description: "Works on the stock NVIDIA open driver: it duplicates the target's /dev/nvidiactl\n" +
			"file (pidfd_getfd, needs root or CAP_SYS_PTRACE) and issues RM controls on it.",
		Writer:    env.Stdout,
		ErrWriter: env.Stderr,
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "output format: table or json", EnvVars: []string{"GPREEMPT_OUTPUT"}},
			&cli.BoolFlag{Name: "allow-unsupported-driver", Usage: "use the nearest known RM ABI on a driver version gpreempt does not know", EnvVars: []string{"GPREEMPT_ALLOW_UNSUPPORTED_DRIVER"}},
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "debug, info, warn or error", EnvVars: []string{"GPREEMPT_LOG_LEVEL"}},
			&cli.IntFlag{Name: "handle-gap", Value: 4096, Usage: "end a client's object scan after this many unused handles", EnvVars: []string{"GPREEMPT_HANDLE_GAP"}},
			&cli.StringFlag{Name: "source", Value: "auto", Usage: "discovery and control: auto (the patched driver's escapes when it has them, else attach), attach (pidfd_getfd, stock driver) or escape (patched driver only)", EnvVars: []string{"GPREEMPT_SOURCE"}},
			&cli.BoolFlag{Name: "no-attach-fallback", Usage: "with the escape source: fail preempt/suspend/resume instead of attaching to the target", EnvVars: []string{"GPREEMPT_NO_ATTACH_FALLBACK"}},
			&cli.BoolFlag{Name: "demo", Usage: "show what gpreemptctl does without a GPU: two CUDA processes replayed from a libcuda trace recorded on an H100", EnvVars: []string{"GPREEMPT_DEMO"}},
			&cli.BoolFlag{Name: "full-client-scan", Usage: "probe every possible client handle (only needed after RM's client counter wrapped)", EnvVars: []string{"GPREEMPT_FULL_CLIENT_SCAN"}},
		},
		// In the help's header; --version prints the version command's
		// whole output (version.go).
		Version:              buildInfo(env).Version,
		EnableBashCompletion: true,
		Metadata:             map[string]any{"env": env, cliutil.VersionKey: printVersionFlag},
		Before: func(c *cli.Context) error {
			var level slog.Level
			if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
				return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", ErrInvalidArgument, c.String("log-level"))
			}
			if gap := c.Int("handle-gap"); gap <= 0 {
				return fmt.Errorf("%w: --handle-gap %d: want a number of handles above 0", ErrInvalidArgument, gap)
			}
			out := c.String("output")
			if out != "table" && out != "json" {
				return fmt.Errorf("%w: --output %q: want table or json", ErrInvalidArgument, out)
			}
			log := slog.New(slog.NewTextHandler(env.Stderr, &slog.HandlerOptions{Level: level}))
			env := env
			if c.Bool("demo") {
				var err error
				if env, err = demoEnv(env); err != nil {
					return err
				}
				// Labelled where something is shown of the machine: not for
				// help, version or completion, nor trace and daemon (which
				// have no demo). The header goes to stdout only with the
				// table it heads: a command that fails prints nothing there.
				if cmd := c.App.Command(c.Args().First()); cmd != nil && !slices.Contains([]string{"help", "version", "completion", "trace", "daemon"}, cmd.Name) {
					fmt.Fprint(env.Stderr, demoBanner)
					if out == "table" {
						env.Stdout = &headedWriter{w: env.Stdout, header: "# DEMO: a recorded H100 trace, not this machine\n"}
						c.App.Writer = env.Stdout
					}
				}
			}
			opts := tsg.ScanOptions{
				HandleGap:              c.Int("handle-gap"),
				FullClientRange:        c.Bool("full-client-scan"),
				AllowUnsupportedDriver: c.Bool("allow-unsupported-driver"),
				Logger:                 log,
			}
			source, closer, err := newSource(c, env.Host, opts)
			if err != nil {
				return err
			}
			cmdutil.SetGlobals(c.App, &cmdutil.Globals{Logger: log, JSON: out == "json", Demo: c.Bool("demo")})
			c.App.Metadata["rt"] = &runtime{
				env:    env,
				log:    log,
				source: source,
				closer: closer,
				json:   out == "json",
			}
			return nil
		},
		After: func(c *cli.Context) error {
			if r, ok := c.App.Metadata["rt"].(*runtime); ok && r.closer != nil {
				return r.closer.Close()
			}
			return nil
		},
		Commands: []*cli.Command{
			devicesCommand,
			psCommand,
			getTimesliceCommand,
			setTimesliceCommand,
			setInterleaveCommand,
			preemptCommand,
			suspendCommand,
			resumeCommand,
			classCommand,
			resetCommand,
			versionCommand,
			completionCommand,
			tracecmd.Command,
			daemoncmd.Command,
		},
		// Errors are printed once, by Run, with the exit code it picks.
		ExitErrHandler: func(*cli.Context, error) {},
	}
	cliutil.Strict(app, ErrInvalidArgument)
	return app
}

// Run runs gpreemptctl and returns the process exit code, having printed
// any error as "gpreemptctl: <err>".
func Run(ctx context.Context, env Env, args []string) int {
	err := NewApp(env).RunContext(ctx, args)
	if err != nil {
		fmt.Fprintf(env.Stderr, "gpreemptctl: %v%s\n", err, hint(err))
	}
	return ExitCode(err)
}

// hint names the flag that changes the outcome of err, where there is one:
// the libraries return typed errors and leave the CLI's words to the CLI.
func hint(err error) string {
	if errors.Is(err, ioctl.ErrUnsupportedDriver) {
		return " (override with --allow-unsupported-driver)"
	}
	return ""
}

// Flags shared by the commands that act on one process's groups.
var (
	pidFlag         = &cli.IntFlag{Name: "pid", Usage: "target process (required)"}
	tsgFlag         = &cli.StringFlag{Name: "tsg", Usage: "only the channel group with this handle (e.g. 0x5c000015)"}
	computeOnlyFlag = &cli.BoolFlag{Name: "compute-only", Usage: "only the compute channel group(s)"}
	groupFlags      = []cli.Flag{pidFlag, tsgFlag, computeOnlyFlag}
)

func selector(c *cli.Context) (tsg.Selector, error) {
	var sel tsg.Selector
	if s := c.String("tsg"); s != "" {
		if err := sel.Handle.UnmarshalText([]byte(s)); err != nil || sel.Handle == 0 {
			return sel, fmt.Errorf("%w: --tsg %q: want a handle such as 0x5c000015", ErrInvalidArgument, s)
		}
		if c.Bool("compute-only") {
			return sel, fmt.Errorf("%w: --tsg and --compute-only exclude each other", ErrInvalidArgument)
		}
	}
	sel.ComputeOnly = c.Bool("compute-only")
	return sel, nil
}

// withGroups discovers --pid, selects the groups the flags name, and runs
// fn on them. The process's duplicated files are closed afterwards.
func withGroups(c *cli.Context, fn func(p *tsg.Process, gs []tsg.Group) error) error {
	pid, err := cmdutil.PIDArg(c)
	if err != nil {
		return err
	}
	sel, err := selector(c)
	if err != nil {
		return err
	}
	p, err := rt(c).source.Discover(c.Context, pid)
	if err != nil {
		return err
	}
	defer p.Close()
	gs, err := p.Select(sel)
	if err != nil {
		return err
	}
	return fn(p, gs)
}

// oneArg returns the command's single positional argument.
func oneArg(c *cli.Context, what string) (string, error) {
	if c.NArg() != 1 {
		return "", fmt.Errorf("%w: %s takes exactly one argument: %s", ErrInvalidArgument, cliutil.CommandName(c), what)
	}
	return c.Args().First(), nil
}
