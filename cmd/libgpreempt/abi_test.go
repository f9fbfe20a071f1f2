package main

import (
	"bytes"
	"debug/elf"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
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
	src := `#include <stdio.h>
#include <string.h>
#include "gpreempt.h"
int main(void) {
	if (gpreempt_hint("x", 1) != 0) { puts("hint without init succeeded"); return 1; }
	printf("before-init: %s\n", gpreempt_last_error());
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
	return gpreempt_shutdown() == 0 ? 0 : 1;
}
`
	if err := os.WriteFile(prog, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "abi")
	cc := exec.Command("gcc", "-Wall", "-Werror", "-I", filepath.Join("..", "..", "include"), "-o", exe, prog,
		"-L", dir, "-lgpreempt", "-Wl,-rpath,"+dir)
	if out, err := cc.CombinedOutput(); err != nil {
		t.Fatalf("compile against gpreempt.h: %v\n%s", err, out)
	}
	out, err := exec.Command(exe).CombinedOutput()
	text := string(out)
	if !strings.Contains(text, "bad-flags: gpreempt_init: unknown flags 0x80") {
		t.Errorf("init with unknown flags did not say so:\n%s", text)
	}
	if !strings.Contains(text, "before-init: gpreempt_hint: not initialised") {
		t.Errorf("hint before init did not report why:\n%s", text)
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		if !strings.Contains(text, `"hints":1`) {
			t.Errorf("stats do not count the hint:\n%s", text)
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
    eng = gpreempt.Engine(skip_lc_class=True, launcher="poller", lib=sys.argv[1])
except gpreempt.GpreemptError as e:
    print("no-gpu:", e); sys.exit(3)
with eng.request("py", expected_prep_us=100) as req:
    req.ready()
st = eng.stats()
print("stats:", json.dumps({k: st[k] for k in ("hints", "early", "late")}))
eng.close()
`
	cmd := exec.Command(py, "-c", script, lib)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join("..", "..", "python"))
	out, err := cmd.CombinedOutput()
	text := string(out)
	for _, want := range []string{"bad-launcher: launcher 'threads'", "missing-lib: libgpreempt.so not found (set GPREEMPT_LIB): /nonexistent/libgpreempt.so"} {
		if !strings.Contains(text, want) {
			t.Errorf("wrapper output lacks %q:\n%s", want, text)
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
