package bench

import (
	"bytes"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/golden"
	gpuinfo "github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/stats"
)

func TestSchedule(t *testing.T) {
	scs := mustScenarios("standalone,be-1us,prepreempt-be-1us,be-only")
	tests := []struct {
		repeat int
		want   string
	}{
		{1, "1:standalone 1:be-1us 1:prepreempt-be-1us 1:be-only"},
		{3, "1:standalone 1:be-1us 1:prepreempt-be-1us 1:be-only " +
			"2:standalone 2:be-1us 2:prepreempt-be-1us 2:be-only " +
			"3:standalone 3:be-1us 3:prepreempt-be-1us 3:be-only"},
	}
	for _, tt := range tests {
		var got []string
		for _, s := range schedule(scs, tt.repeat) {
			got = append(got, strings.Join([]string{string(rune('0' + s.Rep)), s.Scenario.Name}, ":"))
		}
		if strings.Join(got, " ") != tt.want {
			t.Errorf("repeat %d: %s\nwant %s", tt.repeat, strings.Join(got, " "), tt.want)
		}
	}
}

func TestCITooWide(t *testing.T) {
	tests := []struct {
		claim  float64
		lo, hi float64
		want   bool
	}{
		{1.0, 0.8, 1.6, true},     // "as fast as alone", but it could be 1.6x
		{1.02, 0.98, 1.10, false}, // narrower than the floor
		{6.5, 6.3, 6.7, false},    // a large effect, a tight interval
		{1.3, 0.9, 1.9, true},     // the interval cannot tell 1.3x from 1x
		{3, 2.0, 3.9, false},      // wide, but the effect is wider
	}
	for _, tt := range tests {
		if got := ciTooWide(tt.claim, stats.Interval{Lo: tt.lo, Hi: tt.hi}); got != tt.want {
			t.Errorf("ciTooWide(%v, [%v, %v]) = %v, want %v", tt.claim, tt.lo, tt.hi, got, tt.want)
		}
	}
}

// synthLC is an LC result of n requests whose latency (us) is base plus an
// exponential tail of the given scale, times factor.
func synthLC(rng *rand.Rand, n int, base, tail, factor float64) *LCResult {
	lc := &LCResult{Schema: SchemaVersion, Worker: "synthetic", GPUStamps: true, Requested: n,
		MeasureStartMonoNs: 1e9, MeasureEndMonoNs: 1e9 + int64(n)*3_500_000}
	for i := range n {
		us := (base + tail*rng.ExpFloat64()) * factor
		lc.Samples = append(lc.Samples, LCSample{ArrivalMonoNs: 1e9 + int64(i)*3_500_000, LatencyNs: int64(us * 1e3), GPUNs: 14_000})
	}
	return lc
}

