// Package gpu reports what the NVIDIA driver says about the GPUs on this
// machine: driver version, devices, their memory and the compute processes
// on them. It reads NVML through go-nvml, which dlopens libnvidia-ml.so.1 at
// run time, so binaries importing this package start on machines without a
// GPU and learn that from ErrNoDriver.
//
// Consumers depend on the Info interface, not on NVML: Open returns the real
// implementation, Null stands in where there is no driver, and Mock serves
// other packages' tests.
package gpu

import (
	"context"
	"errors"
)

var (
	// ErrNoDriver means there is no usable NVIDIA driver: libnvidia-ml.so.1
	// could not be loaded, or it loaded but the kernel module is absent.
	// Callers that can work without a GPU check for it with errors.Is and
	// fall back to Null.
	ErrNoDriver = errors.New("NVIDIA driver not found")
	// ErrClosed is returned by calls on an Info after its Close. NVML has
	// been shut down (and its library possibly unloaded) by then, so the
	// call must not reach it.
	ErrClosed = errors.New("gpu info closed")
)

// Info is what gpreempt needs to know about the GPUs. NVML calls cannot be
// interrupted, so ctx is checked between them rather than during one.
type Info interface {
	Driver(ctx context.Context) (DriverInfo, error)
	Devices(ctx context.Context) ([]Device, error)
	Close() error
}

// DriverInfo identifies the installed driver.
type DriverInfo struct {
	// Version is the kernel driver's version, such as "580.142".
	Version string `json:"version"`
	// CUDADriverVersion is the newest CUDA the driver supports, encoded as
	// 1000*major + 10*minor (13000 for CUDA 13.0), as cudaDriverGetVersion
	// reports it.
	CUDADriverVersion int `json:"cuda_driver_version"`
}

// Device is one GPU as NVML enumerates it.
type Device struct {
	// Index is NVML's enumeration index, which follows PCI bus order and may
	// differ from CUDA's default (fastest-first) order.
	Index int    `json:"index"`
	Name  string `json:"name"`
	// UUID ("GPU-...") is the stable identity; prefer it to Index.
	UUID     string `json:"uuid"`
	PCIBusID string `json:"pci_bus_id"`
	// MemoryTotal and MemoryUsed are in bytes; both are 0 where the device
	// does not report framebuffer memory.
	MemoryTotal uint64    `json:"memory_total"`
	MemoryUsed  uint64    `json:"memory_used"`
	Processes   []Process `json:"processes"`
}

// Process is a compute (CUDA) context on a device.
type Process struct {
	// PID is in the host's PID namespace, as the driver sees it.
	PID int `json:"pid"`
	// UsedMemory is in bytes, 0 where NVML cannot say (it reports
	// "not available" without the right privileges, for example).
	UsedMemory uint64 `json:"used_memory"`
	// Name is /proc/<pid>/comm, empty when that cannot be read: the process
	// has exited, or this process runs in another PID namespace.
	Name string `json:"name"`
}

// Null is the Info of a machine without a driver: Driver and Devices always
// fail with ErrNoDriver, so code written against Info needs no nil checks.
type Null struct{}

var _ Info = Null{}

func (Null) Driver(context.Context) (DriverInfo, error) { return DriverInfo{}, ErrNoDriver }

func (Null) Devices(context.Context) ([]Device, error) { return nil, ErrNoDriver }

// Close returns nil: there is nothing to release, and a deferred Close
// should not report the missing driver a second time.
func (Null) Close() error { return nil }
