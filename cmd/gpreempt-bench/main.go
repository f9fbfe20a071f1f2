// Command gpreempt-bench measures latency-critical GPU request latency and
// best-effort throughput on a shared GPU, with and without gpreempt's
// scheduling classes. See internal/bench for the subcommands.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpreempt-bench: %v\n", err)
		os.Exit(bench.ExitCode(err))
	}
}

// newApp is bench's app refusing a --log-level it does not know before any
// command runs (the workers would otherwise log at info, silently).
func newApp() *cli.App {
	app := bench.NewApp()
	before := app.Before
	app.Before = func(c *cli.Context) error {
		var level slog.Level
		if err := level.UnmarshalText([]byte(c.String("log-level"))); err != nil {
			return fmt.Errorf("%w: --log-level %q: want debug, info, warn or error", bench.ErrInvalidArgument, c.String("log-level"))
		}
		if before != nil {
			return before(c)
		}
		return nil
	}
	return app
}
