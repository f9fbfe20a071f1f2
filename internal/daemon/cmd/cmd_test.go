package cmd

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/version"
)

func TestCheckConfig(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("rules:\n  - class: be\n    clas: lc\n"), 0o644)
	for _, tc := range []struct {
		file string
		code int
		want string
	}{
		{"../../../deploy/gpreemptd.yaml", ExitOK, "ok (4 rules, default burstable)"},
		{bad, ExitBadConfig, "line 3: rules[0].clas: unknown field"},
		{filepath.Join(t.TempDir(), "missing.yaml"), ExitBadConfig, "no such file"},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), []string{"gpreemptd", "--check-config", tc.file}, &out, &errb)
		if code != tc.code || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("--check-config %s: exit %d, %q %q; want %d and %q", tc.file, code, out.String(), errb.String(), tc.code, tc.want)
		}
	}
}

func TestBadFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"gpreemptd", "--no-such-flag"}, &out, &errb); code != ExitBadConfig {
		t.Errorf("unknown flag: exit %d", code)
	}
	dir := t.TempDir()
	if code := Run(context.Background(), []string{"gpreemptd", "-c", "../../../deploy/gpreemptd.yaml", "--socket", filepath.Join(dir, "s"), "--mode", "turbo", "--metrics-addr", ""}, &out, &errb); code != ExitBadConfig {
		t.Errorf("--mode turbo: exit %d: %s", code, errb.String())
	}
	errb.Reset()
	if code := Run(context.Background(), []string{"gpreemptd", "-c", "../../../deploy/gpreemptd.yaml", "--socket", filepath.Join(dir, "s2"), "--mode", "scan", "--metrics-addr", "",
		"--trace-requests", "--libcuda", filepath.Join(dir, "no-libcuda.so.1")}, &out, &errb); code != ExitBadConfig || !strings.Contains(errb.String(), "--libcuda") {
		t.Errorf("--libcuda missing: exit %d: %s", code, errb.String())
	}
	errb.Reset() // the same for the BE launch counter's (on by default)
	if code := Run(context.Background(), []string{"gpreemptd", "-c", "../../../deploy/gpreemptd.yaml", "--socket", filepath.Join(dir, "s3"), "--mode", "scan", "--metrics-addr", "",
		"--libcuda", filepath.Join(dir, "no-libcuda.so.1")}, &out, &errb); code != ExitBadConfig || !strings.Contains(errb.String(), "--libcuda") {
		t.Errorf("--libcuda missing without --trace-requests: exit %d: %s", code, errb.String())
	}
}

// TestVersion: gpreemptd says what every gpreempt binary says of its build.
func TestVersion(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"gpreemptd", "--version"}, &out, &errb); code != ExitOK {
		t.Fatalf("exit %d: %s", code, &errb)
	}
	if want := "gpreemptd version " + version.Get().String() + "\n"; out.String() != want {
		t.Errorf("--version printed %q, want %q", &out, want)
	}
}

// TestMissingPolicy: a daemon started without its policy file says how to
// get one.
func TestMissingPolicy(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	code := Run(context.Background(), []string{"gpreemptd", "--config", filepath.Join(dir, "none.yaml"),
		"--socket", filepath.Join(dir, "d.sock"), "--metrics-addr", "", "--nvml=false", "--mode", "scan"}, &out, &errb)
	if code != ExitBadConfig || !strings.Contains(errb.String(), "install the example policy with `sudo make install`, or name one with --config") {
		t.Errorf("exit %d, stderr %q", code, &errb)
	}
	if out.Len() > 0 {
		t.Errorf("stdout %q", &out)
	}
}
