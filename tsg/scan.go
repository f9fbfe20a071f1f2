package tsg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// ScanOptions configure an AttachSource and bound its scans.
type ScanOptions struct {
	// Workers probe client handles in parallel on one fd. The probe
	// (NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO) takes RM's API lock
	// read-only and no GPU lock, so probes do not serialise. Default 8.
	Workers int
	// HandleGap ends an object scan after this many consecutive unused
	// handles past the last object found. libcuda hands out object
	// handles from a counter (0x5c000001, 0x5c000002, ...) and frees leave
	// holes, so a gap much larger than any hole is safe. Default 4096.
	HandleGap int
	// MaxObjectProbes caps one client's object scan. Default 1<<20.
	MaxObjectProbes int
	// FullClientRange scans every possible client index instead of those
	// below RM's current counter (needed only after the counter wrapped,
	// i.e. after a million clients since the driver loaded).
	FullClientRange bool
	// AllowUnsupportedDriver uses the nearest known ABI on a driver
	// version outside the known range instead of refusing.
	AllowUnsupportedDriver bool
	// Logger receives what discovery skipped or assumed (default:
	// discarded).
	Logger *slog.Logger
}

func (o ScanOptions) withDefaults() ScanOptions {
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.HandleGap <= 0 {
		o.HandleGap = 4096
	}
	if o.MaxObjectProbes <= 0 {
		o.MaxObjectProbes = 1 << 20
	}
	if o.Logger == nil {
		o.Logger = discardLogger
	}
	return o
}

// discardLogger stands in for an options struct's nil Logger.
var discardLogger = slog.New(slog.DiscardHandler)

// ScanStats says what a discovery cost.
type ScanStats struct {
	ControlFDs   int           `json:"control_fds"`
	ClientProbes int64         `json:"client_probes"`
	ObjectProbes int64         `json:"object_probes"`
	Clients      int           `json:"clients"`
	ClientTop    ioctl.Handle  `json:"client_top"`
	Elapsed      time.Duration `json:"elapsed_ns"`
}

// AttachSource discovers the groups of a running process on a stock
// driver, without its cooperation: see the package comment.
type AttachSource struct {
	host  Host
	opts  ScanOptions
	log   *slog.Logger
	cache abiCache
}

// NewAttachSource returns a Source over host.
func NewAttachSource(host Host, opts ScanOptions) *AttachSource {
	opts = opts.withDefaults()
	return &AttachSource{host: host, opts: opts, log: opts.Logger}
}

func (s *AttachSource) Name() string { return "attach" }

