package tsg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Process is a discovered process: its groups and the open files that
// reach them.
type Process struct {
	PID    int                 `json:"pid"`
	Driver ioctl.DriverVersion `json:"-"`
	Source string              `json:"source"`
	Groups []Group             `json:"groups"`
	Stats  ScanStats           `json:"scan"`

	abi  ioctl.ABI
	devs []Device
}

// Close releases the duplicated files. Groups of a closed process can no
// longer be controlled.
func (p *Process) Close() error {
	var errs []error
	for _, d := range p.devs {
		errs = append(errs, d.Close())
	}
	p.devs = nil
	return errors.Join(errs...)
}

// Selector picks groups of a process: one handle, the compute groups, or
// (the zero value) all of them.
type Selector struct {
	Handle      ioctl.Handle
	ComputeOnly bool
}

// Select returns the groups sel picks, or ErrNoSuchGroup naming what was
// asked for.
func (p *Process) Select(sel Selector) ([]Group, error) {
	var out []Group
	for _, g := range p.Groups {
		if sel.Handle != 0 && g.Handle != sel.Handle {
			continue
		}
		if sel.ComputeOnly && g.Engine != EngineCompute {
			continue
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		switch {
		case sel.Handle != 0:
			return nil, fmt.Errorf("pid %d: %w %v", p.PID, ErrNoSuchGroup, sel.Handle)
		case sel.ComputeOnly:
			return nil, fmt.Errorf("pid %d: %w: no compute group", p.PID, ErrNoSuchGroup)
		}
		return nil, fmt.Errorf("pid %d: %w", p.PID, ErrNoSuchGroup)
	}
	return out, nil
}

// Settings is a change to apply to groups; nil fields are left alone.
type Settings struct {
	Timeslice  *time.Duration
	Interleave *Level
}

// Apply changes every group in gs, all or nothing: each group's current
// values are read first, and if any step fails the groups already changed
// are restored before the error is returned. The error then says whether
// the restore itself succeeded.
func (p *Process) Apply(ctx context.Context, gs []Group, s Settings) error {
	if s.Timeslice != nil {
		if err := CheckTimeslice(*s.Timeslice); err != nil {
			return err
		}
	}
	if s.Interleave != nil && *s.Interleave > LevelHigh {
		return fmt.Errorf("%w: interleave level %v", ErrInvalidArgument, *s.Interleave)
	}
	type undo struct {
		g     Group
		prevT *uint64
		prevL *Level
	}
	var done []undo
	rollback := func(cause error) error {
		var errs []error
		for i := len(done) - 1; i >= 0; i-- {
			u := done[i]
			if u.prevL != nil {
				errs = append(errs, setInterleave(u.g, restorableLevel(*u.prevL)))
			}
			if u.prevT != nil {
				errs = append(errs, setTimeslice(u.g, *u.prevT))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("%w; restoring the %d groups already changed also failed: %w", cause, len(done), err)
		}
		if len(done) > 0 {
			return fmt.Errorf("%w (the %d groups already changed were restored)", cause, len(done))
		}
		return cause
	}
	for _, g := range gs {
		if err := ctx.Err(); err != nil {
			return rollback(err)
		}
		u := undo{g: g}
		if s.Timeslice != nil {
			prev, err := getTimeslice(g)
			if err != nil {
				return rollback(fmt.Errorf("group %v: read timeslice: %w", g.Handle, err))
			}
			if err := setTimeslice(g, uint64(*s.Timeslice/time.Microsecond)); err != nil {
				return rollback(fmt.Errorf("group %v: set timeslice: %w", g.Handle, err))
			}
			u.prevT = &prev
		}
		if s.Interleave != nil {
			prev, err := getInterleave(g)
			if errors.Is(err, ioctl.NV_ERR_NOT_SUPPORTED) {
				// GSP-RM on the H100 (580.159.04) does not implement
				// GET_INTERLEAVE_LEVEL; restore to RM's allocation default.
				prev, err = LevelUnknown, nil
			}
			if err != nil {
				done = append(done, u) // its timeslice changed already
				return rollback(fmt.Errorf("group %v: read interleave level: %w", g.Handle, err))
			}
			if err := setInterleave(g, *s.Interleave); err != nil {
				done = append(done, u)
				return rollback(fmt.Errorf("group %v: set interleave level: %w", g.Handle, err))
			}
			u.prevL = &prev
		}
		done = append(done, u)
	}
	p.update(gs, s)
	return nil
}

// SetTimeslice sets the timeslice of gs, all or nothing.
func (p *Process) SetTimeslice(ctx context.Context, gs []Group, d time.Duration) error {
	return p.Apply(ctx, gs, Settings{Timeslice: &d})
}

// SetInterleave sets the interleave level of gs, all or nothing.
func (p *Process) SetInterleave(ctx context.Context, gs []Group, l Level) error {
	return p.Apply(ctx, gs, Settings{Interleave: &l})
}

// Preempt preempts each group in turn. wait makes RM wait for each
// preemption to finish (RM's own timeout applies, or timeout if non-zero,
// at most 1 s). Preemption changes no setting, so there is nothing to
// restore; the error names the first group that failed.
func (p *Process) Preempt(ctx context.Context, gs []Group, wait bool, timeout time.Duration) error {
	if timeout < 0 || timeout > ioctl.NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US*time.Microsecond {
		return fmt.Errorf("%w: preempt timeout %v out of range [0, 1s]", ErrInvalidArgument, timeout)
	}
	params := ioctl.NVA06C_CTRL_PREEMPT_PARAMS{BWait: boolByte(wait)}
	if timeout > 0 {
		params.BManualTimeout, params.TimeoutUs = 1, uint32(timeout/time.Microsecond)
	}
	for _, g := range gs {
		if err := ctx.Err(); err != nil {
			return err
		}
		q := params
		if err := ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_PREEMPT, &q); err != nil {
			return fmt.Errorf("group %v: preempt: %w", g.Handle, err)
		}
	}
	return nil
}

// Schedule enables (resume) or disables (suspend) gs on the runlist with
// GPFIFO_SCHEDULE, all or nothing: on a failure the groups already switched
// are switched back. A suspended group's work stays queued and runs when it
// is resumed.
func (p *Process) Schedule(ctx context.Context, gs []Group, enable bool) error {
	for i, g := range gs {
		err := ctx.Err()
		if err == nil {
			err = p.schedule(g, enable)
		}
		if err != nil {
			err = fmt.Errorf("group %v: schedule(enable=%v): %w", g.Handle, enable, err)
			var errs []error
			for j := i - 1; j >= 0; j-- {
				errs = append(errs, p.schedule(gs[j], !enable))
			}
			if rerr := errors.Join(errs...); rerr != nil {
				return fmt.Errorf("%w; switching back the %d groups already changed also failed: %w", err, i, rerr)
			}
			return err
		}
	}
	return nil
}

func (p *Process) schedule(g Group, enable bool) error {
	return g.ctl.ControlBytes(g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, p.abi.ScheduleParams(enable))
}

// Refresh re-reads the timeslice and interleave level of every group.
func (p *Process) Refresh(ctx context.Context) error {
	for i := range p.Groups {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := p.Groups[i].refresh(); err != nil {
			return err
		}
	}
	return nil
}

func (p *Process) update(gs []Group, s Settings) {
	for i := range p.Groups {
		for _, g := range gs {
			if p.Groups[i].Key() != g.Key() {
				continue
			}
			if s.Timeslice != nil {
				p.Groups[i].Timeslice = Micros(*s.Timeslice / time.Microsecond)
			}
			if s.Interleave != nil {
				p.Groups[i].Interleave = *s.Interleave
			}
		}
	}
}

// refresh reads what RM says of the group now. The hardware id and the
// timeslice are required; where RM will not report the interleave level,
// the level this Process last set is kept (LevelUnknown if none).
func (g *Group) refresh() error {
	info := ioctl.NVA06C_CTRL_GET_INFO_PARAMS{}
	if err := ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_INFO, &info); err != nil {
		return fmt.Errorf("group %v: get info: %w", g.Handle, err)
	}
	g.TSGID = info.TsgID
	ts, err := getTimeslice(*g)
	if err != nil {
		return fmt.Errorf("group %v: get timeslice: %w", g.Handle, err)
	}
	g.Timeslice = Micros(ts)
	l, err := getInterleave(*g)
	var status *ioctl.StatusError
	switch {
	case err == nil:
		g.Interleave = l
	case errors.As(err, &status):
		// Not reported (GSP-RM): keep what this process last set, or
		// LevelUnknown from discovery.
	default:
		return fmt.Errorf("group %v: get interleave level: %w", g.Handle, err)
	}
	return nil
}

