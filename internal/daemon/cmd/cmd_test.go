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
	capped := filepath.Join(t.TempDir(), "capped.yaml") // valid, but its rule gives no process lc
	os.WriteFile(capped, []byte("classes: {lc: {timeslice: 5s}}\nrules: [{name: lc, match: {env: {GPREEMPT_CLASS: lc}}, class: lc}]\n"), 0o644)
	for _, tc := range []struct {
		file string
		code int
		want string
	}{
		{"../../../deploy/gpreemptd.yaml", ExitOK, "ok (4 rules, default burstable)"},
		{bad, ExitBadConfig, "line 3: rules[0].clas: unknown field"},
		{capped, ExitOK, `warning: line 2: rule "lc" matches what a process sets itself (env), so its class lc is capped`},
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

// TestCheckConfigEveryFile: --check-config checks each file it is given,
// says which are bad, and exits 2 when any is.
func TestCheckConfigEveryFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("rules:\n  - clas: lc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := "../../../deploy/gpreemptd.yaml"
	for _, tc := range []struct {
		files   []string
		code    int
		wantOut int // "ok" lines
		wantErr string
	}{
		{[]string{good, good}, ExitOK, 2, ""},
		{[]string{good, bad}, ExitBadConfig, 1, "1 of 2 policy files invalid: " + bad},
		{[]string{bad, good}, ExitBadConfig, 1, "1 of 2 policy files invalid: " + bad},
		{[]string{bad, bad, good}, ExitBadConfig, 1, "2 of 3 policy files invalid: " + bad + ", " + bad},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"gpreemptd", "--check-config"}, tc.files...), &out, &errb)
		if code != tc.code || strings.Count(out.String(), ": ok (") != tc.wantOut || !strings.Contains(errb.String(), tc.wantErr) {
			t.Errorf("--check-config %v: exit %d, stdout %q, stderr %q; want %d, %d ok, %q", tc.files, code, &out, &errb, tc.code, tc.wantOut, tc.wantErr)
		}
	}
}

// TestExtraArguments: gpreemptd takes flags only. An argument is refused
// with exit 2 before anything starts, also where it hides a later flag
// from the parser (the daemon's socket would be made in dir otherwise).
func TestExtraArguments(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"extra"},
		{"--config", "../../../deploy/gpreemptd.yaml", "--socket", filepath.Join(dir, "d.sock"), "--metrics-addr", "", "--mode", "scan", "--nvml=false", "extra", "--check-config", "../../../deploy/gpreemptd.yaml"},
	} {
		var out, errb bytes.Buffer
		code := Run(context.Background(), append([]string{"gpreemptd"}, args...), &out, &errb)
		if code != ExitBadConfig || !strings.Contains(errb.String(), `unexpected argument "extra"`) || out.Len() > 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 naming \"extra\"", args, code, &out, &errb)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the daemon started: %v in its socket's folder", entries)
	}
}

// TestHelpMatchesFlags: gpreemptd has flags and no commands, so its help and
// its page show no command syntax and no help command, and the page gives
// the default of the switches that are on unless turned off.
func TestHelpMatchesFlags(t *testing.T) {
	var out, errb bytes.Buffer
	if code := Run(context.Background(), []string{"gpreemptd", "--help"}, &out, &errb); code != ExitOK {
		t.Fatalf("--help: exit %d: %s", code, &errb)
	}
	page, err := ManPage()
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{"--help": out.String(), "gpreemptd(8)": page} {
		for _, no := range []string{"command [", "COMMANDS", "help, h", "[COMMAND OPTIONS]"} {
			if strings.Contains(text, no) {
				t.Errorf("%s shows %q:\n%s", name, no, text)
			}
		}
		if !strings.Contains(text, "--check-config FILE [FILE...]") {
			t.Errorf("%s lacks the --check-config synopsis", name)
		}
	}
	for _, flag := range []string{"be-progress", "nvml"} {
		if !strings.Contains(page, `\fB--`+flag+`\fP`) || !strings.Contains(page[strings.Index(page, `\fB--`+flag+`\fP`):], "(default: true") {
			t.Errorf("gpreemptd(8) does not give --%s's default: true", flag)
		}
	}
}
