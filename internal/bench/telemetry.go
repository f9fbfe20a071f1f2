package bench

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	gpuinfo "github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// telemetrySource is what the orchestrator needs from NVML.
type telemetrySource interface {
	gpuinfo.Telemetry
	Close() error
}

// openTelemetry opens NVML. gpuinfo.Open returns no value to call after a
// failed initialisation (a later NVML call would kill the process), so an
// error here simply means no telemetry.
func openTelemetry(log *slog.Logger) (telemetrySource, error) {
	info, err := gpuinfo.Open(log)
	if err != nil {
		return nil, err
	}
	src, ok := info.(telemetrySource)
	if !ok {
		return nil, errors.Join(errors.New("NVML implementation without readings"), info.Close())
	}
	return src, nil
}

// timedReading is a reading and when it was taken (CLOCK_MONOTONIC).
type timedReading struct {
	MonoNs int64
	gpuinfo.Reading
}

// sampler reads the GPU on every tick until stopped.
type sampler struct {
	src   gpuinfo.Telemetry
	index int
	log   *slog.Logger

	mu       sync.Mutex
	readings []timedReading
	failures int

	cancel context.CancelFunc
	done   chan struct{}
}

// startSampler reads src's device index on every tick of ticks, until ctx
// ends, ticks is closed or stop is called.
func startSampler(ctx context.Context, src gpuinfo.Telemetry, index int, ticks <-chan time.Time, log *slog.Logger) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{src: src, index: index, log: log, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			select {
			case <-ctx.Done():
				return
			case t, ok := <-ticks:
				if !ok {
					return
				}
				s.read(ctx, t)
			}
		}
	}()
	return s
}

func (s *sampler) read(ctx context.Context, t time.Time) {
	r, err := s.src.Reading(ctx, s.index)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		// One line for the first failure: a sampler failing every 50 ms
		// would drown the log.
		if s.failures == 0 {
			s.log.Warn("GPU reading failed; clocks will be missing from the report", "err", err)
		}
		s.failures++
		return
	}
	s.readings = append(s.readings, timedReading{MonoNs: monoNs(t), Reading: r})
}

// stop ends the sampling and waits for the goroutine.
func (s *sampler) stop() {
	s.cancel()
	<-s.done
}

// between returns the readings taken in [start, end].
func (s *sampler) between(start, end int64) []gpuinfo.Reading {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []gpuinfo.Reading
	for _, r := range s.readings {
		if r.MonoNs >= start && r.MonoNs <= end {
			out = append(out, r.Reading)
		}
	}
	return out
}

// startTelemetry starts the NVML sampler, if asked for and available.
func (r *runner) startTelemetry(ctx context.Context) {
	if r.o.NVMLInterval <= 0 || r.env.telemetry == nil {
		return
	}
	src, err := r.env.telemetry(r.log)
	if err != nil {
		r.log.Warn("no GPU telemetry: clocks, power and temperature will be missing from the report", "err", err)
		return
	}
	tick := time.NewTicker(r.o.NVMLInterval)
	// NVML enumerates in PCI order, CUDA fastest first by default: on a
	// one-GPU machine (or with CUDA_DEVICE_ORDER=PCI_BUS_ID) they agree.
	r.sampler = startSampler(ctx, src, r.o.Device, tick.C, r.log)
	r.stopSampling = func() {
		tick.Stop()
		r.sampler.stop()
		if err := src.Close(); err != nil {
			r.log.Warn("close NVML", "err", err)
		}
	}
}

func (r *runner) stopTelemetry() {
	if r.stopSampling != nil {
		r.stopSampling()
		r.stopSampling = nil
	}
}

// TelemetrySummary digests the NVML readings of a measurement window.
type TelemetrySummary struct {
	Readings int `json:"readings"`
	// SM clock (MHz) over the window.
	SMClockP50 float64 `json:"sm_clock_p50_mhz"`
	SMClockMin float64 `json:"sm_clock_min_mhz"`
	// Power (W) and temperature (C).
	PowerP50 float64 `json:"power_p50_w,omitempty"`
	PowerMax float64 `json:"power_max_w,omitempty"`
	TempMax  float64 `json:"temperature_max_c,omitempty"`
	// ThrottleReasons names every reason seen in the window, with the
	// fraction of readings that had it.
	ThrottleReasons map[string]float64 `json:"throttle_reasons,omitempty"`
}

// summarizeTelemetry digests readings; nil for none.
func summarizeTelemetry(rs []gpuinfo.Reading) *TelemetrySummary {
	if len(rs) == 0 {
		return nil
	}
	clock := make([]float64, len(rs))
	power := make([]float64, 0, len(rs))
	ts := &TelemetrySummary{Readings: len(rs)}
	seen := map[string]int{}
	for i, r := range rs {
		clock[i] = float64(r.SMClockMHz)
		if r.PowerMilliwatts > 0 {
			power = append(power, float64(r.PowerMilliwatts)/1000)
		}
		ts.TempMax = max(ts.TempMax, float64(r.TemperatureC))
		for _, n := range gpuinfo.ThrottleReasonNames(r.ThrottleReasons) {
			seen[n]++
		}
	}
	cs := stats.Summarize(clock)
	ts.SMClockP50, ts.SMClockMin = cs.P50, cs.Min
	if len(power) > 0 {
		ps := stats.Summarize(power)
		ts.PowerP50, ts.PowerMax = ps.P50, ps.Max
	}
	if len(seen) > 0 {
		ts.ThrottleReasons = map[string]float64{}
		for n, c := range seen {
			ts.ThrottleReasons[n] = float64(c) / float64(len(rs))
		}
	}
	return ts
}

// throttleList renders the reasons, most frequent first.
func (ts *TelemetrySummary) throttleList() []string {
	names := make([]string, 0, len(ts.ThrottleReasons))
	for n := range ts.ThrottleReasons {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		return cmp.Or(cmp.Compare(ts.ThrottleReasons[b], ts.ThrottleReasons[a]), cmp.Compare(a, b))
	})
	return names
}
