package bench

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/prepreempt"
)

// SchemaVersion is the version of the workers' result files; it is bumped
// whenever their meaning changes.
const SchemaVersion = 1

// ResultsSchemaVersion is results.json's version. 2 added repetitions, the
// per-scenario summaries with their confidence intervals, GPU telemetry and
// several LC workers per scenario; LoadResults still reads 1.
const ResultsSchemaVersion = 2

// LCSample is one latency-critical request.
type LCSample struct {
	// ArrivalMonoNs is when the request was due (CLOCK_MONOTONIC); its
	// preparation starts then, or as soon as the previous request is done.
	ArrivalMonoNs int64 `json:"arrival_mono_ns"`
	// PrepNs is the CPU-side preparation time before the launch.
	PrepNs int64 `json:"prep_ns"`
	// LaunchCallNs is the time spent inside the launch call itself.
	LaunchCallNs int64 `json:"launch_call_ns"`
	// FirstCallNs is when the request's first CUDA call returned, after its start
	// (lc_infer.py; 0: not stamped): a traced request starts inside that call.
	FirstCallNs int64 `json:"first_call_ns,omitempty"`
	// LatencyNs is the request's latency: from just before the launch call
	// to the return of the stream synchronization.
	LatencyNs int64 `json:"latency_ns"`
	// GPUStartNs and GPUEndNs are lc_work's %globaltimer stamps (0 for
	// workers without them).
	GPUStartNs uint64 `json:"gpu_start_ns,omitempty"`
	GPUEndNs   uint64 `json:"gpu_end_ns,omitempty"`
	// GPUNs is the GPU-side duration of the request's work: GPUEndNs -
	// GPUStartNs for lc_work, the CUDA-event span for the PyTorch worker.
	GPUNs int64 `json:"gpu_ns"`
	// CPUNs is the LC's thread's CPU time during the request (Python
	// workers; 0 where not measured).
	CPUNs int64 `json:"cpu_ns,omitempty"`
	// CPUMeterNs is a fixed loop's time on the LC's thread around the
	// request (lc_decode.py): its CPU's own speed then (0: not measured).
	CPUMeterNs int64 `json:"cpu_meter_ns,omitempty"`
	// TTFTNs and TPOTNs, for the LLM decode worker: time to the first
	// token on the host, and the mean time per output token after it.
	TTFTNs int64 `json:"ttft_ns,omitempty"`
	TPOTNs int64 `json:"tpot_ns,omitempty"`
}

// offCPUMs is s's time off its thread's CPU in ms: its latency less its CPU time (blocked or
// preempted, not the app's own work); false where the worker timed no CPU.
func (s LCSample) offCPUMs() (float64, bool) {
	return float64(max(0, s.LatencyNs-s.CPUNs)) / 1e6, s.CPUNs > 0
}

// LCResult is what an LC worker writes.
type LCResult struct {
	Schema int    `json:"schema"`
	Worker string `json:"worker"`
	PID    int    `json:"pid"`
	Device string `json:"device,omitempty"`
	// GPUStamps says GPUStartNs/GPUEndNs are %globaltimer stamps, which
	// allows the stricter plausibility checks.
	GPUStamps bool `json:"gpu_stamps"`
	// Config echoes the worker's parameters (worker-specific keys).
	Config map[string]any `json:"config"`
	// Requested and Warmup are the measured and discarded request counts.
	Requested int `json:"requested"`
	Warmup    int `json:"warmup"`
	// MeasureStartMonoNs and MeasureEndMonoNs bound the measured requests
	// (CLOCK_MONOTONIC): the window over which BE throughput is compared.
	MeasureStartMonoNs int64 `json:"measure_start_mono_ns"`
	MeasureEndMonoNs   int64 `json:"measure_end_mono_ns"`
	// Late counts requests whose preparation started more than a period
	// after their arrival because the previous request was still running.
	Late    int        `json:"late"`
	Samples []LCSample `json:"samples"`
	// Prepreempt is the engine's statistics when the worker ran with
	// --hints.
	Prepreempt *prepreempt.Stats `json:"prepreempt,omitempty"`
}

// BEResult is what a BE worker writes.
type BEResult struct {
	Schema int    `json:"schema"`
	Worker string `json:"worker"`
	PID    int    `json:"pid"`
	Device string `json:"device,omitempty"`
	// Unit is what Kernels counts: "kernels" (be_fma launches) or
	// "iterations" (PyTorch training steps).
	Unit   string         `json:"unit"`
	Config map[string]any `json:"config"`
	// KernelIters is be_fma's iteration count (0 for PyTorch).
	KernelIters uint64 `json:"kernel_iters"`
	// FirstKernelMs is the GPU time of the first kernel (or step), run
	// before READY, typically alone on the GPU.
	FirstKernelMs float64 `json:"first_kernel_ms"`
	// Kernels is how many kernels (or steps) completed after READY.
	Kernels       int64   `json:"kernels"`
	KernelsPerSec float64 `json:"kernels_per_sec"`
	DurationS     float64 `json:"duration_s"`
	StartMonoNs   int64   `json:"start_mono_ns"`
	EndMonoNs     int64   `json:"end_mono_ns"`
	// CompletionsMonoNs holds when each kernel was seen complete
	// (CLOCK_MONOTONIC), so that throughput can be counted over another
	// process's measurement window.
	CompletionsMonoNs []int64 `json:"completions_mono_ns,omitempty"`
}

