// Package rmfake is a fake NVIDIA resource manager for logic tests. It
// enforces the rules of the real driver that gpreempt's code depends on,
// each checked against the 580.x source and against what was measured on an
// H100 (docs/GPU-RESULTS.md):
//
//   - a client is bound to the open file that allocated it; a control or
//     allocation naming it through any other file fails with
//     NV_ERR_INVALID_CLIENT, exactly as for a client that does not exist;
//     a duplicate of that file (pidfd_getfd) is the same file;
//   - an open file lives as long as any descriptor refers to it, as the
//     kernel's struct file does: a duplicate taken with pidfd_getfd keeps a
//     process's file, and so its RM clients, alive after the process exits,
//     and RM frees those clients only when the last reference is closed;
//   - client handles come from a counter: RS_CLIENT_HANDLE_BASE + index;
//   - a control's parameter size must match the command's exactly
//     (NV_ERR_INVALID_PARAM_STRUCT), a command not exported by the object's
//     class is NV_ERR_NOT_SUPPORTED, an unknown object
//     NV_ERR_INVALID_OBJECT_HANDLE, a lookup of a missing handle
//     NV_ERR_OBJECT_NOT_FOUND;
//   - NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE matches NVOC internal class
//     ids, not external class numbers (learned the hard way on the H100);
//   - GPFIFO_SCHEDULE's parameters are 2 bytes before 575.51 and 3 after;
//   - SET_INTERLEAVE_LEVEL is privileged (NV_ERR_INSUFFICIENT_PERMISSIONS
//     for a non-root caller); a new TSG's timeslice is 1024 us and its
//     interleave level MEDIUM, which GET_INTERLEAVE_LEVEL does not report on
//     GSP-RM (NV_ERR_NOT_SUPPORTED on the H100); libcuda then sets the compute TSG to 2048 us.
//
// Processes are populated by replaying a real libcuda allocation trace.
package rmfake

import (
	"cmp"
	"fmt"
	"slices"
	"sync"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// GPUID is RM's id of the fake's one GPU, as NV2080_CTRL_CMD_GPU_GET_ID and
// the QUERY escape report it.
const GPUID = 0x100

// file is one open file of the driver.
type file struct {
	id  int
	ctl bool
	// refs counts the descriptors that refer to the file: the process's
	// own and every duplicate (Host().Attach). The file is released, and
	// the clients bound to it freed, when it drops to 0.
	refs int
	// registered is the control file a /dev/nvidiaN file was registered
	// with (NV_ESC_REGISTER_FD); RM validates clients against it.
	registered *file
}

func (f *file) owner() *file {
	if f.registered != nil {
		return f.registered
	}
	return f
}

type object struct {
	handle, parent ioctl.Handle
	class          uint32
	timesliceUs    uint64
	interleave     uint32
	tsgID          uint32
	enabled        bool
}

type client struct {
	handle ioctl.Handle
	file   *file
	// procID is the process that allocated the client (RM's
	// RmClient.ProcID): the pid of the descriptor it was made through, 0
	// for the caller's own files. It does not change when the file is
	// handed on or the process forks.
	procID  int
	objects map[ioctl.Handle]*object
}

// Proc is a fake process: its descriptor table.
type Proc struct {
	PID int
	// Deny makes attaching to it fail as pidfd_getfd does without
	// ptrace rights.
	Deny bool
	fds  map[int]*file
}

// Fault makes the Nth matching control fail with Status (N counts from 1;
// 0 means every match).
type Fault struct {
	Cmd    uint32
	Object ioctl.Handle
	Nth    int
	Status ioctl.NvStatus
	seen   int
}

// Driver is the fake RM. The zero value is not usable; call New.
type Driver struct {
	mu         sync.Mutex
	version    ioctl.DriverVersion
	root       bool
	clients    map[ioctl.Handle]*client
	nextClient uint32
	nextFile   int
	nextTSGID  uint32
	nextHandle uint32
	procs      map[int]*Proc
	faults     []*Fault
	controls   map[uint32]int
	// interleaveReadable: GET_INTERLEAVE_LEVEL answers. GSP-RM on the H100
	// (580.159.04) refuses it with NV_ERR_NOT_SUPPORTED.
	interleaveReadable bool
}

// Option configures a Driver.
type Option func(*Driver)

// WithVersion sets the driver version the fake reports and whose ABI it
// enforces. Default 580.159.04.
func WithVersion(v ioctl.DriverVersion) Option { return func(d *Driver) { d.version = v } }

// WithUnprivilegedCaller makes the caller a non-root user for
// PRIVILEGED controls.
func WithUnprivilegedCaller() Option { return func(d *Driver) { d.root = false } }

// WithReadableInterleave makes GET_INTERLEAVE_LEVEL answer, as a driver
// that implements it would.
func WithReadableInterleave() Option { return func(d *Driver) { d.interleaveReadable = true } }

// WithClientCounter starts the client counter at index (as on a machine
// where that many clients were created since the driver loaded).
func WithClientCounter(index uint32) Option { return func(d *Driver) { d.nextClient = index } }

// New returns an empty fake driver.
func New(opts ...Option) *Driver {
	d := &Driver{
		version:    ioctl.DriverVersion{Major: 580, Minor: 159, Patch: 4},
		root:       true,
		clients:    map[ioctl.Handle]*client{},
		procs:      map[int]*Proc{},
		controls:   map[uint32]int{},
		nextClient: 0x21, // as in the trace: a fresh VM had made 0x21 clients
	}
	for _, o := range opts {
		o(d)
	}
	return d
}

// AddFault installs a fault.
func (d *Driver) AddFault(f *Fault) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.faults = append(d.faults, f)
}

