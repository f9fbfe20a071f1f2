package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/tsg"
)

// Scenarios named "daemon:<scenario>" leave the classing to gpreemptd: their
// workers carry classEnvVar in their environment (a policy rule
// "class_from_env: GPREEMPT_CLASS" classes them), gpreemptctl changes
// nothing, and the harness only reads back until the class holds.

// classEnvVar is the variable gpreemptd's class_from_env rule reads.
const classEnvVar = "GPREEMPT_CLASS"

// daemonPrefix marks a scenario classed by gpreemptd.
const daemonPrefix = "daemon:"

// sloPrefix marks a scenario classed by gpreemptd in SLO mode.
const sloPrefix = "slo:"

// workerEnvVar names a worker of an slo: scenario ("lc", "lc1", "be2"), so
// that a policy can give two LC workers different objectives (a rule
// matching env: {GPREEMPT_BENCH_WORKER: lc1}).
const workerEnvVar = "GPREEMPT_BENCH_WORKER"

// ErrNotClassed marks a worker whose channel groups did not read back the
// class its scenario expects within --daemon-timeout.
var ErrNotClassed = errors.New("not classed by gpreemptd")

// childEnv is a worker's environment: the orchestrator's without
// classEnvVar, plus extra. Dropping the inherited variable keeps the
// gpreemptctl-classed scenarios out of a daemon's class_from_env rule even
// when the bench itself was started with GPREEMPT_CLASS set.
func childEnv(parent, extra []string) []string {
	env := make([]string, 0, len(parent)+len(extra))
	for _, kv := range parent {
		if strings.HasPrefix(kv, classEnvVar+"=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// classEnv is what a worker of sc in role ("be", "lc") adds to its
// environment for the daemon: nothing outside daemon: scenarios.
func (sc Scenario) classEnv(role class.Name) []string {
	return sc.workerEnv(role, 0)
}

// workerEnv is classEnv for the i-th worker of role: in slo: scenarios
// the BE workers of a weighted scenario ask for their weight (be:3), and
// every worker carries its label in workerEnvVar.
func (sc Scenario) workerEnv(role class.Name, i int) []string {
	if !sc.Daemon {
		return nil
	}
	spec := string(role)
	if role == class.BE && sc.Weights[i].Weight > 0 {
		spec = sc.Weights[i].String()
	}
	env := []string{classEnvVar + "=" + spec}
	if sc.SLO {
		n := sc.LCCount()
		if role == class.BE {
			n = sc.BECount()
		}
		env = append(env, workerEnvVar+"="+workerLabel(string(role), i, n))
	}
	return env
}

// classWant is what a worker's groups must read back once classed.
type classWant struct {
	Class     class.Name
	Timeslice time.Duration
	// Interleave is checked only where the driver reports it (GSP-RM on
	// the H100 does not: it reads back as n/a).
	Interleave tsg.Level
}

// daemonWants returns what the daemon must give sc's BE and LC workers: BE
// the scenario's timeslice (the daemon's policy has to hold the same, for
// gpreemptctl's path sets it with --be-timeslice), LC the lc class.
//
// In slo: scenarios the daemon chooses the BE timeslice: BE's want has
// Timeslice 0, any timeslice.
func (sc Scenario) daemonWants() (be, lc classWant) {
	d := class.Defaults()
	lcTimeslice := d[class.LC].Timeslice
	if sc.SLO {
		lcTimeslice = 0 // the SLO mode may tune the lc class too
	}
	return classWant{Class: class.BE, Timeslice: sc.BETimeslice, Interleave: d[class.BE].Interleave},
		classWant{Class: class.LC, Timeslice: lcTimeslice, Interleave: d[class.LC].Interleave}
}

func (w classWant) String() string {
	if w.Timeslice == 0 {
		return fmt.Sprintf("%s (timeslice chosen by the daemon)", w.Class)
	}
	return fmt.Sprintf("%s (timeslice %s)", w.Class, usArg(w.Timeslice))
}

// parseReadBack decodes get-timeslice's JSON (a list of processes, each
// group a tsg.Group as gpreemptctl prints it) into pid's groups.
func parseReadBack(b []byte, pid int) ([]tsg.Group, error) {
	var procs []struct {
		PID    int         `json:"pid"`
		Groups []tsg.Group `json:"groups"`
	}
	if err := json.Unmarshal(b, &procs); err != nil {
		return nil, fmt.Errorf("gpreemptctl get-timeslice output: %w", err)
	}
	for _, p := range procs {
		if p.PID == pid {
			return p.Groups, nil
		}
	}
	return nil, fmt.Errorf("gpreemptctl get-timeslice output: no process %d", pid)
}

// holds reports whether every group reads back w (and there is a group).
func (w classWant) holds(gs []tsg.Group) bool {
	if len(gs) == 0 {
		return false
	}
	for _, g := range gs {
		if w.Timeslice != 0 && g.Timeslice.Duration() != w.Timeslice {
			return false
		}
		if g.Interleave != tsg.LevelUnknown && g.Interleave != w.Interleave {
			return false
		}
	}
	return true
}

// describeGroups writes groups for an error message: "compute 2048us/n/a,
// copy 1024us/n/a x3".
func describeGroups(gs []tsg.Group) string {
	if len(gs) == 0 {
		return "no channel groups"
	}
	var parts []string
	count := map[string]int{}
	for _, g := range gs {
		s := fmt.Sprintf("%s %s/%s", g.Engine, usArg(g.Timeslice.Duration()), g.Interleave)
		if count[s] == 0 {
			parts = append(parts, s)
		}
		count[s]++
	}
	for i, s := range parts {
		if n := count[s]; n > 1 {
			parts[i] = s + " x" + strconv.Itoa(n)
		}
	}
	return strings.Join(parts, ", ")
}

// DaemonClassed records how long a worker of a daemon: scenario took to
// read back its class.
type DaemonClassed struct {
	Label     string `json:"label"`
	PID       int    `json:"pid"`
	Class     string `json:"class"`
	Timeslice string `json:"timeslice"`
	// WaitMs is from the worker's READY to the end of the first read-back
	// that showed the class: an upper bound of the daemon's own delay, at
	// the resolution of one read-back (a gpreemptctl run, tens of ms).
	WaitMs float64 `json:"wait_ms"`
	// Reads is how many read-backs it took (1: classed by the first).
	Reads int `json:"reads"`
}

// classWaiter polls a worker's read-back until it holds a class. Its clock,
// sleep and read-back are injected so that tests need no timing.
type classWaiter struct {
	read     func(ctx context.Context, pid int) ([]tsg.Group, error)
	now      func() time.Time
	sleep    func(ctx context.Context, d time.Duration) error
	interval time.Duration
	timeout  time.Duration
}

// wait reads pid's groups every interval until they hold want, and fails
// with ErrNotClassed after timeout. A read that fails (the process's groups
// momentarily unreadable) counts as not yet; its error is in the timeout's
// message.
func (cw classWaiter) wait(ctx context.Context, label string, pid int, want classWant) (DaemonClassed, error) {
	rec := DaemonClassed{Label: label, PID: pid, Class: string(want.Class), Timeslice: usArg(want.Timeslice)}
	start := cw.now()
	var last string
	for {
		gs, err := cw.read(ctx, pid)
		rec.Reads++
		now := cw.now()
		if err == nil && want.holds(gs) {
			rec.WaitMs = float64(now.Sub(start)) / float64(time.Millisecond)
			return rec, nil
		}
		if err != nil {
			if ctx.Err() != nil {
				return rec, ctx.Err()
			}
			last = err.Error()
		} else {
			last = describeGroups(gs)
		}
		if now.Sub(start) >= cw.timeout {
			return rec, fmt.Errorf("%w: %s (pid %d) did not read back class %s within %v (%d reads; last: %s): is gpreemptd running with a rule 'class_from_env: %s', requests up to lc, and the same %s timeslice?",
				ErrNotClassed, label, pid, want, cw.timeout, rec.Reads, last, classEnvVar, want.Class)
		}
		if err := cw.sleep(ctx, cw.interval); err != nil {
			return rec, err
		}
	}
}

// readBackTimeout bounds one read-back; it is a discovery plus a few GETs.
const readBackTimeout = 10 * time.Second

// readBack runs `gpreemptctl -o json get-timeslice --pid PID` (read-only)
// and returns pid's groups. Not recorded as a gpreemptctl call: a wait
// makes many.
func (c *ctlRunner) readBack(ctx context.Context, pid int) ([]tsg.Group, error) {
	ctx, cancel := context.WithTimeout(ctx, readBackTimeout)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, c.path, "-o", "json", "get-timeslice", "--pid", strconv.Itoa(pid))
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("%w: get-timeslice --pid %d: %w: %s", ErrCtl, pid, err, strings.TrimSpace(errb.String()))
	}
	return parseReadBack(out.Bytes(), pid)
}

// waitClassed waits until w's groups read back want (daemon: scenarios),
// failing early if any of the scenario's workers dies.
func (run *scenarioRun) waitClassed(ctx context.Context, w *worker, want classWant) error {
	o := &run.r.o
	cw := classWaiter{
		read:     run.r.ctl.readBack,
		now:      time.Now,
		sleep:    func(ctx context.Context, d time.Duration) error { return sleepWatching(ctx, d, run.all...) },
		interval: o.DaemonPoll,
		timeout:  o.DaemonTimeout,
	}
	rec, err := cw.wait(ctx, w.label, w.pid(), want)
	run.sr.DaemonClassed = append(run.sr.DaemonClassed, rec)
	if err == nil {
		run.r.log.Info("classed by gpreemptd", "worker", w.label, "pid", rec.PID, "class", rec.Class, "ms", fmt.Sprintf("%.1f", rec.WaitMs), "reads", rec.Reads)
	}
	return err
}

// daemonClassedLine is the report's line for one run's waits.
func daemonClassedLine(recs []DaemonClassed) string {
	parts := make([]string, len(recs))
	for i, r := range recs {
		reads := "reads"
		if r.Reads == 1 {
			reads = "read"
		}
		parts[i] = fmt.Sprintf("%s (pid %d) %s %s after %.1f ms (%d %s)", r.Label, r.PID, r.Class, r.Timeslice, r.WaitMs, r.Reads, reads)
	}
	return strings.Join(parts, "; ")
}