// CountIn returns how many completions fall in (start, end].
func (r *BEResult) CountIn(start, end int64) int64 {
	var n int64
	for _, t := range r.CompletionsMonoNs {
		if t > start && t <= end {
			n++
		}
	}
	return n
}

// CtlCall records one gpreemptctl invocation.
type CtlCall struct {
	Argv       []string `json:"argv"`
	Output     string   `json:"output"`
	ExitCode   int      `json:"exit_code"`
	DurationMs float64  `json:"duration_ms"`
}

// BEShare is one BE process's part in a scenario.
type BEShare struct {
	Label string `json:"label"`
	// Timeslice is what gpreemptctl set for it ("" = driver defaults).
	Timeslice string `json:"timeslice,omitempty"`
	// Class is the class and weight it was given ("be:3"), when the
	// scenario gave one.
	Class string `json:"class,omitempty"`
	// WindowKernels and WindowPerSec count its completions in the
	// scenario's measurement window.
	WindowKernels int64     `json:"window_kernels"`
	WindowPerSec  float64   `json:"window_per_sec"`
	Result        *BEResult `json:"result"`
}

// LCTenant is one of several LC workers of a scenario.
type LCTenant struct {
	Label     string         `json:"label"`
	LC        *LCResult      `json:"lc"`
	LatencyUs *stats.Summary `json:"latency_us,omitempty"`
	// Ratios to the standalone scenario of the same repetition.
	P50VsStandalone float64 `json:"p50_vs_standalone,omitempty"`
	P99VsStandalone float64 `json:"p99_vs_standalone,omitempty"`
}

