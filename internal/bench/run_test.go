package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"

	"github.com/gpreempt/gpreempt/internal/cuda"
	"github.com/gpreempt/gpreempt/internal/golden"
	gpuinfo "github.com/gpreempt/gpreempt/internal/gpu"
)

// The orchestrator is tested end to end without a GPU: this test binary
// doubles as the worker binary. Started with fakeWorkerEnv set and "be" or
// "lc" as its first argument, it behaves like the real worker (READY line,
// --wait-go, SIGTERM, JSON file) with synthetic numbers; fakeModeEnv makes
// it misbehave in chosen ways.
const (
	fakeWorkerEnv = "GPREEMPT_BENCH_FAKE_WORKER"
	fakeModeEnv   = "GPREEMPT_BENCH_FAKE_MODE"
)

// benchAppEnv makes this test binary gpreempt-bench itself, for the scripts' dry runs
// (benchDir).
const benchAppEnv = "GPREEMPT_BENCH_AS_APP"

func TestMain(m *testing.M) {
	if os.Getenv(fakeWorkerEnv) != "" && len(os.Args) > 1 && (os.Args[1] == "be" || os.Args[1] == "lc") {
		os.Exit(fakeWorker(os.Args[1], os.Args[2:]))
	}
	// As --python: "-u SCRIPT ARGS", the Python workers played by the same fake.
	if os.Getenv(fakeWorkerEnv) != "" && len(os.Args) > 2 && os.Args[1] == "-u" {
		role := map[bool]string{true: "lc", false: "be"}[strings.HasPrefix(filepath.Base(os.Args[2]), "lc_")]
		os.Exit(fakeWorker(role, os.Args[3:]))
	}
	if os.Getenv(benchAppEnv) != "" {
		if err := NewApp().Run(os.Args); err != nil {
			fmt.Fprintf(os.Stderr, "gpreempt-bench: %v\n", err)
			os.Exit(ExitCode(err))
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// benchDir is a folder whose gpreempt-bench is this test binary as the bench (the
// environment needs benchAppEnv set), for a script's C or .carry.
func benchDir(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.Symlink(self, filepath.Join(dir, "gpreempt-bench")); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fakeWorker(role string, args []string) int {
	flags := map[string]string{}
	for i := 0; i < len(args); i++ {
		if name, ok := strings.CutPrefix(args[i], "--"); ok {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				flags[name] = args[i+1]
				i++
			} else {
				flags[name] = "true"
			}
		}
	}
	mode := os.Getenv(fakeModeEnv)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fake %s: "+format+"\n", append([]any{role}, a...)...)
		return 1
	}
	if flags["calibrate-only"] == "true" {
		fmt.Println("ITERS 4242")
		return 0
	}
	switch mode {
	case role + "-die":
		return fail("CUDA_ERROR_NO_DEVICE: simulated crash before READY")
	case role + "-hang":
		time.Sleep(time.Hour)
	case role + "-wrong-pid":
		fmt.Println("READY pid=1")
		time.Sleep(time.Hour)
	case "pinned":
		// --lc-cpus / --be-cpus: each worker runs on its role's CPUs alone.
		want := os.Getenv("FAKE_CPUS_" + role)
		if got := cpusAllowed(); got != want {
			return fail("runs on CPUs %q, want %q", got, want)
		}
	case "lc-env":
		// --lc-env FAKE_LC_ONLY=1: LC workers have it, BE workers not.
		if (role == "lc") != (os.Getenv("FAKE_LC_ONLY") == "1") {
			return fail("FAKE_LC_ONLY=%q", os.Getenv("FAKE_LC_ONLY"))
		}
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	fmt.Fprintln(os.Stderr, "fake worker starting")
	fmt.Printf("READY pid=%d\n", os.Getpid())

	if role == "be" {
		start := time.Now()
		dur, _ := time.ParseDuration(flags["duration"])
		// A kernel completes every 2 ms from the start, as on a GPU,
		// whether or not this process is given a CPU meanwhile: the
		// completion times are made from the clock when the worker ends,
		// so a loaded machine cannot leave the BE with none in the window
		// (nor with times that go backwards).
		const every = 2 * time.Millisecond
		timer := time.NewTimer(dur)
		defer timer.Stop()
		var crash <-chan time.Time
		if mode == "be-crash" {
			crash = time.After(21 * every)
		}
		select {
		case <-sigs:
		case <-timer.C:
		case <-crash:
			return fail("simulated crash while running")
		}
		var done []int64
		end := time.Now()
		if mode != "be-stall" {
			for t := start.Add(every); !t.After(end); t = t.Add(every) {
				done = append(done, monoNs(t))
			}
		}
		r := &BEResult{Schema: SchemaVersion, Worker: "fake be", PID: os.Getpid(), Unit: "kernels",
			Kernels: int64(len(done)), DurationS: end.Sub(start).Seconds(), KernelsPerSec: float64(len(done)) / end.Sub(start).Seconds(),
			StartMonoNs: monoNs(start), EndMonoNs: monoNs(end), CompletionsMonoNs: done}
		if err := writeJSON(flags["out"], os.Stdout, r); err != nil {
			return fail("%v", err)
		}
		return 0
	}

	if flags["wait-go"] == "true" {
		stdin := bufio.NewReader(os.Stdin)
		if _, err := stdin.ReadString('\n'); err != nil {
			return fail("no go line: %v", err)
		}
		if n, _ := strconv.Atoi(flags["alone"]); n > 0 { // lc_decode.py --alone: 200, 201, ... ms alone (CPU loop 2, 2.1, ... ms), then a second go
			var ns []string
			for i := range n {
				ns = append(ns, fmt.Sprintf("%d:%d", 200_000_000+1_000_000*i, 2_000_000+100_000*i))
			}
			fmt.Println("ALONE " + strings.Join(ns, ","))
			if mode == "lc-die-at-alone" {
				return fail("simulated crash after its ALONE line")
			}
			if _, err := stdin.ReadString('\n'); err != nil {
				return fail("no second go line: %v", err)
			}
			if f := os.Getenv("FAKE_DAEMON_CONFIG"); f != "" { // what gpreemptd was told by the second go
				b, _ := os.ReadFile(f)
				fmt.Printf("CONFIG AT GO %q\n", b)
			}
		}
	}
	n, _ := strconv.Atoi(flags["requests"])
	period, _ := time.ParseDuration(flags["period"])
	r := &LCResult{Schema: SchemaVersion, Worker: "fake lc", PID: os.Getpid(), GPUStamps: true, Requested: n}
	start := time.Now()
	gpu := uint64(1e15)
	for i := range n {
		time.Sleep(period / 4)
		lat := int64(30_000 + 1_000*(i%7))
		if mode == "lc-implausible" && i == 3 {
			lat = 5_000
		}
		r.Samples = append(r.Samples, LCSample{ArrivalMonoNs: monoNs(time.Now()), LatencyNs: lat, LaunchCallNs: 2_000,
			GPUStartNs: gpu, GPUEndNs: gpu + 20_000, GPUNs: 20_000})
		gpu += uint64(period)
	}
	if mode == "lc-short" {
		r.Samples = r.Samples[:n/2]
	}
	r.MeasureStartMonoNs, r.MeasureEndMonoNs = monoNs(start), monoNs(time.Now())
	if err := writeJSON(flags["out"], os.Stdout, r); err != nil {
		return fail("%v", err)
	}
	return 0
}

// fakeCtl writes a gpreemptctl stand-in that logs its arguments to a file
// and exits with the given status.
func fakeCtl(t *testing.T, exit int) (path, log string) {
	t.Helper()
	dir := t.TempDir()
	path = filepath.Join(dir, "gpreemptctl")
	log = filepath.Join(dir, "calls.log")
	script := fmt.Sprintf("#!/bin/sh\necho \"$@\" >> %q\necho \"gpreemptctl stand-in: $*\"\nexit %d\n", log, exit)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path, log
}

func testOptions(t *testing.T, scenarios, ctl string) runOptions {
	t.Helper()
	scs, err := ParseScenarios(scenarios)
	if err != nil {
		t.Fatal(err)
	}
	return runOptions{
		Scenarios: scs, Repeat: 1, Seed: 1, Out: t.TempDir(), Ctl: ctl,
		Duration: 300 * time.Millisecond, Settle: 20 * time.Millisecond, ReadyTimeout: 10 * time.Second,
		Period: 3500 * time.Microsecond, Requests: 40, Warmup: 1,
		LCIters: DefaultLCKernelIters, LCThreads: 256, LCCalibrateUs: 20,
		BEIters: DefaultBEKernelIters, BEThreads: 256, BEQueue: 3, BECalibrateMs: 2.35,
		PyPeriod: 20 * time.Millisecond, HintLauncher: "goroutine",
	}
}

func testEnv(t *testing.T, mode string) (runEnv, *bytes.Buffer) {
	t.Helper()
	t.Setenv(fakeWorkerEnv, "1")
	t.Setenv(fakeModeEnv, mode)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var stdout bytes.Buffer
	return runEnv{
		self: []string{self},
		probe: func(int) (DeviceInfo, error) {
			return DeviceInfo{Name: "Fake GPU", SMs: 4, CC: "9.0", Driver: 13000}, nil
		},
		stdout: &stdout,
		log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, &stdout
}

func TestLCEnvReachesLCWorkersOnly(t *testing.T) {
	ctl, _ := fakeCtl(t, 0)
	o := testOptions(t, "defaults", ctl)
	env, _ := testEnv(t, "lc-env")
	t.Setenv("FAKE_LC_ONLY", "") // not inherited: given to LC workers alone
	o.LCEnv = []string{"FAKE_LC_ONLY=1"}
	if err := runAll(context.Background(), o, env); err != nil {
		t.Fatal(err)
	}
	// Without it the LC worker refuses to run (the check can fail).
	o.LCEnv, o.Out = nil, t.TempDir()
	if err := runAll(context.Background(), o, env); err == nil {
		t.Fatal("LC worker ran without --lc-env")
	}
}

// cpusAllowed is the calling thread's CPU list as /proc shows it.
func cpusAllowed() string {
	b, err := os.ReadFile("/proc/thread-self/status")
	if err != nil {
		return err.Error()
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "no Cpus_allowed_list"
}

func TestWorkersArePinned(t *testing.T) {
	// Any two online CPUs the kernel lets this process pin to: not only
	// those of its own mask (under taskset a child may be given others).
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skip(err)
	}
	online, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	var allowed []int
	for _, c := range online.List() {
		if onCPUs(cpuset.New(c), func() error { return nil }) == nil {
			allowed = append(allowed, c)
		}
	}
	if len(allowed) < 2 {
		t.Skipf("needs two CPUs to tell LC from BE workers; may pin to %v", allowed)
	}
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	lc, be := strconv.Itoa(allowed[0]), strconv.Itoa(allowed[len(allowed)-1])
	ctl, _ := fakeCtl(t, 0)
	o := testOptions(t, "defaults", ctl)
	o.LCCPUs, o.BECPUs = lc, be
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	env, _ := testEnv(t, "pinned")
	t.Setenv("FAKE_CPUS_lc", lc)
	t.Setenv("FAKE_CPUS_be", be)
	if err := runAll(context.Background(), o, env); err != nil {
		t.Fatal(err)
	}
	// Every thread of the bench got its own CPUs back.
	var own []int
	for c := range maxCPUs {
		if mine.IsSet(c) {
			own = append(own, c)
		}
	}
	want := cpuset.New(own...).String()
	tasks, _ := filepath.Glob("/proc/self/task/*/status")
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // exited meanwhile
		}
		if !strings.Contains(string(b), "Cpus_allowed_list:\t"+want+"\n") {
			t.Errorf("%s: a bench thread kept a worker's CPUs (want %s):\n%s", f, want, b)
		}
	}
	// Swapped, each worker finds itself on the other's CPU: the check can fail.
	o.LCCPUs, o.BECPUs, o.Out = be, lc, t.TempDir()
	if err := o.validate(); err != nil {
		t.Fatal(err)
	}
	if err := runAll(context.Background(), o, env); err == nil {
		t.Fatal("workers ran on the other role's CPUs unnoticed")
	}
}

func TestRunMatrix(t *testing.T) {
	ctl, calls := fakeCtl(t, 0)
	o := testOptions(t, "standalone,defaults,be-200us,be-only,be-ratio:3000us:1000us", ctl)
	env, stdout := testEnv(t, "")
	if err := runAll(context.Background(), o, env); err != nil {
		t.Fatal(err)
	}

	res, err := LoadResults(filepath.Join(o.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scenarios) != 5 || res.Error != "" {
		t.Fatalf("%d scenarios, error %q", len(res.Scenarios), res.Error)
	}
	if res.Calibrated["be_kernel_iters"] != 4242 || res.Calibrated["lc_kernel_iters"] != 4242 || res.Config.BEIters != 4242 {
		t.Errorf("calibration not applied: %v, config %d", res.Calibrated, res.Config.BEIters)
	}
	byName := map[string]*ScenarioResult{}
	for _, sr := range res.Scenarios {
		byName[sr.Name] = sr
		if sr.Error != "" {
			t.Errorf("%s: %s", sr.Name, sr.Error)
		}
	}
	if s := byName["standalone"]; s.LCLatencyUs == nil || s.LCLatencyUs.N != 40 || len(s.BE) != 0 || s.LCP50VsStandalone != 1 {
		t.Errorf("standalone: %+v", s)
	}
	if s := byName["defaults"]; len(s.Ctl) != 0 || len(s.BE) != 1 || s.BE[0].WindowKernels == 0 || s.BEVsBEOnly == 0 {
		t.Errorf("defaults: ctl %v, be %+v, vs be-only %v", s.Ctl, s.BE, s.BEVsBEOnly)
	}
	if s := byName["be-ratio:3000us:1000us"]; len(s.BE) != 2 || s.BE[0].Timeslice != "3000us" || s.BE[1].Timeslice != "1000us" {
		t.Errorf("be-ratio: %+v", s.BE)
	}
	// Per-kernel times stay in the worker files, not in results.json.
	if s := byName["be-only"]; len(s.BE) != 1 || s.BE[0].Result.CompletionsMonoNs != nil {
		t.Errorf("be-only: completions kept in results.json")
	}

	// gpreemptctl was called with the workers' own pids, BE before LC.
	b200 := byName["be-200us"]
	if len(b200.Ctl) != 2 {
		t.Fatalf("be-200us: %d gpreemptctl calls, want 2", len(b200.Ctl))
	}
	bePID, lcPID := b200.BE[0].Result.PID, b200.LC.PID
	wantCalls := fmt.Sprintf("class --pid %d --be-timeslice 200us be\nclass --pid %d lc\n", bePID, lcPID)
	ratio := byName["be-ratio:3000us:1000us"]
	wantCalls += fmt.Sprintf("set-timeslice --pid %d 3000us\nset-timeslice --pid %d 1000us\n", ratio.BE[0].Result.PID, ratio.BE[1].Result.PID)
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != wantCalls {
		t.Errorf("gpreemptctl calls:\n%s\nwant:\n%s", got, wantCalls)
	}
	if !strings.Contains(b200.Ctl[0].Output, "gpreemptctl stand-in") {
		t.Errorf("ctl output not recorded: %q", b200.Ctl[0].Output)
	}

	for _, f := range []string{"results.md", "cdf.png", "be-200us/lc.json", "be-200us/be.json", "be-200us/be.stderr", "be-ratio_3000us_1000us/be2.json"} {
		if fi, err := os.Stat(filepath.Join(o.Out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(stdout.String(), "| be-200us |") {
		t.Errorf("table not printed:\n%s", stdout)
	}
}

func TestRunFailures(t *testing.T) {
	tests := []struct {
		name      string
		scenarios string
		mode      string
		ctlExit   int
		edit      func(*runOptions)
		wantErr   error
		wantText  string
	}{
		{name: "BE dies before READY", scenarios: "defaults", mode: "be-die", wantErr: ErrWorker, wantText: "simulated crash before READY"},
		{name: "LC dies before READY", scenarios: "standalone", mode: "lc-die", wantErr: ErrWorker, wantText: "lc (pid"},
		{name: "READY timeout", scenarios: "standalone", mode: "lc-hang", edit: func(o *runOptions) { o.ReadyTimeout = 300 * time.Millisecond }, wantErr: ErrWorker, wantText: "not READY within 300ms"},
		{name: "READY names another pid", scenarios: "be-only", mode: "be-wrong-pid", wantErr: ErrWorker, wantText: "printed READY pid=1"},
		{name: "BE dies while LC measures", scenarios: "defaults", mode: "be-crash", edit: func(o *runOptions) { o.Requests = 400 }, wantErr: ErrWorker, wantText: "simulated crash while running"},
		{name: "gpreemptctl fails", scenarios: "be-1us", ctlExit: 5, wantErr: ErrCtl, wantText: "gpreemptctl stand-in: class --pid"},
		{name: "LC latency below kernel time", scenarios: "standalone", mode: "lc-implausible", wantErr: ErrImplausible, wantText: "below the GPU-measured kernel duration"},
		{name: "LC returns fewer samples", scenarios: "standalone", mode: "lc-short", wantErr: ErrImplausible, wantText: "20 samples, 40 requested"},
		{name: "BE makes no progress", scenarios: "be-only", mode: "be-stall", wantErr: ErrImplausible, wantText: "completed no kernels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctl, _ := fakeCtl(t, tt.ctlExit)
			o := testOptions(t, tt.scenarios, ctl)
			if tt.edit != nil {
				tt.edit(&o)
			}
			env, _ := testEnv(t, tt.mode)
			start := time.Now()
			err := runAll(context.Background(), o, env)
			if !errors.Is(err, tt.wantErr) || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("runAll = %v\nwant %v containing %q", err, tt.wantErr, tt.wantText)
			}
			if time.Since(start) > 8*time.Second {
				t.Errorf("took %v to fail", time.Since(start))
			}
			// The failure is recorded beside the partial results.
			res, err := LoadResults(filepath.Join(o.Out, "results.json"))
			if err != nil {
				t.Fatal(err)
			}
			if res.Error == "" || len(res.Scenarios) != 1 || res.Scenarios[0].Error == "" {
				t.Errorf("failure not recorded: error %q, scenarios %d", res.Error, len(res.Scenarios))
			}
		})
	}
}

func TestRunStopsEarly(t *testing.T) {
	t.Run("no GPU", func(t *testing.T) {
		o := testOptions(t, "standalone", "")
		env, _ := testEnv(t, "")
		env.probe = func(int) (DeviceInfo, error) {
			return DeviceInfo{}, gpuError(fmt.Errorf("%w: libcuda.so.1: cannot open shared object file", cuda.ErrLibraryNotFound))
		}
		err := runAll(context.Background(), o, env)
		if !errors.Is(err, ErrNoGPU) || ExitCode(err) != ExitNoGPU || !strings.Contains(err.Error(), "libcuda.so.1 not found") {
			t.Fatalf("runAll = %v (exit %d)", err, ExitCode(err))
		}
		if entries, _ := os.ReadDir(o.Out); len(entries) != 0 {
			t.Errorf("wrote %d entries before failing", len(entries))
		}
	})
	t.Run("gpreemptctl missing", func(t *testing.T) {
		t.Setenv("PATH", t.TempDir())
		o := testOptions(t, "standalone,be-200us", "")
		env, _ := testEnv(t, "")
		err := runAll(context.Background(), o, env)
		if !errors.Is(err, ErrCtl) || !strings.Contains(err.Error(), "gpreemptctl not found") {
			t.Fatalf("runAll = %v", err)
		}
		if entries, _ := os.ReadDir(o.Out); len(entries) != 0 {
			t.Errorf("ran something before failing: %d entries", len(entries))
		}
	})
	t.Run("gpreemptctl path not executable", func(t *testing.T) {
		o := testOptions(t, "be-1us", filepath.Join(t.TempDir(), "nope"))
		env, _ := testEnv(t, "")
		if err := runAll(context.Background(), o, env); !errors.Is(err, ErrCtl) {
			t.Fatalf("runAll = %v", err)
		}
	})
	t.Run("interrupted", func(t *testing.T) {
		o := testOptions(t, "defaults", "")
		o.Requests = 100000
		env, _ := testEnv(t, "")
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		if err := runAll(ctx, o, env); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("runAll = %v", err)
		}
	})
}

func TestCLI(t *testing.T) {
	tests := []struct {
		args     []string
		wantExit int
		wantText string
	}{
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "nonsense"}, ExitUsage, "unknown scenario"},
		{[]string{"run", "--out", t.TempDir(), "--prep", "5ms", "--period", "3ms"}, ExitUsage, "shorter than --period"},
		{[]string{"run", "--out", t.TempDir(), "--no-such-flag"}, ExitUsage, "no-such-flag"},
		{[]string{"lc", "--requests", "0"}, ExitUsage, "--requests must be positive"},
		{[]string{"run", "--out", t.TempDir(), "--repeat", "0"}, ExitUsage, "--repeat 0"},
		{[]string{"run", "--out", t.TempDir(), "--lc-env", "CUDA_MPS_PIPE_DIRECTORY"}, ExitUsage, `--lc-env "CUDA_MPS_PIPE_DIRECTORY": want KEY=VALUE`},
		{[]string{"run", "--out", t.TempDir(), "--lc-env", "=x"}, ExitUsage, `--lc-env "=x": want KEY=VALUE`},
		{[]string{"run", "--out", t.TempDir(), "--lc-env", "GPREEMPT_CLASS=be"}, ExitUsage, "the bench sets GPREEMPT_CLASS itself"},
		{[]string{"run", "--out", t.TempDir(), "--lc-env", "PYTHONPATH=/x"}, ExitUsage, "the bench sets PYTHONPATH itself"},
		// Values are kept whole: a comma does not split one.
		{[]string{"run", "--out", t.TempDir(), "--lc-env", "CUDA_VISIBLE_DEVICES=0,1", "--lc-env", "x"}, ExitUsage, `--lc-env "x": want KEY=VALUE`},
		{[]string{"run", "--out", t.TempDir(), "--soak", "5m", "--repeat", "3"}, ExitUsage, "drop --repeat 3"},
		{[]string{"run", "--out", t.TempDir(), "--lc-cpus", "3-1"}, ExitUsage, `--lc-cpus "3-1": want a CPU list such as 2-3,8`},
		{[]string{"run", "--out", t.TempDir(), "--be-cpus", "x"}, ExitUsage, `--be-cpus "x": want a CPU list such as 2-3,8`},
		{[]string{"run", "--out", t.TempDir(), "--lc-cpus", "100000"}, ExitUsage, "CPUs below 1024"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "llm-standalone,llm-defaults", "--be-duty", "1s"}, ExitUsage, "--be-duty 1s: want whole milliseconds, at least 2.2s"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "llm-defaults", "--be-duty", "4.0000001s", "--duration", "40s"}, ExitUsage, "want whole milliseconds"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "llm-defaults", "--be-duty", "4s", "--llm-period", "1s"}, ExitUsage, "--be-duty 4s: llm-defaults's requests every 1s do not fit a half past its 100ms guard; want a period of at least 4.2s"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "llm-standalone", "--be-duty", "4s", "--duration", "40s"}, ExitUsage, "--be-duty: no scenario runs a BE that can idle"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "defaults,be-only", "--be-duty", "4s"}, ExitUsage, "--be-duty: no scenario runs a BE that can idle"},
		// Refused before the parser walks the range.
		{[]string{"run", "--out", t.TempDir(), "--lc-cpus", "0-9223372036854775807"}, ExitUsage, "CPUs below 1024"},
		// In range, but no machine here has it online: the kernel refuses the pin.
		{[]string{"run", "--out", t.TempDir(), "--be-cpus", "1023"}, ExitUsage, `--be-cpus "1023": pin to CPUs 1023: invalid argument`},
		{[]string{"run", "--out", t.TempDir(), "--nvml-interval", "-1s"}, ExitUsage, "--nvml-interval"},
		{[]string{"run", "--out", t.TempDir(), "--be-only-duration", "-1s"}, ExitUsage, "--be-only-duration -1s: want a positive duration"},
		{[]string{"run", "--out", t.TempDir(), "--time-limit", "-1s"}, ExitUsage, "--time-limit must not be negative"},
		{[]string{"run", "--out", t.TempDir(), "--own-alone-policy", "/etc/hostname"}, ExitUsage, "--own-alone-policy: no scenario's --daemon-policy names @OWN_P50@"},
		// A Llama decode's five settings, each run lengthened to 30 requests a half of BE's duty,
		// in 505 s: the last would be cut and lost, so nothing starts.
		{append([]string{"run", "--out", t.TempDir(), "--time-limit", "505s"}, llamaPlanArgs...), ExitUsage,
			"the schedule needs about 9m53s by its plan (--plan), more than --time-limit 8m25s"},
		{[]string{"run", "--out", t.TempDir(), "--scenarios", "be-1us@x0.1", "--prep", "1ms"}, ExitUsage, "shorter than its period"},
		{[]string{"be", "--calibrate-only"}, ExitUsage, "needs --calibrate-ms"},
		{[]string{"lc", "--calibrate-only"}, ExitUsage, "needs --calibrate-us"},
		{[]string{"lc", "--prep-dist", "uniform:1ms"}, ExitUsage, "prep distribution"},
		// Usage errors name the command and print no help.
		{[]string{"be", "--no-such-flag"}, ExitUsage, "be: flag provided but not defined: -no-such-flag"},
		{[]string{"lc", "--requests", "x"}, ExitUsage, `lc: invalid value "x" for flag -requests`},
		{[]string{"run", "--repeat"}, ExitUsage, "run: flag needs an argument: -repeat"},
		{[]string{"--no-such-flag"}, ExitUsage, "flag provided but not defined: -no-such-flag"},
		{[]string{"be", "extra"}, ExitUsage, `be takes no arguments, got ["extra"]`},
		{[]string{"run", "--out", t.TempDir(), "extra"}, ExitUsage, `run takes no arguments, got ["extra"]`},
		{[]string{"nosuch"}, ExitUsage, `unknown command "nosuch" (see gpreempt-bench --help)`},
		{[]string{"compare", "a.json"}, ExitUsage, "compare takes two results files"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			app := NewApp()
			var out bytes.Buffer
			app.Writer, app.ErrWriter = &out, &out
			err := app.Run(append([]string{"gpreempt-bench"}, tt.args...))
			if ExitCode(err) != tt.wantExit || err == nil || !strings.Contains(err.Error(), tt.wantText) {
				t.Fatalf("err = %v (exit %d), want exit %d containing %q", err, ExitCode(err), tt.wantExit, tt.wantText)
			}
			if out.Len() > 0 {
				t.Errorf("printed %q; main prints the error, and nothing else is", out.String())
			}
		})
	}
}