// repeatFixture is three interleaved repetitions of a small matrix with
// synthetic samples: a standalone baseline, a scenario 6.5x slower at a
// lower clock, one equal to standalone but with too few requests for its
// p99, a BE-only baseline and a multi-tenant scenario.
func repeatFixture() *Results {
	rng := rand.New(rand.NewPCG(3, 4))
	start := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	clock := func(mhz uint32, w uint32) *TelemetrySummary {
		rs := []gpuinfo.Reading{{SMClockMHz: mhz, PowerMilliwatts: w * 1000, TemperatureC: 55, ThrottleReasons: 0}, {SMClockMHz: mhz - 15, PowerMilliwatts: (w + 20) * 1000, TemperatureC: 57, ThrottleReasons: 0x4}}
		return summarizeTelemetry(rs)
	}
	be := func(label string, perSec float64) BEShare {
		return BEShare{Label: label, WindowKernels: int64(perSec * 20), WindowPerSec: perSec,
			Result: &BEResult{Schema: SchemaVersion, Unit: "kernels", Kernels: int64(perSec * 21), DurationS: 21}}
	}
	res := &Results{
		Schema: ResultsSchemaVersion, Tool: "gpreempt-bench", StartedAt: start, Host: "gpu-host",
		Device: DeviceInfo{Name: "NVIDIA H100 80GB HBM3", SMs: 132, CC: "9.0", Driver: 13000},
		Config: runOptions{Scenarios: mustScenarios("standalone,be-1us,prepreempt-be-1us,be-only,multi-tenant"), Repeat: 3, Seed: 1,
			Out: "/tmp/out", Duration: 20 * time.Second, Settle: time.Second, Period: 3500 * time.Microsecond,
			Prep: PrepDist{Min: 500 * time.Microsecond, Max: 500 * time.Microsecond}, Requests: 5714, Warmup: 50,
			LCIters: 2000, LCThreads: 256, BEIters: 183600, BEThreads: 256, BEQueue: 3, BECalibrateMs: 2.35, HintLauncher: "poller"},
	}
	for rep := 1; rep <= 3; rep++ {
		drift := 1 + 0.03*float64(rep-2)
		sa := synthLC(rng, 2000, 30, 8, drift)
		res.Scenarios = append(res.Scenarios,
			&ScenarioResult{Name: "standalone", Kind: KindStandalone, Runtime: RuntimeKernels, Rep: rep, StartedAt: start, LC: sa, GPU: clock(1965, 120)},
			&ScenarioResult{Name: "be-1us", Kind: KindShared, Runtime: RuntimeKernels, Rep: rep, StartedAt: start, BETimeslice: "1us",
				LC: synthLC(rng, 2000, 30, 8, 6.5*drift), GPU: clock(1395, 690), BE: []BEShare{be("be", 385)}, BEPerSec: 385},
			&ScenarioResult{Name: "prepreempt-be-1us", Kind: KindShared, Runtime: RuntimeKernels, Rep: rep, StartedAt: start, BETimeslice: "1us",
				LC: synthLC(rng, 300, 30, 20, drift), GPU: clock(1410, 680), BE: []BEShare{be("be", 380)}, BEPerSec: 380},
			&ScenarioResult{Name: "be-only", Kind: KindBEOnly, Runtime: RuntimeKernels, Rep: rep, StartedAt: start, GPU: clock(1380, 700),
				BE: []BEShare{be("be", 427)}, BEPerSec: 427},
		)
		mt := &ScenarioResult{Name: "multi-tenant", Kind: KindMultiTenant, Runtime: RuntimeKernels, Rep: rep, StartedAt: start, GPU: clock(1400, 690),
			BE: []BEShare{be("be1", 270), be("be2", 90)}, BEPerSec: 360}
		mt.BE[0].Class, mt.BE[1].Class = "be:3", "be"
		mt.Tenants = []LCTenant{{Label: "lc1", LC: synthLC(rng, 2000, 30, 8, 6*drift)}, {Label: "lc2", LC: synthLC(rng, 2000, 30, 8, 7*drift)}}
		mt.LC = mt.Tenants[0].LC
		res.Scenarios = append(res.Scenarios, mt)
	}
	// be-1us's BE idled half of every 4 s: its LC's requests split by
	// the half they ran in.
	res.Config.BEDuty = 4 * time.Second
	for _, sr := range res.Scenarios {
		if sr.Name == "be-1us" {
			sr.BEDuty = res.Config.BEDuty
			// The host took 2% of every CPU, 5% of the LC's, in each run.
			lcSteal := 0.05
			sr.Host = &HostCPU{Steal: 0.02, LCCPUsSteal: &lcSteal}
			for i := range sr.LC.Samples {
				sr.LC.Samples[i].CPUNs = sr.LC.Samples[i].LatencyNs * 9 / 10
			}
		}
		summarizeLC(sr)
	}
	finalize(res, 1)
	return res
}

func TestRepeatReportGolden(t *testing.T) {
	res := repeatFixture()
	var b bytes.Buffer
	if err := WriteMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	golden.Check(t, "results-repeat.md", b.Bytes())
}

func TestSummaries(t *testing.T) {
	res := repeatFixture()
	by := map[string]*ScenarioSummary{}
	for _, s := range res.Summaries {
		by[s.Name] = s
	}
	if got := []string{res.Summaries[0].Name, res.Summaries[4].Name}; !reflect.DeepEqual(got, []string{"standalone", "multi-tenant"}) {
		t.Errorf("summary order %v", got)
	}
	b := by["be-1us"]
	if b.Reps != 3 || len(b.P50.PerRep) != 3 {
		t.Fatalf("be-1us: %d reps, %d p50 ratios", b.Reps, len(b.P50.PerRep))
	}
	// Built as 6.5x standalone in every repetition.
	for _, rs := range []*RatioStats{b.P50, b.P99} {
		if rs.CI95 == nil || !rs.CI95.Contains(6.5) || rs.Min > rs.Median || rs.Median > rs.Max {
			t.Errorf("be-1us ratio %+v, CI %v: want an interval around 6.5", rs, rs.CI95)
		}
	}
	// Clock-normalised: latency scaled by 1395/1965.
	if want := b.P50.Median * 1395 / 1965; b.P50Clock == nil || b.P50Clock.Median < want*0.98 || b.P50Clock.Median > want*1.02 {
		t.Errorf("clock-normalised p50 %+v, want about %.2f", b.P50Clock, want)
	}
	if b.BE == nil || b.BE.Median < 0.90 || b.BE.Median > 0.91 {
		t.Errorf("BE kept %+v, want 385/427", b.BE)
	}
	p := by["prepreempt-be-1us"]
	if len(p.Warnings) == 0 || !strings.Contains(strings.Join(p.Warnings, "\n"), "p99 rests on 3 requests") {
		t.Errorf("prepreempt-be-1us warnings %q: want the too-few-requests one", p.Warnings)
	}
	mt := by["multi-tenant"]
	if len(mt.Tenants) != 2 || mt.BESplit == nil || mt.BESplit.Median != 3 {
		t.Fatalf("multi-tenant: tenants %+v, split %+v", mt.Tenants, mt.BESplit)
	}
	if mt.Tenants[1].P50.Median <= mt.Tenants[0].P50.Median {
		t.Errorf("lc2 (7x) not slower than lc1 (6x): %+v", mt.Tenants)
	}
	if g := by["be-1us"].GPU; g == nil || g.SMClockP50 != 1380 || g.SMClockMin != 1380 || g.ThrottleReasons["sw-power-cap"] != 0.5 {
		t.Errorf("be-1us telemetry %+v", g)
	}
}

