package daemon

import (
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
	if gs := pi.gpus(pid); len(gs) != 0 {
		t.Fatalf("before the process is listed: %v", gs)
	}
	// The context appears on GPU 1 just after that reading.
	m.DeviceList[1].Processes = []gpu.Process{{PID: pid}}
	pi.mu.Lock()
	pi.nvmlAt = time.Now().Add(-nvmlMissAge - time.Millisecond)
	pi.mu.Unlock()
	gs := pi.gpus(pid)
	if len(gs) != 1 || gs[0] != (policy.GPU{Index: 1, UUID: "GPU-b"}) {
		t.Fatalf("gpus = %v, want GPU 1 from NVML", gs)
	}
}
