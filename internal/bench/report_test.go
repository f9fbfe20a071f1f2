package bench

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/golden"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// fixtureResults is a complete, fixed run: every kind of row the report
// renders.
func fixtureResults() *Results {
	lat := func(p50, p99, max float64) *stats.Summary {
		return &stats.Summary{N: 5714, Mean: p50 * 1.1, Min: p50 * 0.8, P50: p50, P90: p99 * 0.9, P99: p99, P999: max * 0.95, Max: max}
	}
	lc := &LCResult{Schema: SchemaVersion, Worker: "gpreempt-bench lc", PID: 4243, GPUStamps: true, Requested: 2,
		MeasureStartMonoNs: 1_000_000, MeasureEndMonoNs: 8_000_000,
		Samples: []LCSample{
			{ArrivalMonoNs: 1_000_000, LaunchCallNs: 3_000, LatencyNs: 36_000, GPUStartNs: 5_000_000, GPUEndNs: 5_020_000, GPUNs: 20_000},
			{ArrivalMonoNs: 4_500_000, LaunchCallNs: 3_100, LatencyNs: 52_000, GPUStartNs: 8_500_000, GPUEndNs: 8_520_500, GPUNs: 20_500},
		},
		Config: map[string]any{"blocks": float64(132)},
	}
	be := func(pid int, perSec float64) *BEResult {
		return &BEResult{Schema: SchemaVersion, Worker: "gpreempt-bench be", PID: pid, Unit: "kernels", KernelIters: 183600,
			FirstKernelMs: 2.35, Kernels: int64(perSec * 21), KernelsPerSec: perSec, DurationS: 21,
			Config: map[string]any{"blocks": float64(264)}}
	}
	ctl := func(args ...string) CtlCall {
		return CtlCall{Argv: append([]string{"/opt/gpreempt/bin/gpreemptctl"}, args...), Output: "ok\n", ExitCode: 0, DurationMs: 12.5}
	}
	start := time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	return &Results{
		Schema: SchemaVersion, Tool: "gpreempt-bench", StartedAt: start, Host: "gpu-host",
		Device:     DeviceInfo{Name: "NVIDIA H100 80GB HBM3", SMs: 132, CC: "9.0", Driver: 13000},
		Calibrated: map[string]uint64{"be_kernel_iters": 183600, "lc_kernel_iters": 2000},
		Config: runOptions{Scenarios: mustScenarios("standalone,defaults,be-200us,be-only,be-ratio:3000us:1000us,pytorch"), Repeat: 1, Seed: 1, LCCPUs: "2-3", BECPUs: "4-5",
			Out: "/tmp/out", Duration: 20 * time.Second, Settle: time.Second, ReadyTimeout: 2 * time.Minute, NVMLInterval: 50 * time.Millisecond,
			Period: 3500 * time.Microsecond, Requests: 5714, Warmup: 50,
			LCIters: 2000, LCThreads: 256, BEIters: 183600, BEThreads: 256, BEQueue: 3, BECalibrateMs: 2.35, LCCalibrateUs: 20,
			PyPeriod: 20 * time.Millisecond, PyRequests: 1000, PyLCModel: "resnet50", PyLCBatch: 1, PyGraph: true, PyBEModel: "resnet50", PyBEBatch: 64,
			HintLauncher: "goroutine"},
		Scenarios: []*ScenarioResult{
			{Name: "standalone", Kind: KindStandalone, Runtime: RuntimeKernels, StartedAt: start, LC: lc, LCLatencyUs: lat(36.1, 52.4, 88.0), LCGPUHeldShare: 0.0058, LCP50VsStandalone: 1, LCP99VsStandalone: 1},
			{Name: "defaults", Kind: KindShared, Runtime: RuntimeKernels, StartedAt: start, LC: lc, LCLatencyUs: lat(938, 976, 1210.5), LCGPUHeldShare: 0.0061,
				BE: []BEShare{{Label: "be", WindowKernels: 7800, WindowPerSec: 390.2, Result: be(4242, 390.2)}}, BEPerSec: 390.2,
				LCP50VsStandalone: 25.98, LCP99VsStandalone: 18.63, BEVsBEOnly: 0.92},
			{Name: "be-200us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: "200us", StartedAt: start, LC: lc, LCLatencyUs: lat(250, 450, 610), LCGPUHeldShare: 0.006,
				BE: []BEShare{{Label: "be", Timeslice: "200us", WindowKernels: 7700, WindowPerSec: 384.4, Result: be(4244, 384.4)}}, BEPerSec: 384.4,
				Ctl:               []CtlCall{ctl("class", "--pid", "4244", "--be-timeslice", "200us", "be"), ctl("class", "--pid", "4245", "lc")},
				LCP50VsStandalone: 6.93, LCP99VsStandalone: 8.59, BEVsBEOnly: 0.906},
			{Name: "be-only", Kind: KindBEOnly, Runtime: RuntimeKernels, StartedAt: start,
				BE: []BEShare{{Label: "be", WindowKernels: 8490, WindowPerSec: 424.3, Result: be(4246, 424.3)}}, BEPerSec: 424.3, BEVsBEOnly: 1},
			{Name: "be-ratio:3000us:1000us", Kind: KindBERatio, Runtime: RuntimeKernels, StartedAt: start,
				BE: []BEShare{
					{Label: "be1", Timeslice: "3000us", WindowKernels: 5800, WindowPerSec: 290.1, Result: be(4247, 290.1)},
					{Label: "be2", Timeslice: "1000us", WindowKernels: 1900, WindowPerSec: 95.4, Result: be(4248, 95.4)},
				}, BEPerSec: 385.5, BEVsBEOnly: 0.9086,
				Ctl: []CtlCall{ctl("set-timeslice", "--pid", "4247", "3000us"), ctl("set-timeslice", "--pid", "4248", "1000us")}},
			{Name: "pytorch", Kind: KindShared, Runtime: RuntimePyTorch, StartedAt: start,
				Warnings: []string{"12 of 1000 LC requests started more than a period late"},
				Error:    "implausible result: LC: 990 samples, 1000 requested\nsecond line",
			},
		},
		Error: "scenario pytorch: implausible result",
	}
}

