package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/bench"
	"github.com/gpreempt/gpreempt/internal/version"
)

// TestVersion: the version command and --version print what every gpreempt
// binary says of its build.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		app := newApp()
		app.Writer, app.ErrWriter = &out, io.Discard
		if err := app.RunContext(context.Background(), append([]string{"gpreempt-bench"}, args...)); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if want := "gpreempt-bench version " + version.Get().String() + "\n"; out.String() != want {
			t.Errorf("%v printed %q, want %q", args, &out, want)
		}
	}
}

func TestLogLevel(t *testing.T) {
	tests := []struct {
		level string
		code  int
	}{
		{"bogus", bench.ExitUsage},
		{"", bench.ExitUsage},
		{"debug", bench.ExitOK},
		{"WARN", bench.ExitOK},
	}
	for _, tt := range tests {
		t.Run(tt.level, func(t *testing.T) {
			app := newApp()
			app.Writer, app.ErrWriter = io.Discard, io.Discard
			// With no command the app only prints its help: what is
			// checked is that the flag is refused before that.
			err := app.RunContext(context.Background(), []string{"gpreempt-bench", "--log-level", tt.level})
			if code := bench.ExitCode(err); code != tt.code {
				t.Fatalf("exit %d, want %d (%v)", code, tt.code, err)
			}
			if err != nil && !strings.Contains(err.Error(), `--log-level "`+tt.level+`"`) {
				t.Errorf("error %q does not name the flag and its value", err)
			}
		})
	}
}
