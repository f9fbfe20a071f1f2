package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	pyscripts "github.com/gpreempt/gpreempt/bench/pytorch"
	"github.com/gpreempt/gpreempt/internal/api"
	gpreemptpy "github.com/gpreempt/gpreempt/python/gpreempt"
)

// pythonEnv makes Python flush READY at once even if -u were dropped.
var pythonEnv = []string{"PYTHONUNBUFFERED=1"}

func (r *runner) calibrateArgv(cmd string, args ...string) []string {
	argv := append(slices.Clone(r.env.self), cmd, "--device", strconv.Itoa(r.o.Device), "--calibrate-only")
	return append(argv, args...)
}

// beArgv builds a BE worker's command line and extra environment.
func (r *runner) beArgv(sc Scenario, out string) ([]string, []string) {
	// The BE is stopped with SIGTERM when the window ends; its own limit is
	// only a backstop against a lost orchestrator.
	backstop := 10*r.o.measureDuration(sc) + r.lcTimeout(sc) + 10*time.Minute
	if sc.Runtime.LLM() {
		argv := []string{r.o.Python, "-u", filepath.Join(r.scripts, "be_gemm.py"),
			"--duration", fmtDuration(backstop), "--n", strconv.Itoa(r.o.GEMMSize),
			"--device", strconv.Itoa(r.o.Device), "--out", out}
		if d := r.o.dutyOf(sc); d > 0 {
			argv = append(argv, "--duty-period", fmtDuration(d))
		}
		return argv, pythonEnv
	}
	if sc.Runtime.Python() {
		argv := []string{r.o.Python, "-u", filepath.Join(r.scripts, "be_train.py"),
			"--duration", fmtDuration(backstop), "--model", r.o.PyBEModel,
			"--batch", strconv.Itoa(r.o.PyBEBatch), "--device", strconv.Itoa(r.o.Device), "--out", out}
		if d := r.o.dutyOf(sc); d > 0 {
			argv = append(argv, "--duty-period", fmtDuration(d))
		}
		return argv, pythonEnv
	}
	return append(slices.Clone(r.env.self), "be",
		"--device", strconv.Itoa(r.o.Device),
		"--blocks", strconv.Itoa(r.o.BEBlocks), "--threads", strconv.Itoa(r.o.BEThreads),
		"--kernel-iters", strconv.FormatUint(r.o.BEIters, 10), "--queue", strconv.Itoa(r.o.BEQueue),
		"--duration", fmtDuration(backstop), "--out", out), nil
}

// lcArgv builds an LC worker's command line and extra environment.
func (r *runner) lcArgv(sc Scenario, out string) ([]string, []string) {
	if sc.Runtime.Python() {
		return r.pythonLCArgv(sc, out)
	}
	sw, requests := switchArgs(sc, r.o.lcRequests(sc), r.o.period(sc))
	argv := append(slices.Clone(r.env.self), "lc",
		"--device", strconv.Itoa(r.o.Device),
		"--period", fmtDuration(r.o.period(sc)), "--prep-dist", r.o.Prep.String(),
		"--blocks", strconv.Itoa(r.o.LCBlocks), "--threads", strconv.Itoa(r.o.LCThreads),
		"--kernel-iters", strconv.FormatUint(r.o.LCIters, 10),
		"--requests", strconv.Itoa(requests), "--warmup", strconv.Itoa(r.o.Warmup),
		"--wait-go", "--out", out)
	argv = append(argv, sw...)
	if sc.Hints {
		argv = append(argv, "--hints", "--hint-launcher", r.o.HintLauncher.String())
		if r.o.HintPrepQuantile != 0 {
			argv = append(argv, "--hint-prep-quantile", strconv.FormatFloat(r.o.HintPrepQuantile, 'g', -1, 64))
		}
	}
	return append(argv, r.pushArgs(sc)...), nil
}

func (r *runner) pythonLCArgv(sc Scenario, out string) ([]string, []string) {
	if sc.Runtime.LLM() {
		argv := []string{r.o.Python, "-u", filepath.Join(r.scripts, "lc_decode.py"),
			"--family", r.o.LLMFamily, "--period", fmtDuration(r.o.period(sc)),
			"--requests", strconv.Itoa(r.o.lcRequests(sc)), "--warmup", strconv.Itoa(r.o.LLMWarmup),
			"--new-tokens", strconv.Itoa(r.o.LLMNewTokens), "--prompt", strconv.Itoa(r.o.LLMPrompt),
			"--loop", r.o.LLMLoop, "--device", strconv.Itoa(r.o.Device), "--wait-go", "--out", out}
		if sc.Runtime == RuntimeLLMGraph {
			argv = append(argv, "--graph")
		}
		if r.o.LLMBatch > 1 {
			argv = append(argv, "--batch", strconv.Itoa(r.o.LLMBatch))
		}
		if r.o.LLMMetricsPort > 0 {
			argv = append(argv, "--metrics-port", strconv.Itoa(r.o.LLMMetricsPort+lcIndex(out)))
		}
		if r.o.ownAlone[sc.Name] {
			argv = append(argv, "--alone", strconv.Itoa(r.o.OwnAlone), "--alone-max", strconv.Itoa(aloneTries*r.o.OwnAlone),
				"--alone-duty", fmtDuration(r.o.dutyOf(sc)), "--alone-guard", fmtDuration(dutyGuard))
		}
		argv = append(argv, r.pushArgs(sc)...)
		if !sc.Gate {
			return argv, pythonEnv
		}
		return append(argv, "--gate", "--hint-launcher", r.o.HintLauncher.String()), r.engineEnv()
	}
	sw, requests := switchArgs(sc, r.o.lcRequests(sc), r.o.period(sc))
	argv := []string{r.o.Python, "-u", filepath.Join(r.scripts, "lc_infer.py"),
		"--period", fmtDuration(r.o.period(sc)), "--requests", strconv.Itoa(requests),
		"--warmup", strconv.Itoa(r.o.PyWarmup), "--prep", r.o.Prep.String(),
		"--model", r.o.PyLCModel, "--batch", strconv.Itoa(r.o.PyLCBatch),
		"--device", strconv.Itoa(r.o.Device), "--wait-go", "--out", out}
	if r.o.PyGraph && sc.Runtime != RuntimePyTorchEager {
		argv = append(argv, "--cuda-graph")
	}
	argv = append(argv, sw...)
	argv = append(argv, r.pushArgs(sc)...)
	switch {
	case sc.Gate:
		return append(argv, "--gate", "--hint-launcher", r.o.HintLauncher.String()), r.engineEnv()
	case sc.Hints:
		return append(argv, "--hints", "--hint-launcher", r.o.HintLauncher.String()), r.engineEnv()
	}
	return argv, pythonEnv
}

