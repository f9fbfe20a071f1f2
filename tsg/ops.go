package tsg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
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

	abi ioctl.ABI

	// use is held shared by each operation and exclusively by Close, so
	// that Close waits for operations in flight instead of closing a file
	// under them (a closed descriptor number can be reused at once).
	use sync.RWMutex
	// mu guards devs and closed: the escape source's fallback attaches
	// during an operation, and more than one may run at a time.
	mu     sync.Mutex
	devs   []Device
	closed bool
}

// ErrClosed: the Process was closed; discover it again to act on it.
var ErrClosed = errors.New("process closed")

// begin starts an operation: it fails on a closed Process, and Close waits
// for the returned end.
func (p *Process) begin() (end func(), err error) {
	p.use.RLock()
	p.mu.Lock()
	closed := p.closed
	p.mu.Unlock()
	if closed {
		p.use.RUnlock()
		return nil, fmt.Errorf("pid %d: %w", p.PID, ErrClosed)
	}
	return p.use.RUnlock, nil
}

// addDevice makes dev one of the files Close releases; on a closed
// process it closes dev at once and says so.
func (p *Process) addDevice(dev Device) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		dev.Close()
		return fmt.Errorf("pid %d: %w", p.PID, ErrClosed)
	}
	p.devs = append(p.devs, dev)
	return nil
}

