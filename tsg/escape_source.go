package tsg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// ErrNotSupported: the operation cannot be done through the source that
// discovered the group.
var ErrNotSupported = errors.New("not supported by this source")

// EscapeOptions configure an EscapeSource.
type EscapeOptions struct {
	// AllowUnsupportedDriver uses the nearest known ABI (for the controls
	// that fall back to the target's own file) on an unknown driver.
	AllowUnsupportedDriver bool
	// NoAttachFallback makes preemption and scheduling, which the escapes
	// do not carry, fail with ErrNotSupported instead of duplicating the
	// target's file as the attach source does.
	NoAttachFallback bool
	// Logger receives what the source assumed on the way (default:
	// discarded).
	Logger *slog.Logger
}

// EscapeSource discovers and controls channel groups through the escapes
// of gpreempt's driver patch series (docs/PATCHES.md): one QUERY lists a
// process's groups with their GPU, engine, runlist, timeslice and
// interleave level, and SET changes a group's timeslice or interleave
// level, from a file of our own. The driver checks the caller's rights
// (CAP_SYS_ADMIN or CAP_SYS_NICE, or the euid that created the client) and
// resolves pids in the caller's pid namespace; nothing is attached.
//
// Groups it returns are controlled through the same Process methods, over
// its Control: Apply (SetTimeslice, SetInterleave) goes through SET, reads
// through QUERY; Preempt and Schedule have no escape and fall back to a duplicate of the target's file that owns
// the group's client (pidfd_getfd: root or CAP_SYS_PTRACE), or fail with
// ErrNotSupported under EscapeOptions.NoAttachFallback. Group.FD is -1:
// the escape does not say which of the target's files holds the client.
type EscapeSource struct {
	host Host
	opts EscapeOptions
	log  *slog.Logger

	mu       sync.Mutex
	probed   bool
	probeErr error
	dev      Device
	esc      ioctl.Escaper
	version  ioctl.DriverVersion
}

// NewEscapeSource returns an EscapeSource over host. Nothing is opened
// until the first Available or Discover.
func NewEscapeSource(host Host, opts EscapeOptions) *EscapeSource {
	if opts.Logger == nil {
		opts.Logger = discardLogger
	}
	return &EscapeSource{host: host, opts: opts, log: opts.Logger}
}

func (s *EscapeSource) Name() string { return "escape" }

// Available reports whether the loaded driver answers gpreempt's escapes.
// The first call opens a control file of our own and issues one QUERY for
// our own pid (which every caller may ask about, and which has no groups);
// the answer, and the file when the answer is yes, are kept for the life
// of the source. A stock driver refuses the unknown escape number with
// EINVAL (see ioctl.ErrNoGpreemptEscapes): that is (false, nil). Failing
// to reach the driver at all is (false, err).
func (s *EscapeSource) Available() (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.probed {
		s.probed = true
		s.probeErr = s.probe()
		s.log.Debug("gpreempt escapes probed", "available", s.esc != nil, "err", s.probeErr)
	}
	switch {
	case s.esc != nil:
		return true, nil
	case errors.Is(s.probeErr, ioctl.ErrNoGpreemptEscapes):
		return false, nil
	}
	return false, s.probeErr
}

func (s *EscapeSource) probe() error {
	dev, err := s.host.OpenControl()
	if err != nil {
		return err
	}
	esc, ok := dev.(ioctl.Escaper)
	if !ok {
		dev.Close()
		return fmt.Errorf("%w (%T cannot issue raw escapes)", ioctl.ErrNoGpreemptEscapes, dev)
	}
	version, err := dev.DriverVersion()
	if err == nil {
		_, err = ioctl.QueryTSGs(esc, uint32(os.Getpid()), 0)
	}
	if err != nil {
		dev.Close()
		return err
	}
	s.dev, s.esc, s.version = dev, esc, version
	return nil
}

