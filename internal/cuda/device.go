package cuda

/*
#include "shim.h"
*/
import "C"

import "fmt"

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int

// Device attributes. Values from cuda.h.
const (
	AttrMaxThreadsPerBlock          DeviceAttribute = 1
	AttrWarpSize                    DeviceAttribute = 10
	AttrClockRateKHz                DeviceAttribute = 13
	AttrMultiprocessorCount         DeviceAttribute = 16
	AttrCanMapHostMemory            DeviceAttribute = 19
	AttrComputeMode                 DeviceAttribute = 20
	AttrPCIBusID                    DeviceAttribute = 33
	AttrPCIDeviceID                 DeviceAttribute = 34
	AttrMaxThreadsPerMultiprocessor DeviceAttribute = 39
	AttrUnifiedAddressing           DeviceAttribute = 41
	AttrComputeCapabilityMajor      DeviceAttribute = 75
	AttrComputeCapabilityMinor      DeviceAttribute = 76
	AttrComputePreemptionSupported  DeviceAttribute = 90
	AttrMaxBlocksPerMultiprocessor  DeviceAttribute = 106
)

// Device is a CUDA device (a CUdevice ordinal handle).
type Device struct {
	ordinal int
	h       C.CUdevice
}

// DeviceCount returns how many CUDA devices the driver sees.
func DeviceCount() (int, error) {
	if err := Init(); err != nil {
		return 0, err
	}
	var n C.int
	if err := check("cuDeviceGetCount", C.gp_device_count(&n)); err != nil {
		return 0, err
	}
	return int(n), nil
}

// GetDevice returns the device with the given ordinal. With no device at
// all, the driver fails cuInit already, so Init's error surfaces here.
func GetDevice(ordinal int) (Device, error) {
	if err := Init(); err != nil {
		return Device{}, err
	}
	var h C.CUdevice
	if err := check("cuDeviceGet", C.gp_device_get(&h, C.int(ordinal))); err != nil {
		return Device{}, fmt.Errorf("device %d: %w", ordinal, err)
	}
	return Device{ordinal: ordinal, h: h}, nil
}

// Ordinal returns the ordinal the device was opened with.
func (d Device) Ordinal() int { return d.ordinal }

// Name returns the device's marketing name, e.g. "NVIDIA H100 80GB HBM3".
func (d Device) Name() (string, error) {
	var buf [256]C.char
	if err := check("cuDeviceGetName", C.gp_device_name(&buf[0], C.int(len(buf)), d.h)); err != nil {
		return "", err
	}
	return C.GoString(&buf[0]), nil
}

// Attribute returns one device attribute.
func (d Device) Attribute(a DeviceAttribute) (int, error) {
	var v C.int
	if err := check("cuDeviceGetAttribute", C.gp_device_attribute(&v, C.int(a), d.h)); err != nil {
		return 0, fmt.Errorf("attribute %d: %w", int(a), err)
	}
	return int(v), nil
}

// MultiprocessorCount returns the number of SMs.
func (d Device) MultiprocessorCount() (int, error) {
	return d.Attribute(AttrMultiprocessorCount)
}

// ComputeCapability returns the device's compute capability, e.g. (9, 0).
func (d Device) ComputeCapability() (major, minor int, err error) {
	if major, err = d.Attribute(AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.Attribute(AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// TotalMem returns the device's memory size in bytes.
func (d Device) TotalMem() (uint64, error) {
	var n C.size_t
	if err := check("cuDeviceTotalMem_v2", C.gp_device_total_mem(&n, d.h)); err != nil {
		return 0, err
	}
	return uint64(n), nil
}

// ContextFlags are CUctx_flags: how a thread waits for the GPU in
// synchronizing calls.
type ContextFlags uint32

// Context scheduling flags. Values from cuda.h.
const (
	// SchedAuto lets the driver choose (spin when there are more cores than
	// active contexts, else yield).
	SchedAuto ContextFlags = 0
	// SchedSpin busy-waits: lowest wake-up latency, one core kept busy.
	SchedSpin ContextFlags = 1
	// SchedYield spins but yields the CPU between polls.
	SchedYield ContextFlags = 2
	// SchedBlockingSync sleeps on an interrupt: no CPU used while waiting,
	// tens of microseconds more latency.
	SchedBlockingSync ContextFlags = 4
)

// RetainPrimaryContext sets the device's primary-context flags and retains
// that context (creating it if needed). The primary context is the one the
// CUDA runtime and frameworks share, so a process holds a single context (and
// a single set of TSGs) whatever mix of libraries it uses. Since CUDA 11 the
// flags may be set while the context is active.
func (d Device) RetainPrimaryContext(flags ContextFlags) (*Context, error) {
	if err := check("cuDevicePrimaryCtxSetFlags_v2", C.gp_primary_ctx_set_flags(d.h, C.uint(flags))); err != nil {
		return nil, err
	}
	var h C.CUcontext
	if err := check("cuDevicePrimaryCtxRetain", C.gp_primary_ctx_retain(&h, d.h)); err != nil {
		return nil, err
	}
	return &Context{dev: d, h: h}, nil
}
