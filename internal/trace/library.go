package trace

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/internal/libfile"
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
	// DefaultQueueSymbols queue a request's other GPU work (RoleQueue), its input copies and
	// event records, often before its first kernel: a request begins at the first of them or of
	// the launches.
	DefaultQueueSymbols = []string{"cuMemcpyHtoDAsync_v2", "cuMemcpyHtoDAsync_v2_ptsz", "cuMemcpyAsync", "cuMemcpyAsync_ptsz",
		"cuEventRecord", "cuEventRecord_ptsz", "cuEventRecordWithFlags", "cuEventRecordWithFlags_ptsz"}
	DefaultSyncSymbols = []string{"cuStreamSynchronize", "cuStreamSynchronize_ptsz", "cuEventSynchronize", "cuCtxSynchronize", "cuCtxSynchronize_v2"}
	// The hint API's C ABI (libgpreempt.so).
	DefaultHintSymbol   = "gpreempt_hint"
	DefaultReadySymbol  = "gpreempt_ready"
	DefaultCancelSymbol = "gpreempt_cancel"
)

// RequestProbes are the probes of the request definition on the library at path ("": each
// process's own): launches, queued work, synchronizes.
func RequestProbes(path string) []Probe {
	return slices.Concat(ProbesOf(path, RoleLaunch, DefaultLaunchSymbols), ProbesOf(path, RoleQueue, DefaultQueueSymbols),
		ProbesOf(path, RoleSync, DefaultSyncSymbols))
}

// ProbesOf are probes of role on the functions syms of the library at path ("": each process's own).
func ProbesOf(path string, role Role, syms []string) []Probe {
	out := make([]Probe, 0, len(syms))
	for _, s := range syms {
		out = append(out, Probe{Library: path, Symbol: s, Role: role})
	}
	return out
}

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

// mappedLibrary finds name among the files pid has mapped, and returns
// the path to open it by: the mapping itself (/proc/PID/map_files/RANGE,
// which names the very file mapped, even deleted or renamed since), or,
// where the caller may not open those (without CAP_SYS_ADMIN or
// CAP_CHECKPOINT_RESTORE), the mapped path under /proc/PID/root, only if
// it is still the inode mapped.
func mappedLibrary(pid int, name string) (string, error) {
	root := "/proc/" + strconv.Itoa(pid)
	b, err := readBounded(root+"/maps", maxMapsRead)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: process %d: %w", ErrNoLibrary, pid, err)
	}
	if err != nil {
		return "", fmt.Errorf("read %s/maps: %w", root, err)
	}
	m, ok := matchMapping(b, name)
	if !ok {
		return "", nil
	}
	mf := fmt.Sprintf("%s/map_files/%x-%x", root, m.start, m.end)
	if fd, err := unix.Open(mf, unix.O_PATH|unix.O_CLOEXEC, 0); err == nil {
		unix.Close(fd)
		return mf, nil
	}
	path := root + "/root" + m.path
	var st unix.Stat_t
	// O_PATH opens no file (no FIFO waits, no device is opened); a path
	// that is no longer the inode mapped is not the library.
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNoLibrary, path, err)
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrNoLibrary, path, err)
	}
	if st.Ino != m.inode {
		return "", fmt.Errorf("%w: %s is no longer the file process %d mapped (inode %d, mapped %d)", ErrUntrustedLibrary, path, pid, st.Ino, m.inode)
	}
	return path, nil
}

// maxMapsRead bounds what is read of a process's maps: a process with a
// million mappings costs no more than this.
const maxMapsRead = 16 << 20

// readBounded reads at most limit bytes of a file.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, limit))
}

// mapping is one line of /proc/PID/maps that maps a file.
type mapping struct {
	start, end, inode uint64
	path              string
}

// matchMapping returns the first mapping of /proc/pid/maps content b of a
// file whose base name is name or another version of it.
func matchMapping(b []byte, name string) (mapping, bool) {
	stem := libraryStem(name)
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(nil, 1<<16)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// address perms offset dev inode path
		if len(f) < 6 || !strings.HasPrefix(f[5], "/") {
			continue
		}
		path := strings.Join(f[5:], " ")
		base := filepath.Base(path)
		if base != name && base != stem && !strings.HasPrefix(base, stem+".") {
			continue
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		inode, err3 := strconv.ParseUint(f[4], 10, 64)
		if !ok || err1 != nil || err2 != nil || err3 != nil {
			continue
		}
		return mapping{start: start, end: end, inode: inode, path: strings.TrimSuffix(path, " (deleted)")}, true
	}
	return mapping{}, false
}

// matchMaps returns the first mapped file of /proc/pid/maps content b whose
// base name is name or another version of it, prefixed with root.
func matchMaps(b []byte, name, root string) string {
	if m, ok := matchMapping(b, name); ok {
		return root + m.path
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
	// Offset is the function's place in the file, set by ResolveProbes:
	// what the uprobe is attached at.
	Offset uint64 `json:"-"`
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
// every call twice. Each kept probe carries its function's file offset.
// Libraries are opened as libfile.Open does: a file that is not a regular
// one, not trusted, or too large to be a libcuda is ErrUntrustedLibrary.
func ResolveProbes(probes []Probe) (keep []Probe, skipped []Skipped, err error) {
	keep, skipped, libs, err := resolveOpen(probes)
	for _, l := range libs {
		l.Close()
	}
	return keep, skipped, err
}

// resolveOpen is ResolveProbes that leaves the libraries open, by the
// probes' Library: probes are attached through them (Executable), so the
// uprobes go on the very file whose symbols were read. The caller closes
// them, also on error.
func resolveOpen(probes []Probe) (keep []Probe, skipped []Skipped, libs map[string]*libfile.File, err error) {
	type place struct {
		lib  string
		addr uint64
	}
	wanted := map[string][]string{}
	for _, p := range probes {
		if !slices.Contains(wanted[p.Library], p.Symbol) {
			wanted[p.Library] = append(wanted[p.Library], p.Symbol)
		}
	}
	libs = map[string]*libfile.File{}
	at := map[place]string{}
	for _, p := range probes {
		l, ok := libs[p.Library]
		if !ok {
			if l, err = libfile.Open(p.Library, wanted[p.Library]); err != nil {
				return nil, nil, libs, err
			}
			libs[p.Library] = l
		}
		off, ok := l.Offset(p.Symbol)
		if !ok {
			skipped = append(skipped, Skipped{p, "no such function in the library"})
			continue
		}
		if other, dup := at[place{p.Library, off}]; dup {
			skipped = append(skipped, Skipped{p, "alias of " + other})
			continue
		}
		at[place{p.Library, off}] = p.Symbol
		p.Offset = off
		keep = append(keep, p)
	}
	return keep, skipped, libs, nil
}
