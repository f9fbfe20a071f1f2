package rmfake

import (
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
)

var tracePath = filepath.Join("..", "..", "testdata", "h100-580.159.04-alloc-sequence.txt")

func TestParseRealTrace(t *testing.T) {
	trace, err := ParseTraceFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[uint32]int{}
	for _, a := range trace {
		counts[a.Class]++
	}
	// What docs/GPU-FACTS.md describes: two clients, four TSGs, one context
	// share, 8+3*4 channels, 8 compute objects, 20 copy objects.
	want := map[uint32]int{
		ioctl.NV01_ROOT_CLIENT:        2,
		ioctl.KEPLER_CHANNEL_GROUP_A:  4,
		ioctl.FERMI_CONTEXT_SHARE_A:   1,
		ioctl.HOPPER_CHANNEL_GPFIFO_A: 20,
		ioctl.HOPPER_COMPUTE_A:        8,
		ioctl.HOPPER_DMA_COPY_A:       20,
	}
	for class, n := range want {
		if counts[class] != n {
			t.Errorf("class %#x: %d allocations, want %d", class, counts[class], n)
		}
	}
}

func TestParseTraceErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"fd=8 client=0 parent=0 h=0xc1d00021", `missing field "class"`},
		{"fd=8 client=0 parent=0 h=0xc1d00021 class=0x41 class=0x41", "repeated"},
		{"fd=8 client=zz parent=0 h=1 class=0x41", "client="},
		{"fd=8 client=0 parent=0 h=0 class=0x41", "h=0"},
		{"fd=8 client=0 parent=0 h=1 class=0x41 colour=blue", "unknown field"},
		{"fd=8 client=0 parent=0 h=1 class=0x41 stray", "not key=value"},
		{"fd=99999999 client=0 parent=0 h=1 class=0x41", "out of range"},
	}
	for _, tt := range tests {
		_, err := ParseTrace(strings.NewReader("# header\n\n" + tt.in + "\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "line 3") {
			t.Errorf("ParseTrace(%q) = %v, want an error on line 3 containing %q", tt.in, err, tt.want)
		}
	}
}

