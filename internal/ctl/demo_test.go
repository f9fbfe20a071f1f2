package ctl_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/golden"
)

// TestDemo runs the demo with no machine at all behind the environment:
// whatever it shows comes from the embedded recording.
func TestDemo(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		banner bool
		// stderrHas is part of the error, where the command fails.
		stderrHas string
	}{
		{"demo-ps", []string{"--demo", "ps"}, ctl.ExitOK, true, ""},
		{"demo-ps-json", []string{"--demo", "-o", "json", "ps", "--pid", "4343"}, ctl.ExitOK, true, ""},
		{"demo-class-be", []string{"--demo", "class", "--pid", "4242", "be"}, ctl.ExitOK, true, ""},
		{"demo-set-timeslice", []string{"--demo", "set-timeslice", "--pid", "4343", "--compute-only", "5s"}, ctl.ExitOK, true, ""},
		{"demo-devices", []string{"--demo", "devices"}, ctl.ExitOK, true, ""},
		{"demo-reset-all", []string{"--demo", "reset", "--all"}, ctl.ExitOK, true, ""},
		{"demo-no-such-pid", []string{"--demo", "ps", "--pid", "1"}, ctl.ExitNoProcess, true, "1"},
		{"demo-class-no-such-pid", []string{"--demo", "class", "--pid", "999", "be"}, ctl.ExitNoProcess, true, "999"},
		{"demo-trace", []string{"--demo", "trace", "rpc"}, ctl.ExitUsage, false, "has no demo"},
		{"demo-daemon-status", []string{"--demo", "daemon", "status"}, ctl.ExitUsage, false, "daemon commands ask a running gpreemptd and have no demo"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			env := ctl.Env{Stdout: &stdout, Stderr: &stderr}
			code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl"}, tt.args...))
			if code != tt.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.code, &stderr)
			}
			if got := strings.HasPrefix(stderr.String(), "gpreemptctl: demo: no GPU is used"); got != tt.banner {
				t.Errorf("demo banner on stderr: %v, want %v: %q", got, tt.banner, &stderr)
			}
			if code == ctl.ExitOK {
				golden.Check(t, tt.name, stdout.Bytes())
				return
			}
			// A failure says so on stderr alone: not even the demo's
			// header reaches stdout.
			if stdout.Len() > 0 {
				t.Errorf("stdout of a failed command: %q", &stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderrHas) {
				t.Errorf("stderr %q lacks %q", &stderr, tt.stderrHas)
			}
		})
	}
}

// The demo embeds its own copy of the recording; it must stay the one in
// testdata.
func TestDemoTraceIsTheRecording(t *testing.T) {
	want, err := os.ReadFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join("demodata", filepath.Base(tracePath)))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("demodata/%s differs from %s: copy it again", filepath.Base(tracePath), tracePath)
	}
}
