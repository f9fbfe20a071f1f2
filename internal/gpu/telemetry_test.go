package gpu

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

func telemetryDevice(clock, power, temp nvml.Return) *mock.Device {
	return &mock.Device{
		GetClockInfoFunc: func(c nvml.ClockType) (uint32, nvml.Return) {
			if c != nvml.CLOCK_SM {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return 1395, clock
		},
		GetPowerUsageFunc:                   func() (uint32, nvml.Return) { return 697000, power },
		GetTemperatureFunc:                  func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 61, temp },
		GetCurrentClocksThrottleReasonsFunc: func() (uint64, nvml.Return) { return 0x4, nvml.SUCCESS },
	}
}

func TestReading(t *testing.T) {
	tests := []struct {
		name               string
		clock, power, temp nvml.Return
		want               Reading
		wantErr            string
	}{
		{name: "all", want: Reading{SMClockMHz: 1395, PowerMilliwatts: 697000, TemperatureC: 61, ThrottleReasons: 4}},
		{name: "no power in a VM", power: nvml.ERROR_NOT_SUPPORTED, want: Reading{SMClockMHz: 1395, TemperatureC: 61, ThrottleReasons: 4}},
		{name: "clock fails", clock: nvml.ERROR_GPU_IS_LOST, wantErr: "get SM clock"},
		{name: "temperature fails", temp: nvml.ERROR_UNKNOWN, wantErr: "get temperature"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dev := telemetryDevice(tt.clock, tt.power, tt.temp)
			lib := &mock.Interface{
				InitFunc:                   func() nvml.Return { return nvml.SUCCESS },
				DeviceGetHandleByIndexFunc: func(int) (nvml.Device, nvml.Return) { return dev, nvml.SUCCESS },
				ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
			}
			n, err := open(lib, nil)
			if err != nil {
				t.Fatal(err)
			}
			got, err := n.Reading(context.Background(), 0)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Reading() error %v, want one containing %q", err, tt.wantErr)
				}
			} else if err != nil || got != tt.want {
				t.Fatalf("Reading() = %+v, %v; want %+v", got, err, tt.want)
			}
			if err := n.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := n.Reading(context.Background(), 0); !errors.Is(err, ErrClosed) {
				t.Errorf("Reading after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestThrottleReasonNames(t *testing.T) {
	tests := []struct {
		mask uint64
		want []string
	}{
		{0, nil},
		{0x1, []string{"gpu-idle"}},
		{0x4 | 0x40, []string{"sw-power-cap", "hw-thermal"}},
		{1<<20 | 0x8, []string{"hw-slowdown", "bit20"}},
	}
	for _, tt := range tests {
		if got := ThrottleReasonNames(tt.mask); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ThrottleReasonNames(%#x) = %v, want %v", tt.mask, got, tt.want)
		}
	}
}

func TestMockReadings(t *testing.T) {
	m := &Mock{Readings: []Reading{{SMClockMHz: 1}, {SMClockMHz: 2}}}
	var got []uint32
	for range 3 {
		r, err := m.Reading(context.Background(), 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, r.SMClockMHz)
	}
	if !reflect.DeepEqual(got, []uint32{1, 2, 2}) {
		t.Errorf("mock readings %v, want [1 2 2]", got)
	}
}
