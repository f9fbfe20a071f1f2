package gpu

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Reading is one sample of a device's operating point.
type Reading struct {
	// SMClockMHz is the current SM clock.
	SMClockMHz uint32 `json:"sm_clock_mhz"`
	// PowerMilliwatts is the board's power draw; 0 where not reported.
	PowerMilliwatts uint32 `json:"power_mw"`
	// TemperatureC is the GPU core temperature; 0 where not reported.
	TemperatureC uint32 `json:"temperature_c"`
	// ThrottleReasons is NVML's clocks throttle (event) reason mask; see
	// ThrottleReasonNames.
	ThrottleReasons uint64 `json:"throttle_reasons"`
}

// Telemetry reads a device's current clocks, power, temperature and
// throttle reasons. Implementations serialise with Close like Info.
type Telemetry interface {
	Reading(ctx context.Context, index int) (Reading, error)
}

var _ Telemetry = (*nvmlInfo)(nil)

// Reading reads device index (NVML's enumeration order). The SM clock is
// required; power, temperature and throttle reasons are left 0 where the
// device or our privileges do not allow reading them.
func (n *nvmlInfo) Reading(ctx context.Context, index int) (Reading, error) {
	if err := n.lock(ctx); err != nil {
		return Reading{}, err
	}
	defer n.mu.Unlock()
	h, ret := n.lib.DeviceGetHandleByIndex(index)
	if ret != nvml.SUCCESS {
		return Reading{}, fmt.Errorf("device %d: get handle: %w", index, ret)
	}
	var r Reading
	if r.SMClockMHz, ret = h.GetClockInfo(nvml.CLOCK_SM); ret != nvml.SUCCESS {
		return Reading{}, fmt.Errorf("device %d: get SM clock: %w", index, ret)
	}
	if v, ret := h.GetPowerUsage(); ret == nvml.SUCCESS {
		r.PowerMilliwatts = v
	} else if !optional(ret) {
		return Reading{}, fmt.Errorf("device %d: get power: %w", index, ret)
	}
	if v, ret := h.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		r.TemperatureC = v
	} else if !optional(ret) {
		return Reading{}, fmt.Errorf("device %d: get temperature: %w", index, ret)
	}
	if v, ret := h.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		r.ThrottleReasons = v
	} else if !optional(ret) {
		return Reading{}, fmt.Errorf("device %d: get throttle reasons: %w", index, ret)
	}
	return r, nil
}

// throttleReasons names NVML's throttle reason bits (nvml.h,
// nvmlClocksEventReason*), in bit order.
var throttleReasons = []struct {
	bit  uint64
	name string
}{
	{nvml.ClocksEventReasonGpuIdle, "gpu-idle"},
	{nvml.ClocksEventReasonApplicationsClocksSetting, "app-clocks"},
	{nvml.ClocksEventReasonSwPowerCap, "sw-power-cap"},
	{nvml.ClocksThrottleReasonHwSlowdown, "hw-slowdown"},
	{nvml.ClocksEventReasonSyncBoost, "sync-boost"},
	{nvml.ClocksEventReasonSwThermalSlowdown, "sw-thermal"},
	{nvml.ClocksThrottleReasonHwThermalSlowdown, "hw-thermal"},
	{nvml.ClocksThrottleReasonHwPowerBrakeSlowdown, "hw-power-brake"},
	{nvml.ClocksEventReasonDisplayClockSetting, "display-clocks"},
}

// ThrottleReasonNames names the bits set in mask; unknown bits are named
// "bit<N>".
func ThrottleReasonNames(mask uint64) []string {
	var names []string
	for _, r := range throttleReasons {
		if mask&r.bit != 0 {
			names = append(names, r.name)
			mask &^= r.bit
		}
	}
	for mask != 0 {
		b := bits.TrailingZeros64(mask)
		names = append(names, fmt.Sprintf("bit%d", b))
		mask &^= 1 << b
	}
	return names
}
