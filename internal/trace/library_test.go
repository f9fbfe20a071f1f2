package trace

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestMatchMaps(t *testing.T) {
	maps := `55d0c0a00000-55d0c0a01000 r--p 00000000 fd:01 1234 /usr/bin/python3.11
7f0000000000-7f0000100000 r-xp 00000000 fd:01 5678 /usr/lib/x86_64-linux-gnu/libcudart.so.12.4.127
7f0000200000-7f0002000000 r-xp 00000000 fd:01 9012 /usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04
7f0003000000-7f0003001000 rw-p 00000000 00:00 0 [heap]
7f0004000000-7f0004001000 r-xp 00000000 fd:01 3456 /opt/my libs/libgpreempt.so
`
	tests := []struct{ name, want string }{
		{"libcuda.so.1", "/proc/7/root/usr/lib/x86_64-linux-gnu/libcuda.so.580.159.04"},
		{"libgpreempt.so", "/proc/7/root/opt/my libs/libgpreempt.so"},
		{"libnvidia-ml.so.1", ""},
	}
	for _, tt := range tests {
		if got := matchMaps([]byte(maps), tt.name, "/proc/7/root"); got != tt.want {
			t.Errorf("matchMaps(%s) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseLdconfig(t *testing.T) {
	out := "3 libs found in cache `/etc/ld.so.cache'\n" +
		"\tlibcudart.so.12 (libc6,x86-64) => /nonexistent/libcudart.so.12\n" +
		"\tlibc.so.6 (libc6,x86-64) => /bin/sh\n"
	if got := parseLdconfig([]byte(out), "libc.so.6"); got != "/bin/sh" {
		t.Errorf("found %q", got)
	}
	// A cache entry whose file is gone does not count.
	if got := parseLdconfig([]byte(out), "libcudart.so.12"); got != "" {
		t.Errorf("found %q", got)
	}
}

func TestFindLibrary(t *testing.T) {
	if _, err := FindLibrary(LibCUDA, "/nonexistent/libcuda.so.1", 0); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("explicit missing file: %v", err)
	}
	if _, err := FindLibrary("libgpreempt-does-not-exist.so.9", "", 0); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("unknown library: %v", err)
	}
	if _, err := FindLibrary(LibCUDA, "", 1<<22+12345); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("no such pid: %v", err)
	}

	// A running process that maps the fake libcuda: found through its maps.
	lib, app := buildFakeCUDA(t)
	cmd := exec.Command(app)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	defer stdin.Close()
	// The dynamic loader maps the library before main reads stdin; poll
	// until it has.
	var got string
	for range 200 {
		if got, err = FindLibrary("libfakecuda.so", "", cmd.Process.Pid); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The mapping itself (map_files), or the path under the process's
	// root: either way the file built.
	if err != nil || !strings.HasPrefix(got, "/proc/") || !sameFile(t, got, lib) {
		t.Errorf("FindLibrary via maps = %q, %v (lib %s)", got, err, lib)
	}
	if _, err := FindLibrary(LibCUDA, "", cmd.Process.Pid); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("a process without libcuda: %v", err)
	}
}

func TestResolveProbes(t *testing.T) {
	lib, _ := buildFakeCUDA(t)
	keep, skipped, err := ResolveProbes(fakeProbes(lib))
	if err != nil {
		t.Fatal(err)
	}
	if len(keep) != 8 || len(skipped) != 7 {
		t.Errorf("kept %v, skipped %v", keep, skipped)
	}
	for _, s := range skipped {
		if !strings.Contains(s.String(), "no such function") {
			t.Errorf("skip reason %q", s)
		}
	}
	// Aliases are placed once.
	keep, skipped, err = ResolveProbes([]Probe{{Library: lib, Symbol: "cuLaunchKernel", Role: RoleLaunch}, {Library: lib, Symbol: "cuLaunchKernel", Role: RoleLaunch}})
	if err != nil || len(keep) != 1 || len(skipped) != 1 || !strings.Contains(skipped[0].Reason, "alias") {
		t.Errorf("alias: %v %v %v", keep, skipped, err)
	}
	notELF := filepath.Join(t.TempDir(), "libnot.so")
	if err := os.WriteFile(notELF, []byte("not an ELF file"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ResolveProbes([]Probe{{Library: notELF, Symbol: "x", Role: RoleSync}}); !errors.Is(err, ErrNoLibrary) {
		t.Errorf("not an ELF file: %v", err)
	}
}

// sameFile says whether paths a and b name one inode.
func sameFile(tb testing.TB, a, b string) bool {
	tb.Helper()
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}