// Close releases the duplicated files, after any operation in flight has
// returned. Operations on a closed process fail with ErrClosed. Close may
// be called more than once.
func (p *Process) Close() error {
	p.use.Lock()
	defer p.use.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for _, d := range p.devs {
		errs = append(errs, d.Close())
	}
	p.devs, p.closed = nil, true
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

// Settings is a change to apply to groups; unset fields are left alone.
// It is comparable: groups given equal Settings are changed in one Apply
// (a Settings is a map key).
type Settings struct {
	Timeslice  Opt[time.Duration]
	Interleave Opt[Level]
}

// Opt is a value that may be unset, where a zero value would be a value
// (a Settings field left alone, a timeslice no one chose). It is
// comparable when T is.
type Opt[T comparable] struct {
	V   T
	Set bool
}

// Some is v, set.
func Some[T comparable](v T) Opt[T] { return Opt[T]{V: v, Set: true} }

// Get is o's value and whether it is set.
func (o Opt[T]) Get() (T, bool) { return o.V, o.Set }

// Or is o's value, or def when it is unset.
func (o Opt[T]) Or(def T) T {
	if o.Set {
		return o.V
	}
	return def
}

// String is the value, or "unset".
func (o Opt[T]) String() string {
	if !o.Set {
		return "unset"
	}
	return fmt.Sprint(o.V)
}

// Apply changes every group in gs, all or nothing where the driver allows:
// each group's current values are read first, and if any step fails the
// groups already changed are restored, in reverse, before the error is
// returned. The error says what the restore did. A level the driver does
// not report (GSP-RM on the H100) cannot be restored: such groups are left
// at the new level and the error says how many. If the process exits
// meanwhile the error is ioctl.ErrNoSuchProcess and nothing is restored:
// its groups are gone.
func (p *Process) Apply(ctx context.Context, gs []Group, s Settings) error {
	if ts, ok := s.Timeslice.Get(); ok {
		if err := CheckTimeslice(ts); err != nil {
			return err
		}
	}
	if l, ok := s.Interleave.Get(); ok && l > LevelHigh {
		return fmt.Errorf("%w: interleave level %v", ErrInvalidArgument, l)
	}
	end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
	var done []undo
	for _, g := range gs {
		if err := ctx.Err(); err != nil {
			return rollback(err, done, levelOf(s))
		}
		u := undo{g: g}
		if ts, ok := s.Timeslice.Get(); ok {
			prev, err := g.ctl.Timeslice(g)
			if err != nil {
				return rollback(fmt.Errorf("group %v: read timeslice: %w", g.Handle, err), done, levelOf(s))
			}
			if err := g.ctl.SetTimeslice(g, Micros(ts/time.Microsecond)); err != nil {
				return rollback(fmt.Errorf("group %v: set timeslice: %w", g.Handle, err), done, levelOf(s))
			}
			u.prevT = Some(prev)
		}
		if l, ok := s.Interleave.Get(); ok {
			prev, err := g.ctl.Interleave(g)
			if errors.Is(err, ioctl.NV_ERR_NOT_SUPPORTED) {
				// GSP-RM on the H100 (580.159.04) does not implement
				// GET_INTERLEAVE_LEVEL: the change goes ahead, and a
				// rollback says it could not restore this one.
				prev, err = LevelUnknown, nil
			}
			if err != nil {
				done = append(done, u) // its timeslice changed already
				return rollback(fmt.Errorf("group %v: read interleave level: %w", g.Handle, err), done, levelOf(s))
			}
			if err := g.ctl.SetInterleave(g, l); err != nil {
				done = append(done, u)
				return rollback(fmt.Errorf("group %v: set interleave level: %w", g.Handle, err), done, levelOf(s))
			}
			u.prevL = Some(prev)
		}
		done = append(done, u)
	}
	p.update(gs, s)
	return nil
}

// undo is what Apply changed in one group, and what was there before.
type undo struct {
	g     Group
	prevT Opt[Micros]
	prevL Opt[Level] // LevelUnknown: the driver did not report it
}

func levelOf(s Settings) Level { return s.Interleave.Or(LevelUnknown) }

// rollback restores, in reverse, what done changed, and returns cause with
// an account of exactly what was restored and what was not.
func rollback(cause error, done []undo, newLevel Level) error {
	if len(done) == 0 {
		return cause
	}
	if errors.Is(cause, ioctl.ErrNoSuchProcess) {
		return fmt.Errorf("%w (nothing restored: the process and its groups are gone)", cause)
	}
	var errs []error
	restoredT, restoredL, leftL := 0, 0, 0
	for i := len(done) - 1; i >= 0; i-- {
		u := done[i]
		if prevL, ok := u.prevL.Get(); ok {
			switch {
			case prevL == LevelUnknown:
				leftL++
			default:
				if err := u.g.ctl.SetInterleave(u.g, prevL); err != nil {
					errs = append(errs, fmt.Errorf("group %v: restore interleave level %v: %w", u.g.Handle, prevL, err))
				} else {
					restoredL++
				}
			}
		}
		if prevT, ok := u.prevT.Get(); ok {
			if err := u.g.ctl.SetTimeslice(u.g, prevT); err != nil {
				errs = append(errs, fmt.Errorf("group %v: restore timeslice %v: %w", u.g.Handle, prevT, err))
			} else {
				restoredT++
			}
		}
	}
	var did []string
	if restoredT > 0 {
		did = append(did, fmt.Sprintf("timeslice of %d groups restored", restoredT))
	}
	if restoredL > 0 {
		did = append(did, fmt.Sprintf("interleave level of %d groups restored", restoredL))
	}
	if leftL > 0 {
		did = append(did, fmt.Sprintf("interleave level of %d groups left at %v: the driver does not report the previous level", leftL, newLevel))
	}
	account := strings.Join(did, "; ")
	err := errors.Join(errs...)
	switch {
	case err != nil && allGone(errs):
		// The process exited while we restored: that is the answer.
		return fmt.Errorf("%w; the process exited while restoring (%s): %w", cause, orNothing(account), ioctl.ErrNoSuchProcess)
	case err != nil:
		return fmt.Errorf("%w; restoring the %d groups already changed failed in part (%s): %w", cause, len(done), orNothing(account), err)
	}
	return fmt.Errorf("%w (%s)", cause, account)
}

func allGone(errs []error) bool {
	for _, e := range errs {
		if !errors.Is(e, ioctl.ErrNoSuchProcess) {
			return false
		}
	}
	return len(errs) > 0
}

func orNothing(s string) string {
	if s == "" {
		return "nothing restored"
	}
	return s
}

// SetTimeslice sets the timeslice of gs, all or nothing.
func (p *Process) SetTimeslice(ctx context.Context, gs []Group, d time.Duration) error {
	return p.Apply(ctx, gs, Settings{Timeslice: Some(d)})
}

// SetInterleave sets the interleave level of gs, all or nothing where the
// driver reports the previous level (see Apply).
func (p *Process) SetInterleave(ctx context.Context, gs []Group, l Level) error {
	return p.Apply(ctx, gs, Settings{Interleave: Some(l)})
}

// Preempt preempts each group in turn. wait makes RM wait for each
// preemption to finish (RM's own timeout applies, or timeout if non-zero,
// at most 1 s). Preemption changes no setting, so there is nothing to
// restore; the error names the first group that failed.
func (p *Process) Preempt(ctx context.Context, gs []Group, wait bool, timeout time.Duration) error {
	if timeout < 0 || timeout > ioctl.NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US*time.Microsecond {
		return fmt.Errorf("%w: preempt timeout %v out of range [0, 1s]", ErrInvalidArgument, timeout)
	}
	if timeout%time.Microsecond != 0 {
		return fmt.Errorf("%w: preempt timeout %v is not a whole number of microseconds", ErrInvalidArgument, timeout)
	}
	end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
	for _, g := range gs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := g.ctl.Preempt(g, wait, timeout); err != nil {
			return fmt.Errorf("group %v: preempt: %w", g.Handle, err)
		}
	}
	return nil
}

