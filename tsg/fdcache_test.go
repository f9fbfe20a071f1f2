package tsg

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// fdRig is a process as FDCache sees it: a procfs root of the test's own
// whose one pid has a stat file the test writes (its identity) and an fd
// directory that is this process's real /proc/self/fd (real procfs
// offsets, real magic links). The "control node" is a 195:255 node made
// in a temporary directory and held by O_PATH descriptors, which fstat
// like an open nvidiactl without a driver.
type fdRig struct {
	t     *testing.T
	root  string
	pid   int
	ctl   string
	now   time.Time
	c     *FDCache
	walks []int // descriptors each walk stat'd
}

func newFDRig(t *testing.T) *fdRig {
	t.Helper()
	dir := t.TempDir()
	ctl := filepath.Join(dir, "nvidiactl")
	if err := syscall.Mknod(ctl, syscall.S_IFCHR|0o600, ioctl.NV_MAJOR_DEVICE_NUMBER<<8|ioctl.NV_CONTROL_MINOR); err != nil {
		t.Skipf("mknod %s (needs CAP_MKNOD): %v", ctl, err)
	}
	r := &fdRig{t: t, root: filepath.Join(dir, "proc"), pid: 4242, ctl: ctl, now: time.Unix(1e9, 0)}
	pdir := filepath.Join(r.root, strconv.Itoa(r.pid))
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/proc/"+strconv.Itoa(os.Getpid())+"/fd", filepath.Join(pdir, "fd")); err != nil {
		t.Fatal(err)
	}
	r.setStart(100)
	r.c = &FDCache{Now: func() time.Time { return r.now }}
	r.c.OnWalk = func(pid, _, examined int) {
		if pid == r.pid {
			r.walks = append(r.walks, examined)
		}
	}
	return r
}