// Controls returns how many times cmd was issued (whatever the outcome).
func (d *Driver) Controls(cmd uint32) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.controls[cmd]
}

// NewProc creates a process with no files.
func (d *Driver) NewProc(pid int) *Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := &Proc{PID: pid, fds: map[int]*file{}}
	d.procs[pid] = p
	return p
}

// Fork makes child, a process whose descriptors refer to parent's open
// files, as fork(2) leaves them: a child forked after its parent made a
// CUDA context reaches the parent's clients through them.
func (d *Driver) Fork(parent, child int) *Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := &Proc{PID: child, fds: map[int]*file{}}
	for fd, f := range d.procs[parent].fds {
		f.refs++
		c.fds[fd] = f
	}
	d.procs[child] = c
	return c
}

// GetFDs gives process to a duplicate of each of from's descriptors, at
// the same numbers, as pidfd_getfd(2) does one at a time (a monitoring
// agent, or gpreemptctl, reaching another process's clients); to is
// created if unknown.
func (d *Driver) GetFDs(from, to int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	t := d.procs[to]
	if t == nil {
		t = &Proc{PID: to, fds: map[int]*file{}}
		d.procs[to] = t
	}
	for fd, f := range d.procs[from].fds {
		f.refs++
		t.fds[fd] = f
	}
}

// Exit removes a process and closes its descriptors. A file that a
// duplicate still refers to stays open, with its clients, until that
// duplicate is closed: the kernel frees a file at its last fput, and RM
// frees the file's clients only then.
func (d *Driver) Exit(pid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.procs[pid]
	if p == nil {
		return
	}
	delete(d.procs, pid)
	for fd, f := range p.fds {
		delete(p.fds, fd)
		d.release(f)
	}
}

// release drops one reference to f; the last one frees the clients bound
// to f. d.mu must be held.
func (d *Driver) release(f *file) {
	f.refs--
	if f.refs > 0 {
		return
	}
	for h, c := range d.clients {
		if c.file == f {
			delete(d.clients, h)
		}
	}
}

// Proc returns the live process pid, or nil.
func (d *Driver) Proc(pid int) *Proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.procs[pid]
}

