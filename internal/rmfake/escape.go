package rmfake

import (
	"encoding/binary"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// The gpreempt escapes (patches/, docs/PATCHES.md) as a stock or a
// patched driver answers them, at the level of the raw escape: the
// parameter block's bytes, the errno, the status written into the block.
//
//   - Stock driver (the default): every escape number the driver does not
//     know fails with EINVAL and leaves the argument untouched, as 550.x and
//     580.x do from RmIoctl's default case and 595.x from
//     nv_validate_ioctls.
//   - Patched driver (EnableGpreemptEscapes): the exact size is required
//     (EINVAL otherwise), then the answer is in the status field. A client
//     is visible to the caller if its process is in the caller's pid
//     namespace and the caller is privileged (CAP_SYS_ADMIN or
//     CAP_SYS_NICE) or has the euid that allocated it. QUERY pages the
//     visible groups in (client, TSG) order; SET answers
//     NV_ERR_INVALID_CLIENT for any client it may not touch, and issues
//     the controls with the caller's own RM privilege (USER_ROOT for an
//     admin, USER otherwise) on the client's own file, so RM's checks run:
//     SET_TIMESLICE is allowed to both, SET_INTERLEAVE_LEVEL needs the NICE
//     right (root or CAP_SYS_NICE).
//
// The state lives beside the Driver (escapeStates) because the fake's
// core types are shared with every other test.

// EscapeConfig describes a patched driver's caller.
type EscapeConfig struct {
	// CallerUID is the caller's effective uid.
	CallerUID uint32
	// CallerPrivileged: the caller has CAP_SYS_ADMIN or CAP_SYS_NICE.
	CallerPrivileged bool
}

type escapeState struct {
	enabled bool
	cfg     EscapeConfig
	uid     map[int]uint32 // owner euid of a process's clients; 0 if unset
	hidden  map[int]bool   // processes outside the caller's pid namespace
	calls   map[uint32]int
}

var escapeStates sync.Map // *Driver -> *escapeState, guarded by the Driver's mu

// escapes returns d's escape state; d.mu must be held.
func (d *Driver) escapes() *escapeState {
	v, _ := escapeStates.LoadOrStore(d, &escapeState{uid: map[int]uint32{}, hidden: map[int]bool{}, calls: map[uint32]int{}})
	return v.(*escapeState)
}

// EnableGpreemptEscapes makes d a driver carrying gpreempt's series, with
// cfg's caller.
func (d *Driver) EnableGpreemptEscapes(cfg EscapeConfig) {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.escapes()
	st.enabled, st.cfg = true, cfg
}

// SetProcUID makes uid the euid that allocated pid's clients.
func (d *Driver) SetProcUID(pid int, uid uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.escapes().uid[pid] = uid
}

// HideFromCaller puts pid outside the caller's pid namespace.
func (d *Driver) HideFromCaller(pid int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.escapes().hidden[pid] = true
}

// Escapes returns how many times escape nr was issued, whatever the outcome.
func (d *Driver) Escapes(nr uint32) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.escapes().calls[nr]
}

// Escape implements ioctl.Escaper for the gpreempt escapes.
func (x *FD) Escape(nr uint32, arg []byte) error {
	d := x.d
	d.mu.Lock()
	defer d.mu.Unlock()
	st := d.escapes()
	st.calls[nr]++
	switch {
	case x.closed:
		return syscall.EBADF
	case !st.enabled:
		return syscall.EINVAL // stock: unknown escape, argument untouched
	case !x.f.ctl:
		return syscall.EINVAL // NV_CTL_DEVICE_ONLY
	}
	switch nr {
	case ioctl.NV_ESC_RM_GPREEMPT_QUERY_TSGS:
		if len(arg) != len(ioctl.Bytes(new(ioctl.NV_GPREEMPT_QUERY_TSGS_PARAMS))) {
			return syscall.EINVAL
		}
		d.queryTSGs(st, arg)
	case ioctl.NV_ESC_RM_GPREEMPT_SET_TSG:
		if len(arg) != len(ioctl.Bytes(new(ioctl.NV_GPREEMPT_SET_TSG_PARAMS))) {
			return syscall.EINVAL
		}
		d.setTSG(st, arg)
	default:
		return syscall.EINVAL
	}
	return nil
}

