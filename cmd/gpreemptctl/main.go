// Command gpreemptctl shows and changes how the GPU schedules the channel
// groups of running CUDA processes. See docs/CLI.md.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/gpreempt/gpreempt/internal/ctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ctl.Run(ctx, ctl.DefaultEnv(), os.Args)
	stop()
	os.Exit(code)
}