// Close releases the source's own control file.
func (s *EscapeSource) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dev == nil {
		return nil
	}
	err := s.dev.Close()
	s.dev, s.esc = nil, nil
	return err
}

// ready returns the escaper and the ABI for controls, or why there are none.
func (s *EscapeSource) ready() (ioctl.Escaper, ioctl.DriverVersion, ioctl.ABI, error) {
	ok, err := s.Available()
	if err != nil {
		return nil, ioctl.DriverVersion{}, ioctl.ABI{}, err
	}
	if !ok {
		return nil, ioctl.DriverVersion{}, ioctl.ABI{}, fmt.Errorf("escape source: %w", ioctl.ErrNoGpreemptEscapes)
	}
	s.mu.Lock()
	esc, version := s.esc, s.version
	s.mu.Unlock()
	if esc == nil {
		return nil, version, ioctl.ABI{}, errors.New("escape source closed")
	}
	abi, err := lookupABI(version, s.opts.AllowUnsupportedDriver, s.log)
	if err != nil {
		return nil, version, abi, err
	}
	return esc, version, abi, nil
}

// query returns every group of pid (0: of every process the caller may act
// on), page by page. The decoder guarantees that each page with more to
// come advances the cursor, so the walk ends.
func query(ctx context.Context, esc ioctl.Escaper, pid uint32) ([]ioctl.NV_GPREEMPT_TSG_INFO, int, error) {
	var all []ioctl.NV_GPREEMPT_TSG_INFO
	cursor, pages := uint64(0), 0
	for {
		if err := ctx.Err(); err != nil {
			return nil, pages, err
		}
		page, err := ioctl.QueryTSGs(esc, pid, cursor)
		pages++
		if err != nil {
			return nil, pages, err
		}
		all = append(all, page.TSGs...)
		if !page.More {
			return all, pages, nil
		}
		cursor = page.NextCursor
	}
}

// Discover returns pid's groups as the driver reports them. A pid with no
// group the caller may see (not a CUDA process, outside the caller's pid
// namespace, or another user's without CAP_SYS_NICE) is ErrNoGPUContext:
// the escape does not tell these apart, by design. A pid that names no
// process at all is ioctl.ErrNoSuchProcess, as with the attach source.
func (s *EscapeSource) Discover(ctx context.Context, pid int) (*Process, error) {
	if pid <= 0 || pid > 1<<31-1 {
		return nil, fmt.Errorf("%w: pid %d", ErrInvalidArgument, pid)
	}
	procs, err := s.discover(ctx, uint32(pid))
	if err != nil {
		return nil, err
	}
	if len(procs) == 0 {
		// The escape cannot tell a missing process from one without a
		// context; the host can, as the attach source would.
		t, err := s.host.Open(pid)
		if errors.Is(err, ioctl.ErrNoSuchProcess) {
			return nil, err
		}
		if err == nil {
			t.Close()
		}
		return nil, fmt.Errorf("pid %d: %w (the driver reports no channel group of it that this caller may see)", pid, ErrNoGPUContext)
	}
	return procs[0], nil
}

// DiscoverAll returns every process with a group the caller may act on, in
// pid order, from one walk of the driver's clients: for a privileged
// caller, every CUDA process in its pid namespace. The driver leaves out
// silently what the caller may not see, so Listing.Denied is 0.
func (s *EscapeSource) DiscoverAll(ctx context.Context) (*Listing, error) {
	procs, err := s.discover(ctx, 0)
	if err != nil {
		return nil, err
	}
	return &Listing{Processes: procs, Examined: len(procs)}, nil
}