// clientPID is the process that holds the file c is bound to (the fake's
// stand-in for the process that allocated it).
func (d *Driver) clientPID(c *client) (int, bool) {
	var pids []int
	for pid, p := range d.procs {
		for _, f := range p.fds {
			if f == c.file {
				pids = append(pids, pid)
			}
		}
	}
	if len(pids) == 0 {
		return 0, false
	}
	return slices.Min(pids), true
}

// visible says whether the caller may see and change c, and c's pid.
func (d *Driver) visible(st *escapeState, c *client) (int, bool) {
	pid, ok := d.clientPID(c)
	if !ok || st.hidden[pid] {
		return 0, false
	}
	return pid, st.cfg.CallerPrivileged || st.uid[pid] == st.cfg.CallerUID
}

func (d *Driver) queryTSGs(st *escapeState, arg []byte) {
	var in ioctl.NV_GPREEMPT_QUERY_TSGS_PARAMS
	if err := ioctl.DecodeParams(arg, &in); err != nil {
		panic(err) // Escape checked the size
	}
	// The padding word after Status is reserved and must be zero; the
	// decoder skips it, so it is read from the bytes.
	reserved := binary.NativeEndian.Uint32(arg[36:])
	p := ioctl.NV_GPREEMPT_QUERY_TSGS_PARAMS{Pid: in.Pid, Flags: in.Flags, Cursor: in.Cursor, NextCursor: in.Cursor}
	if p.Flags != 0 || reserved != 0 {
		p.Status = uint32(ioctl.NV_ERR_INVALID_ARGUMENT)
		ioctl.EncodeParams(arg, &p)
		return
	}
	var all []ioctl.NV_GPREEMPT_TSG_INFO
	for _, c := range d.clients {
		pid, ok := d.visible(st, c)
		if !ok || (p.Pid != 0 && uint32(pid) != p.Pid) {
			continue
		}
		for h, o := range c.objects {
			if !ioctl.IsChannelGroupClass(o.class) || ioctl.TSGKey(c.handle, h) <= p.Cursor {
				continue
			}
			all = append(all, d.tsgInfo(c, o, pid))
		}
	}
	slices.SortFunc(all, func(a, b ioctl.NV_GPREEMPT_TSG_INFO) int {
		switch {
		case a.Key() < b.Key():
			return -1
		case a.Key() > b.Key():
			return 1
		}
		return 0
	})
	if len(all) > ioctl.NV_GPREEMPT_QUERY_TSGS_MAX {
		all, p.BMore = all[:ioctl.NV_GPREEMPT_QUERY_TSGS_MAX], 1
	}
	p.Count = uint32(copy(p.Tsgs[:], all))
	if len(all) > 0 {
		p.NextCursor = all[len(all)-1].Key()
	}
	ioctl.EncodeParams(arg, &p)
}

// tsgInfo describes TSG o of client c as the patch reports it. The engine
// is the compute engine for a group with a context share or a compute
// object, a copy engine for one with copy objects only.
func (d *Driver) tsgInfo(c *client, o *object, pid int) ioctl.NV_GPREEMPT_TSG_INFO {
	t := ioctl.NV_GPREEMPT_TSG_INFO{
		Pid: uint32(pid), HClient: c.handle, HTsg: o.handle, HDevice: o.parent, GpuID: GPUID,
		TsgID: o.tsgID, TimesliceUs: o.timesliceUs, InterleaveLevel: o.interleave,
	}
	compute, copies := false, false
	for _, ch := range c.objects {
		switch {
		case ch.parent == o.handle && ch.class == ioctl.FERMI_CONTEXT_SHARE_A:
			compute = true
		case ch.parent == o.handle && ioctl.IsChannelClass(ch.class):
			t.ChannelCount++
			for _, e := range c.objects {
				if e.parent == ch.handle {
					compute = compute || ioctl.IsComputeClass(e.class)
					copies = copies || ioctl.IsCopyClass(e.class)
				}
			}
		}
	}
	switch {
	case compute:
		t.EngineType, t.RunlistID = ioctl.NV2080_ENGINE_TYPE_GR0, 0
	case copies:
		t.EngineType, t.RunlistID = ioctl.NV2080_ENGINE_TYPE_COPY0+o.tsgID%10, 1+o.tsgID%10
	}
	return t
}

