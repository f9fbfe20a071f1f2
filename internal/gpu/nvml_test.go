package gpu

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// The go-nvml mock panics on any method whose Func is unset. The tests below
// rely on that: a mock with only InitFunc set proves that nothing else, not
// even Shutdown, is called after a failed Init, the call that crashes a real
// process.

func TestOpenInitFailure(t *testing.T) {
	tests := []struct {
		ret          nvml.Return
		wantNoDriver bool
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, true},
		{nvml.ERROR_DRIVER_NOT_LOADED, true},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, false},
		{nvml.ERROR_NO_PERMISSION, false},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String(), func(t *testing.T) {
			lib := &mock.Interface{InitFunc: func() nvml.Return { return tt.ret }}
			info, err := open(lib, nil)
			if err == nil || info != nil {
				t.Fatalf("open() = %v, %v; want an error", info, err)
			}
			if got := errors.Is(err, ErrNoDriver); got != tt.wantNoDriver {
				t.Errorf("errors.Is(%v, ErrNoDriver) = %v, want %v", err, got, tt.wantNoDriver)
			}
			if tt.ret != nvml.ERROR_LIBRARY_NOT_FOUND && !errors.Is(err, tt.ret) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.ret)
			}
			if n := len(lib.InitCalls()); n != 1 {
				t.Errorf("Init called %d times, want 1", n)
			}
		})
	}
}

// busID fills NVML's C char array the way the driver does.
func busID(s string) (b [32]int8) {
	for i := range len(s) {
		b[i] = int8(s[i])
	}
	return b
}

// fakeProc builds a /proc holding only a comm file per given process.
func fakeProc(tb testing.TB, comms map[uint32]string) string {
	tb.Helper()
	root := tb.TempDir()
	for pid, comm := range comms {
		dir := filepath.Join(root, strconv.Itoa(int(pid)))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "comm"), []byte(comm+"\n"), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return root
}

// fakeDevice is the answers one mocked NVML device gives.
type fakeDevice struct {
	name, uuid, busID string
	memory            nvml.Memory
	memoryRet         nvml.Return
	procs             []nvml.ProcessInfo
	procsRet          nvml.Return
	uuidRet           nvml.Return
}

func (f fakeDevice) mock() *mock.Device {
	return &mock.Device{
		GetNameFunc: func() (string, nvml.Return) { return f.name, nvml.SUCCESS },
		GetUUIDFunc: func() (string, nvml.Return) {
			if f.uuidRet != nvml.SUCCESS {
				return "", f.uuidRet
			}
			return f.uuid, nvml.SUCCESS
		},
		GetPciInfoFunc:                 func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{BusId: busID(f.busID)}, nvml.SUCCESS },
		GetMemoryInfoFunc:              func() (nvml.Memory, nvml.Return) { return f.memory, f.memoryRet },
		GetComputeRunningProcessesFunc: func() ([]nvml.ProcessInfo, nvml.Return) { return f.procs, f.procsRet },
	}
}

// newFakeNVML returns an opened nvmlInfo over a mocked library with the
// given devices and processes named by procs.
func newFakeNVML(t *testing.T, devices []fakeDevice, procs map[uint32]string) (*nvmlInfo, *mock.Interface) {
	t.Helper()
	lib := &mock.Interface{
		InitFunc:                       func() nvml.Return { return nvml.SUCCESS },
		ShutdownFunc:                   func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc:     func() (string, nvml.Return) { return "580.142", nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) { return 13000, nvml.SUCCESS },
		DeviceGetCountFunc:             func() (int, nvml.Return) { return len(devices), nvml.SUCCESS },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devices) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devices[i].mock(), nvml.SUCCESS
		},
	}
	n, err := open(lib, nil)
	if err != nil {
		t.Fatal(err)
	}
	n.procRoot = fakeProc(t, procs)
	return n, lib
}

func TestNVMLDriver(t *testing.T) {
	n, _ := newFakeNVML(t, nil, nil)
	got, err := n.Driver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if want := (DriverInfo{Version: "580.142", CUDADriverVersion: 13000}); got != want {
		t.Errorf("Driver() = %+v, want %+v", got, want)
	}
}

