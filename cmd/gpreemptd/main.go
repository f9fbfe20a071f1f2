// gpreemptd holds a GPU scheduling policy over every CUDA process of the
// node (docs/DAEMON.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpreempt/gpreempt/internal/daemon/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(cmd.Run(ctx, os.Args, os.Stdout, os.Stderr))
}
