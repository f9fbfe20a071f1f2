package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/tsg"
)

func TestParseDaemonScenarios(t *testing.T) {
	scs, err := ParseScenarios("be-1us,daemon:be-1us,prepreempt-be-1us,daemon:prepreempt-be-1us,daemon:pytorch-be-1ms,daemon:be-1us@x2,daemon:llm-standalone")
	if err != nil {
		t.Fatal(err)
	}
	want := []Scenario{
		{Name: "be-1us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond},
		{Name: "daemon:be-1us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond, Daemon: true},
		{Name: "prepreempt-be-1us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond, Hints: true},
		{Name: "daemon:prepreempt-be-1us", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond, Hints: true, Daemon: true},
		{Name: "daemon:pytorch-be-1ms", Kind: KindShared, Runtime: RuntimePyTorch, BETimeslice: time.Millisecond, Daemon: true},
		{Name: "daemon:be-1us@x2", Kind: KindShared, Runtime: RuntimeKernels, BETimeslice: time.Microsecond, Daemon: true, PeriodFactor: 2},
		{Name: "daemon:llm-standalone", Kind: KindStandalone, Runtime: RuntimeLLM, Daemon: true},
	}
	if !slices.Equal(scs, want) {
		t.Fatalf("got  %+v\nwant %+v", scs, want)
	}
	if d := scs[3].Dir(); d != "daemon_prepreempt-be-1us" {
		t.Errorf("Dir = %q", d)
	}
	if !scs[1].NeedsCtl() {
		t.Error("daemon:be-1us: NeedsCtl false: its read-back needs gpreemptctl")
	}
	// The daemon: rows compare with the same baselines as the gpreemptctl ones.
	if lc, be := baselineNames(scs[1]); lc != "standalone" || be != "be-only" {
		t.Errorf("baselines %s, %s", lc, be)
	}
	// The LC alone under the daemon compares with the plain standalone run.
	if lc, _ := baselineNames(scs[6]); lc != "llm-standalone" || scs[6].LCCount() != 1 || scs[6].BECount() != 0 {
		t.Errorf("daemon:llm-standalone: baseline %s, %d LC, %d BE", lc, scs[6].LCCount(), scs[6].BECount())
	}
	for _, bad := range []string{"daemon:be-only", "daemon:defaults", "daemon:be-ratio:3000us:1000us",
		"daemon:multi-tenant", "daemon:daemon:be-1us", "daemon:", "daemon:be-0us"} {
		if _, err := ParseScenarios(bad); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: err %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := ParseScenarios("daemon:be-only"); err == nil || !strings.Contains(err.Error(), "daemon: takes an LC + BE scenario") {
		t.Errorf("daemon:be-only: %v", err)
	}
}

func TestWorkerClassEnv(t *testing.T) {
	parent := []string{"PATH=/bin", "GPREEMPT_CLASS=lc", "GPREEMPT_CLASSES=x", "HOME=/root"}
	plain, _ := ParseScenarios("be-1us")
	daemon, _ := ParseScenarios("daemon:be-1us")
	tests := []struct {
		name  string
		sc    Scenario
		role  class.Name
		extra []string
		want  []string
	}{
		// A gpreemptctl-classed worker never carries the variable, even one
		// the orchestrator inherited: the daemon must leave it alone.
		{"gpreemptctl BE", plain[0], class.BE, nil, []string{"PATH=/bin", "GPREEMPT_CLASSES=x", "HOME=/root"}},
		{"gpreemptctl LC", plain[0], class.LC, pythonEnv, []string{"PATH=/bin", "GPREEMPT_CLASSES=x", "HOME=/root", "PYTHONUNBUFFERED=1"}},
		{"daemon BE", daemon[0], class.BE, nil, []string{"PATH=/bin", "GPREEMPT_CLASSES=x", "HOME=/root", "GPREEMPT_CLASS=be"}},
		{"daemon LC", daemon[0], class.LC, pythonEnv, []string{"PATH=/bin", "GPREEMPT_CLASSES=x", "HOME=/root", "PYTHONUNBUFFERED=1", "GPREEMPT_CLASS=lc"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := childEnv(parent, slices.Concat(tt.extra, tt.sc.classEnv(tt.role)))
			if !slices.Equal(got, tt.want) {
				t.Errorf("env %q\nwant %q", got, tt.want)
			}
		})
	}
	if len(pythonEnv) != 1 {
		t.Errorf("pythonEnv changed: %q", pythonEnv)
	}
}

func TestParseReadBack(t *testing.T) {
	be, lc := Scenario{Kind: KindShared, BETimeslice: time.Microsecond}.daemonWants()
	if be.Timeslice != time.Microsecond || be.Class != class.BE || be.Interleave != tsg.LevelLow ||
		lc.Timeslice != 5*time.Second || lc.Class != class.LC || lc.Interleave != tsg.LevelHigh {
		t.Fatalf("wants: be %+v, lc %+v", be, lc)
	}
	tests := []struct {
		golden   string // gpreemptctl's own golden output
		holds    bool
		describe string
	}{
		{"class-be-1us-json.golden", true, "compute 1us/low, copy 1us/low x3"},
		{"ps-json.golden", false, "compute 2048us/n/a, copy 1024us/n/a x3"},
	}
	for _, tt := range tests {
		b, err := os.ReadFile(filepath.Join("..", "ctl", "testdata", tt.golden))
		if err != nil {
			t.Fatal(err)
		}
		gs, err := parseReadBack(b, 4242)
		if err != nil {
			t.Fatal(err)
		}
		if len(gs) != 4 || be.holds(gs) != tt.holds || lc.holds(gs) || describeGroups(gs) != tt.describe {
			t.Errorf("%s: %d groups, holds be %v lc %v, %q", tt.golden, len(gs), be.holds(gs), lc.holds(gs), describeGroups(gs))
		}
		if _, err := parseReadBack(b, 1); err == nil {
			t.Errorf("%s: pid 1 found", tt.golden)
		}
	}
	g := func(us tsg.Micros, l tsg.Level) tsg.Group {
		return tsg.Group{Engine: tsg.EngineCompute, Timeslice: us, Interleave: l}
	}
	for _, tt := range []struct {
		gs   []tsg.Group
		want bool
	}{
		{nil, false},
		{[]tsg.Group{g(5_000_000, tsg.LevelUnknown)}, true}, // H100: the level reads n/a
		{[]tsg.Group{g(5_000_000, tsg.LevelHigh), g(5_000_000, tsg.LevelUnknown)}, true},
		{[]tsg.Group{g(5_000_000, tsg.LevelMedium)}, false},
		{[]tsg.Group{g(5_000_000, tsg.LevelHigh), g(2048, tsg.LevelUnknown)}, false},
	} {
		if got := lc.holds(tt.gs); got != tt.want {
			t.Errorf("lc holds %+v = %v", tt.gs, got)
		}
	}
	for _, bad := range []string{"", "{}", `[{"pid":1,"groups":[{"interleave":"max"}]}]`} {
		if _, err := parseReadBack([]byte(bad), 1); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// fakeClock is the waiter's clock: sleeping advances it.
type fakeClock struct {
	t      time.Time
	slept  []time.Duration
	cancel bool
}

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(ctx context.Context, d time.Duration) error {
	if c.cancel {
		return context.Canceled
	}
	c.slept = append(c.slept, d)
	c.t = c.t.Add(d)
	return nil
}

func TestClassWaiter(t *testing.T) {
	be, _ := Scenario{Kind: KindShared, BETimeslice: time.Microsecond}.daemonWants()
	defaults := []tsg.Group{{Engine: tsg.EngineCompute, Timeslice: 2048, Interleave: tsg.LevelUnknown}, {Engine: tsg.EngineCopy, Timeslice: 1024, Interleave: tsg.LevelUnknown}}
	classed := []tsg.Group{{Engine: tsg.EngineCompute, Timeslice: 1, Interleave: tsg.LevelUnknown}, {Engine: tsg.EngineCopy, Timeslice: 1, Interleave: tsg.LevelUnknown}}
	type step struct {
		gs   []tsg.Group
		err  error
		cost time.Duration // how long the read-back takes
	}
	tests := []struct {
		name     string
		steps    []step // the last repeats
		cancel   bool
		wantErr  error
		wantText string
		wantMs   float64
		reads    int
	}{
		{name: "classed at once", steps: []step{{gs: classed, cost: 40 * time.Millisecond}}, wantMs: 40, reads: 1},
		{name: "classed on the third read", steps: []step{
			{err: fmt.Errorf("%w: exit status 7: no GPU context", ErrCtl), cost: 30 * time.Millisecond},
			{gs: defaults, cost: 30 * time.Millisecond},
			{gs: classed, cost: 30 * time.Millisecond},
		}, wantMs: 3*30 + 2*20, reads: 3},
		{name: "never classed", steps: []step{{gs: defaults, cost: 30 * time.Millisecond}}, wantErr: ErrNotClassed,
			wantText: "be (pid 77) did not read back class be (timeslice 1us) within 1s (21 reads; last: compute 2048us/n/a, copy 1024us/n/a)", reads: 21},
		{name: "read-back keeps failing", steps: []step{{err: fmt.Errorf("%w: permission denied", ErrCtl), cost: 30 * time.Millisecond}},
			wantErr: ErrNotClassed, wantText: "last: gpreemptctl failed: permission denied", reads: 21},
		{name: "worker dies while waiting", steps: []step{{gs: defaults}}, cancel: true, wantErr: context.Canceled, reads: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := &fakeClock{t: time.Unix(1000, 0), cancel: tt.cancel}
			n := 0
			cw := classWaiter{
				read: func(_ context.Context, pid int) ([]tsg.Group, error) {
					if pid != 77 {
						t.Fatalf("read pid %d", pid)
					}
					s := tt.steps[min(n, len(tt.steps)-1)]
					n++
					clk.t = clk.t.Add(s.cost)
					return s.gs, s.err
				},
				now: clk.now, sleep: clk.sleep, interval: 20 * time.Millisecond, timeout: time.Second,
			}
			rec, err := cw.wait(context.Background(), "be", 77, be)
			if !errors.Is(err, tt.wantErr) || (err != nil && !strings.Contains(err.Error(), tt.wantText)) {
				t.Fatalf("err %v, want %v with %q", err, tt.wantErr, tt.wantText)
			}
			if rec.Reads != tt.reads || rec.WaitMs != tt.wantMs || rec.Label != "be" || rec.PID != 77 || rec.Class != "be" || rec.Timeslice != "1us" {
				t.Errorf("record %+v, want %d reads, %v ms", rec, tt.reads, tt.wantMs)
			}
			for _, d := range clk.slept {
				if d != 20*time.Millisecond {
					t.Errorf("slept %v", d)
				}
			}
		})
	}
}

func TestDaemonClassedReport(t *testing.T) {
	recs := []DaemonClassed{
		{Label: "be", PID: 812, Class: "be", Timeslice: "1us", WaitMs: 43.14, Reads: 2},
		{Label: "lc", PID: 830, Class: "lc", Timeslice: "5000000us", WaitMs: 38, Reads: 1},
	}
	want := "be (pid 812) be 1us after 43.1 ms (2 reads); lc (pid 830) lc 5000000us after 38.0 ms (1 read)"
	if got := daemonClassedLine(recs); got != want {
		t.Errorf("line %q\nwant %q", got, want)
	}
	res := &Results{Scenarios: []*ScenarioResult{
		{Name: "be-1us", Rep: 1},
		{Name: "daemon:be-1us", Rep: 1, DaemonClassed: recs},
	}}
	var b bytes.Buffer
	if err := WriteMarkdown(&b, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Classed by gpreemptd (") || !strings.Contains(b.String(), "\n- daemon:be-1us (rep 1): "+want+"\n") {
		t.Errorf("report:\n%s", b.String())
	}
}

// fakeDaemonCtl writes a gpreemptctl stand-in that plays a running
// gpreemptd: get-timeslice reads back class be (1us) or lc (5s) for a pid
// whose environment holds GPREEMPT_CLASS, else the driver's defaults
// (classed is "never": defaults always). Every call is logged with the
// target's GPREEMPT_CLASS.
func fakeDaemonCtl(t *testing.T, classed string) (path, log string) {
	t.Helper()
	dir := t.TempDir()
	path, log = filepath.Join(dir, "gpreemptctl"), filepath.Join(dir, "calls.log")
	script := `#!/bin/sh
if [ "$3" = get-timeslice ]; then pid=$5; else pid=$3; fi
cls=$(tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^GPREEMPT_CLASS=//p')
echo "$* env=$cls" >> ` + log + `
[ "$3" = get-timeslice ] || exit 0
case "$cls" in be) ts=1;; lc) ts=5000000;; *) ts=2048;; esac
[ "` + classed + `" = never ] && ts=2048
printf '[{"pid":%s,"comm":"x","groups":[{"pid":%s,"handle":"0x5c000015","engine":"compute","timeslice_us":%s,"interleave":"n/a"}]}]\n' $pid $pid $ts
`
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, log
}

func TestRunDaemonScenarios(t *testing.T) {
	ctl, calls := fakeDaemonCtl(t, "")
	o := testOptions(t, "standalone,be-1us,daemon:be-1us,daemon:standalone,be-only", ctl)
	o.DaemonPoll, o.DaemonTimeout = 5*time.Millisecond, 5*time.Second
	env, stdout := testEnv(t, "")
	// Inherited by the orchestrator, dropped for every worker.
	t.Setenv(classEnvVar, "lc")
	if err := runAll(context.Background(), o, env); err != nil {
		t.Fatal(err)
	}
	res, err := LoadResults(filepath.Join(o.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*ScenarioResult{}
	for _, sr := range res.Scenarios {
		byName[sr.Name] = sr
	}
	d, p := byName["daemon:be-1us"], byName["be-1us"]
	if len(d.Ctl) != 0 || len(p.Ctl) != 2 {
		t.Errorf("gpreemptctl calls recorded: daemon %d, plain %d", len(d.Ctl), len(p.Ctl))
	}
	if len(d.DaemonClassed) != 2 || d.DaemonClassed[0].Label != "be" || d.DaemonClassed[0].PID != d.BE[0].Result.PID ||
		d.DaemonClassed[1].Label != "lc" || d.DaemonClassed[1].Timeslice != "5000000us" || d.DaemonClassed[1].PID != d.LC.PID {
		t.Errorf("daemon_classed %+v", d.DaemonClassed)
	}
	if d.BE[0].Timeslice != "1us" || d.BETimeslice != "1us" || d.LCP50VsStandalone == 0 || d.BEVsBEOnly == 0 {
		t.Errorf("daemon:be-1us: be %+v, ratios %v %v", d.BE[0], d.LCP50VsStandalone, d.BEVsBEOnly)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	// The LC alone under the daemon: classed lc by it, no BE, related to
	// the plain standalone run.
	a := byName["daemon:standalone"]
	if len(a.DaemonClassed) != 1 || a.DaemonClassed[0].Label != "lc" || len(a.BE) != 0 || a.LCP50VsStandalone == 0 {
		t.Errorf("daemon:standalone: classed %+v, %d BE, p50 ratio %v", a.DaemonClassed, len(a.BE), a.LCP50VsStandalone)
	}
	want := fmt.Sprintf("class --pid %d --be-timeslice 1us be env=\nclass --pid %d lc env=\n-o json get-timeslice --pid %d env=be\n-o json get-timeslice --pid %d env=lc\n-o json get-timeslice --pid %d env=lc\n",
		p.BE[0].Result.PID, p.LC.PID, d.BE[0].Result.PID, d.LC.PID, a.LC.PID)
	if string(got) != want {
		t.Errorf("gpreemptctl calls:\n%s\nwant:\n%s", got, want)
	}
	if !strings.Contains(stdout.String(), "- daemon:be-1us: be (pid ") {
		t.Errorf("report has no daemon line:\n%s", stdout)
	}
}

func TestRunDaemonNotClassed(t *testing.T) {
	ctl, _ := fakeDaemonCtl(t, "never")
	o := testOptions(t, "daemon:be-1us", ctl)
	o.DaemonPoll, o.DaemonTimeout = 5*time.Millisecond, 200*time.Millisecond
	env, _ := testEnv(t, "")
	err := runAll(context.Background(), o, env)
	if !errors.Is(err, ErrNotClassed) || !strings.Contains(err.Error(), "last: compute 2048us/n/a") {
		t.Fatalf("runAll = %v", err)
	}
	res, err := LoadResults(filepath.Join(o.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if sr := res.Scenarios[0]; sr.Error == "" || len(sr.DaemonClassed) != 1 || sr.DaemonClassed[0].Reads < 2 {
		t.Errorf("failure not recorded: %+v", sr)
	}
}
