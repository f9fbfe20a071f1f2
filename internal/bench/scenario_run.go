package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/stats"
)

// scenarioRun is one scenario run in progress: its result, its directory
// and its workers.
type scenarioRun struct {
	r   *runner
	sc  Scenario
	sr  *ScenarioResult
	dir string
	// all holds every worker started, killed on the way out.
	all []*worker
	bes []*worker
	// beTimeslices is what gpreemptctl set for each BE ("": nothing).
	beTimeslices []string
	// prior are the runs before this one (an @ALONE_P50@ policy reads them).
	prior []*ScenarioResult
}

// workerLabel names the i-th of n workers of a role: "be", or "be1", "be2".
func workerLabel(role string, i, n int) string {
	if n == 1 {
		return role
	}
	return fmt.Sprintf("%s%d", role, i+1)
}

// runScenario runs one slot; prior are the runs before it (an
// @ALONE_P50@ policy reads the last standalone one).
func (r *runner) runScenario(ctx context.Context, s slot, prior []*ScenarioResult) (sr *ScenarioResult, err error) {
	sc := s.Scenario
	started := time.Now()
	sr = &ScenarioResult{Name: sc.Name, Kind: sc.Kind, Runtime: sc.Runtime, StartedAt: started.UTC(), BEDuty: r.o.dutyOf(sc)}
	if r.o.Repeat > 1 {
		sr.Rep = s.Rep
	}
	run := &scenarioRun{r: r, sc: sc, sr: sr, dir: filepath.Join(r.o.Out, sc.Dir()), prior: prior}
	if r.o.Repeat > 1 {
		run.dir = filepath.Join(run.dir, fmt.Sprintf("rep%d", s.Rep))
	}
	if err := os.MkdirAll(run.dir, 0o755); err != nil {
		return sr, err
	}
	if sr.DaemonPolicy, err = r.applyPolicy(ctx, sc, prior, 0, run.dir); err != nil {
		return sr, err
	}
	if sc.SLO && len(r.o.DaemonPolicies) > 0 {
		if r.o.SLOWindow, err = sloWindow(ctx, fetchStatus(r.o.DaemonSocket), sloPatience); err != nil {
			return sr, err
		}
	}
	if sc.SLO {
		sr.SLOWindow = r.o.SLOWindow
	}
	if sc.BETimeslice > 0 {
		sr.BETimeslice = usArg(sc.BETimeslice)
	}
	defer func() {
		// On any error, no worker outlives its scenario.
		for _, w := range run.all {
			w.kill()
		}
		sr.WallS = time.Since(started).Seconds()
	}()

	if err := run.startBEs(ctx); err != nil {
		return sr, err
	}
	if err := run.classifyBEs(ctx); err != nil {
		return sr, err
	}
	if sc.SLO && sc.HasLC() {
		if err := run.waitBEAlone(ctx); err != nil {
			return sr, err
		}
	}
	if sc.HasLC() {
		err = run.measureLC(ctx)
	} else {
		err = run.timedWindow(ctx)
	}
	if err != nil {
		return sr, err
	}
	for _, w := range run.bes {
		if err := w.stop(30 * time.Second); err != nil {
			return sr, err
		}
	}
	errs := []error{run.collectBE()}
	for _, t := range sr.Tenants {
		if err := checkLC(t.LC, r.o.lcRequests(sc)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", t.Label, err))
		}
	}
	if sr.LC != nil {
		if err := checkLC(sr.LC, r.o.lcRequests(sc)); err != nil {
			errs = append(errs, err)
		}
	}
	summarizeLC(sr)
	if r.sampler != nil {
		sr.GPU = summarizeTelemetry(r.sampler.between(sr.WindowStartMonoNs, sr.WindowEndMonoNs))
	}
	return sr, errors.Join(errs...)
}

// startBEs starts the BE workers and waits until all are READY (context,
// channels and kernels exist, the GPU is busy) before anything is changed
// or measured.
func (run *scenarioRun) startBEs(ctx context.Context) error {
	n := run.sc.BECount()
	for i := range n {
		label := workerLabel("be", i, n)
		argv, env := run.r.beArgv(run.sc, filepath.Join(run.dir, label+".json"))
		w, err := startWorker(label, run.dir, argv, slices.Concat(env, run.sc.workerEnv(class.BE, i)), run.r.o.beCPUs, run.r.log)
		if err != nil {
			return err
		}
		run.all = append(run.all, w)
		run.bes = append(run.bes, w)
	}
	for _, w := range run.bes {
		if err := w.waitReady(ctx, run.r.o.ReadyTimeout); err != nil {
			return err
		}
	}
	return nil
}

