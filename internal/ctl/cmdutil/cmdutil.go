// Package cmdutil is what gpreemptctl's command groups share: the usage
// error sentinel, the global flags' effect (logger, output format) and a
// few printing helpers. The app (internal/ctl) sets the globals up before
// any command runs; a command group in its own package reads them here.
package cmdutil

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/cliutil"
	"github.com/gpreempt/gpreempt/tsg"
)

// ErrInvalidArgument marks usage errors: a bad flag, argument or value
// (exit code 2).
var ErrInvalidArgument = tsg.ErrInvalidArgument

// Globals is what the global flags set for every command.
type Globals struct {
	// Logger is the logger --log-level configured, writing to stderr.
	Logger *slog.Logger
	// JSON is -o json.
	JSON bool
	// Demo is --demo: the processes are a replayed recording, and the
	// machine itself (its kernel, its libraries) is not to be touched.
	Demo bool
}

const globalsKey = "gpreemptctl.globals"

// SetGlobals makes g what Get returns for app's commands.
func SetGlobals(app *cli.App, g *Globals) {
	if app.Metadata == nil {
		app.Metadata = map[string]any{}
	}
	app.Metadata[globalsKey] = g
}

// Get returns the globals of c's app. Outside an app that set them up (a
// command run on its own) it returns a discarding logger and table output.
func Get(c *cli.Context) *Globals {
	if g, ok := c.App.Metadata[globalsKey].(*Globals); ok {
		return g
	}
	return &Globals{Logger: slog.New(slog.DiscardHandler)}
}

// PIDArg returns --pid, which the command requires, refusing a missing or
// non-positive one.
func PIDArg(c *cli.Context) (int, error) {
	if !c.IsSet("pid") {
		return 0, fmt.Errorf("%w: %s needs --pid", ErrInvalidArgument, cliutil.CommandName(c))
	}
	pid := c.Int("pid")
	if pid <= 0 {
		return 0, fmt.Errorf("%w: --pid %d: want a process id above 0", ErrInvalidArgument, pid)
	}
	return pid, nil
}

// WriteJSON prints v indented, with a final newline.
func WriteJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}

// OrDash stands "-" in for an unknown (empty) name in a table.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
