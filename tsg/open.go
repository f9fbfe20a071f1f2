package tsg

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// abiCache holds the driver's version and ABI, read once per source: the
// loaded module does not change under a running daemon.
type abiCache struct {
	mu      sync.Mutex
	version ioctl.DriverVersion
	abi     ioctl.ABI
	ok      bool
}

// lookupABI is ioctl.LookupABI for a source: with allowUnsupported, a
// driver outside the known range gets the nearest ABI and a warning
// instead of a refusal.
func lookupABI(version ioctl.DriverVersion, allowUnsupported bool, log *slog.Logger) (ioctl.ABI, error) {
	abi, err := ioctl.LookupABI(version, allowUnsupported)
	if err != nil {
		if !allowUnsupported {
			return abi, err
		}
		log.Warn("using nearest known ABI", "driver", version, "abi", abi.Name, "err", err)
	}
	return abi, nil
}

func (s *AttachSource) driverABI() (ioctl.DriverVersion, ioctl.ABI, error) {
	s.cache.mu.Lock()
	defer s.cache.mu.Unlock()
	if s.cache.ok {
		return s.cache.version, s.cache.abi, nil
	}
	own, err := s.host.OpenControl()
	if err != nil {
		return ioctl.DriverVersion{}, ioctl.ABI{}, err
	}
	defer own.Close()
	version, err := own.DriverVersion()
	if err != nil {
		return ioctl.DriverVersion{}, ioctl.ABI{}, err
	}
	abi, err := lookupABI(version, s.opts.AllowUnsupportedDriver, s.log)
	if err != nil {
		return version, ioctl.ABI{}, err
	}
	s.cache.version, s.cache.abi, s.cache.ok = version, abi, true
	return version, abi, nil
}

// Open builds a controllable Process from groups the caller already knows
// (a registry fed by the RM tracer: owner, control-file descriptor,
// client, device, group handles, engines), without Discover's scan of
// every client and object handle. It holds pid by a pidfd, duplicates its
// descriptor fd (which must still be /dev/nvidiactl), checks with one
// GET_HANDLE_INFO per distinct client that each group's client is bound
// to that file (so a reused descriptor number or pid is refused), and
// reads each group back (GET_INFO, GET_TIMESLICE): a group that no longer
// exists fails the call. The Process holds the one duplicate until Close.
//
// GPUID stays 0 (not asked). Errors: ioctl.ErrNoSuchProcess,
// ioctl.ErrPermission, ErrNoGPUContext (a client is not bound to fd), RM's
// status for a group that is gone, ErrInvalidArgument for no groups.
func (s *AttachSource) Open(ctx context.Context, pid, fd int, groups []Group) (*Process, error) {
	start := time.Now()
	if len(groups) == 0 {
		return nil, fmt.Errorf("%w: pid %d: no groups to open", ErrInvalidArgument, pid)
	}
	version, abi, err := s.driverABI()
	if err != nil {
		return nil, err
	}
	target, err := s.host.Open(pid)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	dev, err := target.Attach(fd)
	if err != nil {
		return nil, err
	}
	p := &Process{PID: pid, Driver: version, abi: abi, Source: s.Name()}
	if err := p.addDevice(dev); err != nil {
		return nil, err
	}
	fail := func(err error) (*Process, error) {
		p.Close()
		return nil, err
	}
	p.Stats.ControlFDs = 1
	rm := rmControl{dev: dev, abi: abi}
	bound := map[ioctl.Handle]bool{}
	for _, g := range groups {
		if _, seen := bound[g.Client]; seen {
			continue
		}
		ok, err := boundTo(dev, g.Client)
		p.Stats.ClientProbes++
		if err != nil {
			return fail(fmt.Errorf("pid %d fd %d client %v: %w", pid, fd, g.Client, err))
		}
		if !ok {
			return fail(fmt.Errorf("pid %d fd %d: %w (client %v is not bound to it)", pid, fd, ErrNoGPUContext, g.Client))
		}
		bound[g.Client] = true
	}
	p.Stats.Clients = len(bound)
	for _, g := range groups {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		g.PID, g.FD, g.ctl = pid, fd, rm
		if g.Engine == "" {
			g.Engine = EngineUnknown
		}
		id, err := rm.info(g)
		if err != nil {
			return fail(fmt.Errorf("pid %d group %v: get info: %w", pid, g.Handle, err))
		}
		g.TSGID = id
		if err := g.refresh(); err != nil {
			return fail(fmt.Errorf("pid %d: %w", pid, err))
		}
		p.Groups = append(p.Groups, g)
	}
	p.Stats.Elapsed = time.Since(start)
	s.log.Debug("opened", "pid", pid, "fd", fd, "groups", len(p.Groups), "elapsed", p.Stats.Elapsed)
	return p, nil
}
