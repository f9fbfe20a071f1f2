package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/bench"
)

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