// Clients returns the handles of every live client, sorted: what RM still
// holds, whoever holds it.
func (d *Driver) Clients() []ioctl.Handle {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]ioctl.Handle, 0, len(d.clients))
	for h := range d.clients {
		out = append(out, h)
	}
	slices.Sort(out)
	return out
}

// ComputeProcesses lists, sorted, the processes NVML reports as a GPU's
// compute processes: RM's NV2080_CTRL_CMD_GPU_GET_PIDS answers with the
// pid each client was allocated by (gpuGetProcWithObject), for the
// clients holding a compute object, whichever processes hold the client's
// file now. A process handed a duplicate of the file, or forked from its
// maker, is not listed for it.
func (d *Driver) ComputeProcesses() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var pids []int
	for _, c := range d.clients {
		if c.procID == 0 || slices.Contains(pids, c.procID) {
			continue
		}
		for _, o := range c.objects {
			if ioctl.IsComputeClass(o.class) {
				pids = append(pids, c.procID)
				break
			}
		}
	}
	slices.Sort(pids)
	return pids
}

// newFile opens a file with one reference, its opener's descriptor.
func (d *Driver) newFile(ctl bool) *file {
	d.nextFile++
	return &file{id: d.nextFile, ctl: ctl, refs: 1}
}

// OpenControlAt opens /dev/nvidiactl in p at descriptor fd. The FD
// returned is p's own descriptor: closing it closes fd in p.
func (d *Driver) OpenControlAt(p *Proc, fd int) *FD {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := d.newFile(true)
	d.install(p, fd, f)
	return &FD{d: d, f: f, proc: p, num: fd}
}

// install puts f at descriptor fd of p, closing what was there (dup2's
// rule). d.mu must be held.
func (d *Driver) install(p *Proc, fd int, f *file) {
	if old := p.fds[fd]; old != nil {
		d.release(old)
	}
	p.fds[fd] = f
}

// OpenDeviceAt opens /dev/nvidia0 in p at descriptor fd, registered with
// the control file at ctlFD.
func (d *Driver) OpenDeviceAt(p *Proc, fd, ctlFD int) (*FD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	ctl := p.fds[ctlFD]
	if ctl == nil || !ctl.ctl {
		return nil, fmt.Errorf("fd %d of pid %d is not a control file", ctlFD, p.PID)
	}
	f := d.newFile(false)
	f.registered = ctl
	d.install(p, fd, f)
	return &FD{d: d, f: f, proc: p, num: fd}, nil
}

// FD is an open file of the fake driver; it implements tsg.Device. It is
// one of three things: a process's own descriptor (proc set: closing it
// closes that descriptor), a descriptor of the caller's own (a duplicate
// from Host().Attach or a file from Host().OpenControl: counted, closing
// it drops its reference), or a view the fake uses internally (neither:
// closing it only stops its use).
type FD struct {
	d       *Driver
	f       *file
	counted bool
	proc    *Proc
	num     int
	closed  bool
}

// Close closes the descriptor once; the file goes when its last reference
// does (see Driver.Exit).
func (x *FD) Close() error {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	if x.closed {
		return nil
	}
	x.closed = true
	switch {
	case x.counted:
		x.d.release(x.f)
	case x.proc != nil && x.proc.fds[x.num] == x.f:
		delete(x.proc.fds, x.num)
		x.d.release(x.f)
	}
	return nil
}

func (x *FD) DriverVersion() (ioctl.DriverVersion, error) {
	x.d.mu.Lock()
	defer x.d.mu.Unlock()
	if x.closed {
		return ioctl.DriverVersion{}, fmt.Errorf("fake fd closed")
	}
	return x.d.version, nil
}

