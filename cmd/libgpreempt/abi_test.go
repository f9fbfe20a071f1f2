package main

import (
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/version"
	"github.com/gpreempt/gpreempt/prepreempt"
)

// TestCABI builds libgpreempt.so, compiles a C program against
// include/gpreempt.h and checks the whole path through the ABI. Without a
// GPU the engine cannot start, which exercises the error reporting; with
// one, init, a hint and ready must succeed.
func TestCABI(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no gcc to build the C test program")
	}
	lib := buildLibrary(t)
	dir := filepath.Dir(lib)
	checkUprobeNOPs(t, lib)
	prog := filepath.Join(dir, "abi.c")
	src := `#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "gpreempt.h"

/* Two threads fail differently, wait for each other, then each reads its
 * own message: gpreempt_last_error is per thread. */
static pthread_barrier_t both_failed;
static const char *want[2] = {"not initialised", "max_hold_us 60000000 exceeds"};
static int thread_ok[2];
static void *fail_and_read(void *arg) {
	int i = (int)(long)arg;
	if (i == 0) gpreempt_hint("x", 1);
	else gpreempt_init(0, 60000000, 0);
	pthread_barrier_wait(&both_failed);
	const char *got = gpreempt_last_error();
	thread_ok[i] = strstr(got, want[i]) != NULL;
	if (!thread_ok[i]) printf("thread %d read %s, want its own %s\n", i, got, want[i]);
	return NULL;
}

int main(void) {
	pthread_t th[2];
	pthread_barrier_init(&both_failed, NULL, 2);
	for (long i = 0; i < 2; i++) pthread_create(&th[i], NULL, fail_and_read, (void *)i);
	for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
	if (thread_ok[0] && thread_ok[1]) puts("per-thread: ok");
	printf("version: %s\n", gpreempt_version());
	if (gpreempt_set_prepreempt(0) == 0) { puts("set_prepreempt without init succeeded"); return 1; }
	printf("set-before-init: %s\n", gpreempt_last_error());
	char win[GPREEMPT_WINDOW_JSON_MAX];
	if (gpreempt_window_json(win, sizeof win) >= 0) { puts("window without init succeeded"); return 1; }
	printf("window-before-init: %s\n", gpreempt_last_error());
	if (gpreempt_hint("x", 1) != 0) { puts("hint without init succeeded"); return 1; }
	printf("before-init: %s\n", gpreempt_last_error());
	if (gpreempt_hint("x", 20000000) != 0) { puts("hint with 20 s expected preparation succeeded"); return 1; }
	printf("long-prep: %s\n", gpreempt_last_error());
	if (gpreempt_init(0, 60000000, 0) == 0) { puts("init with a 60 s max hold succeeded"); return 1; }
	printf("long-hold: %s\n", gpreempt_last_error());
	if (gpreempt_init(0, 0, 0x80) == 0) { puts("init with unknown flags succeeded"); return 1; }
	printf("bad-flags: %s\n", gpreempt_last_error());
	if (gpreempt_init(0, 0, GPREEMPT_SKIP_LC_CLASS) != 0) {
		printf("init: %s\n", gpreempt_last_error());
		return 3;
	}
	uint64_t h = gpreempt_hint("x", 100);
	if (h == 0 || gpreempt_ready(h) != 0) { printf("request: %s\n", gpreempt_last_error()); return 1; }
	if (gpreempt_ready(h) == 0) { puts("second ready succeeded"); return 1; }
	char buf[4096];
	int n = gpreempt_stats_json(buf, sizeof buf);
	printf("stats %d %s\n", n, buf);
	if (gpreempt_window_json(win, 64) >= 0) { puts("window into 64 bytes succeeded"); return 1; }
	printf("small-window: %s\n", gpreempt_last_error());
	n = gpreempt_window_json(win, sizeof win);
	printf("window: %s\n", win);
	n = gpreempt_window_json(win, sizeof win);
	printf("next window: %s\n", win);
	return gpreempt_shutdown() == 0 ? 0 : 1;
}
`
	if err := os.WriteFile(prog, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "abi")
	cc := exec.Command("gcc", "-Wall", "-Werror", "-I", filepath.Join("..", "..", "include"), "-o", exe, prog,
		"-L", dir, "-lgpreempt", "-lpthread", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("compile against gpreempt.h: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).CombinedOutput()
	text := string(out)
	if !strings.Contains(text, "bad-flags: gpreempt_init: unknown flags 0x80") {
		t.Errorf("init with unknown flags did not say so:\n%s", text)
	}
	for _, want := range []string{
		"per-thread: ok",
		"version: " + version.Release() + " (revision ",
		"before-init: gpreempt_hint: not initialised",
		"set-before-init: gpreempt_set_prepreempt: not initialised",
		"window-before-init: gpreempt_window_json: not initialised",
		"long-prep: gpreempt_hint: expected_prep_us 20000000 exceeds 10000000 (10s)",
		"long-hold: gpreempt_init: max_hold_us 60000000 exceeds 250000 (250ms, the hold budget)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("C program output lacks %q:\n%s", want, text)
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		if !strings.Contains(text, `"hints":1`) {
			t.Errorf("stats do not count the hint:\n%s", text)
		}
		if !strings.Contains(text, "small-window: gpreempt_window_json: a buffer of 64 bytes: want at least 512") {
			t.Errorf("a small window buffer not refused:\n%s", text)
		}
		// The request's spinner, if one ran, finished in one of the two
		// windows or after both (its hold is read by the engine's own
		// goroutine): never in both.
		var holds uint64
		for _, name := range []string{"\nwindow: ", "\nnext window: "} {
			_, line, _ := strings.Cut(text, name)
			line, _, _ = strings.Cut(line, "\n")
			var w prepreempt.Window
			if err := json.Unmarshal([]byte(line), &w); err != nil || (w.Holds > 0) != (w.HoldUs != nil) {
				t.Errorf("%q: %+v, %v", line, w, err)
			}
			holds += w.Holds
		}
		if holds > 1 {
			t.Errorf("one request's hold counted in %d windows:\n%s", holds, text)
		}
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		// No GPU here: init must fail and say so.
		if !strings.Contains(text, "libcuda") && !strings.Contains(text, "CUDA") {
			t.Errorf("init failure does not name the cause:\n%s", text)
		}
	default:
		t.Fatalf("C program: %v\n%s", err, text)
	}
}

// checkUprobeNOPs checks that the hint API's entry points start with the
// 5-byte NOP that makes uprobes on them cheap (entry.c).
func checkUprobeNOPs(t *testing.T, lib string) {
	t.Helper()
	if runtime.GOARCH != "amd64" {
		return
	}
	f, err := elf.Open(lib)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		t.Fatal(err)
	}
	text := f.Section(".text")
	if text == nil {
		t.Fatal("no .text section")
	}
	code, err := text.Data()
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{0x0f, 0x1f, 0x44, 0x00, 0x00}
	found := 0
	for _, s := range syms {
		switch s.Name {
		case "gpreempt_hint", "gpreempt_ready", "gpreempt_cancel":
		default:
			continue
		}
		found++
		off := s.Value - text.Addr
		if s.Value < text.Addr || off+5 > uint64(len(code)) {
			t.Errorf("%s at %#x is outside .text", s.Name, s.Value)
			continue
		}
		if got := code[off : off+5]; !bytes.Equal(got, want) {
			t.Errorf("%s starts with % x, want the 5-byte NOP % x", s.Name, got, want)
		}
	}
	if found != 3 {
		t.Errorf("found %d of the 3 hint entry points among the exports", found)
	}
}

