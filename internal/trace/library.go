package trace

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Default names of what the uprobes go on.
const (
	LibCUDA     = "libcuda.so.1"
	LibGPreempt = "libgpreempt.so"
)

// Default functions per role. The _ptsz variants are what the CUDA runtime
// calls for the per-thread default stream.
var (
	DefaultLaunchSymbols = []string{"cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchKernelEx_ptsz", "cuGraphLaunch", "cuGraphLaunch_ptsz"}
	DefaultSyncSymbols   = []string{"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuEventSynchronize", "cuCtxSynchronize", "cuCtxSynchronize_v2"}
	// The hint API's C ABI (libgpreempt.so).
	DefaultHintSymbol   = "gpreempt_hint"
	DefaultReadySymbol  = "gpreempt_ready"
	DefaultCancelSymbol = "gpreempt_cancel"
)

// libraryDirs are searched when the dynamic linker's cache does not know a
// library (or ldconfig is missing).
var libraryDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
	"/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu", "/lib64", "/lib", "/usr/local/lib",
}

// FindLibrary returns the file to put uprobes for library name on. An
// explicit path wins. With pid > 0, it is the copy that process has mapped,
// reached through /proc/pid/root so that a container's library is the one
// probed (uprobes are per file). Otherwise LD_LIBRARY_PATH, the dynamic
// linker's cache and the usual directories are searched. Not found is
// ErrNoLibrary.
func FindLibrary(name, explicit string, pid int) (string, error) {
	if explicit != "" {
		if _, err := os.Stat(explicit); err != nil {
			return "", fmt.Errorf("%w: %s: %w", ErrNoLibrary, explicit, err)
		}
		return explicit, nil
	}
	if pid > 0 {
		path, err := mappedLibrary(pid, name)
		if err != nil {
			return "", err
		}
		if path != "" {
			return path, nil
		}
		return "", fmt.Errorf("%w: process %d has no %s mapped (not a CUDA process yet, or name the file)", ErrNoLibrary, pid, name)
	}
	for _, dir := range filepath.SplitList(os.Getenv("LD_LIBRARY_PATH")) {
		if p := filepath.Join(dir, name); dir != "" && isFile(p) {
			return p, nil
		}
	}
	if p := ldconfigLookup(name); p != "" {
		return p, nil
	}
	for _, dir := range libraryDirs {
		if p := filepath.Join(dir, name); isFile(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%w: %s is not in LD_LIBRARY_PATH, the ldconfig cache or %s", ErrNoLibrary, name, strings.Join(libraryDirs, ":"))
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// libraryStem is the name up to ".so": libcuda.so.1 maps as
// libcuda.so.580.159.04.
func libraryStem(name string) string {
	if i := strings.Index(name, ".so"); i >= 0 {
		return name[:i+3]
	}
	return name
}

// mappedLibrary finds name among the files pid has mapped.
func mappedLibrary(pid int, name string) (string, error) {
	root := "/proc/" + strconv.Itoa(pid)
	b, err := os.ReadFile(root + "/maps")
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: process %d: %w", ErrNoLibrary, pid, err)
	}
	if err != nil {
		return "", fmt.Errorf("read %s/maps: %w", root, err)
	}
	return matchMaps(b, name, root+"/root"), nil
}

// matchMaps returns the first mapped file of /proc/pid/maps content b whose
// base name is name or another version of it, prefixed with root.
func matchMaps(b []byte, name, root string) string {
	stem := libraryStem(name)
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// address perms offset dev inode path
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		path := strings.Join(f[5:], " ")
		base := filepath.Base(path)
		if base == name || base == stem || strings.HasPrefix(base, stem+".") {
			return root + path
		}
	}
	return ""
}

// ldconfigLookup asks the dynamic linker's cache (ldconfig -p).
func ldconfigLookup(name string) string {
	bin, err := exec.LookPath("ldconfig")
	if err != nil {
		if bin, err = exec.LookPath("/sbin/ldconfig"); err != nil {
			return ""
		}
	}
	out, err := exec.Command(bin, "-p").Output()
	if err != nil {
		return ""
	}
	return parseLdconfig(out, name)
}

// parseLdconfig reads `ldconfig -p` lines such as
// "	libcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1".
func parseLdconfig(out []byte, name string) string {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		lib, rest, ok := strings.Cut(line, " ")
		if !ok || lib != name {
			continue
		}
		if _, path, ok := strings.Cut(rest, "=> "); ok && isFile(strings.TrimSpace(path)) {
			return strings.TrimSpace(path)
		}
	}
	return ""
}

// Probe is one function to trace.
type Probe struct {
	Library string `json:"library"`
	Symbol  string `json:"symbol"`
	Role    Role   `json:"role"`
}

// Skipped is a requested probe the tracer could not place, and why.
type Skipped struct {
	Probe  Probe
	Reason string
}

func (s Skipped) String() string {
	return fmt.Sprintf("%s (%s) in %s: %s", s.Probe.Symbol, s.Probe.Role, s.Probe.Library, s.Reason)
}

// ResolveProbes keeps the probes whose function the library defines and
// says why each other one is skipped. A symbol at the same address as one
// already kept (an alias) is skipped too: two uprobes there would count
// every call twice.
func ResolveProbes(probes []Probe) (keep []Probe, skipped []Skipped, err error) {
	type place struct {
		lib  string
		addr uint64
	}
	tables := map[string]map[string]uint64{}
	at := map[place]string{}
	for _, p := range probes {
		syms, ok := tables[p.Library]
		if !ok {
			if syms, err = functionSymbols(p.Library); err != nil {
				return nil, nil, err
			}
			tables[p.Library] = syms
		}
		addr, ok := syms[p.Symbol]
		if !ok {
			skipped = append(skipped, Skipped{p, "no such function in the library"})
			continue
		}
		if other, dup := at[place{p.Library, addr}]; dup {
			skipped = append(skipped, Skipped{p, "alias of " + other})
			continue
		}
		at[place{p.Library, addr}] = p.Symbol
		keep = append(keep, p)
	}
	return keep, skipped, nil
}

// functionSymbols reads the defined function symbols of an ELF file, from
// its dynamic table and, if present, its full one.
func functionSymbols(path string) (map[string]uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrNoLibrary, path, err)
	}
	defer f.Close()
	out := map[string]uint64{}
	for _, read := range []func() ([]elf.Symbol, error){f.DynamicSymbols, f.Symbols} {
		syms, err := read()
		if err != nil {
			continue // a stripped file has no .symtab; no .dynsym is fine too
		}
		for _, s := range syms {
			if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Section == elf.SHN_UNDEF || s.Value == 0 {
				continue
			}
			// Versioned names ("cuLaunchKernel@@libcuda.so.1") are
			// reported without the version by debug/elf.
			if _, seen := out[s.Name]; !seen {
				out[s.Name] = s.Value
			}
		}
	}
	return out, nil
}