func TestNVMLDevices(t *testing.T) {
	devices := []fakeDevice{
		{
			name: "NVIDIA H100 80GB HBM3", uuid: "GPU-0", busID: "00000000:19:00.0",
			memory: nvml.Memory{Total: 80 << 30, Free: 79 << 30, Used: 1 << 30},
			procs: []nvml.ProcessInfo{
				{Pid: 4242, UsedGpuMemory: 512 << 20},
				// Exited before we read its name, and NVML could not
				// say how much memory it held.
				{Pid: 4343, UsedGpuMemory: math.MaxUint64},
			},
		},
		{
			// A device that hides memory and processes still lists.
			name: "NVIDIA GB10", uuid: "GPU-1", busID: "0000000F:01:00.0",
			memoryRet: nvml.ERROR_NOT_SUPPORTED, procsRet: nvml.ERROR_NO_PERMISSION,
		},
		{name: "NVIDIA H100 80GB HBM3", uuid: "GPU-2", busID: "00000000:3B:00.0"},
	}
	n, _ := newFakeNVML(t, devices, map[uint32]string{4242: "python3"})

	got, err := n.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{
			Index: 0, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-0", PCIBusID: "00000000:19:00.0",
			MemoryTotal: 80 << 30, MemoryUsed: 1 << 30,
			Processes: []Process{{PID: 4242, UsedMemory: 512 << 20, Name: "python3"}, {PID: 4343}},
		},
		{Index: 1, Name: "NVIDIA GB10", UUID: "GPU-1", PCIBusID: "0000000F:01:00.0"},
		// No processes is an empty list, not unknown (nil).
		{Index: 2, Name: "NVIDIA H100 80GB HBM3", UUID: "GPU-2", PCIBusID: "00000000:3B:00.0", Processes: []Process{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Devices() =\n%+v\nwant\n%+v", got, want)
	}
}

func TestNVMLDeviceError(t *testing.T) {
	devices := []fakeDevice{
		{name: "a", uuid: "GPU-0", busID: "00000000:19:00.0"},
		{name: "b", uuidRet: nvml.ERROR_GPU_IS_LOST},
	}
	n, _ := newFakeNVML(t, devices, nil)
	_, err := n.Devices(t.Context())
	if !errors.Is(err, nvml.ERROR_GPU_IS_LOST) {
		t.Fatalf("Devices() error = %v, want ERROR_GPU_IS_LOST", err)
	}
	if want := "device 1: get UUID: "; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Devices() error = %q, want prefix %q", err, want)
	}
}

func TestNVMLCanceled(t *testing.T) {
	n, lib := newFakeNVML(t, []fakeDevice{{name: "a", uuid: "GPU-0"}}, nil)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := n.Driver(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Driver() error = %v, want context.Canceled", err)
	}
	if _, err := n.Devices(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Devices() error = %v, want context.Canceled", err)
	}
	if calls := len(lib.DeviceGetCountCalls()) + len(lib.SystemGetDriverVersionCalls()); calls != 0 {
		t.Errorf("%d NVML calls with a canceled context, want 0", calls)
	}
}

func TestNVMLClose(t *testing.T) {
	n, lib := newFakeNVML(t, []fakeDevice{{name: "a", uuid: "GPU-0"}}, nil)
	if err := n.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if _, err := n.Driver(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Driver() after Close = %v, want ErrClosed", err)
	}
	if _, err := n.Devices(t.Context()); !errors.Is(err, ErrClosed) {
		t.Errorf("Devices() after Close = %v, want ErrClosed", err)
	}
	if err := n.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close() = %v, want ErrClosed", err)
	}
	if calls := len(lib.ShutdownCalls()); calls != 1 {
		t.Errorf("Shutdown called %d times, want 1", calls)
	}
	if calls := len(lib.DeviceGetCountCalls()) + len(lib.SystemGetDriverVersionCalls()); calls != 0 {
		t.Errorf("%d NVML calls after Close, want 0", calls)
	}
}

func TestNVMLShutdownError(t *testing.T) {
	n, lib := newFakeNVML(t, nil, nil)
	lib.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
	if err := n.Close(); !errors.Is(err, nvml.ERROR_UNKNOWN) {
		t.Errorf("Close() = %v, want ERROR_UNKNOWN", err)
	}
}

// TestOpen runs against the real library: on a machine without a GPU it must
// fail cleanly with ErrNoDriver (and not crash, see nvmlInfo); on one with a
// GPU it must list the devices.
func TestOpen(t *testing.T) {
	_, statErr := os.Stat("/dev/nvidiactl")
	haveGPU := statErr == nil

	info, err := Open(nil)
	if !haveGPU {
		if !errors.Is(err, ErrNoDriver) || info != nil {
			t.Fatalf("Open() without /dev/nvidiactl = %v, %v; want nil, ErrNoDriver", info, err)
		}
		t.Logf("Open() = %v", err)
		return
	}
	if err != nil {
		t.Fatalf("Open() with /dev/nvidiactl present: %v", err)
	}
	t.Cleanup(func() {
		if err := info.Close(); err != nil {
			t.Errorf("Close() = %v", err)
		}
	})

	driver, err := info.Driver(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if driver.Version == "" || driver.CUDADriverVersion < 1000 {
		t.Errorf("Driver() = %+v, want a version and a CUDA version", driver)
	}
	t.Logf("driver %s, CUDA %d", driver.Version, driver.CUDADriverVersion)

	devices, err := info.Devices(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) == 0 {
		t.Fatal("Devices() is empty with /dev/nvidiactl present")
	}
	for i, d := range devices {
		if d.Index != i || d.Name == "" || !strings.HasPrefix(d.UUID, "GPU-") || d.PCIBusID == "" {
			t.Errorf("device %d = %+v, want index, name, GPU- UUID and bus ID", i, d)
		}
		t.Logf("%+v", d)
	}
}