// buildLibrary builds libgpreempt.so into a temporary directory.
func buildLibrary(t *testing.T) string {
	t.Helper()
	lib := filepath.Join(t.TempDir(), "libgpreempt.so")
	build := exec.Command("go", "build", "-buildmode=c-shared", "-o", lib, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build the shared library: %v\n%s", err, out)
	}
	return lib
}

// TestPythonWrapper drives python/gpreempt against the built library: a
// bad launcher is refused before the library is touched, a missing library
// is named, and without a GPU Engine() raises GpreemptError with the
// engine's reason; with one, a request and the stats (samples included)
// round-trip.
func TestPythonWrapper(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the wrapper")
	}
	lib := buildLibrary(t)
	script := `
import json, sys, gpreempt
print("versions:", gpreempt.__version__, "|", gpreempt.library_version(sys.argv[1]))
try:
    gpreempt.Engine(launcher="threads", lib=sys.argv[1])
    print("bad launcher accepted"); sys.exit(1)
except ValueError as e:
    print("bad-launcher:", e)
try:
    gpreempt.Engine(lib="/nonexistent/libgpreempt.so")
    print("missing library accepted"); sys.exit(1)
except gpreempt.GpreemptError as e:
    print("missing-lib:", e)
try:
    gpreempt.Engine(max_hold_us=60_000_000, lib=sys.argv[1])
    print("60 s max hold accepted"); sys.exit(1)
except ValueError as e:
    print("long-hold:", e)

# The engine as a context manager shuts the library down once, on exit,
# also when the block raises (checked on a stand-in for the library, so
# that it runs without a GPU).
class FakeLib:
    shutdowns = 0
    def gpreempt_shutdown(self):
        FakeLib.shutdowns += 1
        return 0
fake = gpreempt.Engine.__new__(gpreempt.Engine)
fake._lib, fake._open = FakeLib(), True
try:
    with fake as got:
        assert got is fake
        raise KeyError("inside")
except KeyError:
    pass
fake.close()
print("context-manager shutdowns:", FakeLib.shutdowns)

# A push's engine fields, from the window JSON the library writes (the
# Go engine's, passed in), on a stand-in for the library.
class WindowLib:
    def __init__(self, text):
        self.text = text.encode()
    def gpreempt_window_json(self, buf, n):
        assert n >= 512
        buf.value = self.text
        return len(self.text)
for i, arg in enumerate(sys.argv[2:]):
    w = gpreempt.Engine.__new__(gpreempt.Engine)
    w._lib, w._open, w._gate = WindowLib(arg), False, ("on", "off")[i]
    print("push-fields-%d: %s" % (i, json.dumps(w.push_fields())))

try:
    eng = gpreempt.Engine(skip_lc_class=True, launcher="poller", lib=sys.argv[1])
except gpreempt.GpreemptError as e:
    print("no-gpu:", e); sys.exit(3)
with eng:
    with eng.request("py", expected_prep_us=100) as req:
        req.ready()
    st = eng.stats()
    print("stats:", json.dumps({k: st[k] for k in ("hints", "early", "late")}))
`
	var windows []string
	for _, w := range []prepreempt.Window{
		{Spinning: true, SkippedNoBenefit: 2, Expired: 1, Holds: 3, HoldUs: map[string]float64{"p50": 180, "p99": 260, "max": 270}},
		{Spinning: false, SkippedNoBenefit: 9},
	} {
		b, err := json.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		windows = append(windows, string(b))
	}
	cmd := exec.Command(py, append([]string{"-c", script, lib}, windows...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "..", "python"))
	out, err := cmd.CombinedOutput()
	text := string(out)
	for _, want := range []string{
		"bad-launcher: launcher 'threads'",
		"missing-lib: libgpreempt.so not found (set GPREEMPT_LIB): /nonexistent/libgpreempt.so",
		"long-hold: max_hold_us 60000000: want 0 (default) to 250000",
		"context-manager shutdowns: 1",
		"versions: " + version.Release() + " | " + version.Release() + " (revision ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("wrapper output lacks %q:\n%s", want, text)
		}
	}
	for i, want := range []api.Stats{
		{ExpiredHolds: 1, SpinnerHoldUs: map[string]float64{"p50": 180, "p99": 260, "max": 270}, Engine: &api.Engine{Prepreempt: true, SkippedNoBenefit: 2, Gate: "on"}},
		{Engine: &api.Engine{SkippedNoBenefit: 9, Gate: "off"}},
	} {
		_, line, ok := strings.Cut(text, fmt.Sprintf("push-fields-%d: ", i))
		line, _, _ = strings.Cut(line, "\n")
		var got api.Stats
		if err := json.Unmarshal([]byte(line), &got); !ok || err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("window %s: push fields %q (%v), want %+v", windows[i], line, err, want)
		}
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		if !strings.Contains(text, `"hints": 1`) {
			t.Errorf("stats do not count the hint:\n%s", text)
		}
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		if !strings.Contains(text, "no-gpu: gpreempt init: ") {
			t.Errorf("init failure not reported as GpreemptError with the engine's reason:\n%s", text)
		}
	default:
		t.Fatalf("python: %v\n%s", err, text)
	}
}