func (s *EscapeSource) discover(ctx context.Context, pid uint32) ([]*Process, error) {
	start := time.Now()
	esc, version, abi, err := s.ready()
	if err != nil {
		return nil, err
	}
	all, pages, err := query(ctx, esc, pid)
	if err != nil {
		return nil, err
	}
	var procs []*Process
	byPID := map[uint32]*Process{}
	clients := map[uint32]map[ioctl.Handle]bool{}
	// One controller per process, so that a fallback attach is made once.
	ctls := map[uint32]*escapeControl{}
	for _, t := range all {
		if pid != 0 && t.Pid != pid {
			return nil, fmt.Errorf("gpreempt query for pid %d returned a group of pid %d", pid, t.Pid)
		}
		p := byPID[t.Pid]
		if p == nil {
			p = &Process{PID: int(t.Pid), Driver: version, Source: s.Name(), abi: abi}
			byPID[t.Pid], clients[t.Pid] = p, map[ioctl.Handle]bool{}
			ctls[t.Pid] = &escapeControl{src: s, esc: esc, proc: p, pid: t.Pid}
			procs = append(procs, p)
		}
		clients[t.Pid][t.HClient] = true
		p.Groups = append(p.Groups, Group{
			PID: int(t.Pid), FD: -1, Client: t.HClient, Device: t.HDevice, Handle: t.HTsg,
			TSGID: t.TsgID, Engine: engineOf(t.EngineType), Channels: int(t.ChannelCount),
			Timeslice: Micros(t.TimesliceUs), Interleave: Level(t.InterleaveLevel), GPUID: t.GpuID,
			ctl: ctls[t.Pid],
		})
	}
	// The groups come sorted by (client, handle); processes by pid.
	slices.SortFunc(procs, func(a, b *Process) int { return a.PID - b.PID })
	elapsed := time.Since(start)
	for _, p := range procs {
		p.Stats = ScanStats{Clients: len(clients[uint32(p.PID)]), Elapsed: elapsed}
	}
	s.log.Debug("discovered through the gpreempt escapes", "pid", pid, "processes", len(procs), "groups", len(all),
		"pages", pages, "elapsed", elapsed)
	return procs, nil
}

// engineOf names the engine a group runs on from QUERY's engine type.
func engineOf(engineType uint32) Engine {
	switch {
	case ioctl.NV2080EngineTypeIsGR(engineType):
		return EngineCompute
	case ioctl.NV2080EngineTypeIsCopy(engineType):
		return EngineCopy
	}
	return EngineUnknown
}

// AutoSource uses the gpreempt escapes where the driver has them and the
// attach source elsewhere. The choice is made once, on first use, by
// EscapeSource.Available; any failure to probe (no driver, no access to
// the control node) also picks the attach source, which then reports the
// problem in its own terms.
type AutoSource struct {
	escape *EscapeSource
	attach Source
	log    *slog.Logger

	once   sync.Once
	chosen Source
}

// AutoOptions configure an AutoSource.
type AutoOptions struct {
	// Logger receives which source was chosen, and why (default:
	// discarded).
	Logger *slog.Logger
}

// NewAutoSource returns a Source choosing between escape and attach.
func NewAutoSource(escape *EscapeSource, attach Source, opts AutoOptions) *AutoSource {
	if opts.Logger == nil {
		opts.Logger = discardLogger
	}
	return &AutoSource{escape: escape, attach: attach, log: opts.Logger}
}

func (a *AutoSource) Name() string { return "auto" }

// Chosen returns the source Discover uses, probing the driver on first use.
func (a *AutoSource) Chosen() Source {
	a.once.Do(func() {
		ok, err := a.escape.Available()
		switch {
		case ok:
			a.chosen = a.escape
		case err != nil:
			a.log.Info("gpreempt escapes not probed; using the attach source", "err", err)
			a.chosen = a.attach
		default:
			a.log.Debug("driver without gpreempt escapes; using the attach source")
			a.chosen = a.attach
		}
	})
	return a.chosen
}

func (a *AutoSource) Discover(ctx context.Context, pid int) (*Process, error) {
	return a.Chosen().Discover(ctx, pid)
}

func (a *AutoSource) DiscoverAll(ctx context.Context) (*Listing, error) {
	return a.Chosen().DiscoverAll(ctx)
}

// Close releases the escape source's control file.
func (a *AutoSource) Close() error { return a.escape.Close() }
