package version_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/bench"
	"github.com/gpreempt/gpreempt/internal/ctl"
	daemoncmd "github.com/gpreempt/gpreempt/internal/daemon/cmd"
	"github.com/gpreempt/gpreempt/internal/version"
)

// TestOneVersionLine: the three binaries' --version starts with the same
// line, their name then "version" then the release and revision
// (docs/CLI.md); the three apps share one process here, as in genman.
func TestOneVersionLine(t *testing.T) {
	v := version.Get()
	run := map[string]func() (string, int){
		"gpreemptctl": func() (string, int) {
			var out, errb bytes.Buffer
			env := ctl.DefaultEnv()
			env.Stdout, env.Stderr = &out, &errb
			code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "--version"})
			return out.String(), code
		},
		"gpreemptd": func() (string, int) {
			var out, errb bytes.Buffer
			code := daemoncmd.Run(context.Background(), []string{"gpreemptd", "--version"}, &out, &errb)
			return out.String(), code
		},
		"gpreempt-bench": func() (string, int) {
			var out bytes.Buffer
			app := bench.NewApp()
			app.Writer, app.ErrWriter = &out, &out
			if err := app.Run([]string{"gpreempt-bench", "--version"}); err != nil {
				return err.Error(), bench.ExitCode(err)
			}
			return out.String(), 0
		},
	}
	for name, f := range run {
		text, code := f()
		first, _, _ := strings.Cut(text, "\n")
		if want := v.Line(name); code != 0 || first != want {
			t.Errorf("%s --version: exit %d, first line %q, want %q", name, code, first, want)
		}
	}
}