// llamaPlanArgs are a Llama decode's settings as scripts/gpu-run-self.sh runs them in one call.
var llamaPlanArgs = []string{"--scenarios", "llm-be-only,slo:llm-defaults,llm-be-200us,daemon:llm-be-200us#gate,llm-be-1us",
	"--llm-family", "llama-330m", "--llm-batch", "2", "--llm-prompt", "128", "--llm-new-tokens", "32", "--llm-period", "1s",
	"--slo-push=false", "--slo-lead-in", "60s", "--be-only-duration", "40s"}

// TestPlan prints each run's planned time and their total, starts nothing,
// and refuses (after the plan) a schedule that outlasts --time-limit.
func TestPlan(t *testing.T) {
	// steady: a pushed LC under SLO mode 480 s after its lead-in, a schedule a 525 s limit cut.
	steady := []string{"--scenarios", "slo:llm-defaults", "--duration", "480s", "--slo-lead-in", "16s"}
	// own: the absolute objective from the LC's own 20 requests alone, GPT-2 every 800 ms: 3 of
	// them an 8 s duty period, 7 periods and one more to reach an idle half.
	dir := t.TempDir()
	pol := func(slo string) string {
		return "version: 1\nclasses:\n  lc: {objective: \"p50<=@OWN_P50*1.15@\"}\nslo:\n  enabled: true\n" + slo
	}
	own, alone := writeFile(t, dir, "own.yaml", pol("")), writeFile(t, dir, "alone.yaml", pol("  ladder: [200us]\n"))
	ownArgs := []string{"--scenarios", "llm-be-only,slo:llm-defaults#abs", "--daemon-policy", "slo:llm-defaults#abs=" + own,
		"--daemon-socket", "/nonexistent.sock", "--daemon-config", own, "--slo-push=false", "--slo-lead-in", "16s"}
	aloneArgs := append([]string{"--own-alone-policy", alone}, ownArgs...)
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"plan", llamaPlanArgs, ""},
		{"plan-fits", append([]string{"--time-limit", "9m53s"}, llamaPlanArgs...), ""},
		{"plan-cut", append([]string{"--time-limit", "9m52s"}, llamaPlanArgs...), "more than --time-limit 9m52s: its last run would be cut and lost"},
		{"plan-steady-cut", append([]string{"--time-limit", "525s"}, steady...), "needs about 8m57s by its plan"},
		// A kernel LC measures its 5000 requests at its period, past --duration.
		{"plan-kernel", []string{"--scenarios", "standalone@x4,be-1us", "--repeat", "2"}, ""},
		{"plan-requests", []string{"--scenarios", "pytorch-standalone", "--pytorch-requests", "3000"}, ""},
		// Requests past what a duration holds plan past any limit, not wrapped round to a short run.
		{"plan-overflow", []string{"--scenarios", "standalone,be-1us", "--requests", "9000000000000", "--duration", "2500000h", "--time-limit", "1h"}, "more than --time-limit 1h0m0s"},
		{"plan-own", aloneArgs, ""},
		{"plan-own-no-duty", append([]string{"--be-duty", "0"}, aloneArgs...), "slo:llm-defaults#abs's policy names @OWN_P50@, whose LC alone is taken in BE's idle halves: it needs BE and --be-duty"},
		// SLO mode under the hour would explore to its longest arm while the LC runs alone.
		{"plan-own-no-alone-policy", ownArgs, "give --own-alone-policy"},
		// Off, it would forget BE's rate alone; at another window, window it otherwise.
		{"plan-own-slo-off", append([]string{"--own-alone-policy", writeFile(t, dir, "off.yaml", "version: 1\n")}, ownArgs...), "--own-alone-policy: SLO mode false, window 1s"},
		{"plan-own-window", append([]string{"--own-alone-policy", writeFile(t, dir, "w.yaml", pol("  window: 2s\n"))}, ownArgs...), "window 2s, where slo:llm-defaults#abs's policy has true, 1s"},
		{"plan-own-bad", append([]string{"--own-alone-policy", writeFile(t, dir, "bad.yaml", "version: 7\n")}, ownArgs...), "--own-alone-policy: invalid policy: line 1: version"},
		// A factor that leaves the objective at nothing is refused before the LC runs alone.
		{"plan-own-zero", append([]string{"--own-alone-policy", alone, "--daemon-policy", "default=" + writeFile(t, dir, "zero.yaml", pol("")), "--scenarios", "llm-be-only,slo:llm-defaults#abs,slo:llm-defaults",
			"--daemon-policy", "slo:llm-defaults=" + writeFile(t, dir, "z.yaml", strings.ReplaceAll(pol(""), "*1.15", "*0"))}, ownArgs[2:]...), "--daemon-policy slo:llm-defaults: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			app := NewApp()
			var b bytes.Buffer
			app.Writer, app.ErrWriter = &b, &b
			err := app.Run(append([]string{"gpreempt-bench", "run", "--out", out, "--plan"}, tt.args...))
			if tt.wantErr == "" && err != nil || tt.wantErr != "" && (ExitCode(err) != ExitUsage || !strings.Contains(fmt.Sprint(err), tt.wantErr)) {
				t.Fatalf("err = %v (exit %d), want %q", err, ExitCode(err), tt.wantErr)
			}
			golden.Check(t, tt.name, b.Bytes())
		})
	}
}