// classifyBEs applies the scenario's BE settings with gpreemptctl, or
// waits for gpreemptd to apply them.
func (run *scenarioRun) classifyBEs(ctx context.Context) error {
	sc := run.sc
	run.beTimeslices = make([]string, len(run.bes))
	switch {
	case sc.Daemon:
		want, _ := sc.daemonWants()
		for i, w := range run.bes {
			run.beTimeslices[i] = usArg(want.Timeslice)
			if sc.SLO {
				run.beTimeslices[i] = "slo"
			}
			if err := run.waitClassed(ctx, w, want); err != nil {
				return err
			}
		}
	case sc.Kind == KindShared && sc.BETimeslice > 0:
		run.beTimeslices[0] = usArg(sc.BETimeslice)
		return run.ctl(ctx, "class", "--pid", strconv.Itoa(run.bes[0].pid()), "--be-timeslice", usArg(sc.BETimeslice), "be")
	case sc.Weights[0].Weight > 0 || sc.Kind == KindMultiTenant:
		// Class be with a weight (class.Class.TimesliceFor: the slice overhead plus the weight times
		// the rest of the class's timeslice),
		// or at the timeslices the scenario names.
		for i, w := range run.bes {
			run.beTimeslices[i] = usArg(sc.Ratio[i])
			if err := run.ctl(ctx, "class", "--pid", strconv.Itoa(w.pid()), "--be-timeslice", usArg(sc.Ratio[i]), "be"); err != nil {
				return err
			}
		}
	case sc.Kind == KindBERatio:
		for i, w := range run.bes {
			run.beTimeslices[i] = usArg(sc.Ratio[i])
			if err := run.ctl(ctx, "set-timeslice", "--pid", strconv.Itoa(w.pid()), usArg(sc.Ratio[i])); err != nil {
				return err
			}
		}
	}
	return nil
}

// lcClassed reports whether the scenario puts its LC workers in class lc.
func (sc Scenario) lcClassed() bool {
	return sc.Kind == KindMultiTenant || (sc.Kind == KindShared && sc.BETimeslice > 0)
}

// measureLC starts the LC workers, lets the BE settle, measures, and reads
// their results. The measurement window is the one all LC workers measured
// in.
func (run *scenarioRun) measureLC(ctx context.Context) error {
	sc, o := run.sc, &run.r.o
	n := sc.LCCount()
	var lcs []*worker
	for i := range n {
		label := workerLabel("lc", i, n)
		argv, env := run.r.lcArgv(sc, filepath.Join(run.dir, label+".json"))
		w, err := startWorker(label, run.dir, argv, slices.Concat(env, o.LCEnv, sc.workerEnv(class.LC, i)), o.lcCPUs, run.r.log)
		if err != nil {
			return err
		}
		run.all = append(run.all, w)
		lcs = append(lcs, w)
	}
	for _, w := range lcs {
		if err := w.waitReady(ctx, o.ReadyTimeout); err != nil {
			return err
		}
		if sc.Daemon {
			_, want := sc.daemonWants()
			if err := run.waitClassed(ctx, w, want); err != nil {
				return err
			}
			continue
		}
		if sc.lcClassed() {
			// After READY: libcuda sets its own timeslice on the compute
			// TSG during context setup, which would overwrite an earlier
			// policy.
			if err := run.ctl(ctx, "class", "--pid", strconv.Itoa(w.pid()), "lc"); err != nil {
				return err
			}
		}
	}
	if len(run.bes) > 0 {
		if err := sleepWatching(ctx, o.Settle, run.bes...); err != nil {
			return err
		}
	}
	if o.ownAlone[sc.Name] { // its one LC alone first: the measurement's status and host times start after
		if err := run.ownObjective(ctx, lcs[0]); err != nil {
			return err
		}
	}
	stopSLO := run.startSLOPoll(ctx)
	defer stopSLO()
	before, berr := readCPUTimes()
	for _, w := range lcs {
		if err := w.sendGo(); err != nil {
			return err
		}
	}
	for _, w := range lcs {
		if err := w.wait(ctx, run.r.lcTimeout(sc), run.bes...); err != nil {
			return err
		}
	}
	if after, aerr := readCPUTimes(); berr == nil && aerr == nil {
		run.sr.Host = hostCPU(before, after, o.lcCPUs)
		if h := run.sr.Host; h != nil && h.LCCPUsSteal == nil && !o.lcCPUs.IsEmpty() {
			run.r.log.Warn("the LC's CPUs are not all in /proc/stat: their steal is not reported", "cpus", o.lcCPUs.String())
		}
	} else {
		run.r.log.Warn("host CPU times not read", "err", errors.Join(berr, aerr))
	}
	stopSLO() // before reading the results; the deferred call is then a no-op
	for i, w := range lcs {
		var lr LCResult
		if err := readJSON(filepath.Join(run.dir, w.label+".json"), &lr); err != nil {
			return fmt.Errorf("%w: %s result: %w", ErrWorker, w.label, err)
		}
		if n > 1 {
			run.sr.Tenants = append(run.sr.Tenants, LCTenant{Label: w.label, LC: &lr})
		}
		if i == 0 {
			run.sr.LC = &lr
			run.sr.WindowStartMonoNs, run.sr.WindowEndMonoNs = lr.MeasureStartMonoNs, lr.MeasureEndMonoNs
			continue
		}
		run.sr.WindowStartMonoNs = max(run.sr.WindowStartMonoNs, lr.MeasureStartMonoNs)
		run.sr.WindowEndMonoNs = min(run.sr.WindowEndMonoNs, lr.MeasureEndMonoNs)
	}
	return nil
}

