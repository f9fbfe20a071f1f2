package ctl

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// What a CUDA context's groups hold before anyone changes them (measured
// on the H100, 580.159.04, CUDA 13.0; docs/GPU-RESULTS.md): RM gives a new
// channel group a 1024 us timeslice and MEDIUM interleave, and libcuda
// sets its compute group to 2048 us right after creating the channels.
const (
	driverTimeslice         = 1024 * time.Microsecond
	libcudaComputeTimeslice = 2048 * time.Microsecond
	driverInterleave        = tsg.LevelMedium
)

// defaultTimeslice is what the driver and libcuda leave a group of engine e at.
func defaultTimeslice(e tsg.Engine) time.Duration {
	if e == tsg.EngineCompute {
		return libcudaComputeTimeslice
	}
	return driverTimeslice
}

var resetCommand = &cli.Command{
	Name:  "reset",
	Usage: "put a process's channel groups (or every process's) back to the driver's and libcuda's defaults",
	Description: "Compute groups go back to 2048us (what libcuda sets), copy groups to 1024us (what RM gives a\n" +
		"new group), all to MEDIUM interleave. Each process is changed all or nothing; with --all, a\n" +
		"process that fails is reported and the others are still reset. Suspended groups stay\n" +
		"suspended: resume them.",
	Flags: []cli.Flag{
		&cli.IntFlag{Name: "pid", Usage: "the process to reset"},
		&cli.BoolFlag{Name: "all", Usage: "every process with a channel group"},
	},
	Action: func(c *cli.Context) error {
		r := rt(c)
		if c.IsSet("pid") == c.Bool("all") {
			return fmt.Errorf("%w: reset needs one of --pid and --all", ErrInvalidArgument)
		}
		if c.IsSet("pid") {
			pid, err := cmdutil.PIDArg(c)
			if err != nil {
				return err
			}
			p, err := r.source.Discover(c.Context, pid)
			if err != nil {
				return err
			}
			defer p.Close()
			if err := resetProcess(c.Context, p); err != nil {
				return err
			}
			return printChanged(c, p, p.Groups)
		}
		pids, denied, err := r.env.Host.Processes()
		if err != nil {
			return err
		}
		var errs []error
		if denied > 0 {
			// They may hold groups another tool left starved: not being
			// able to reset them is a failure, reported after the rest.
			err := fmt.Errorf("%d processes could not be examined: %w", denied, ioctl.ErrPermission)
			fmt.Fprintf(r.env.Stderr, "gpreemptctl: reset: %v\n", err)
			errs = append(errs, err)
		}
		views := []processView{}
		for _, pid := range pids {
			p, err := r.source.Discover(c.Context, pid)
			if errors.Is(err, tsg.ErrNoGPUContext) || errors.Is(err, ioctl.ErrNoSuchProcess) {
				continue
			}
			if err == nil {
				err = resetProcess(c.Context, p)
				if err == nil {
					err = p.Refresh(c.Context)
				}
				if err == nil {
					views = append(views, viewOf(c, p, p.Groups))
				}
				p.Close()
			}
			if err != nil {
				fmt.Fprintf(r.env.Stderr, "gpreemptctl: reset pid %d: %v\n", pid, err)
				errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
			}
		}
		if err := printGroups(c, views); err != nil {
			return err
		}
		if len(errs) > 0 {
			return fmt.Errorf("reset failed for %d of the processes: %w", len(errs), errors.Join(errs...))
		}
		return nil
	},
}

// resetProcess puts every group of p back to the defaults, all or nothing:
// each engine's groups are changed together (tsg's Apply restores its own
// on failure), and if a later engine's change fails the groups changed
// before are set back to what they held.
func resetProcess(ctx context.Context, p *tsg.Process) error {
	byTimeslice := map[time.Duration][]tsg.Group{}
	var order []time.Duration
	for _, g := range p.Groups {
		ts := defaultTimeslice(g.Engine)
		if byTimeslice[ts] == nil {
			order = append(order, ts)
		}
		byTimeslice[ts] = append(byTimeslice[ts], g)
	}
	level := driverInterleave
	var done []tsg.Group
	for _, ts := range order {
		gs := byTimeslice[ts]
		if err := p.Apply(ctx, gs, tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(level)}); err != nil {
			if len(done) == 0 {
				return fmt.Errorf("pid %d: %w", p.PID, err)
			}
			if rerr := restore(ctx, p, done); rerr != nil {
				return fmt.Errorf("pid %d: %w; restoring the %d groups reset before also failed: %w", p.PID, err, len(done), rerr)
			}
			return fmt.Errorf("pid %d: %w (the %d groups reset before were restored)", p.PID, err, len(done))
		}
		done = append(done, gs...)
	}
	return nil
}

// restore sets gs back to the values they were discovered with. A level
// RM would not tell (GET_INTERLEAVE_LEVEL unsupported) is left as set.
func restore(ctx context.Context, p *tsg.Process, gs []tsg.Group) error {
	var errs []error
	for _, g := range gs {
		s := tsg.Settings{Timeslice: tsg.Some(g.Timeslice.Duration())}
		if g.Interleave != tsg.LevelUnknown {
			s.Interleave = tsg.Some(g.Interleave)
		}
		if err := p.Apply(ctx, []tsg.Group{g}, s); err != nil {
			errs = append(errs, fmt.Errorf("group %v: %w", g.Handle, err))
		}
	}
	return errors.Join(errs...)
}