func mustScenarios(list string) []Scenario {
	scs, err := ParseScenarios(list)
	if err != nil {
		panic(err)
	}
	return scs
}

func TestWriteMarkdownGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteMarkdown(&b, fixtureResults()); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "results.md", b.Bytes())
}

func TestResultsJSONRoundTrip(t *testing.T) {
	in := fixtureResults()
	path := filepath.Join(t.TempDir(), "results.json")
	if err := writeJSON(path, nil, in); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out Results
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, &out) {
		a, _ := json.Marshal(in)
		b, _ := json.Marshal(&out)
		t.Fatalf("round trip changed the results:\n in: %s\nout: %s", a, b)
	}
	// No temporary file is left beside the result.
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only results.json", len(entries))
	}
}

func TestReadJSONRefusesOtherSchemas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lc.json")
	if err := os.WriteFile(path, []byte(`{"schema": 99, "worker": "future"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var r LCResult
	if err := readJSON(path, &r); err == nil {
		t.Fatal("schema 99 accepted")
	}
}

// TestPythonWorkerSchema decodes the JSON shapes the Python workers write
// (kept in testdata, in step with bench/pytorch) into the Go types with
// unknown fields refused, so that a renamed field on either side fails here
// rather than on the GPU machine.
func TestPythonWorkerSchema(t *testing.T) {
	for _, tt := range []struct {
		file string
		into any
	}{
		{"lc_infer.json", &LCResult{}},
		{"be_train.json", &BEResult{}},
	} {
		t.Run(tt.file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", tt.file))
			if err != nil {
				t.Fatal(err)
			}
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(tt.into); err != nil {
				t.Fatal(err)
			}
		})
	}
	var lc LCResult
	if err := readJSON(filepath.Join("testdata", "lc_infer.json"), &lc); err != nil {
		t.Fatal(err)
	}
	if err := checkLC(&lc, lc.Requested); err != nil {
		t.Errorf("the sample lc_infer.py output fails the checks: %v", err)
	}
	var be BEResult
	if err := readJSON(filepath.Join("testdata", "be_train.json"), &be); err != nil {
		t.Fatal(err)
	}
	if err := checkBE("be", &be); err != nil {
		t.Errorf("the sample be_train.py output fails the checks: %v", err)
	}
}

func TestLogTicks(t *testing.T) {
	labels := func(lo, hi float64) []string {
		var out []string
		for _, tk := range (logTicks{}).Ticks(lo, hi) {
			if tk.Label != "" {
				out = append(out, tk.Label)
			}
		}
		return out
	}
	tests := []struct {
		lo, hi float64
		want   []string
	}{
		{22, 4956, []string{"50", "100", "200", "500", "1000", "2000"}},
		{1040, 6138, []string{"2000", "3000", "4000", "5000", "6000"}},
		{30, 40, []string{"30", "40"}},
		{0, 10, nil},
	}
	for _, tt := range tests {
		if got := labels(tt.lo, tt.hi); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("ticks(%v, %v) labels %v, want %v", tt.lo, tt.hi, got, tt.want)
		}
	}
}

// TestPlotCDF draws the fixture; the PNG's content is checked by eye, its
// existence and format here.
func TestPlotCDF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cdf.png")
	if err := PlotCDF(path, fixtureResults()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("cdf.png: %v, %d bytes", err, len(b))
	}
	empty := filepath.Join(t.TempDir(), "none.png")
	if err := PlotCDF(empty, &Results{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a plot without LC samples was written: %v", err)
	}
}

func TestTimeline(t *testing.T) {
	var samples []LCSample
	for i := range 10 {
		samples = append(samples, LCSample{ArrivalMonoNs: 5e9 + int64(i)*1e9, LatencyNs: int64(i+1) * 1000})
	}
	tests := []struct {
		buckets        int
		wantX, wantP50 []float64
	}{
		{buckets: 10, wantX: []float64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, wantP50: []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}},
		{buckets: 2, wantX: []float64{0, 5}, wantP50: []float64{3, 8}},
		{buckets: 3, wantX: []float64{0, 4, 8}, wantP50: []float64{2, 6, 9}},
	}
	for _, tt := range tests {
		p50, p99 := timeline(samples, tt.buckets)
		var xs, ys []float64
		for _, pt := range p50 {
			xs, ys = append(xs, pt.X), append(ys, pt.Y)
		}
		if !reflect.DeepEqual(xs, tt.wantX) || !reflect.DeepEqual(ys, tt.wantP50) || len(p99) != len(p50) {
			t.Errorf("%d buckets: x %v p50 %v (%d p99 points), want x %v p50 %v", tt.buckets, xs, ys, len(p99), tt.wantX, tt.wantP50)
		}
	}
}

func TestPlotTimeline(t *testing.T) {
	path := filepath.Join(t.TempDir(), "timeline.png")
	if err := PlotTimeline(path, fixtureResults()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("timeline.png: %v, %d bytes", err, len(b))
	}
}

func TestPlotFrontier(t *testing.T) {
	res := &Results{Summaries: []*ScenarioSummary{
		{Name: "llm-standalone", P50: newRatioStats([]float64{1, 1})},
		{Name: "llm-defaults", P50: newRatioStats([]float64{1.2, 1.6}), BE: newRatioStats([]float64{0.91, 0.92}), BEBound: 0.64},
		{Name: "llm-gate-defaults", P50: newRatioStats([]float64{0.9, 1.1}), BE: newRatioStats([]float64{0.66, 0.74}), BEBound: 0.64},
	}}
	path := filepath.Join(t.TempDir(), "frontier.png")
	if err := PlotFrontier(path, res); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("frontier.png: %v, %d bytes", err, len(b))
	}
	none := filepath.Join(t.TempDir(), "none.png")
	if err := PlotFrontier(none, &Results{Summaries: res.Summaries[:1]}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(none); !os.IsNotExist(err) {
		t.Errorf("a frontier without a shared scenario was written: %v", err)
	}
}