// DefaultLevel is the interleave level RM gives a new channel group
// (kernel_channel_group_api.c); it is what a level that could not be read
// is restored to.
const DefaultLevel = LevelMedium

func restorableLevel(l Level) Level {
	if l == LevelUnknown {
		return DefaultLevel
	}
	return l
}

func getTimeslice(g Group) (uint64, error) {
	p := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{}
	err := ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, &p)
	return p.TimesliceUs, err
}

func setTimeslice(g Group, us uint64) error {
	p := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: us}
	return ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, &p)
}

func getInterleave(g Group) (Level, error) {
	p := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{}
	err := ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, &p)
	return Level(p.TsgInterleaveLevel), err
}

func setInterleave(g Group, l Level) error {
	p := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{TsgInterleaveLevel: uint32(l)}
	return ioctl.Control(g.ctl, g.Client, g.Handle, ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, &p)
}

func boolByte(b bool) uint8 {
	if b {
		return 1
	}
	return 0
}

// Controller returns the file through which g is controlled, for callers
// that issue other KEPLER_CHANNEL_GROUP_A controls themselves. It is valid
// until the Process is closed.
func (g Group) Controller() ioctl.Controller { return g.ctl }

// GetTimeslice reads g's timeslice from RM (one cheap control).
func (p *Process) GetTimeslice(g Group) (time.Duration, error) {
	us, err := getTimeslice(g)
	return time.Duration(us) * time.Microsecond, err
}
