// Package testlog is a logger for tests: every record, debug included,
// goes to the test's log, shown when it fails or under -v.
package testlog

import (
	"log/slog"
	"testing"
)

// New is a logger writing to tb's log.
func New(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(writer{tb}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type writer struct{ tb testing.TB }

func (w writer) Write(b []byte) (int, error) { w.tb.Log(string(b)); return len(b), nil }