// lcIndex is the index of the LC worker whose result goes to out
// (lc.json, lc1.json: 0; lc2.json: 1).
func lcIndex(out string) int {
	base := strings.TrimSuffix(filepath.Base(out), ".json")
	if n, err := strconv.Atoi(strings.TrimPrefix(base, "lc")); err == nil && n > 1 {
		return n - 1
	}
	return 0
}

// engineEnv is a Python LC's environment when it runs libgpreempt's
// engine: the wrapper is written beside the scripts; the library is found
// next to this binary unless GPREEMPT_LIB says otherwise.
func (r *runner) engineEnv() []string {
	env := append(slices.Clone(pythonEnv), "PYTHONPATH="+r.scripts)
	if os.Getenv("GPREEMPT_LIB") == "" && len(r.env.self) > 0 {
		env = append(env, "GPREEMPT_LIB="+filepath.Join(filepath.Dir(r.env.self[0]), "libgpreempt.so"))
	}
	return env
}

// pushArgs makes an LC worker of an slo: scenario run a lead-in of
// --slo-lead-in and push its latency windows to gpreemptd (unless
// --slo-push=false: the daemon traces them).
func (r *runner) pushArgs(sc Scenario) []string {
	if !sc.SLO {
		return nil
	}
	argv := []string{"--lead-in", fmtDuration(r.o.SLOLeadIn)}
	if r.o.SLONoPush {
		return argv
	}
	argv = append(argv, "--push-latency", api.SocketPath(r.o.DaemonSocket))
	if r.o.SLOWindow > 0 {
		argv = append(argv, "--push-period", fmtDuration(r.o.SLOWindow))
	}
	return argv
}

// leadIn is how long sc's LC runs before it measures.
func (o *runOptions) leadIn(sc Scenario) time.Duration {
	if !sc.SLO {
		return 0
	}
	return o.SLOLeadIn
}

// aloneTries is how many requests an LC runs, for each --own-alone one wanted, before it gives up
// finding them in BE's idle halves.
const aloneTries = 20

// ownAloneTimeout bounds the wait for an LC's ALONE line: its tries at its period three times over
// (requests can run late under contention), two duty periods and slack.
func (o *runOptions) ownAloneTimeout(sc Scenario) time.Duration {
	return satAdd(satMul(3*aloneTries*o.OwnAlone, o.period(sc)), satAdd(satMul(2, o.dutyOf(sc)), 2*time.Minute))
}

// lcTimeout bounds an LC worker's lead-in and measurement: their nominal
// length three times over (requests can run late under contention) plus
// slack.
func (r *runner) lcTimeout(sc Scenario) time.Duration {
	return 3*(r.o.leadIn(sc)+time.Duration(r.o.lcRequests(sc))*r.o.period(sc)) + 2*time.Minute
}

// pytorchScripts returns the directory holding the Python workers: the
// flag's, or the embedded copies written under the output directory (so the
// scripts that produced a result are kept beside it).
func (r *runner) pytorchScripts() (string, error) {
	if r.o.PyScripts != "" {
		for _, f := range pyscripts.Names {
			if _, err := os.Stat(filepath.Join(r.o.PyScripts, f)); err != nil {
				return "", fmt.Errorf("--pytorch-scripts: %w", err)
			}
		}
		return r.o.PyScripts, nil
	}
	dir := filepath.Join(r.o.Out, "pytorch-scripts")
	if err := os.MkdirAll(filepath.Join(dir, "gpreempt"), 0o755); err != nil {
		return "", err
	}
	for _, f := range pyscripts.Names {
		b, err := pyscripts.FS.ReadFile(f)
		if err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			return "", err
		}
	}
	// The libgpreempt wrapper, for the pytorch-prepreempt scenarios.
	if err := os.WriteFile(filepath.Join(dir, "gpreempt", "__init__.py"), gpreemptpy.Init, 0o644); err != nil {
		return "", err
	}
	return dir, nil
}