// TestHelp prints help where it is asked for, and only there.
func TestHelp(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{nil, "gpreempt-bench - measure LC latency"},
		{[]string{"--help"}, "gpreempt-bench - measure LC latency"},
		{[]string{"be", "--help"}, "gpreempt-bench be - best-effort worker"},
		{[]string{"run", "-h"}, "gpreempt-bench run - run scenarios"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			app := NewApp()
			var out bytes.Buffer
			app.Writer, app.ErrWriter = &out, &out
			if err := app.Run(append([]string{"gpreempt-bench"}, tt.args...)); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(out.String(), tt.want) {
				t.Errorf("help = %q, want it to contain %q", out.String(), tt.want)
			}
		})
	}
}

// TestWorkersWithoutGPU runs the real be and lc workers where there is no
// GPU: they must fail with the no-GPU error, not crash.
func TestWorkersWithoutGPU(t *testing.T) {
	if err := cuda.Init(); err == nil {
		t.Skip("a GPU is present; this test is for machines without one")
	}
	for _, args := range [][]string{{"be", "--duration", "1s"}, {"lc", "--requests", "1"}} {
		app := NewApp()
		app.Writer = io.Discard
		err := app.Run(append([]string{"gpreempt-bench"}, args...))
		if !errors.Is(err, ErrNoGPU) || ExitCode(err) != ExitNoGPU {
			t.Errorf("%s: err = %v", args[0], err)
		}
	}
}

