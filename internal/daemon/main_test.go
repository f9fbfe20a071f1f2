package daemon

import (
	"os"
	"testing"

	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/proctest"
)

// TestMain makes the test binary the pauser's watchdog, or a process that
// maps a file (testMapArg), when the tests start it as one.
func TestMain(m *testing.M) {
	proctest.Main(m, map[string]func([]string) int{
		pause.WatchdogArg: func(args []string) int { return pause.RunWatchdog(args, os.Stdin, os.Stderr) },
		testMapArg:        runMapper,
	})
}