// Alloc follows NV_ESC_RM_ALLOC: object 0 with class NV01_ROOT_CLIENT makes
// a client bound to this file; other objects need a client bound to it.
func (x *FD) Alloc(hClient, parent, h ioctl.Handle, class uint32, params []byte) (ioctl.Handle, error) {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.closed {
		return 0, fmt.Errorf("fake fd closed")
	}
	op := fmt.Sprintf("alloc class %#x", class)
	switch class {
	case ioctl.NV01_ROOT, ioctl.NV01_ROOT_NON_PRIV, ioctl.NV01_ROOT_CLIENT:
		if !x.f.ctl {
			return 0, ioctl.NV_ERR_INVALID_ARGUMENT.Err(op)
		}
		if h == 0 {
			h = ioctl.RS_CLIENT_HANDLE_BASE + ioctl.Handle(d.nextClient)
			d.nextClient = (d.nextClient + 1) % ioctl.RS_CLIENT_HANDLE_MAX
		}
		if d.clients[h] != nil {
			return 0, ioctl.NV_ERR_INSERT_DUPLICATE_NAME.Err(op)
		}
		c := &client{handle: h, file: x.f.owner(), objects: map[ioctl.Handle]*object{}}
		if x.proc != nil {
			c.procID = x.proc.PID
		}
		c.objects[h] = &object{handle: h, class: ioctl.NV01_ROOT_CLIENT}
		d.clients[h] = c
		// RM writes the handle it chose back into the allocation
		// parameters; the trace replay passes none.
		var ap ioctl.NV0000_ALLOC_PARAMETERS
		if ioctl.DecodeParams(params, &ap) == nil {
			ap.HClient = h
			ioctl.EncodeParams(params, &ap)
		}
		return h, nil
	}
	c := d.clients[hClient]
	if c == nil || c.file != x.f.owner() {
		return 0, ioctl.NV_ERR_INVALID_CLIENT.Err(op)
	}
	if c.objects[parent] == nil {
		return 0, ioctl.NV_ERR_INVALID_OBJECT_PARENT.Err(op)
	}
	if h == 0 {
		d.nextHandle++
		h = 0xcaf00000 + ioctl.Handle(d.nextHandle)
	}
	if c.objects[h] != nil {
		return 0, ioctl.NV_ERR_INSERT_DUPLICATE_NAME.Err(op)
	}
	o := &object{handle: h, parent: parent, class: class}
	if ioctl.IsChannelGroupClass(class) {
		o.timesliceUs = 1024
		o.interleave = ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM
		o.tsgID = d.nextTSGID
		d.nextTSGID++
	}
	c.objects[h] = o
	return h, nil
}

// Free follows NV_ESC_RM_FREE: freeing the client handle frees the client.
func (x *FD) Free(hClient, parent, h ioctl.Handle) error {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if x.closed {
		return fmt.Errorf("free: fake fd closed")
	}
	c := d.clients[hClient]
	if c == nil || c.file != x.f.owner() {
		return ioctl.NV_ERR_INVALID_CLIENT.Err("free")
	}
	if h == hClient {
		delete(d.clients, hClient)
		return nil
	}
	if c.objects[h] == nil {
		return ioctl.NV_ERR_OBJECT_NOT_FOUND.Err("free")
	}
	c.free(h)
	return nil
}

func (c *client) free(h ioctl.Handle) {
	for child, o := range c.objects {
		if o.parent == h && child != h {
			c.free(child)
		}
	}
	delete(c.objects, h)
}

// paramSize is what the command's export-table entry expects in the ABI
// of the version the fake reports: ioctl's table, the one place sizes and
// the 575.51 cut-off are written down.
func (d *Driver) paramSize(cmd uint32) (int, bool) {
	abi, err := ioctl.LookupABI(d.version, true)
	if abi.Name == "" {
		panic(fmt.Sprintf("rmfake: no ABI for driver %v: %v", d.version, err))
	}
	return abi.ParamSize(cmd)
}

