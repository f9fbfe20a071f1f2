package ctl

import (
	"bytes"
	_ "embed"
	"fmt"
	"io"
	"log/slog"

	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/rmfake"
)

// demoTrace is every RM allocation libcuda (CUDA 13.0) made creating one
// context on an H100 with the 580.159.04 open driver: the recording in the
// repository's testdata/, embedded so that --demo works from anywhere.
//
//go:embed demodata/h100-580.159.04-alloc-sequence.txt
var demoTrace []byte

// demoProcesses are the CUDA processes of the demo: each replays the trace,
// so each has the compute group libcuda set to 2048 us and three copy
// groups at the driver's 1024 us.
var demoProcesses = []struct {
	pid  int
	comm string
}{
	{4242, "python3"},
	{4343, "lc-server"},
}

// demoBanner says, on stderr, that nothing real is shown.
const demoBanner = "gpreemptctl: demo: no GPU is used; pids 4242 (python3) and 4343 (lc-server) are CUDA processes\n" +
	"gpreemptctl: demo: replayed from a libcuda trace recorded on an H100 (driver 580.159.04); changes last one command\n"

// demoEnv is a machine made of the recorded trace: an RM fake holding
// two CUDA processes and one nvidia-smi-like process without a context,
// and an H100 in NVML. Output still goes to env's writers.
func demoEnv(env Env) (Env, error) {
	trace, err := rmfake.ParseTrace(bytes.NewReader(demoTrace))
	if err != nil {
		return env, fmt.Errorf("demo trace: %w", err)
	}
	d := rmfake.New()
	comm := map[int]string{}
	var nvml []gpu.Process
	for _, p := range demoProcesses {
		if _, err := d.Replay(d.NewProc(p.pid), trace); err != nil {
			return env, fmt.Errorf("demo trace: %w", err)
		}
		comm[p.pid] = p.comm
		nvml = append(nvml, gpu.Process{PID: p.pid, Name: p.comm, UsedMemory: 512 << 20})
	}
	// A monitoring tool: the control file open, no context.
	d.OpenControlAt(d.NewProc(5000), 3)
	comm[5000] = "nvidia-smi"
	env.Host = d.Host()
	env.Comm = func(pid int) string { return comm[pid] }
	env.GPU = func(*slog.Logger) (gpu.Info, error) {
		return &gpu.Mock{
			DriverInfo: gpu.DriverInfo{Version: "580.159.04", CUDADriverVersion: 13000},
			DeviceList: []gpu.Device{{
				Index: 0, Name: "NVIDIA H100 80GB HBM3 (demo)", UUID: "GPU-00000000-0000-0000-0000-000000000000",
				PCIBusID: "00000000:00:00.0", MemoryTotal: 81559 << 20, MemoryUsed: 1024 << 20,
				Processes: nvml,
			}},
		}, nil
	}
	return env, nil
}

// headedWriter writes header before the first bytes written through it,
// and nothing if nothing is.
type headedWriter struct {
	w      io.Writer
	header string
	done   bool
}

func (h *headedWriter) Write(p []byte) (int, error) {
	if !h.done && len(p) > 0 {
		h.done = true
		if _, err := io.WriteString(h.w, h.header); err != nil {
			return 0, err
		}
	}
	return h.w.Write(p)
}