// TestSummaryCIWarning: a scenario claimed equal to standalone from a few
// hundred heavy-tailed requests gets a warning on its p99.
func TestSummaryCIWarning(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	res := &Results{Schema: ResultsSchemaVersion, Tool: "gpreempt-bench", Config: runOptions{Repeat: 1}}
	res.Scenarios = []*ScenarioResult{
		{Name: "standalone", Kind: KindStandalone, Runtime: RuntimeKernels, LC: synthLC(rng, 300, 30, 60, 1)},
		{Name: "prepreempt-be-1us", Kind: KindShared, Runtime: RuntimeKernels, LC: synthLC(rng, 300, 30, 60, 1)},
	}
	for _, sr := range res.Scenarios {
		summarizeLC(sr)
	}
	finalize(res, 1)
	w := strings.Join(res.Summaries[1].Warnings, "\n")
	if !strings.Contains(w, "LC p99 ratio") || !strings.Contains(w, "wider than the effect") {
		t.Errorf("warnings %q: want the CI-width warning on p99", w)
	}
	t.Logf("p99 %+v CI %v", res.Summaries[1].P99, res.Summaries[1].P99.CI95)
}

func TestSummarizeTelemetry(t *testing.T) {
	if summarizeTelemetry(nil) != nil {
		t.Error("no readings gave a summary")
	}
	got := summarizeTelemetry([]gpuinfo.Reading{
		{SMClockMHz: 1980, PowerMilliwatts: 300000, TemperatureC: 40, ThrottleReasons: 0x1},
		{SMClockMHz: 1395, PowerMilliwatts: 697000, TemperatureC: 62, ThrottleReasons: 0x4},
		{SMClockMHz: 1410, PowerMilliwatts: 690000, TemperatureC: 61, ThrottleReasons: 0x4},
		{SMClockMHz: 1400, TemperatureC: 61},
	})
	want := &TelemetrySummary{Readings: 4, SMClockP50: 1395, SMClockMin: 1395, PowerP50: 690, PowerMax: 697, TempMax: 62,
		ThrottleReasons: map[string]float64{"gpu-idle": 0.25, "sw-power-cap": 0.5}}
	// Nearest-rank p50 of 4 readings is the 2nd smallest: 1400.
	want.SMClockP50 = 1400
	if !reflect.DeepEqual(got, want) {
		t.Errorf("summarizeTelemetry = %+v\nwant %+v", got, want)
	}
}

// TestSampler drives the sampler with a tick channel the test owns, so
// that nothing depends on the machine's timing: an unbuffered send returns
// only once the sampler took the tick, and closing the channel ends it.
func TestSampler(t *testing.T) {
	m := &gpuinfo.Mock{Readings: []gpuinfo.Reading{{SMClockMHz: 1965}, {SMClockMHz: 1500}, {SMClockMHz: 1395}}}
	ticks := make(chan time.Time)
	s := startSampler(t.Context(), m, 0, ticks, discardLogger())
	base := time.Now()
	for i := range 3 {
		ticks <- base.Add(time.Duration(i) * time.Second)
	}
	close(ticks)
	<-s.done
	all := s.between(monoNs(base), monoNs(base.Add(2*time.Second)))
	if len(all) != 3 || all[0].SMClockMHz != 1965 || all[2].SMClockMHz != 1395 {
		t.Fatalf("readings %+v", all)
	}
	if got := s.between(monoNs(base.Add(500*time.Millisecond)), monoNs(base.Add(1500*time.Millisecond))); len(got) != 1 || got[0].SMClockMHz != 1500 {
		t.Errorf("window readings %+v, want the middle one", got)
	}
	s.stop() // after the channel closed: returns at once
}

func TestSamplerFailingSource(t *testing.T) {
	m := &gpuinfo.Mock{ReadingErr: gpuinfo.ErrClosed}
	ticks := make(chan time.Time)
	s := startSampler(t.Context(), m, 0, ticks, discardLogger())
	ticks <- time.Now()
	ticks <- time.Now()
	close(ticks)
	<-s.done
	if s.failures != 2 || len(s.readings) != 0 {
		t.Errorf("failures %d readings %d", s.failures, len(s.readings))
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