// ControlBytes follows NV_ESC_RM_CONTROL.
func (x *FD) ControlBytes(hClient, hObject ioctl.Handle, cmd uint32, params []byte) error {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	d.controls[cmd]++
	op := fmt.Sprintf("control %#x on %v/%v", cmd, hClient, hObject)
	if x.closed {
		return fmt.Errorf("%s: fake fd closed", op)
	}
	for _, f := range d.faults {
		if f.Cmd == cmd && (f.Object == 0 || f.Object == hObject) {
			f.seen++
			if f.Nth == 0 || f.Nth == f.seen {
				return f.Status.Err(op)
			}
		}
	}
	c := d.clients[hClient]
	if c == nil || c.file != x.f.owner() {
		return ioctl.NV_ERR_INVALID_CLIENT.Err(op)
	}
	o := c.objects[hObject]
	if o == nil {
		return ioctl.NV_ERR_INVALID_OBJECT_HANDLE.Err(op)
	}
	want, known := d.paramSize(cmd)
	cmdClass := ioctl.ControlClass(cmd)
	objClass := o.class
	if objClass == ioctl.NV01_ROOT_CLIENT {
		objClass = ioctl.NV01_ROOT
	}
	if !known || cmdClass != objClass {
		return ioctl.NV_ERR_NOT_SUPPORTED.Err(op)
	}
	if len(params) != want {
		return ioctl.NV_ERR_INVALID_PARAM_STRUCT.Err(op)
	}
	return d.control(c, o, cmd, params).Err(op)
}

// control answers cmd on o with the caller's parameter block p, whose size
// ControlBytes has checked. Parameters are read and written with ioctl's
// decoder, as any other reader of outside bytes does.
func (d *Driver) control(c *client, o *object, cmd uint32, p []byte) ioctl.NvStatus {
	switch cmd {
	case ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO:
		var q ioctl.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			target := c.objects[q.HObject]
			if target == nil {
				return ioctl.NV_ERR_OBJECT_NOT_FOUND
			}
			switch q.Index {
			case ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT:
				q.Data = uint64(target.parent)
			case ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID:
				q.Data = uint64(target.class)
			default:
				return ioctl.NV_ERR_INVALID_ARGUMENT
			}
			return ioctl.NV_OK
		})
	case ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE:
		var q ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			if c.objects[q.HParent] == nil {
				return ioctl.NV_ERR_OBJECT_NOT_FOUND
			}
			var found []ioctl.Handle
			for h, child := range c.objects {
				if child.parent == q.HParent && internalClass(child.class) == q.ClassID && h != q.HParent {
					found = append(found, h)
				}
			}
			if len(found) == 0 {
				return ioctl.NV_ERR_OBJECT_NOT_FOUND
			}
			q.HObject = slices.Min(found)
			return ioctl.NV_OK
		})
	case ioctl.NV2080_CTRL_CMD_GPU_GET_ID:
		var q ioctl.NV2080_CTRL_GPU_GET_ID_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			q.GpuID = GPUID
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:
		var q ioctl.NVA06C_CTRL_TIMESLICE_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			if q.TimesliceUs == 0 {
				return ioctl.NV_ERR_INVALID_ARGUMENT
			}
			o.timesliceUs = q.TimesliceUs
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE:
		var q ioctl.NVA06C_CTRL_TIMESLICE_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			q.TimesliceUs = o.timesliceUs
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_PREEMPT:
		var q ioctl.NVA06C_CTRL_PREEMPT_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			if q.BManualTimeout != 0 && q.TimeoutUs > ioctl.NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US {
				return ioctl.NV_ERR_INVALID_ARGUMENT
			}
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_GET_INFO:
		var q ioctl.NVA06C_CTRL_GET_INFO_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			q.TsgID = o.tsgID
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL:
		var q ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			if !d.root {
				return ioctl.NV_ERR_INSUFFICIENT_PERMISSIONS
			}
			if q.TsgInterleaveLevel > ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH {
				return ioctl.NV_ERR_INVALID_ARGUMENT
			}
			o.interleave = q.TsgInterleaveLevel
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL:
		var q ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus {
			if !d.interleaveReadable {
				return ioctl.NV_ERR_NOT_SUPPORTED
			}
			q.TsgInterleaveLevel = o.interleave
			return ioctl.NV_OK
		})
	case ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:
		// Both layouts start with bEnable; ControlBytes checked which one
		// this version takes.
		if len(p) == 3 {
			var q ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575
			return decodeAnswer(p, &q, func() ioctl.NvStatus { o.enabled = q.BEnable != 0; return ioctl.NV_OK })
		}
		var q ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS
		return decodeAnswer(p, &q, func() ioctl.NvStatus { o.enabled = q.BEnable != 0; return ioctl.NV_OK })
	}
	return ioctl.NV_OK
}

