package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrCtl marks a missing or failing gpreemptctl.
var ErrCtl = errors.New("gpreemptctl failed")

// ctlTimeout bounds one gpreemptctl call. A call makes a handful of RM
// controls of ~300 us each, plus process discovery; seconds mean it hung.
const ctlTimeout = 30 * time.Second

// resolveCtl finds gpreemptctl: the explicit path if given, else next to
// this binary (how the two are built and shipped together), else $PATH.
func resolveCtl(explicit string) (string, error) {
	if explicit != "" {
		if err := checkExecutable(explicit); err != nil {
			return "", fmt.Errorf("%w: --gpreemptctl %s: %w", ErrCtl, explicit, err)
		}
		return explicit, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "gpreemptctl")
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("gpreemptctl"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: gpreemptctl not found next to gpreempt-bench or in $PATH (build it with 'go build ./cmd/gpreemptctl' into the same directory, or pass --gpreemptctl)", ErrCtl)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() || fi.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// ctlRunner runs gpreemptctl and records every call.
type ctlRunner struct {
	path string
	log  *slog.Logger
}

// run runs gpreemptctl with args; any failure (exit status, timeout) is an
// error carrying its output. The call is recorded either way.
func (c *ctlRunner) run(ctx context.Context, args ...string) (CtlCall, error) {
	ctx, cancel := context.WithTimeout(ctx, ctlTimeout)
	defer cancel()
	argv := append([]string{c.path}, args...)
	call := CtlCall{Argv: argv}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	call.DurationMs = float64(time.Since(start)) / float64(time.Millisecond)
	call.Output = out.String()
	call.ExitCode = cmd.ProcessState.ExitCode()
	c.log.Info("gpreemptctl", "argv", strings.Join(argv, " "), "exit", call.ExitCode, "ms", fmt.Sprintf("%.1f", call.DurationMs))
	if err != nil {
		return call, fmt.Errorf("%w: %s: %w\n%s", ErrCtl, strings.Join(argv, " "), err, indent(strings.TrimSpace(call.Output)))
	}
	return call, nil
}
