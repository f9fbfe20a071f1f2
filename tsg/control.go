package tsg

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Control reads and changes one channel group's scheduling: the seam
// between what Process does (checks, all-or-nothing, rollback) and how the
// driver is reached. Each source gives its groups one: the attach source
// issues KEPLER_CHANNEL_GROUP_A controls on a duplicate of the target's
// file (rmControl), the escape source uses gpreempt's SET and QUERY
// escapes and falls back to the target's file for what they do not carry
// (escapeControl).
//
// Each method is one driver call (a few at most on the escape path's
// fallback) that cannot be interrupted once issued, so none takes a
// context: Process checks its context between groups.
type Control interface {
	// Timeslice reads the group's timeslice.
	Timeslice(g Group) (Micros, error)
	// SetTimeslice sets it; the value is checked by the caller.
	SetTimeslice(g Group, ts Micros) error
	// Interleave reads the group's interleave level. A driver that does
	// not report it (GSP-RM on the H100) answers
	// ioctl.NV_ERR_NOT_SUPPORTED.
	Interleave(g Group) (Level, error)
	// SetInterleave sets it.
	SetInterleave(g Group, l Level) error
	// Preempt preempts the group (PREEMPT); timeout 0 is RM's own.
	Preempt(g Group, wait bool, timeout time.Duration) error
	// Schedule puts the group on the runlist or takes it off
	// (GPFIFO_SCHEDULE).
	Schedule(g Group, enable bool) error
}

// rmControl issues RM controls on a file that owns the groups' client: a
// duplicate of the target's /dev/nvidiactl file.
type rmControl struct {
	dev ioctl.Controller
	abi ioctl.ABI
}

func (c rmControl) Timeslice(g Group) (Micros, error) {
	p := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{}
	err := ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, &p)
	return Micros(p.TimesliceUs), err
}

func (c rmControl) SetTimeslice(g Group, ts Micros) error {
	p := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: uint64(ts)}
	return ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, &p)
}

func (c rmControl) Interleave(g Group) (Level, error) {
	p := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{}
	err := ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, &p)
	return Level(p.TsgInterleaveLevel), err
}

func (c rmControl) SetInterleave(g Group, l Level) error {
	p := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{TsgInterleaveLevel: uint32(l)}
	return ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, &p)
}

func (c rmControl) Preempt(g Group, wait bool, timeout time.Duration) error {
	p := ioctl.NVA06C_CTRL_PREEMPT_PARAMS{BWait: boolByte(wait)}
	if timeout > 0 {
		p.BManualTimeout, p.TimeoutUs = 1, uint32(timeout/time.Microsecond)
	}
	return ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_PREEMPT, &p)
}

func (c rmControl) Schedule(g Group, enable bool) error {
	return c.dev.ControlBytes(g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, c.abi.ScheduleParams(enable))
}

