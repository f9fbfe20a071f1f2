// gpreemptd holds a GPU scheduling policy over every CUDA process of the
// node (docs/DAEMON.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpreempt/gpreempt/internal/daemon"
	"github.com/gpreempt/gpreempt/internal/daemon/cmd"
)

func main() {
	// The watchdog of BE processes the SLO mode stopped: it resumes them
	// if this daemon dies with them stopped (daemon.Pauser).
	if len(os.Args) > 1 && os.Args[1] == daemon.WatchdogArg {
		os.Exit(daemon.RunWatchdog(os.Args[2:], os.Stdin, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cmd.Run(ctx, os.Args, os.Stdout, os.Stderr))
}
