// gpreemptd holds a GPU scheduling policy over every CUDA process of the
// node (docs/DAEMON.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpreempt/gpreempt/internal/daemon/cmd"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
)

func main() {
	// The watchdog of BE processes the SLO mode stopped: it resumes them
	// if this daemon dies with them stopped (pause.Pauser).
	if len(os.Args) > 1 && os.Args[1] == pause.WatchdogArg {
		os.Exit(pause.RunWatchdog(os.Args[2:], os.Stdin, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cmd.Run(ctx, os.Args, os.Stdout, os.Stderr))
}
