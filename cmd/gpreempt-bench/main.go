// Command gpreempt-bench measures latency-critical GPU request latency and
// best-effort throughput on a shared GPU, with and without gpreempt's
// scheduling classes. See internal/bench for the subcommands.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpreempt/gpreempt/internal/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := bench.NewApp().RunContext(ctx, os.Args)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "gpreempt-bench: %v\n", err)
		os.Exit(bench.ExitCode(err))
	}
}