func FuzzParseTrace(f *testing.F) {
	f.Add("fd=8 client=0 parent=0 h=0xc1d00021 class=0x41\n")
	f.Add("fd=8 client=0xc1d00022 parent=0x5c000002 h=0x5c000015 class=0xa06c\nbefore-stop\n")
	f.Add("# c\n\nfd=1 client=1 parent=1 h=1 class=1 fd=2")
	f.Fuzz(func(t *testing.T, s string) {
		trace, err := ParseTrace(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, a := range trace {
			if a.Handle == 0 {
				t.Fatalf("accepted an allocation without a handle: %+v", a)
			}
		}
		// Whatever parses must replay or fail cleanly, never panic.
		d := New()
		_, _ = d.Replay(d.NewProc(1), trace)
	})
}

func TestReplayRejectsForeignClient(t *testing.T) {
	trace := []TraceAlloc{{FD: 3, Client: 0xc1d00005, Parent: 0xc1d00005, Handle: 0x10, Class: ioctl.NV01_DEVICE_0}}
	d := New()
	if _, err := d.Replay(d.NewProc(1), trace); err == nil || !strings.Contains(err.Error(), "never allocated") {
		t.Fatalf("Replay = %v", err)
	}
}

func TestControlRules(t *testing.T) {
	d := New()
	p, clients, err := d.ReplayFile(1, tracePath)
	if err != nil {
		t.Fatal(err)
	}
	ctl := &FD{d: d, f: p.fds[8]}
	dev := &FD{d: d, f: p.fds[17]} // /dev/nvidia0, registered with fd 8
	c := clients[1]
	const tsg = ioctl.Handle(0x5c000015)
	ts := func(fd *FD, client, obj ioctl.Handle, size int) error {
		return fd.ControlBytes(client, obj, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, make([]byte, size))
	}
	tests := []struct {
		name string
		err  error
		want ioctl.NvStatus
	}{
		{"bound client", ts(ctl, c, tsg, 8), ioctl.NV_OK},
		{"registered device file", ts(dev, c, tsg, 8), ioctl.NV_OK},
		{"other file", ts(&FD{d: d, f: d.newFile(true)}, c, tsg, 8), ioctl.NV_ERR_INVALID_CLIENT},
		{"no such client", ts(ctl, 0xc1d0ffff, tsg, 8), ioctl.NV_ERR_INVALID_CLIENT},
		{"no such object", ts(ctl, c, 0x5c0fffff, 8), ioctl.NV_ERR_INVALID_OBJECT_HANDLE},
		{"wrong size", ts(ctl, c, tsg, 16), ioctl.NV_ERR_INVALID_PARAM_STRUCT},
		{"wrong class", ts(ctl, c, 0x5c000002, 8), ioctl.NV_ERR_NOT_SUPPORTED},
		{"old schedule layout on 580", ctl.ControlBytes(c, tsg, ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, []byte{1, 0}), ioctl.NV_ERR_INVALID_PARAM_STRUCT},
	}
	for _, tt := range tests {
		if tt.want == ioctl.NV_OK {
			if tt.err != nil {
				t.Errorf("%s: %v", tt.name, tt.err)
			}
			continue
		}
		if !errors.Is(tt.err, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
}

func TestGetChildHandleTakesInternalClassIDs(t *testing.T) {
	d := New()
	p, clients, err := d.ReplayFile(1, tracePath)
	if err != nil {
		t.Fatal(err)
	}
	ctl := &FD{d: d, f: p.fds[8]}
	c := clients[1]
	child := func(parent ioctl.Handle, class uint32) (ioctl.Handle, error) {
		q := ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS{HParent: parent, ClassID: class}
		err := ioctl.Control(ctl, c, c, ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE, &q)
		return q.HObject, err
	}
	if _, err := child(c, ioctl.NV01_DEVICE_0); !errors.Is(err, ioctl.NV_ERR_OBJECT_NOT_FOUND) {
		t.Errorf("by external class 0x80: %v, want NV_ERR_OBJECT_NOT_FOUND as on the H100", err)
	}
	if h, err := child(c, ioctl.NVOC_CLASS_ID_Device); err != nil || h != 0x5c000002 {
		t.Errorf("by internal Device id: %v, %v", h, err)
	}
	if h, err := child(0x5c000002, ioctl.NVOC_CLASS_ID_KernelChannelGroupApi); err != nil || h != 0x5c000015 {
		t.Errorf("first TSG: %v, %v", h, err)
	}
}

// TestFileLifetime: a process's clients live as long as any descriptor of
// their file does, the process's own or a duplicate (pidfd_getfd), as the
// kernel keeps a struct file until its last fput.
func TestFileLifetime(t *testing.T) {
	type step func(d *Driver, p *Proc, dups []*FD)
	exit := func(d *Driver, p *Proc, _ []*FD) { d.Exit(p.PID) }
	closeDup := func(i int) step { return func(_ *Driver, _ *Proc, dups []*FD) { dups[i].Close() } }
	closeOwn := func(d *Driver, p *Proc, _ []*FD) { (&FD{d: d, f: p.fds[8], proc: p, num: 8}).Close() }
	tests := []struct {
		name  string
		dups  int
		steps []step
		// alive after each step: are the process's clients still there?
		alive []bool
	}{
		{"exit, no duplicate", 0, []step{exit}, []bool{false}},
		{"exit with a duplicate open, then close it", 1, []step{exit, closeDup(0)}, []bool{true, false}},
		{"two duplicates", 2, []step{exit, closeDup(0), closeDup(1)}, []bool{true, true, false}},
		{"a duplicate closed twice counts once", 2, []step{closeDup(0), closeDup(0), exit}, []bool{true, true, true}},
		{"duplicate closed before exit", 1, []step{closeDup(0), exit}, []bool{true, false}},
		{"process closes its own fd, duplicate keeps it", 1, []step{closeOwn, closeDup(0)}, []bool{true, false}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			p, clients, err := d.ReplayFile(1, tracePath)
			if err != nil {
				t.Fatal(err)
			}
			var dups []*FD
			for range tt.dups {
				dups = append(dups, attach(t, d, 1, 8))
			}
			for i, s := range tt.steps {
				s(d, p, dups)
				if got := len(d.Clients()) == len(clients); got != tt.alive[i] {
					t.Fatalf("after step %d: clients %v alive = %v, want %v", i+1, d.Clients(), got, tt.alive[i])
				}
			}
		})
	}
}

// attach duplicates pid's descriptor fd through the fake host, as the
// attach source does, and closes the target right away: the duplicate
// stands on its own.
func attach(t *testing.T, d *Driver, pid, fd int) *FD {
	t.Helper()
	tgt, err := d.Host().Open(pid)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := tgt.Attach(fd)
	tgt.Close()
	if err != nil {
		t.Fatal(err)
	}
	return dev.(*FD)
}

// TestDuplicateOutlivesProcess: a duplicate still reaches the clients of a
// process that has exited, as a real one does, until it is closed.
func TestDuplicateOutlivesProcess(t *testing.T) {
	d := New()
	_, clients, err := d.ReplayFile(1, tracePath)
	if err != nil {
		t.Fatal(err)
	}
	dev := attach(t, d, 1, 8)
	d.Exit(1)
	get := func() error {
		return dev.ControlBytes(clients[1], 0x5c000015, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, make([]byte, 8))
	}
	if err := get(); err != nil {
		t.Errorf("GET_TIMESLICE through a duplicate of an exited process's file: %v", err)
	}
	dev.Close()
	if err := get(); err == nil {
		t.Error("GET_TIMESLICE through a closed duplicate succeeded")
	}
	if c := d.Clients(); len(c) != 0 {
		t.Errorf("clients %v left after the last reference closed", c)
	}
}

// TestComputeProcessesAreTheMakers: NVML's compute processes are RM's
// record of who allocated each client with a compute object, not who holds
// its file: a fork or a process handed a duplicate is not listed for the
// maker's clients; one with a context of its own is; a maker that exited
// while a duplicate keeps its clients alive still is (RM keeps the pid).
func TestComputeProcessesAreTheMakers(t *testing.T) {
	tests := []struct {
		name  string
		setup func(d *Driver)
		want  []int
	}{
		{"one context", func(d *Driver) {}, []int{100}},
		{"forked after its context", func(d *Driver) { d.Fork(100, 101) }, []int{100}},
		{"handed the file", func(d *Driver) { d.GetFDs(100, 50) }, []int{100}},
		{"handed the file, with a context of its own", func(d *Driver) {
			d.GetFDs(100, 50)
			replay(t, d, 50, 20) // its own at a free descriptor
		}, []int{50, 100}},
		{"maker exited, a duplicate open", func(d *Driver) {
			attach(t, d, 100, 8)
			d.Exit(100)
		}, []int{100}},
		{"maker exited", func(d *Driver) { d.Exit(100) }, nil},
		{"no compute object: the caller's own client", func(d *Driver) {
			dev, err := d.Host().OpenControl()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := dev.Alloc(0, 0, 0, ioctl.NV01_ROOT_CLIENT, nil); err != nil {
				t.Fatal(err)
			}
		}, []int{100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			replay(t, d, 100, 0)
			tt.setup(d)
			if got := d.ComputeProcesses(); !slices.Equal(got, tt.want) {
				t.Errorf("compute processes %v, want %v", got, tt.want)
			}
		})
	}
}

// replay makes a context in pid from the real trace, its descriptors
// moved up by shift.
func replay(t *testing.T, d *Driver, pid, shift int) {
	t.Helper()
	trace, err := ParseTraceFile(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	for i := range trace {
		trace[i].FD += shift
	}
	p := d.Proc(pid)
	if p == nil {
		p = d.NewProc(pid)
	}
	if _, err := d.Replay(p, trace); err != nil {
		t.Fatal(err)
	}
}
