package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// nvmlInfo is the Info backed by NVML. It exists only after a successful
// nvml Init: go-nvml resolves NVML's symbols when Init loads the library, so
// any call after a failed Init, Shutdown included, jumps to an unresolved
// symbol and kills the process. open therefore returns no value to call
// methods on unless Init succeeded.
type nvmlInfo struct {
	lib    nvml.Interface
	logger *slog.Logger
	// procRoot is where process names are read from; tests point it at a
	// fake /proc.
	procRoot string

	// mu serialises calls with Close, so none reaches NVML after Shutdown
	// may have unloaded it.
	mu     sync.Mutex
	closed bool
}

var _ Info = (*nvmlInfo)(nil)

// Open initialises NVML and returns an Info backed by it, to be released with
// Close. Where there is no usable driver the error satisfies
// errors.Is(err, ErrNoDriver). A nil logger discards.
func Open(logger *slog.Logger) (Info, error) {
	n, err := open(nvml.New(), logger)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func open(lib nvml.Interface, logger *slog.Logger) (*nvmlInfo, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, fmt.Errorf("%w (libnvidia-ml.so.1 could not be loaded)", ErrNoDriver)
	case nvml.ERROR_DRIVER_NOT_LOADED:
		// The user-space library is installed but the kernel module is
		// not: as unusable as no driver at all, so callers fall back the
		// same way.
		return nil, fmt.Errorf("%w (libnvidia-ml.so.1 loaded, but nvml init: %w)", ErrNoDriver, ret)
	default:
		return nil, fmt.Errorf("nvml init: %w", ret)
	}
	logger.Debug("nvml initialized")
	return &nvmlInfo{lib: lib, logger: logger, procRoot: "/proc"}, nil
}

// Close shuts NVML down. Later calls, Close included, return ErrClosed
// rather than reaching a library that may have been unloaded.
func (n *nvmlInfo) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return ErrClosed
	}
	n.closed = true
	if ret := n.lib.Shutdown(); ret != nvml.SUCCESS {
		return fmt.Errorf("nvml shutdown: %w", ret)
	}
	return nil
}

// lock takes mu for one call and returns an error if the call must not
// proceed; on error mu is not held.
func (n *nvmlInfo) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return ErrClosed
	}
	return nil
}

func (n *nvmlInfo) Driver(ctx context.Context) (DriverInfo, error) {
	if err := n.lock(ctx); err != nil {
		return DriverInfo{}, err
	}
	defer n.mu.Unlock()

	version, ret := n.lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		return DriverInfo{}, fmt.Errorf("get driver version: %w", ret)
	}
	cuda, ret := n.lib.SystemGetCudaDriverVersion()
	if ret != nvml.SUCCESS {
		return DriverInfo{}, fmt.Errorf("get CUDA driver version: %w", ret)
	}
	return DriverInfo{Version: version, CUDADriverVersion: cuda}, nil
}

func (n *nvmlInfo) Devices(ctx context.Context) ([]Device, error) {
	if err := n.lock(ctx); err != nil {
		return nil, err
	}
	defer n.mu.Unlock()

	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("get device count: %w", ret)
	}
	devices := make([]Device, 0, count)
	for i := range count {
		// Each device costs several driver round trips; a caller that
		// gave up should not wait for the rest.
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := n.device(i)
		if err != nil {
			return nil, fmt.Errorf("device %d: %w", i, err)
		}
		devices = append(devices, d)
	}
	return devices, nil
}

// device reads one device. Identity (name, UUID, bus ID) is required;
// memory and processes are left empty where the device or our privileges do
// not allow reading them, because a listing with gaps is more useful than
// none.
func (n *nvmlInfo) device(index int) (Device, error) {
	h, ret := n.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get handle: %w", ret)
	}
	d := Device{Index: index}
	if d.Name, ret = h.GetName(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get name: %w", ret)
	}
	if d.UUID, ret = h.GetUUID(); ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get UUID: %w", ret)
	}
	pci, ret := h.GetPciInfo()
	if ret != nvml.SUCCESS {
		return Device{}, fmt.Errorf("get PCI info: %w", ret)
	}
	d.PCIBusID = cString(pci.BusId[:])

	logger := n.logger.With("device", index, "uuid", d.UUID)
	switch mem, ret := h.GetMemoryInfo(); {
	case ret == nvml.SUCCESS:
		d.MemoryTotal, d.MemoryUsed = mem.Total, mem.Used
	case optional(ret):
		logger.Debug("memory info unavailable", "err", ret)
	default:
		return Device{}, fmt.Errorf("get memory info: %w", ret)
	}

	switch procs, ret := h.GetComputeRunningProcesses(); {
	case ret == nvml.SUCCESS:
		d.Processes = make([]Process, 0, len(procs))
		for _, p := range procs {
			d.Processes = append(d.Processes, Process{
				PID:        int(p.Pid),
				UsedMemory: usedMemory(p.UsedGpuMemory),
				Name:       n.processName(int(p.Pid)),
			})
		}
	case optional(ret):
		logger.Debug("compute processes unavailable", "err", ret)
	default:
		return Device{}, fmt.Errorf("get compute processes: %w", ret)
	}
	return d, nil
}

// optional reports whether ret means "this device will not tell you" rather
// than a failure.
func optional(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_NO_PERMISSION
}

// usedMemory maps NVML's NVML_VALUE_NOT_AVAILABLE (all ones) to 0, which
// reads better in a table and in JSON than 18446744073709551615.
func usedMemory(v uint64) uint64 {
	if v == math.MaxUint64 {
		return 0
	}
	return v
}

// processName reads /proc/<pid>/comm. The PID is the driver's, i.e. the
// host's; inside a container with its own PID namespace it names nothing or
// an unrelated process, which is why a failure is not an error.
func (n *nvmlInfo) processName(pid int) string {
	b, err := os.ReadFile(filepath.Join(n.procRoot, strconv.Itoa(pid), "comm"))
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			n.logger.Debug("read process name", "pid", pid, "err", err)
		}
		return ""
	}
	return strings.TrimSuffix(string(b), "\n")
}

// cString converts a NUL-terminated C char array, as NVML structs carry
// them, to a string.
func cString(b []int8) string {
	s := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		s = append(s, byte(c))
	}
	return string(s)
}
