package bench

import (
	"errors"
	"fmt"
	"time"
)

// ErrImplausible marks results that cannot be right, which means the
// harness (or the GPU) misbehaved and no number from the run can be trusted.
var ErrImplausible = errors.New("implausible result")

// stampTolerance absorbs the granularity of %globaltimer and CUDA events
// when host latency is compared with GPU time: the timer ticks in steps of
// up to a microsecond, and the two clocks are read at slightly different
// points.
const stampTolerance = 2 * time.Microsecond

// maxReported bounds how many individual bad samples an error lists.
const maxReported = 5

// checkLC returns every reason to distrust an LC worker's result.
func checkLC(r *LCResult, wantRequests int) error {
	if r == nil {
		return fmt.Errorf("%w: no LC result", ErrImplausible)
	}
	var errs []error
	fail := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: LC: "+format, append([]any{ErrImplausible}, args...)...))
	}
	if len(r.Samples) < wantRequests {
		fail("%d samples, %d requested", len(r.Samples), wantRequests)
	}
	if r.MeasureEndMonoNs <= r.MeasureStartMonoNs {
		fail("empty measurement window [%d, %d]", r.MeasureStartMonoNs, r.MeasureEndMonoNs)
	}
	bad := 0
	sample := func(i int, format string, args ...any) {
		bad++
		if bad <= maxReported {
			fail("request %d: "+format, append([]any{i}, args...)...)
		}
	}
	for i, s := range r.Samples {
		if s.LatencyNs <= 0 {
			sample(i, "latency %dns", s.LatencyNs)
			continue
		}
		if s.GPUNs < 0 {
			sample(i, "negative GPU time %dns", s.GPUNs)
			continue
		}
		if time.Duration(s.LatencyNs)+stampTolerance < time.Duration(s.GPUNs) {
			sample(i, "host latency %v below the GPU-measured kernel duration %v", time.Duration(s.LatencyNs), time.Duration(s.GPUNs))
		}
		if !r.GPUStamps {
			continue
		}
		if s.GPUStartNs == 0 || s.GPUEndNs <= s.GPUStartNs {
			sample(i, "GPU stamps start %d end %d: the kernel did not stamp", s.GPUStartNs, s.GPUEndNs)
			continue
		}
		// Requests are serialized (launch, synchronize), so each kernel
		// starts after the previous one ended; equal stamps mean the
		// kernel did not run and the buffer still holds the last request's.
		if i > 0 && s.GPUStartNs <= r.Samples[i-1].GPUEndNs {
			sample(i, "GPU start %d not after the previous request's end %d: stale stamps", s.GPUStartNs, r.Samples[i-1].GPUEndNs)
		}
	}
	if bad > maxReported {
		fail("%d more bad requests", bad-maxReported)
	}
	return errors.Join(errs...)
}

// checkBE returns every reason to distrust a BE worker's result.
func checkBE(label string, r *BEResult) error {
	if r == nil {
		return fmt.Errorf("%w: %s: no BE result", ErrImplausible, label)
	}
	var errs []error
	if r.Kernels <= 0 {
		errs = append(errs, fmt.Errorf("%w: %s: completed no %s", ErrImplausible, label, r.Unit))
	}
	if n := int64(len(r.CompletionsMonoNs)); n != r.Kernels {
		errs = append(errs, fmt.Errorf("%w: %s: %d completion times for %d %s", ErrImplausible, label, n, r.Kernels, r.Unit))
	}
	for i := 1; i < len(r.CompletionsMonoNs); i++ {
		if r.CompletionsMonoNs[i] < r.CompletionsMonoNs[i-1] {
			errs = append(errs, fmt.Errorf("%w: %s: completion times go backwards at %d", ErrImplausible, label, i))
			break
		}
	}
	if r.DurationS <= 0 {
		errs = append(errs, fmt.Errorf("%w: %s: duration %vs", ErrImplausible, label, r.DurationS))
	}
	return errors.Join(errs...)
}

// checkShare fails a BE process that made no progress in the window: with
// fixed-work kernels of a few milliseconds, a window of seconds without one
// completion means it was starved or hung, not slowed.
// A BE that completed work outside the measurement window but none inside
// it was starved, a result (scenarioWarnings names it); one that completed
// nothing at all did not run.
func checkShare(sh BEShare, window time.Duration) error {
	if sh.WindowKernels <= 0 && sh.Result.Kernels <= 0 {
		return fmt.Errorf("%w: %s: no %s completed in the %v measurement window, nor outside it", ErrImplausible, sh.Label, sh.Result.Unit, window.Round(time.Millisecond))
	}
	return nil
}

// scenarioWarnings notes results that are possible but suspicious, kept in
// the report rather than failing the run.
// standalone is the same repetition's LC baseline, nil if none.
func scenarioWarnings(sr, _ *ScenarioResult) []string {
	var w []string
	if sr.LC != nil && sr.LC.Late > len(sr.LC.Samples)/100 {
		w = append(w, fmt.Sprintf("%d of %d LC requests started more than a period late: latency exceeds the period, arrivals were not periodic", sr.LC.Late, len(sr.LC.Samples)))
	}
	if sr.BEVsBEOnly > 1.05 {
		w = append(w, fmt.Sprintf("BE throughput %.1f%% of be-only: above 100%%, clocks or the baseline may differ", 100*sr.BEVsBEOnly))
	}
	for _, sh := range sr.BE {
		if sh.WindowKernels <= 0 {
			w = append(w, fmt.Sprintf("%s starved: no %s completed in the measurement window (%d outside it)", sh.Label, sh.Result.Unit, sh.Result.Kernels))
		}
	}
	if sr.LCP50VsStandalone > 0 && sr.LCP50VsStandalone < 0.9 {
		w = append(w, fmt.Sprintf("LC p50 at %.2fx standalone: faster than alone", sr.LCP50VsStandalone))
	}
	return w
}
