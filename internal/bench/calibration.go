package bench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// calibrate sizes the kernels once, alone on the GPU, before any scenario,
// so that every scenario runs the same work whatever the GPU's clocks and
// the PTX in the binary.
func (r *runner) calibrate(ctx context.Context, res *Results) error {
	kernelScenario := func(pred func(Scenario) bool) bool {
		return slices.ContainsFunc(r.o.Scenarios, func(s Scenario) bool { return s.Runtime == RuntimeKernels && pred(s) })
	}
	if r.o.BECalibrateMs > 0 && kernelScenario(func(s Scenario) bool { return s.BECount() > 0 }) {
		n, err := r.calibrateOne(ctx, "be", "--calibrate-ms", strconv.FormatFloat(r.o.BECalibrateMs, 'f', -1, 64),
			"--blocks", strconv.Itoa(r.o.BEBlocks), "--threads", strconv.Itoa(r.o.BEThreads))
		if err != nil {
			return fmt.Errorf("calibrate be_fma: %w", err)
		}
		r.o.BEIters = n
		res.Calibrated["be_kernel_iters"] = n
	}
	if r.o.LCCalibrateUs > 0 && kernelScenario(Scenario.HasLC) {
		n, err := r.calibrateOne(ctx, "lc", "--calibrate-us", strconv.FormatFloat(r.o.LCCalibrateUs, 'f', -1, 64),
			"--blocks", strconv.Itoa(r.o.LCBlocks), "--threads", strconv.Itoa(r.o.LCThreads))
		if err != nil {
			return fmt.Errorf("calibrate lc_work: %w", err)
		}
		r.o.LCIters = n
		res.Calibrated["lc_kernel_iters"] = n
	}
	return nil
}

// calibrateOne runs "<self> <cmd> --calibrate-only ..." and parses its
// "ITERS <n>" line.
func (r *runner) calibrateOne(ctx context.Context, cmd string, args ...string) (uint64, error) {
	argv := r.calibrateArgv(cmd, args...)
	var stdout, stderr bytes.Buffer
	c := exec.CommandContext(ctx, argv[0], argv[1:]...)
	c.Stdout, c.Stderr = &stdout, &stderr
	if err := c.Run(); err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("%w: %s: %w\n%s", ErrWorker, strings.Join(argv, " "), err, indent(strings.TrimSpace(stderr.String())))
	}
	n, err := parseIters(cmd, &stdout)
	if err == nil {
		r.log.Info("calibrated", "kernel", cmd, "iters", n)
	}
	return n, err
}

// parseIters finds the "ITERS <n>" line of a --calibrate-only worker.
func parseIters(cmd string, stdout *bytes.Buffer) (uint64, error) {
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ITERS "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			if err != nil || n == 0 {
				return 0, fmt.Errorf("%w: %s printed %q", ErrWorker, cmd, sc.Text())
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("%w: %s --calibrate-only printed no ITERS line", ErrWorker, cmd)
}