func (d *Driver) setTSG(st *escapeState, arg []byte) {
	var in ioctl.NV_GPREEMPT_SET_TSG_PARAMS
	if err := ioctl.DecodeParams(arg, &in); err != nil {
		panic(err) // Escape checked the size
	}
	pid, hClient, hTsg, flags := in.Pid, in.HClient, in.HTsg, in.Flags
	timeslice, level := in.TimesliceUs, in.InterleaveLevel
	reserved := binary.NativeEndian.Uint32(arg[36:]) // padding the decoder skips
	var done uint32
	status := func() ioctl.NvStatus {
		const known = ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE | ioctl.NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL
		if pid == 0 || flags == 0 || flags&^known != 0 || reserved != 0 ||
			(flags&ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE != 0 && timeslice == 0) ||
			(flags&ioctl.NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL != 0 && level > ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH) {
			return ioctl.NV_ERR_INVALID_ARGUMENT
		}
		c := d.clients[hClient]
		if c == nil {
			return ioctl.NV_ERR_INVALID_CLIENT
		}
		if owner, ok := d.visible(st, c); !ok || uint32(owner) != pid {
			return ioctl.NV_ERR_INVALID_CLIENT
		}
		o := c.objects[hTsg]
		if o == nil || !ioctl.IsChannelGroupClass(o.class) {
			return ioctl.NV_ERR_INVALID_OBJECT_HANDLE
		}
		// Kernel level passes every privilege check; an owner has its own
		// rights, which here means not root.
		saved := d.root
		d.root = st.cfg.CallerPrivileged
		defer func() { d.root = saved }()
		issue := func(cmd uint32, params []byte, bit uint32) ioctl.NvStatus {
			d.controls[cmd]++
			for _, f := range d.faults {
				if f.Cmd == cmd && (f.Object == 0 || f.Object == hTsg) {
					f.seen++
					if f.Nth == 0 || f.Nth == f.seen {
						return f.Status
					}
				}
			}
			s := d.control(c, o, cmd, params)
			if s == ioctl.NV_OK {
				done |= bit
			}
			return s
		}
		if flags&ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE != 0 {
			p := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: timeslice}
			if s := issue(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ioctl.Bytes(&p), ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE); s != ioctl.NV_OK {
				return s
			}
		}
		if flags&ioctl.NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL != 0 {
			p := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{TsgInterleaveLevel: level}
			return issue(ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, ioctl.Bytes(&p), ioctl.NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL)
		}
		return ioctl.NV_OK
	}()
	in.DoneFlags, in.Status = done, uint32(status)
	ioctl.EncodeParams(arg, &in)
}

// ExitingHost is a host on which one process exits right after the nth
// gpreempt SET escape issued on a control file the host opens: an exit in
// the middle of a change.
type ExitingHost struct {
	tsg.Host
	d      *Driver
	pid    int
	after  int64
	issued atomic.Int64
}

// ExitAfterSet wraps host so that pid exits from d right after the nth
// NV_ESC_RM_GPREEMPT_SET_TSG issued through it.
func (d *Driver) ExitAfterSet(host tsg.Host, pid, n int) *ExitingHost {
	return &ExitingHost{Host: host, d: d, pid: pid, after: int64(n)}
}

// Issued is how many SET escapes went through the host.
func (h *ExitingHost) Issued() int { return int(h.issued.Load()) }

func (h *ExitingHost) OpenControl() (tsg.Device, error) {
	dev, err := h.Host.OpenControl()
	if err != nil {
		return nil, err
	}
	return exitingDevice{Device: dev, h: h}, nil
}

type exitingDevice struct {
	tsg.Device
	h *ExitingHost
}

func (x exitingDevice) Escape(nr uint32, arg []byte) error {
	err := x.Device.(ioctl.Escaper).Escape(nr, arg)
	if nr == ioctl.NV_ESC_RM_GPREEMPT_SET_TSG && x.h.issued.Add(1) == x.h.after {
		x.h.d.Exit(x.h.pid)
	}
	return err
}