// setStart gives the pid another identity: a new process with the number.
func (r *fdRig) setStart(start int) {
	r.t.Helper()
	stat := strconv.Itoa(r.pid) + " (a b) c) S 1 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " + strconv.Itoa(start) + " 0 0\n"
	if err := os.WriteFile(filepath.Join(r.root, strconv.Itoa(r.pid), "stat"), []byte(stat), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// open holds n descriptors on path (O_PATH: nothing of the device's own is
// called) until the test ends, and returns their numbers.
func (r *fdRig) open(path string, n int) []int {
	r.t.Helper()
	var fds []int
	for range n {
		fd, err := syscall.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			r.t.Skipf("opening %d files: %v", n, err)
		}
		r.t.Cleanup(func() { syscall.Close(fd) })
		fds = append(fds, fd)
	}
	return fds
}

func (r *fdRig) controlFDs() []int {
	r.t.Helper()
	fds, err := controlFDs(r.c, r.root, r.pid)
	if err != nil {
		r.t.Fatal(err)
	}
	return fds
}

// TestFDCacheWalks: what finding a process's control descriptors costs
// does not grow with the files it holds (issue 40, finding 4). Walks are
// counted through the hook and the clock is the test's: no timing.
func TestFDCacheWalks(t *testing.T) {
	type step struct {
		name      string
		do        func(r *fdRig, ctl *[]int) // before the lookups
		advance   time.Duration
		lookups   int
		wantWalks int  // in all, after the step
		wantCtl   bool // the rig's control descriptors all listed
		wantNone  bool // no control descriptor listed
	}
	tests := []struct {
		name  string
		pad   int // files opened before the control node
		steps []step
	}{
		{"few files: one walk for many lookups", 8, []step{
			{name: "first", lookups: 200, wantWalks: 1, wantCtl: true},
		}},
		{"thousands of files: one bounded walk, the rest verified", 4 * FDWalkBatch, []step{
			{name: "first batch ends before the node", lookups: 200, wantWalks: 1, wantNone: true},
			{name: "still the interval", advance: FDWalkInterval / 2, lookups: 200, wantWalks: 1, wantNone: true},
			{name: "second batch", advance: FDWalkInterval, lookups: 200, wantWalks: 2, wantNone: true},
			{name: "third batch", advance: FDWalkInterval, lookups: 200, wantWalks: 3, wantNone: true},
			{name: "fourth batch", advance: FDWalkInterval, lookups: 200, wantWalks: 4, wantNone: true},
			{name: "last batch finds it", advance: FDWalkInterval, lookups: 200, wantWalks: 5, wantCtl: true},
			{name: "found: verified, not walked", advance: FDWalkInterval / 1024, lookups: 200, wantWalks: 5, wantCtl: true},
			{name: "due again: one walk", advance: 2 * FDWalkInterval, lookups: 200, wantWalks: 6, wantCtl: true},
		}},
		{"closed descriptor dropped without a walk", FDWalkBatch + 16, []step{
			{name: "found", advance: 0, lookups: 1, wantWalks: 1, wantNone: true},
			{name: "found", advance: FDWalkInterval, lookups: 1, wantWalks: 2, wantCtl: true},
			{name: "closed", do: func(r *fdRig, ctl *[]int) {
				for _, fd := range *ctl {
					syscall.Close(fd)
				}
				*ctl = nil
			}, lookups: 100, wantWalks: 2, wantNone: true},
		}},
		{"number reused for another file", 8, []step{
			{name: "found", lookups: 1, wantWalks: 1, wantCtl: true},
			{name: "replaced", do: func(r *fdRig, ctl *[]int) {
				null := r.open(os.DevNull, 1)[0]
				for _, fd := range *ctl {
					if err := syscall.Dup3(null, fd, syscall.O_CLOEXEC); err != nil {
						r.t.Fatal(err)
					}
				}
				*ctl = nil
			}, lookups: 10, wantWalks: 1, wantNone: true},
		}},
		{"new process with the pid: walked again", 8, []step{
			{name: "found", lookups: 10, wantWalks: 1, wantCtl: true},
			{name: "new identity", do: func(r *fdRig, _ *[]int) { r.setStart(200) }, lookups: 10, wantWalks: 2, wantCtl: true},
		}},
		{"a node opened later is found when a walk is due", FDWalkBatch, []step{
			{name: "found", lookups: 1, wantWalks: 1, wantNone: true},
			{name: "second batch", advance: FDWalkInterval, lookups: 1, wantWalks: 2, wantCtl: true},
			{name: "another opened", do: func(r *fdRig, ctl *[]int) {
				*ctl = append(*ctl, r.open(r.ctl, 1)...)
			}, advance: FDWalkInterval, lookups: 50},
			{name: "all found", advance: 3 * FDWalkInterval, lookups: 50, wantCtl: true},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newFDRig(t)
			r.open(os.DevNull, tt.pad)
			ctl := r.open(r.ctl, 1)
			for _, s := range tt.steps {
				if s.do != nil {
					s.do(r, &ctl)
				}
				r.now = r.now.Add(s.advance)
				var got []int
				for range s.lookups {
					got = r.controlFDs()
				}
				if s.wantWalks > 0 && len(r.walks) != s.wantWalks {
					t.Errorf("%s: %d walks (%v), want %d", s.name, len(r.walks), r.walks, s.wantWalks)
				}
				for _, n := range r.walks {
					if n > FDWalkBatch {
						t.Errorf("%s: a walk stat'd %d descriptors, want at most %d", s.name, n, FDWalkBatch)
					}
				}
				if s.wantCtl {
					for _, fd := range ctl {
						if !slices.Contains(got, fd) {
							t.Errorf("%s: control descriptors %v, want %v among them", s.name, got, ctl)
						}
					}
				}
				if s.wantNone && len(got) != 0 {
					t.Errorf("%s: control descriptors %v, want none", s.name, got)
				}
			}
		})
	}
}

// TestFDCacheGone: a process that exited is ErrNoSuchProcess, cached or
// not, and a pid absent from a listing is forgotten.
func TestFDCacheGone(t *testing.T) {
	r := newFDRig(t)
	r.open(r.ctl, 1)
	if fds := r.controlFDs(); len(fds) != 1 {
		t.Fatalf("control descriptors %v, want one", fds)
	}
	r.c.Retain(map[int]bool{r.pid + 1: true})
	if n := len(r.c.procs); n != 0 {
		t.Errorf("%d processes remembered after Retain without them, want 0", n)
	}
	if err := os.RemoveAll(filepath.Join(r.root, strconv.Itoa(r.pid))); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*FDCache{r.c, nil} {
		if _, err := c.Lookup(r.root, r.pid); !errors.Is(err, ioctl.ErrNoSuchProcess) {
			t.Errorf("Lookup of an exited process (cache %v) = %v, want ErrNoSuchProcess", c != nil, err)
		}
	}
}

// TestFDCacheConcurrentLookups: callers asking at once (a peer's requests
// in flight, the scan, the discovery) share one walk; each gets the
// answer of a walk, none an empty guess while the first is under way.
func TestFDCacheConcurrentLookups(t *testing.T) {
	for _, pad := range []int{8, 3 * FDWalkBatch / 2} {
		t.Run(strconv.Itoa(pad)+" files", func(t *testing.T) {
			r := newFDRig(t)
			r.open(os.DevNull, pad)
			ctl := r.open(r.ctl, 1)
			var mu sync.Mutex
			r.c.OnWalk = func(pid, _, examined int) {
				mu.Lock()
				defer mu.Unlock()
				r.walks = append(r.walks, examined)
			}
			const callers = 16
			got := make([][]int, callers)
			errs := make([]error, callers)
			var wg sync.WaitGroup
			for i := range callers {
				wg.Go(func() { got[i], errs[i] = controlFDs(r.c, r.root, r.pid) })
			}
			wg.Wait()
			if len(r.walks) != 1 {
				t.Errorf("%d callers at once made %d walks (%v), want 1", callers, len(r.walks), r.walks)
			}
			for i := range callers {
				if errs[i] != nil {
					t.Fatalf("caller %d: %v", i, errs[i])
				}
				if found := slices.Contains(got[i], ctl[0]); found != (pad < FDWalkBatch) {
					t.Errorf("caller %d: control descriptors %v (node at %d, first batch %d)", i, got[i], ctl[0], FDWalkBatch)
				}
			}
		})
	}
}