// ownObjective releases the LC to its requests alone, takes them (its ALONE line), fills the
// policy's @OWN_P50@ from their p50 and reloads gpreemptd under it; the LC then waits for its
// second go line.
func (run *scenarioRun) ownObjective(ctx context.Context, lc *worker) error {
	if err := lc.sendGo(); err != nil {
		return err
	}
	us, meter, err := lc.waitAlone(ctx, run.r.o.ownAloneTimeout(run.sc))
	if err != nil {
		return err
	}
	s, m := stats.Summarize(us), stats.Summarize(meter)
	run.sr.OwnAloneUs, run.sr.OwnAloneCPUMeterUs = &s, &m
	if _, err := run.r.applyPolicy(ctx, run.sc, run.prior, s.P50, run.dir); err != nil {
		return err
	}
	run.r.log.Info("objective from the LC alone", "requests", s.N, "p50_us", s.P50)
	return nil
}

// timedWindow is the measurement window of a scenario without LC.
func (run *scenarioRun) timedWindow(ctx context.Context) error {
	if err := sleepWatching(ctx, run.r.o.Settle, run.bes...); err != nil {
		return err
	}
	run.sr.WindowStartMonoNs = monoNs(time.Now())
	if err := sleepWatching(ctx, run.r.o.measureDuration(run.sc), run.bes...); err != nil {
		return err
	}
	run.sr.WindowEndMonoNs = monoNs(time.Now())
	return nil
}

// collectBE reads the stopped BE workers' results and counts their
// completions in the measurement window.
func (run *scenarioRun) collectBE() error {
	sr := run.sr
	window := time.Duration(sr.WindowEndMonoNs - sr.WindowStartMonoNs)
	var errs []error
	for i, w := range run.bes {
		label := w.label
		var br BEResult
		if err := readJSON(filepath.Join(run.dir, label+".json"), &br); err != nil {
			return fmt.Errorf("%w: %s result: %w", ErrWorker, label, err)
		}
		if err := checkBE(label, &br); err != nil {
			errs = append(errs, err)
		}
		if br.EndMonoNs < sr.WindowEndMonoNs {
			errs = append(errs, fmt.Errorf("%w: %s stopped before the measurement window ended", ErrImplausible, label))
		}
		if len(sr.SLO) > 0 {
			addBETimeline(sr, &br)
		}
		sh := BEShare{Label: label, Timeslice: run.beTimeslices[i], Result: &br}
		if run.sc.Weights[i].Weight > 0 {
			sh.Class = run.sc.Weights[i].String()
		}
		worked := window
		if r := run.sr.BEDuty; r > 0 {
			// Its rate while it worked: the share of the window that falls
			// in working halves differs from run to run.
			sh.WindowKernels, worked = dutyCount(br.CompletionsMonoNs, sr.WindowStartMonoNs, sr.WindowEndMonoNs, r)
		} else {
			sh.WindowKernels = br.CountIn(sr.WindowStartMonoNs, sr.WindowEndMonoNs)
		}
		if worked > 0 {
			sh.WindowPerSec = float64(sh.WindowKernels) / worked.Seconds()
		}
		if err := checkShare(sh, window); err != nil {
			errs = append(errs, err)
		}
		// The aggregate keeps rates; per-kernel times stay in the worker's
		// own file.
		trimmed := br
		trimmed.CompletionsMonoNs = nil
		sh.Result = &trimmed
		sr.BE = append(sr.BE, sh)
		sr.BEPerSec += sh.WindowPerSec
	}
	return errors.Join(errs...)
}

// addBETimeline adds br's completions to sr's per-second BE timeline,
// which starts at sr's first SLO status read.
func addBETimeline(sr *ScenarioResult, br *BEResult) {
	start, end := sr.SLO[0].MonoNs, sr.WindowEndMonoNs
	if end <= start {
		return
	}
	bins := int((end - start + int64(time.Second) - 1) / int64(time.Second))
	if len(sr.BETimeline) < bins {
		sr.BETimeline = append(sr.BETimeline, make([]float64, bins-len(sr.BETimeline))...)
	}
	sr.BETimelineStartMonoNs = start
	for i := range bins {
		from := start + int64(i)*int64(time.Second)
		to := min(from+int64(time.Second), end)
		sr.BETimeline[i] += float64(br.CountIn(from, to)) / (float64(to-from) / 1e9)
	}
}

// ctl runs gpreemptctl and records the call in the scenario.
func (run *scenarioRun) ctl(ctx context.Context, args ...string) error {
	call, err := run.r.ctl.run(ctx, args...)
	run.sr.Ctl = append(run.sr.Ctl, call)
	return err
}