// TestWorkerArgvParse feeds every command line the orchestrator builds for
// its own workers to the real subcommand definitions (actions stubbed out),
// so that a flag renamed on one side fails here instead of on the GPU
// machine; the fake workers above accept anything.
func TestWorkerArgvParse(t *testing.T) {
	stub := func(c *cli.Command) *cli.Command {
		cp := *c
		cp.Action = func(*cli.Context) error { return nil }
		return &cp
	}
	for _, scenarios := range []string{"defaults", "be-ratio:3000us:1000us"} {
		o := testOptions(t, scenarios, "")
		o.Prep = PrepDist{Min: 300 * time.Microsecond, Max: 700 * time.Microsecond}
		r := &runner{o: o, env: runEnv{self: []string{"gpreempt-bench"}}}
		sc := o.Scenarios[0]
		be, _ := r.beArgv(sc, "/tmp/be.json")
		lc, _ := r.lcArgv(sc, "/tmp/lc.json")
		calBE := r.calibrateArgv("be", "--calibrate-ms", "2.35", "--blocks", "0", "--threads", "256")
		calLC := r.calibrateArgv("lc", "--calibrate-us", "20", "--blocks", "0", "--threads", "256")
		for _, argv := range [][]string{be, lc, calBE, calLC} {
			app := newApp([]*cli.Command{stub(beCommand), stub(lcCommand)})
			if err := app.Run(argv); err != nil {
				t.Errorf("%s: %v", strings.Join(argv, " "), err)
			}
		}
	}
}