// TestPythonPackageInstalls installs python/ with pip, offline (the build
// backend is in-tree), with the built library beside the module, and
// checks that the installed package loads that library by itself.
func TestPythonPackageInstalls(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	if err := exec.Command(py, "-m", "pip", "--version").Run(); err != nil {
		t.Skip("no pip for python3")
	}
	lib := buildLibrary(t)
	target := t.TempDir()
	pip := exec.Command(py, "-m", "pip", "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check",
		"--target", target, filepath.Join("..", "..", "python"))
	pip.Env = append(os.Environ(), "GPREEMPT_LIB="+lib, "PIP_NO_INPUT=1")
	if out, err := pip.CombinedOutput(); err != nil {
		t.Fatalf("pip install ./python: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(target, "gpreempt", "libgpreempt.so")); err != nil {
		t.Fatalf("the wheel does not carry the library: %v", err)
	}
	check := exec.Command(py, "-c", "import gpreempt, os; print('loaded:', os.path.basename(os.path.dirname(gpreempt._load()._name)))")
	check.Env = append(os.Environ(), "PYTHONPATH="+target, "GPREEMPT_LIB=")
	out, err := check.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "loaded: gpreempt") {
		t.Fatalf("installed package did not load its own library: %v\n%s", err, out)
	}
}