// info reads the group's hardware TSG id (GET_INFO). It is discovery's, not
// part of Control: the id does not change over a group's life.
func (c rmControl) info(g Group) (uint32, error) {
	p := ioctl.NVA06C_CTRL_GET_INFO_PARAMS{}
	err := ioctl.Control(c.dev, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_INFO, &p)
	return p.TsgID, err
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// escapeControl is the Control of the groups of one process found through
// gpreempt's escapes. Timeslices and levels go through SET, reads through a
// one-entry QUERY; preemption and scheduling, which the escapes do not
// carry, through the target's own file (attached on first use) unless
// EscapeOptions.NoAttachFallback.
type escapeControl struct {
	src  *EscapeSource
	esc  ioctl.Escaper
	proc *Process
	pid  uint32

	mu       sync.Mutex
	attached map[ioctl.Handle]rmControl // client -> the target's file bound to it
}

func (c *escapeControl) set(g Group, p ioctl.NV_GPREEMPT_SET_TSG_PARAMS) error {
	p.Pid, p.HClient, p.HTsg = c.pid, g.Client, g.Handle
	return c.gone(ioctl.SetTSG(c.esc, &p))
}

func (c *escapeControl) SetTimeslice(g Group, ts Micros) error {
	return c.set(g, ioctl.NV_GPREEMPT_SET_TSG_PARAMS{Flags: ioctl.NV_GPREEMPT_SET_TSG_TIMESLICE, TimesliceUs: uint64(ts)})
}

func (c *escapeControl) SetInterleave(g Group, l Level) error {
	return c.set(g, ioctl.NV_GPREEMPT_SET_TSG_PARAMS{Flags: ioctl.NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL, InterleaveLevel: uint32(l)})
}

func (c *escapeControl) Timeslice(g Group) (Micros, error) {
	t, err := c.lookup(g)
	return Micros(t.TimesliceUs), err
}

func (c *escapeControl) Interleave(g Group) (Level, error) {
	t, err := c.lookup(g)
	return Level(t.InterleaveLevel), err
}

func (c *escapeControl) Preempt(g Group, wait bool, timeout time.Duration) error {
	rm, err := c.ownerFile(g.Client)
	if err != nil {
		return err
	}
	return c.gone(rm.Preempt(g, wait, timeout))
}

func (c *escapeControl) Schedule(g Group, enable bool) error {
	rm, err := c.ownerFile(g.Client)
	if err != nil {
		return err
	}
	return c.gone(rm.Schedule(g, enable))
}

// lookup reads one group with a QUERY starting just below its key: the
// first entry is the group if it still exists.
func (c *escapeControl) lookup(g Group) (ioctl.NV_GPREEMPT_TSG_INFO, error) {
	key := ioctl.TSGKey(g.Client, g.Handle)
	page, err := ioctl.QueryTSGs(c.esc, c.pid, key-1)
	if err == nil && (len(page.TSGs) == 0 || page.TSGs[0].Key() != key) {
		err = ioctl.NV_ERR_INVALID_OBJECT_HANDLE.Err(fmt.Sprintf("gpreempt query pid %d: no group %v", c.pid, g.ID()))
	}
	if err != nil {
		return ioctl.NV_GPREEMPT_TSG_INFO{}, c.gone(err)
	}
	return page.TSGs[0], nil
}

// gone turns the driver's "no such client" or "no such group" into what
// happened when the target process has exited: ioctl.ErrNoSuchProcess,
// which a caller acts on (nothing left to change or restore), instead of
// an RM status that reads like a failure of gpreempt. The process is gone
// when it cannot be opened; if its pid already names another process, that
// one has no client of the group's handle and the status stays the
// answer.
func (c *escapeControl) gone(err error) error {
	if err == nil || !(errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT) || errors.Is(err, ioctl.NV_ERR_INVALID_OBJECT_HANDLE)) {
		return err
	}
	t, oerr := c.src.host.Open(int(c.pid))
	if oerr == nil {
		t.Close()
		return err
	}
	if errors.Is(oerr, ioctl.ErrNoSuchProcess) {
		// The operation names the group; the driver's status is moot.
		return fmt.Errorf("pid %d exited: %w", c.pid, ioctl.ErrNoSuchProcess)
	}
	return err
}

// ownerFile returns a control on a duplicate of the target's control file
// that owns client, attaching on first use. The duplicate joins the
// Process's files and is closed with it.
func (c *escapeControl) ownerFile(client ioctl.Handle) (rmControl, error) {
	if c.src.opts.NoAttachFallback {
		return rmControl{}, fmt.Errorf("%w: the gpreempt escapes set only timeslices and interleave levels (attach fallback disabled)", ErrNotSupported)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rm, ok := c.attached[client]; ok {
		return rm, nil
	}
	fail := func(err error) (rmControl, error) {
		if errors.Is(err, ioctl.ErrNoSuchProcess) {
			return rmControl{}, fmt.Errorf("attach to pid %d: %w", c.pid, err)
		}
		return rmControl{}, fmt.Errorf("%w: the gpreempt escapes set only timeslices and interleave levels, and the fallback to pid %d's own file failed: %w",
			ErrNotSupported, c.pid, err)
	}
	t, err := c.src.host.Open(int(c.pid))
	if err != nil {
		return fail(err)
	}
	defer t.Close()
	fds, err := t.ControlFDs()
	if err != nil {
		return fail(err)
	}
	for _, fd := range fds {
		dev, err := t.Attach(fd)
		if err != nil {
			return fail(err)
		}
		bound, err := boundTo(dev, client)
		if bound {
			if err := c.proc.addDevice(dev); err != nil {
				return fail(err)
			}
			if c.attached == nil {
				c.attached = map[ioctl.Handle]rmControl{}
			}
			rm := rmControl{dev: dev, abi: c.proc.abi}
			c.attached[client] = rm
			return rm, nil
		}
		dev.Close()
		if err != nil {
			return fail(err)
		}
	}
	return fail(fmt.Errorf("no %s of pid %d holds client %v", ioctl.ControlDevicePath, c.pid, client))
}

// boundTo reports whether client is bound to dev: RM validates the client
// on it (see AttachSource.boundClients). An error is a failure to ask.
func boundTo(dev ioctl.Controller, client ioctl.Handle) (bool, error) {
	_, err := handleInfo(dev, client, client, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID)
	var status ioctl.NvStatus
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT):
		return false, nil
	case errors.As(err, &status):
		return true, nil
	}
	return false, err
}