// TestRunRepeatMultiTenant runs two interleaved repetitions of a matrix
// with a multi-tenant scenario and weighted BEs, with NVML mocked.
func TestRunRepeatMultiTenant(t *testing.T) {
	ctl, calls := fakeCtl(t, 0)
	o := testOptions(t, "standalone,multi-tenant,multi-tenant:lc-only,be-ratio:be:3:be:1,be-only", ctl)
	o.Repeat = 2
	o.NVMLInterval = 10 * time.Millisecond
	env, stdout := testEnv(t, "")
	nvml := &gpuinfo.Mock{Readings: []gpuinfo.Reading{{SMClockMHz: 1965}}}
	env.telemetry = func(*slog.Logger) (telemetrySource, error) { return nvml, nil }
	if err := runAll(context.Background(), o, env); err != nil {
		t.Fatal(err)
	}
	if !nvml.Closed() {
		t.Error("NVML left open after the run")
	}
	res, err := LoadResults(filepath.Join(o.Out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, sr := range res.Scenarios {
		order = append(order, fmt.Sprintf("%d:%s", sr.Rep, sr.Name))
		if sr.Error != "" {
			t.Errorf("%s rep %d: %s", sr.Name, sr.Rep, sr.Error)
		}
	}
	want := "1:standalone 1:multi-tenant 1:multi-tenant:lc-only 1:be-ratio:be:3:be:1 1:be-only 2:standalone 2:multi-tenant 2:multi-tenant:lc-only 2:be-ratio:be:3:be:1 2:be-only"
	if strings.Join(order, " ") != want {
		t.Errorf("run order %s\nwant %s", strings.Join(order, " "), want)
	}
	if len(res.Summaries) != 5 {
		t.Fatalf("%d summaries", len(res.Summaries))
	}
	mt := res.Summaries[1]
	if mt.Reps != 2 || len(mt.Tenants) != 2 || mt.P50 == nil || mt.P50.CI95 == nil || mt.BESplit == nil {
		t.Errorf("multi-tenant summary %+v", mt)
	}
	// Two LCs alone: both measured against the one-LC standalone, no BE.
	if lo := res.Summaries[2]; lo.Reps != 2 || len(lo.Tenants) != 2 || lo.Tenants[1].P99 == nil || lo.BESplit != nil || lo.BE != nil {
		t.Errorf("multi-tenant:lc-only summary %+v", lo)
	}
	for _, f := range []string{"multi-tenant/rep1/lc1.json", "multi-tenant/rep2/lc2.json", "multi-tenant/rep2/be2.json", "standalone/rep2/lc.json", "timeline.png"} {
		if _, err := os.Stat(filepath.Join(o.Out, f)); err != nil {
			t.Error(err)
		}
	}
	// Weighted BEs get class be at the slice overhead plus the weight
	// times the rest of the class's timeslice; both LCs class lc, after
	// their BEs; the LC-only run classes its two LCs.
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(got)), "\n")
	if len(lines) != 16 {
		t.Fatalf("%d gpreemptctl calls:\n%s", len(lines), got)
	}
	var sr *ScenarioResult
	for _, s := range res.Scenarios {
		if s.Name == "multi-tenant" && s.Rep == 1 {
			sr = s
		}
	}
	wantCalls := []string{
		fmt.Sprintf("class --pid %d --be-timeslice 560us be", sr.BE[0].Result.PID),
		fmt.Sprintf("class --pid %d --be-timeslice 200us be", sr.BE[1].Result.PID),
		fmt.Sprintf("class --pid %d lc", sr.Tenants[0].LC.PID),
		fmt.Sprintf("class --pid %d lc", sr.Tenants[1].LC.PID),
	}
	if strings.Join(lines[:4], "\n") != strings.Join(wantCalls, "\n") {
		t.Errorf("multi-tenant calls:\n%s\nwant:\n%s", strings.Join(lines[:4], "\n"), strings.Join(wantCalls, "\n"))
	}
	if sr.BE[0].Class != "be:3" || sr.BE[1].Class != "be" {
		t.Errorf("BE classes %q %q", sr.BE[0].Class, sr.BE[1].Class)
	}
	for _, want := range []string{"2 repetitions, interleaved", "| multi-tenant | lc2 |", "| multi-tenant | 2 |"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
}

func TestArgvScenarios(t *testing.T) {
	o := testOptions(t, "pytorch-eager-be-1ms,pytorch-be-1ms,be-1us@x2,standalone", "")
	o.Python, o.PyGraph, o.PyRequests, o.Requests = "python3", true, 500, 0
	o.Duration = 20 * time.Second
	r := &runner{o: o, env: runEnv{self: []string{"gpreempt-bench"}}, scripts: "/s"}
	tests := []struct {
		scenario string
		want     []string
		not      []string
	}{
		{"pytorch-eager-be-1ms", []string{"--requests", "500"}, []string{"--cuda-graph"}},
		{"pytorch-be-1ms", []string{"--cuda-graph"}, nil},
		// Twice the period; requests from the duration, at least 5000.
		{"be-1us@x2", []string{"--period", "7ms", "--requests", "5000"}, nil},
		{"standalone", []string{"--period", "3.5ms", "--requests", "5714"}, nil},
	}
	for _, tt := range tests {
		sc, err := parseScenario(tt.scenario)
		if err != nil {
			t.Fatal(err)
		}
		argv, _ := r.lcArgv(sc, "lc.json")
		for i := 0; i < len(tt.want); i += 2 {
			if !hasArgs(argv, tt.want[i:min(i+2, len(tt.want))]...) {
				t.Errorf("%s: argv %v lacks %v", tt.scenario, argv, tt.want[i:min(i+2, len(tt.want))])
			}
		}
		for _, n := range tt.not {
			if slices.Contains(argv, n) {
				t.Errorf("%s: argv %v has %s", tt.scenario, argv, n)
			}
		}
	}
}