// Schedule enables (resume) or disables (suspend) gs on the runlist with
// GPFIFO_SCHEDULE, in order. A suspended group's work stays queued and
// runs when it is resumed.
//
// On a failure the groups already switched are left switched, and the
// error names them: RM does not report whether a group was on the runlist
// before, so switching them back could resume a group that someone else
// had suspended (or the reverse). Running the same command again finishes
// the job.
func (p *Process) Schedule(ctx context.Context, gs []Group, enable bool) error {
	verb, done := "suspend", "suspended"
	if enable {
		verb, done = "resume", "resumed"
	}
	end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
	for i, g := range gs {
		err := ctx.Err()
		if err == nil {
			err = g.ctl.Schedule(g, enable)
		}
		if err == nil {
			continue
		}
		err = fmt.Errorf("group %v: %s: %w", g.Handle, verb, err)
		if i == 0 || errors.Is(err, ioctl.ErrNoSuchProcess) {
			return err
		}
		handles := make([]string, i)
		for j := range gs[:i] {
			handles[j] = gs[j].Handle.String()
		}
		return fmt.Errorf("%w (groups %s were %s before the failure and are left so: the driver does not report their previous state)",
			err, strings.Join(handles, ", "), done)
	}
	return nil
}

// Refresh re-reads the timeslice and interleave level of every group.
func (p *Process) Refresh(ctx context.Context) error {
	end, err := p.begin()
	if err != nil {
		return err
	}
	defer end()
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
			if ts, ok := s.Timeslice.Get(); ok {
				p.Groups[i].Timeslice = Micros(ts / time.Microsecond)
			}
			if l, ok := s.Interleave.Get(); ok {
				p.Groups[i].Interleave = l
			}
		}
	}
}

// refresh reads what the driver says of the group now. The timeslice is
// required; where the driver will not report the interleave level, the
// level this Process last set is kept (LevelUnknown if none).
func (g *Group) refresh() error {
	ts, err := g.ctl.Timeslice(*g)
	if err != nil {
		return fmt.Errorf("group %v: get timeslice: %w", g.Handle, err)
	}
	g.Timeslice = ts
	l, err := g.ctl.Interleave(*g)
	var status *ioctl.StatusError
	switch {
	case err == nil:
		g.Interleave, g.InterleaveSetOnly = l, false
	case errors.As(err, &status):
		// Not reported (GSP-RM): keep what this process last set, or
		// LevelUnknown from discovery.
		g.InterleaveSetOnly = g.Interleave != LevelUnknown
	default:
		return fmt.Errorf("group %v: get interleave level: %w", g.Handle, err)
	}
	return nil
}

// Control returns the seam through which g is read and changed, for
// callers (a registry, a daemon) that act on groups one at a time. It is
// valid until the Process is closed.
func (g Group) Control() Control { return g.ctl }

// Controller returns the file through which an attach-source group is
// controlled, for callers that issue other KEPLER_CHANNEL_GROUP_A controls
// themselves; nil for a group of another source. It is valid until the
// Process is closed.
func (g Group) Controller() ioctl.Controller {
	if rm, ok := g.ctl.(rmControl); ok {
		return rm.dev
	}
	return nil
}

// GetTimeslice reads g's timeslice from the driver (one cheap call).
func (p *Process) GetTimeslice(g Group) (time.Duration, error) {
	end, err := p.begin()
	if err != nil {
		return 0, err
	}
	defer end()
	us, err := g.ctl.Timeslice(g)
	return us.Duration(), err
}