// Discover finds every channel group of pid. The returned Process holds
// duplicates of the target's control files; Close releases them.
//
// Each group's GPUID is read from its device's first subdevice
// (NV2080_CTRL_CMD_GPU_GET_ID, one cheap control per client). That
// control is best effort: if RM refuses it, GPUID stays 0 and discovery
// goes on, since nothing gpreempt changes depends on it.
func (s *AttachSource) Discover(ctx context.Context, pid int) (*Process, error) {
	start := time.Now()
	// The pidfd first: the fds listed and duplicated are then the
	// process's that was opened, even if pid is reused meanwhile.
	target, err := s.host.Open(pid)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	fds, err := target.ControlFDs()
	if err != nil {
		return nil, err
	}
	if len(fds) == 0 {
		return nil, fmt.Errorf("pid %d: %w (no %s open)", pid, ErrNoGPUContext, ioctl.ControlDevicePath)
	}
	top, version, err := s.clientTop()
	if err != nil {
		return nil, err
	}
	abi, err := lookupABI(version, s.opts.AllowUnsupportedDriver, s.log)
	if err != nil {
		return nil, err
	}
	p := &Process{PID: pid, Driver: version, abi: abi, Source: s.Name()}
	p.Stats.ControlFDs = len(fds)
	p.Stats.ClientTop = top
	limit := uint32(top - ioctl.RS_CLIENT_HANDLE_BASE)
	if s.opts.FullClientRange || top < ioctl.RS_CLIENT_HANDLE_BASE || limit > ioctl.RS_CLIENT_HANDLE_MAX {
		limit = ioctl.RS_CLIENT_HANDLE_MAX
	}
	fail := func(err error) (*Process, error) {
		p.Close()
		return nil, err
	}
	for _, fd := range fds {
		dev, err := target.Attach(fd)
		if err != nil {
			return fail(err)
		}
		if err := p.addDevice(dev); err != nil {
			return fail(err)
		}
		clients, err := s.boundClients(ctx, dev, limit, &p.Stats)
		if err != nil {
			return fail(fmt.Errorf("pid %d fd %d: %w", pid, fd, err))
		}
		for _, c := range clients {
			groups, err := s.clientGroups(ctx, rmControl{dev: dev, abi: abi}, dev, c, &p.Stats)
			if err != nil {
				return fail(fmt.Errorf("pid %d fd %d client %v: %w", pid, fd, c, err))
			}
			for i := range groups {
				groups[i].PID, groups[i].FD = pid, fd
			}
			p.Groups = append(p.Groups, groups...)
		}
		p.Stats.Clients += len(clients)
	}
	p.Stats.Elapsed = time.Since(start)
	if len(p.Groups) == 0 {
		p.Close()
		return nil, fmt.Errorf("pid %d: %w (%d RM clients, none with a channel group)", pid, ErrNoGPUContext, p.Stats.Clients)
	}
	s.log.Debug("discovered", "pid", pid, "groups", len(p.Groups), "client_probes", p.Stats.ClientProbes,
		"object_probes", p.Stats.ObjectProbes, "elapsed", p.Stats.Elapsed)
	return p, nil
}