// decodeAnswer decodes p into q, runs answer, and writes q back into p when
// it succeeds, as RM copies a control's parameters out only on NV_OK.
func decodeAnswer[T any](p []byte, q *T, answer func() ioctl.NvStatus) ioctl.NvStatus {
	if err := ioctl.DecodeParams(p, q); err != nil {
		return ioctl.NV_ERR_INVALID_PARAM_STRUCT
	}
	s := answer()
	if s == ioctl.NV_OK {
		if err := ioctl.EncodeParams(p, q); err != nil {
			return ioctl.NV_ERR_INVALID_PARAM_STRUCT
		}
	}
	return s
}

// internalClass maps an external class to the NVOC internal class id that
// GET_CHILD_HANDLE matches on. Classes gpreempt never looks up get an id
// that no caller can guess, so a lookup by external class number fails as it
// does on the real driver.
func internalClass(class uint32) uint32 {
	switch class {
	case ioctl.NV01_DEVICE_0:
		return ioctl.NVOC_CLASS_ID_Device
	case ioctl.KEPLER_CHANNEL_GROUP_A:
		return ioctl.NVOC_CLASS_ID_KernelChannelGroupApi
	case ioctl.NV20_SUBDEVICE_0:
		return ioctl.NVOC_CLASS_ID_Subdevice
	}
	return 0xff000000 | class
}

// Groups returns every TSG of every client bound to the control file at
// fd of pid, sorted by client and handle, as tsg.Group values holding
// what the fake knows to be true (the interleave level even where
// GET_INTERLEAVE_LEVEL is refused), for tests to compare with what a
// source reports. The groups carry no Control.
func (d *Driver) Groups(pid, fd int) []tsg.Group {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.procs[pid]
	if p == nil || p.fds[fd] == nil {
		return nil
	}
	var out []tsg.Group
	for _, c := range d.clients {
		if c.file != p.fds[fd].owner() {
			continue
		}
		for _, o := range c.objects {
			if !ioctl.IsChannelGroupClass(o.class) {
				continue
			}
			t := d.tsgInfo(c, o, pid)
			engine := tsg.EngineUnknown
			switch {
			case ioctl.NV2080EngineTypeIsGR(t.EngineType):
				engine = tsg.EngineCompute
			case ioctl.NV2080EngineTypeIsCopy(t.EngineType):
				engine = tsg.EngineCopy
			}
			out = append(out, tsg.Group{
				PID: pid, FD: fd, Client: c.handle, Device: o.parent, Handle: o.handle, TSGID: o.tsgID,
				Engine: engine, Channels: int(t.ChannelCount), Timeslice: tsg.Micros(o.timesliceUs),
				Interleave: tsg.Level(o.interleave), GPUID: t.GpuID,
			})
		}
	}
	slices.SortFunc(out, func(a, b tsg.Group) int {
		return cmp.Compare(ioctl.TSGKey(a.Client, a.Handle), ioctl.TSGKey(b.Client, b.Handle))
	})
	return out
}

// Scheduled reports whether group g (as Groups returns it) is on the
// runlist: GPFIFO_SCHEDULE's state, which RM has no control to read.
func (d *Driver) Scheduled(g tsg.Group) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.clients[g.Client]
	if c == nil || c.objects[g.Handle] == nil {
		return false
	}
	return c.objects[g.Handle].enabled
}