// ScenarioResult is one run of one scenario.
type ScenarioResult struct {
	Name    string  `json:"name"`
	Kind    Kind    `json:"kind"`
	Runtime Runtime `json:"runtime"`
	// Rep is the repetition (1-based; 0 in runs without --repeat and in
	// files written before repetitions existed: read it as 1).
	Rep int `json:"rep,omitempty"`
	// BETimeslice is the BE class timeslice applied ("" = none).
	BETimeslice string    `json:"be_timeslice,omitempty"`
	StartedAt   time.Time `json:"started_at"`
	WallS       float64   `json:"wall_s"`
	// The measurement window (CLOCK_MONOTONIC): the LC worker's, or a
	// timed window for BE-only scenarios.
	WindowStartMonoNs int64 `json:"window_start_mono_ns"`
	WindowEndMonoNs   int64 `json:"window_end_mono_ns"`

	LC             *LCResult      `json:"lc,omitempty"`
	LCLatencyUs    *stats.Summary `json:"lc_latency_us,omitempty"`
	LCGPUUs        *stats.Summary `json:"lc_gpu_us,omitempty"`
	LCHistogramUs  []stats.Bucket `json:"lc_latency_histogram_us,omitempty"`
	LCGPUHeldShare float64        `json:"lc_gpu_held"`
	// LCBusy is the share of the window the LC had a request in flight.
	LCBusy float64 `json:"lc_busy,omitempty"`
	// BEDuty is --be-duty: BE worked the first half of every such period
	// and idled the second; LCDuty compares the LC's requests of the two
	// halves.
	BEDuty time.Duration `json:"be_duty,omitempty"`
	LCDuty *DutySplit    `json:"lc_duty,omitempty"`
	// LCDutyByArm splits LCDuty of an slo: run by the arm SLO mode held.
	LCDutyByArm []ArmDuty `json:"lc_duty_by_arm,omitempty"`
	// Host is what the host's CPUs gave while the LC ran; LCOnCPU is the
	// share of its requests' time the LC's thread spent on a CPU (workers
	// that report it).
	Host    *HostCPU `json:"host_cpu,omitempty"`
	LCOnCPU float64  `json:"lc_on_cpu,omitempty"`
	// LCTTFTUs and LCTPOTUs summarise an LLM LC's time to first token and
	// time per output token.
	LCTTFTUs *stats.Summary `json:"lc_ttft_us,omitempty"`
	LCTPOTUs *stats.Summary `json:"lc_tpot_us,omitempty"`
	// Tenants holds every LC worker's result when there are several (LC
	// is then the first's).
	Tenants []LCTenant `json:"lc_tenants,omitempty"`

	BE []BEShare `json:"be,omitempty"`
	// BEPerSec is the BE processes' total rate in the window.
	BEPerSec float64 `json:"be_per_sec,omitempty"`

	Ctl []CtlCall `json:"gpreemptctl,omitempty"`
	// DaemonClassed, in daemon: scenarios, is each worker's wait for
	// gpreemptd's class to read back.
	DaemonClassed []DaemonClassed `json:"daemon_classed,omitempty"`
	// SLO, in slo: scenarios, is gpreemptd's SLO status over the LC's
	// lead-in and measurement (every --slo-poll): the BE timeslice it
	// chose.
	SLO []SLOSample `json:"slo,omitempty"`
	// BETimeline, in slo: scenarios, is the BE processes' completions per
	// second in one-second bins from BETimelineStartMonoNs (the first SLO
	// status read, when the LC's lead-in starts) to the measurement's end:
	// BE share over time, against the be-only run's rate.
	BETimeline            []float64 `json:"be_timeline,omitempty"`
	BETimelineStartMonoNs int64     `json:"be_timeline_start_mono_ns,omitempty"`
	// SLOWindow, in slo: scenarios, is the daemon's window when the run
	// started; Daemon each LC as the daemon saw it beside the app's own
	// p50 of the same windows, and BEStoppedMost the largest share of a
	// minute the status showed BE stopped by calibration (derived from SLO
	// and the samples when the results are finalized).
	SLOWindow     time.Duration `json:"slo_window,omitempty"`
	Daemon        []DaemonView  `json:"daemon_view,omitempty"`
	BEStoppedMost float64       `json:"be_stopped_most_of_a_minute,omitempty"`
	// DaemonPolicy is the policy file gpreemptd ran under (--daemon-policy); while an @OWN_P50@
	// scenario's LC ran alone, under config.own_alone_policy where given (the text in force each
	// time: policy-alone.yaml and policy.yaml in the run's folder).
	DaemonPolicy string `json:"daemon_policy,omitempty"`
	// OwnAloneUs are the LC's requests in BE's idle halves before its lead-in (--own-alone), whose
	// p50 filled its policy's @OWN_P50@.
	OwnAloneUs *stats.Summary `json:"own_alone_us,omitempty"`
	// OwnAloneCPUMeterUs is the LC's CPU loop timed around each of them (its CPU's speed then), as
	// LCSample.CPUMeterNs is.
	OwnAloneCPUMeterUs *stats.Summary `json:"own_alone_cpu_meter_us,omitempty"`

	// GPU is what NVML read during the measurement window.
	GPU *TelemetrySummary `json:"gpu,omitempty"`

	// Ratios to the same runtime's baselines (0: no baseline in this run).
	LCP50VsStandalone float64 `json:"lc_p50_vs_standalone,omitempty"`
	LCP99VsStandalone float64 `json:"lc_p99_vs_standalone,omitempty"`
	BEVsBEOnly        float64 `json:"be_vs_be_only,omitempty"`
	// TTFTP50VsStandalone and TPOTP50VsStandalone: the LLM LC's medians.
	TTFTP50VsStandalone float64 `json:"ttft_p50_vs_standalone,omitempty"`
	TPOTP50VsStandalone float64 `json:"tpot_p50_vs_standalone,omitempty"`
	// LCP50VsStandaloneClock and LCP99VsStandaloneClock are the ratios
	// with the LC latency scaled by this scenario's SM clock over the
	// standalone one's: what the ratio would be at the standalone clock if
	// the LC's time were all clock-bound.
	LCP50VsStandaloneClock float64 `json:"lc_p50_vs_standalone_clock,omitempty"`
	LCP99VsStandaloneClock float64 `json:"lc_p99_vs_standalone_clock,omitempty"`

	Warnings []string `json:"warnings,omitempty"`
	Error    string   `json:"error,omitempty"`
}

// Results is results.json.
type Results struct {
	Schema     int               `json:"schema"`
	Tool       string            `json:"tool"`
	StartedAt  time.Time         `json:"started_at"`
	Host       string            `json:"host"`
	Device     DeviceInfo        `json:"device"`
	Config     runOptions        `json:"config"`
	Calibrated map[string]uint64 `json:"calibrated,omitempty"`
	// Scenarios holds every scenario run, in the order they ran.
	Scenarios []*ScenarioResult `json:"scenarios"`
	// Summaries holds one entry per scenario, over its repetitions.
	Summaries []*ScenarioSummary `json:"summaries,omitempty"`
	Error     string             `json:"error,omitempty"`
}

// writeJSON writes v, indented, to path ("-": w) atomically: a reader never
// sees a half-written file, which matters because the orchestrator reads
// worker files as soon as the worker exits.
func writeJSON(path string, w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	if path == "-" || path == "" {
		_, err := w.Write(b)
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		return errors.Join(err, tmp.Close(), os.Remove(tmp.Name()))
	}
	if err := tmp.Close(); err != nil {
		return errors.Join(err, os.Remove(tmp.Name()))
	}
	return os.Rename(tmp.Name(), path)
}

// readJSON decodes path into v, refusing unknown schema versions.
func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var head struct {
		Schema int `json:"schema"`
	}
	if err := json.Unmarshal(b, &head); err == nil && head.Schema != SchemaVersion {
		return fmt.Errorf("%s: schema %d, want %d", path, head.Schema, SchemaVersion)
	}
	return nil
}
