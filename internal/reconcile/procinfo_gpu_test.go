package reconcile

import (
	"errors"
	"os"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/policy"
)

// A process newer than NVML's last reading is looked up again rather than
// placed by the device files it holds (which name GPUs it does not use).
func TestGPUsRereadNVMLForANewProcess(t *testing.T) {
	pid := os.Getpid()
	m := &gpu.Mock{DeviceList: []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}}
	pi := &ProcInspector{GPU: m}
	if gs := pi.GPUs(pid); len(gs) != 0 {
		t.Fatalf("before the process is listed: %v", gs)
	}
	// The context appears on GPU 1 just after that reading.
	m.DeviceList[1].Processes = []gpu.Process{{PID: pid}}
	pi.mu.Lock()
	pi.nvmlAt = time.Now().Add(-nvmlMissAge - time.Millisecond)
	pi.mu.Unlock()
	gs := pi.GPUs(pid)
	if len(gs) != 1 || gs[0] != (policy.GPU{Index: 1, UUID: "GPU-b"}) {
		t.Fatalf("gpus = %v, want GPU 1 from NVML", gs)
	}
}

// TestListedFromNVML: Listed is NVML's compute process lists, over every
// GPU; unknown without NVML or when NVML fails.
func TestListedFromNVML(t *testing.T) {
	listedOn := func(pids ...int) *gpu.Mock {
		m := &gpu.Mock{DeviceList: []gpu.Device{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}}}
		for _, pid := range pids {
			m.DeviceList[1].Processes = append(m.DeviceList[1].Processes, gpu.Process{PID: pid})
		}
		return m
	}
	tests := []struct {
		name              string
		gpu               gpu.Info
		pid               int
		listed, wantKnown bool
	}{
		{"listed", listedOn(100, 200), 200, true, true},
		{"not listed", listedOn(100), 50, false, true},
		{"no process on any GPU", listedOn(), 50, false, true},
		{"NVML fails", &gpu.Mock{DevicesErr: errors.New("gpu is lost")}, 100, false, false},
		{"no NVML", nil, 100, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pi := &ProcInspector{GPU: tt.gpu}
			listed, known := pi.Listed(tt.pid)
			if listed != tt.listed || known != tt.wantKnown {
				t.Errorf("Listed(%d) = %v, %v; want %v, %v", tt.pid, listed, known, tt.listed, tt.wantKnown)
			}
		})
	}
}