// DiscoverAll discovers each process the host lists with a control file
// open. A process that exits meanwhile is left out; one the caller may not
// examine is counted in Denied; one without a channel group counts as
// examined. The driver is checked first, so that a machine without one
// says so instead of listing nothing.
func (s *AttachSource) DiscoverAll(ctx context.Context) (*Listing, error) {
	own, err := s.host.OpenControl()
	if err != nil {
		return nil, err
	}
	own.Close()
	pids, denied, err := s.host.Processes()
	if err != nil {
		return nil, err
	}
	l := &Listing{Denied: denied}
	for _, pid := range pids {
		if err := ctx.Err(); err != nil {
			l.Close()
			return nil, err
		}
		p, err := s.Discover(ctx, pid)
		switch {
		case err == nil:
			l.Examined++
			l.Processes = append(l.Processes, p)
		case errors.Is(err, ErrNoGPUContext):
			l.Examined++
		case errors.Is(err, ioctl.ErrNoSuchProcess):
		case errors.Is(err, ioctl.ErrPermission):
			l.Denied++
		case errors.Is(err, ioctl.ErrNoDriver), errors.Is(err, ioctl.ErrUnsupportedDriver),
			errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			// The same for every process: the listing's answer.
			l.Close()
			return nil, err
		default:
			l.Failed = append(l.Failed, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return l, nil
}

// clientTop allocates a client of our own and frees it at once: RM hands
// out client handles from a growing counter, so ours bounds the handles of
// every client created before it. It also reads the driver's version on
// the same file.
func (s *AttachSource) clientTop() (ioctl.Handle, ioctl.DriverVersion, error) {
	own, err := s.host.OpenControl()
	if err != nil {
		return 0, ioctl.DriverVersion{}, err
	}
	defer own.Close()
	version, err := own.DriverVersion()
	if err != nil {
		return 0, ioctl.DriverVersion{}, err
	}
	params := ioctl.NV0000_ALLOC_PARAMETERS{ProcessID: uint32(os.Getpid())}
	copy(params.ProcessName[:], "gpreempt")
	h, err := own.Alloc(0, 0, 0, ioctl.NV01_ROOT_CLIENT, ioctl.Bytes(&params))
	if err != nil {
		return 0, version, fmt.Errorf("allocate probe client: %w", err)
	}
	if err := own.Free(h, 0, h); err != nil {
		return 0, version, fmt.Errorf("free probe client %v: %w", h, err)
	}
	return h, version, nil
}

// boundClients finds the clients bound to dev among client indices
// [0, limit). RM answers NV_ERR_INVALID_CLIENT both for a client that does
// not exist and for one bound to another file; any other answer means the
// client passed validation on this file.
func (s *AttachSource) boundClients(ctx context.Context, dev Device, limit uint32, st *ScanStats) ([]ioctl.Handle, error) {
	var (
		next    atomic.Uint32
		probes  atomic.Int64
		mu      sync.Mutex
		found   []ioctl.Handle
		firstMu sync.Mutex
		first   error
		wg      sync.WaitGroup
	)
	const batch = 256
	fail := func(err error) {
		firstMu.Lock()
		if first == nil {
			first = err
		}
		firstMu.Unlock()
	}
	for range s.opts.Workers {
		wg.Go(func() {
			for {
				if ctx.Err() != nil {
					fail(ctx.Err())
					return
				}
				lo := next.Add(batch) - batch
				if lo >= limit {
					return
				}
				hi := min(lo+batch, limit)
				for i := lo; i < hi; i++ {
					c := ioctl.RS_CLIENT_HANDLE_BASE + ioctl.Handle(i)
					_, err := handleInfo(dev, c, c, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID)
					probes.Add(1)
					var status ioctl.NvStatus
					switch {
					case err == nil:
					case errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT):
						continue
					case errors.As(err, &status):
						// Validated, then refused for another reason: bound.
					default:
						fail(err)
						return
					}
					mu.Lock()
					found = append(found, c)
					mu.Unlock()
				}
				firstMu.Lock()
				stop := first != nil
				firstMu.Unlock()
				if stop {
					return
				}
			}
		})
	}
	wg.Wait()
	st.ClientProbes += probes.Load()
	if first != nil {
		return nil, first
	}
	sort.Slice(found, func(i, j int) bool { return found[i] < found[j] })
	return found, nil
}

// object is what discovery learns of one handle.
type object struct {
	class  uint32
	parent ioctl.Handle
}

// clientGroups walks a client's objects and builds its channel groups.
// Handles are probed upwards from the device's: a TSG is always allocated
// after the device it belongs to.
func (s *AttachSource) clientGroups(ctx context.Context, rm rmControl, dev Device, client ioctl.Handle, st *ScanStats) ([]Group, error) {
	device, err := childHandle(dev, client, client, ioctl.NVOC_CLASS_ID_Device)
	if err != nil {
		return nil, err
	}
	if device == 0 {
		return nil, nil
	}
	objs := map[ioctl.Handle]object{}
	miss, probes := 0, 0
	for h := device + 1; miss < s.opts.HandleGap && probes < s.opts.MaxObjectProbes && h != 0; h++ {
		if probes%1024 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
		probes++
		class, err := handleInfo(dev, client, h, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID)
		var status ioctl.NvStatus
		switch {
		case err == nil:
		case errors.As(err, &status):
			miss++
			continue
		default:
			return nil, err
		}
		miss = 0
		c := uint32(class)
		if !ioctl.IsChannelGroupClass(c) && !ioctl.IsChannelClass(c) && !ioctl.IsComputeClass(c) &&
			!ioctl.IsCopyClass(c) && c != ioctl.FERMI_CONTEXT_SHARE_A {
			continue
		}
		parent, err := handleInfo(dev, client, h, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT)
		probes++
		if err != nil {
			return nil, fmt.Errorf("parent of %v: %w", h, err)
		}
		objs[h] = object{class: c, parent: ioctl.Handle(parent)}
	}
	st.ObjectProbes += int64(probes)

	var groups []Group
	index := map[ioctl.Handle]int{}
	for h, o := range objs {
		if ioctl.IsChannelGroupClass(o.class) {
			index[h] = len(groups)
			groups = append(groups, Group{Client: client, Device: o.parent, Handle: h, Engine: EngineUnknown, Interleave: LevelUnknown})
		}
	}
	// RM's own answer for the device's first TSG must be among what the
	// scan found; if not, the scan's bound was wrong for this process.
	if first, err := childHandle(dev, client, device, ioctl.NVOC_CLASS_ID_KernelChannelGroupApi); err != nil {
		return nil, err
	} else if _, ok := index[first]; first != 0 && !ok {
		return nil, fmt.Errorf("object scan missed TSG %v (scanned %d handles from %v; raise the handle gap)", first, probes, device+1)
	}
	hasCompute := map[ioctl.Handle]bool{}
	hasCopy := map[ioctl.Handle]bool{}
	for _, o := range objs {
		switch {
		case ioctl.IsChannelClass(o.class):
			if i, ok := index[o.parent]; ok {
				groups[i].Channels++
			}
		case o.class == ioctl.FERMI_CONTEXT_SHARE_A:
			hasCompute[o.parent] = true
		case ioctl.IsComputeClass(o.class), ioctl.IsCopyClass(o.class):
			if ch, ok := objs[o.parent]; ok && ioctl.IsChannelClass(ch.class) {
				if ioctl.IsComputeClass(o.class) {
					hasCompute[ch.parent] = true
				} else {
					hasCopy[ch.parent] = true
				}
			}
		}
	}
	for i := range groups {
		g := &groups[i]
		switch {
		case hasCompute[g.Handle]:
			g.Engine = EngineCompute
		case hasCopy[g.Handle]:
			g.Engine = EngineCopy
		}
		g.ctl = rm
		id, err := rm.info(*g)
		if err != nil {
			return nil, fmt.Errorf("group %v: get info: %w", g.Handle, err)
		}
		g.TSGID = id
		if err := g.refresh(); err != nil {
			return nil, err
		}
	}
	gpus := map[ioctl.Handle]uint32{}
	for i := range groups {
		g := &groups[i]
		id, ok := gpus[g.Device]
		if !ok {
			var err error
			if id, err = gpuID(dev, client, g.Device); err != nil {
				s.log.Debug("GPU of a device not known", "client", client, "device", g.Device, "err", err)
			}
			gpus[g.Device] = id
		}
		g.GPUID = id
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Handle < groups[j].Handle })
	return groups, nil
}

// gpuID asks RM which GPU a device runs on, through its first subdevice.
func gpuID(c ioctl.Controller, client, device ioctl.Handle) (uint32, error) {
	sub, err := childHandle(c, client, device, ioctl.NVOC_CLASS_ID_Subdevice)
	if err != nil {
		return 0, err
	}
	if sub == 0 {
		return 0, fmt.Errorf("device %v has no subdevice", device)
	}
	p := ioctl.NV2080_CTRL_GPU_GET_ID_PARAMS{}
	if err := ioctl.Control(c, client, sub, ioctl.NV2080_CTRL_CMD_GPU_GET_ID, &p); err != nil {
		return 0, err
	}
	return p.GpuID, nil
}

func handleInfo(c ioctl.Controller, client, h ioctl.Handle, index uint32) (uint64, error) {
	p := ioctl.NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{HObject: h, Index: index}
	if err := ioctl.Control(c, client, client, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, &p); err != nil {
		return 0, err
	}
	if index == ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT {
		return uint64(uint32(p.Data)), nil // the union's hResult
	}
	return p.Data, nil
}

// childHandle asks RM for one child of parent by NVOC internal class id.
func childHandle(c ioctl.Controller, client, parent ioctl.Handle, internalClass uint32) (ioctl.Handle, error) {
	p := ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS{HParent: parent, ClassID: internalClass}
	err := ioctl.Control(c, client, client, ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE, &p)
	if errors.Is(err, ioctl.NV_ERR_OBJECT_NOT_FOUND) {
		return 0, nil
	}
	return p.HObject, err
}
