package tracecmd_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/ctl"
	"github.com/gpreempt/gpreempt/internal/ctl/tracecmd"
	"github.com/gpreempt/gpreempt/internal/golden"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
	"github.com/gpreempt/gpreempt/internal/trace/tracetest"
	"github.com/gpreempt/gpreempt/ioctl"
)

var (
	python   = tracetest.Process{PID: 4242, TID: 4242, Comm: "python3"}
	lcServer = tracetest.Process{PID: 4343, TID: 4350, Comm: "lc-server", ClientOffset: 0x10}
	ctlProc  = tracetest.Process{PID: 999, TID: 999, Comm: "gpreemptctl"}
	// ctlProc2 is a second gpreemptctl call: --by comm adds it to the first.
	ctlProc2  = tracetest.Process{PID: 1003, TID: 1003, Comm: "gpreemptctl"}
	pyClient  = ioctl.Handle(0xc1d00022)
	lcClient  = ioctl.Handle(0xc1d00032)
	compute   = ioctl.Handle(0x5c000015)
	copyGroup = ioctl.Handle(0x5c00003e)
)

const traceStart = 1_000_000_000 // the fake tracer's start, in ns

var tracePath = filepath.Join("..", "..", "..", "testdata", "h100-580.159.04-alloc-sequence.txt")

// world is gpreemptctl's environment for the trace commands, which reach
// the machine only through the tracer.
func world(tb testing.TB) (ctl.Env, *bytes.Buffer, *bytes.Buffer) {
	tb.Helper()
	var stdout, stderr bytes.Buffer
	return ctl.Env{Host: rmfake.New().Host(), Comm: func(int) string { return "" }, Stdout: &stdout, Stderr: &stderr}, &stdout, &stderr
}

func allocTrace(tb testing.TB) []rmfake.TraceAlloc {
	tb.Helper()
	allocs, err := rmfake.ParseTraceFile(tracePath)
	if err != nil {
		tb.Fatal(err)
	}
	return allocs
}

// rmSession is what `trace tsg` and `trace rpc` see on a machine where
// python3 (BE) creates its context, lc-server (LC) creates one, gpreemptctl
// classes them, and lc-server exits.
func rmSession(tb testing.TB) []trace.Event {
	clock := tracetest.Clock{Now: traceStart}
	allocs := allocTrace(tb)
	evs := tracetest.LibcudaContext(allocs, python, &clock)
	evs = append(evs, tracetest.LibcudaContext(allocs, lcServer, &clock)...)
	for _, g := range []ioctl.Handle{compute, copyGroup, 0x5c00004c, 0x5c00005a} {
		evs = append(evs, tracetest.SetTimeslice(ctlProc, 5, pyClient, g, 200, ioctl.NV_OK, &clock))
		evs = append(evs, tracetest.SetInterleave(ctlProc, 5, pyClient, g, ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_LOW, &clock))
	}
	evs = append(evs,
		tracetest.SetTimeslice(ctlProc, 6, lcClient, compute, 5000000, ioctl.NV_OK, &clock),
		tracetest.Preempt(ctlProc, 5, pyClient, compute, 230*time.Microsecond, &clock),
		tracetest.Preempt(ctlProc, 5, pyClient, compute, 330*time.Microsecond, &clock),
		tracetest.Preempt(ctlProc2, 5, pyClient, compute, 280*time.Microsecond, &clock),
		// A control from the wrong file: RM refuses the client.
		tracetest.SetTimeslice(ctlProc, 7, pyClient, compute, 100, ioctl.NV_ERR_INVALID_CLIENT, &clock),
		// Not a channel-group control: only rpc --all shows it.
		tracetest.Control(ctlProc, 5, pyClient, pyClient, ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, make([]byte, 16), ioctl.NV_OK, tracetest.GetCost, &clock),
		tracetest.Free(python, 8, pyClient, copyGroup, 0x5c000040, &clock),
		&trace.TaskExit{PID: lcServer.PID, Comm: lcServer.Comm, At: clock.Now + 1000},
	)
	return evs
}

// requestSession is `trace requests --pid 4343`: requests of 1 to 3
// launches whose latencies spread from tens of microseconds (alone) to
// hundreds (behind BE work).
func requestSession() []trace.Event {
	clock := tracetest.Clock{Now: traceStart + uint64(30*time.Millisecond)} // quiet as the trace begins: its first request whole
	var evs []trace.Event
	for i, us := range []int{36, 38, 41, 35, 52, 61, 240, 420, 37, 39} {
		evs = append(evs, tracetest.Request(lcServer, 1+i%3, time.Duration(us)*time.Microsecond, &clock)...)
		clock.Now += uint64(30 * time.Millisecond) // quiet: more than the 25 ms gap until one is learnt
	}
	return evs
}

// behindSession is requestSession's LC told apart eight times, then
// behind its arrivals: three requests back to back, one busy period of
// three requests' launches, counted as three (req×3).
func behindSession() []trace.Event {
	clock := tracetest.Clock{Now: traceStart + uint64(30*time.Millisecond)} // quiet as the trace begins: its first request whole
	var evs []trace.Event
	for range 8 {
		evs = append(evs, tracetest.Request(lcServer, 3, 40*time.Microsecond, &clock)...)
		clock.Now += uint64(30 * time.Millisecond)
	}
	for _, us := range []int{90, 60, 30} {
		evs = append(evs, tracetest.Request(lcServer, 3, time.Duration(us)*time.Microsecond, &clock)...)
	}
	return evs
}

// eagerSession is an eager LC's requests of 12 launches, its thread on its CPU 20, 30 and 25 us between
// launches (its count of blocks unchanged), asleep in each synchronize and between requests: each with its CPU gap.
func eagerSession() []trace.Event {
	clock := tracetest.Clock{Now: traceStart + uint64(30*time.Millisecond)}
	var evs []trace.Event
	blocked := uint64(1)
	for _, gap := range []time.Duration{20, 30, 25} {
		for k := range 12 {
			d := gap * time.Microsecond
			if k == 0 {
				d = 0
			}
			evs = append(evs, tracetest.WithBlocked(tracetest.Call(lcServer, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, &clock, d), blocked))
		}
		evs = append(evs, tracetest.WithBlocked(tracetest.Call(lcServer, trace.RoleSync, "cuStreamSynchronize", 2, false, 0, &clock, time.Microsecond), blocked))
		blocked++
		evs = append(evs, tracetest.WithBlocked(tracetest.Call(lcServer, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, &clock, 100*time.Microsecond), blocked))
		clock.Now += uint64(30 * time.Millisecond)
		blocked++ // asleep between requests
	}
	return evs
}

// hintSession is `trace hints`: hinted requests (one with a residency
// stamp), one cancelled.
func hintSession() []trace.Event {
	clock := tracetest.Clock{Now: traceStart}
	p := lcServer
	us := time.Microsecond
	var evs []trace.Event
	for i, prep := range []time.Duration{500 * us, 480 * us, 510 * us} {
		h := uint64(i + 1)
		hintAt := clock.Now
		evs = append(evs, tracetest.Hint(p, "infer", 500, h, &clock, 0)...)
		if i == 1 {
			evs = append(evs, &request.Residency{PID: p.PID, Handle: h, At: hintAt + uint64(190*us)})
		}
		evs = append(evs,
			tracetest.Call(p, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, &clock, prep-21*us),
			tracetest.Ready(p, h, &clock, 20*us),
			tracetest.Call(p, trace.RoleSync, "cuStreamSynchronize", 2, false, 0, &clock, 3*us),
			tracetest.Call(p, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, &clock, time.Duration(33+i)*us))
		clock.Now += uint64(2 * time.Millisecond)
	}
	evs = append(evs, tracetest.Hint(p, "warmup", 9, 4, &clock, 0)...)
	evs = append(evs, tracetest.Cancel(p, 4, &clock, 11*us))
	return evs
}

func runTrace(t *testing.T, f *tracecmd.FakeTrace, args ...string) (int, string, string) {
	t.Helper()
	env, stdout, stderr := world(t)
	if f.StartNs == 0 {
		f.StartNs = traceStart
	}
	tracecmd.UseFakeTrace(t, f)
	code := ctl.Run(context.Background(), env, append([]string{"gpreemptctl", "trace"}, args...))
	return code, stdout.String(), stderr.String()
}

// ticksAfterPreempts puts an interval tick after each PREEMPT of evs, so
// that every interval holds one and the summary all of them.
func ticksAfterPreempts(evs []trace.Event) []trace.Event {
	var out []trace.Event
	for _, ev := range evs {
		out = append(out, ev)
		if c, ok := ev.(*trace.RMCall); ok && c.Control != nil && c.Control.Cmd == ioctl.NVA06C_CTRL_CMD_PREEMPT {
			out = append(out, tracecmd.TraceTick{})
		}
	}
	return out
}

func TestTraceGolden(t *testing.T) {
	withTicks := func(evs []trace.Event, every int) []trace.Event {
		var out []trace.Event
		for i, ev := range evs {
			out = append(out, ev)
			if (i+1)%every == 0 {
				out = append(out, tracecmd.TraceTick{})
			}
		}
		return out
	}
	tests := []struct {
		name   string
		events []trace.Event
		args   []string
	}{
		{"tsg", rmSession(t), []string{"tsg"}},
		{"tsg-pid", rmSession(t), []string{"tsg", "--pid", "4343"}},
		{"tsg-json", rmSession(t), []string{"tsg", "--json"}},
		{"rpc", rmSession(t), []string{"rpc"}},
		{"rpc-all-json", rmSession(t), []string{"rpc", "--all", "--json"}},
		{"rpc-cmd", rmSession(t), []string{"rpc", "--cmd", "SET_TIMESLICE,0xa06c0105"}},
		{"rpc-by-comm", rmSession(t), []string{"rpc", "--by", "comm"}},
		{"rpc-by-control-json", rmSession(t), []string{"rpc", "--by", "control", "--json"}},
		{"rpc-interval", ticksAfterPreempts(rmSession(t)), []string{"rpc", "--by", "control", "--cmd", "PREEMPT", "--interval", "1s"}},
		{"requests", requestSession(), []string{"requests", "--pid", "4343", "--each"}},
		{"requests-interval", withTicks(requestSession(), 20), []string{"requests", "--pid", "4343", "--interval", "1s"}},
		{"requests-json", requestSession(), []string{"requests", "--pid", "4343", "--json"}},
		{"requests-behind", behindSession(), []string{"requests", "--pid", "4343", "--each"}},
		{"requests-eager", eagerSession(), []string{"requests", "--pid", "4343", "--each"}},
		{"hints", hintSession(), []string{"hints", "--pid", "4343"}},
		{"hints-json", hintSession(), []string{"hints", "--pid", "4343", "--json"}},
		{"hints-nopid", hintSession(), []string{"hints"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runTrace(t, &tracecmd.FakeTrace{Record: tt.events, LostN: 0}, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d; stderr: %s", code, stderr)
			}
			golden.Check(t, tt.name, []byte(stdout))
		})
	}
}

// TestTraceRequestsEnd: a live trace ends (its end on the events' clock
// known) inside the last busy period, or a quiet gap after it; a recording
// replayed ends at its last synchronize's return.
func TestTraceRequestsEnd(t *testing.T) {
	evs := requestSession()
	last := evs[len(evs)-1].Time()
	tests := []struct {
		name string
		end  uint64
		want string
	}{
		{"within a quiet gap of the last call: its busy period may go on", last + uint64(100*time.Microsecond), `"requests":9,`},
		{"a quiet gap after it", last + uint64(100*time.Millisecond), `"requests":10,`},
		{"a recording replayed", 0, `"requests":10,`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, stdout, stderr := world(t)
			tracecmd.UseFakeTrace(t, &tracecmd.FakeTrace{Record: requestSession(), StartNs: traceStart, EndNs: tt.end})
			if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "trace", "requests", "--pid", "4343", "--json"}); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			lines := bytes.Split(bytes.TrimSpace(stdout.Bytes()), []byte("\n"))
			if summary := lines[len(lines)-1]; !bytes.Contains(summary, []byte(tt.want)) {
				t.Errorf("summary %s: want %s", summary, tt.want)
			}
		})
	}
}

// TestTraceGlobalJSON: the global -o json selects JSON lines too.
func TestTraceGlobalJSON(t *testing.T) {
	env, stdout, stderr := world(t)
	tracecmd.UseFakeTrace(t, &tracecmd.FakeTrace{Record: requestSession(), StartNs: traceStart})
	if code := ctl.Run(context.Background(), env, []string{"gpreemptctl", "-o", "json", "trace", "requests", "--pid", "4343"}); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !bytes.HasPrefix(stdout.Bytes(), []byte(`{"type":"requests"`)) {
		t.Errorf("not JSON lines: %s", stdout)
	}
}

func TestTraceOptions(t *testing.T) {
	tests := []struct {
		args   []string
		pid    int
		rm     bool
		probes []string
	}{
		{[]string{"tsg", "--pid", "4242"}, 0, true, nil},
		{[]string{"rpc", "--pid", "4242"}, 4242, true, nil},
		{[]string{"requests", "--pid", "4343", "--launch-symbols", "cuLaunchKernel", "--queue-symbols", "cuMemcpyHtoDAsync_v2", "--sync-symbols", "cuStreamSynchronize,cuCtxSynchronize"}, 4343, false,
			[]string{"launch cuLaunchKernel /usr/lib/x86_64-linux-gnu/libcuda.so.1", "queue cuMemcpyHtoDAsync_v2 /usr/lib/x86_64-linux-gnu/libcuda.so.1",
				"sync cuStreamSynchronize /usr/lib/x86_64-linux-gnu/libcuda.so.1", "sync cuCtxSynchronize /usr/lib/x86_64-linux-gnu/libcuda.so.1"}},
		{[]string{"hints", "--pid", "77", "--lib", "/opt/libgpreempt.so", "--libcuda", "/x/libcuda.so.1", "--hint-symbol", "hint", "--launch-symbols", "", "--sync-symbols", "cuCtxSynchronize"}, 77, false,
			[]string{"hint hint /opt/libgpreempt.so", "ready gpreempt_ready /opt/libgpreempt.so", "cancel gpreempt_cancel /opt/libgpreempt.so", "sync cuCtxSynchronize /x/libcuda.so.1"}},
		{[]string{"hints"}, 0, false,
			[]string{"hint gpreempt_hint /usr/lib/x86_64-linux-gnu/libgpreempt.so", "ready gpreempt_ready /usr/lib/x86_64-linux-gnu/libgpreempt.so", "cancel gpreempt_cancel /usr/lib/x86_64-linux-gnu/libgpreempt.so"}},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f := &tracecmd.FakeTrace{}
			if code, _, stderr := runTrace(t, f, tt.args...); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			opts := f.Options()
			var got []string
			for _, p := range opts.Probes {
				got = append(got, fmt.Sprintf("%s %s %s", p.Role, p.Symbol, p.Library))
			}
			if opts.PID != tt.pid || opts.RM != tt.rm || !slices.Equal(got, tt.probes) || !opts.MountTracefs {
				t.Errorf("options pid %d rm %v probes %q mount %v", opts.PID, opts.RM, got, opts.MountTracefs)
			}
		})
	}
}

// writeRecording writes evs as `trace requests --record` would (their calls, a JSON line each), then tail.
func writeRecording(tb testing.TB, evs []trace.Event, tail string) string {
	tb.Helper()
	var b bytes.Buffer
	for _, ev := range evs {
		if c, ok := ev.(*trace.Call); ok {
			line, err := json.Marshal(trace.RecordOf(c))
			if err != nil {
				tb.Fatal(err)
			}
			b.Write(append(line, '\n'))
		}
	}
	b.WriteString(tail)
	path := filepath.Join(tb.TempDir(), "calls.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestTraceRequestsReplay: a recording replayed (--replay) gives what tracing the same calls live gives, its
// requests' CPU gaps too, without a tracer, but its first busy period (what came before its first call unknown: a
// piece) and the command's name (a recording holds none); one cut off mid-line gives its calls before the cut, and
// says so.
func TestTraceRequestsReplay(t *testing.T) {
	for _, tc := range []struct {
		name, tail, stderr string
	}{
		{"whole", "", ""},
		{"cut off by a kill", `{"at_ns":12`, "replaying the 42 calls before it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := writeRecording(t, eagerSession(), tc.tail)
			code, stdout, stderr := runTrace(t, &tracecmd.FakeTrace{OpenErr: errors.New("a replay opens no tracer")}, "requests", "--replay", path, "--each")
			if code != 0 || !strings.Contains(stderr, tc.stderr) || tc.stderr == "" && stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and %q", code, stderr, tc.stderr)
			}
			golden.Check(t, "requests-replay", []byte(stdout))
		})
	}
}

func TestTraceErrors(t *testing.T) {
	tests := []struct {
		name    string
		f       *tracecmd.FakeTrace
		args    []string
		code    int
		message string
	}{
		{"not root", &tracecmd.FakeTrace{OpenErr: fmt.Errorf("check: %w", trace.ErrNotRoot)}, []string{"tsg"}, ctl.ExitPermission, "tracing needs root"},
		{"no tracefs", &tracecmd.FakeTrace{OpenErr: fmt.Errorf("%w at /sys/kernel/tracing", trace.ErrNoTracefs)}, []string{"rpc", "--mount-tracefs=false"}, ctl.ExitNoTracing, "tracefs not mounted"},
		{"no bpf", &tracecmd.FakeTrace{OpenErr: fmt.Errorf("%w: load rm programs: operation not supported", trace.ErrBPFUnavailable)}, []string{"tsg"}, ctl.ExitNoTracing, "BPF tracing unavailable"},
		{"no libcuda", &tracecmd.FakeTrace{LibErr: fmt.Errorf("%w: process 4343 has no libcuda.so.1 mapped", trace.ErrNoLibrary)}, []string{"requests", "--pid", "4343"}, ctl.ExitNoLibrary, "library not found: process 4343 has no libcuda.so.1 mapped (set it with --libcuda)"},
		{"no symbols", &tracecmd.FakeTrace{OpenErr: fmt.Errorf("%w: none of 7 functions found", trace.ErrNoSymbols)}, []string{"requests", "--pid", "4343"}, ctl.ExitNoLibrary, "no traceable function"},
		{"requests without pid", &tracecmd.FakeTrace{}, []string{"requests"}, ctl.ExitUsage, "requests needs --pid"},
		{"record where none can be", &tracecmd.FakeTrace{}, []string{"requests", "--pid", "4343", "--record", "/nonexistent/dir/calls.jsonl"}, ctl.ExitUsage, "--record /nonexistent/dir/calls.jsonl: open /nonexistent/dir/"},
		{"bad cmd", &tracecmd.FakeTrace{}, []string{"rpc", "--cmd", "SET_EVERYTHING"}, ctl.ExitUsage, "--cmd"},
		{"bad by", &tracecmd.FakeTrace{}, []string{"rpc", "--by", "tid"}, ctl.ExitUsage, `--by "tid": want pid, comm or control`},
		{"negative duration", &tracecmd.FakeTrace{}, []string{"tsg", "--duration", "-1s"}, ctl.ExitUsage, "--duration"},
		{"negative pid", &tracecmd.FakeTrace{}, []string{"hints", "--pid", "-2"}, ctl.ExitUsage, "--pid"},
		{"replay of no file", &tracecmd.FakeTrace{}, []string{"requests", "--replay", "/nonexistent/calls.jsonl"}, ctl.ExitUsage, "--replay: open /nonexistent/calls.jsonl"},
		{"replay with an interval", &tracecmd.FakeTrace{}, []string{"requests", "--replay", "x", "--interval", "1s"}, ctl.ExitUsage, "--interval has no meaning with --replay"},
		{"replay of no recording", &tracecmd.FakeTrace{}, []string{"requests", "--replay", writeRecording(t, nil, "not a recording\n")}, ctl.ExitUsage, "--replay "},
		{"replay of another pid", &tracecmd.FakeTrace{}, []string{"requests", "--replay", writeRecording(t, eagerSession(), ""), "--pid", "7"}, ctl.ExitUsage, "no calls of pid 7"},
		{"replay of a negative pid", &tracecmd.FakeTrace{}, []string{"requests", "--replay", writeRecording(t, eagerSession(), ""), "--pid", "-1"}, ctl.ExitUsage, "--pid -1"},
		{"replay of an empty file", &tracecmd.FakeTrace{}, []string{"requests", "--replay", writeRecording(t, nil, "")}, ctl.ExitUsage, "no calls in it"},
		{"replay with symbols", &tracecmd.FakeTrace{}, []string{"requests", "--replay", "x", "--sync-symbols", "cuFoo"}, ctl.ExitUsage, "--sync-symbols has no meaning with --replay"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runTrace(t, tt.f, tt.args...)
			if code != tt.code || !strings.HasPrefix(stderr, "gpreemptctl: ") || !strings.Contains(stderr, tt.message) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", code, stderr, tt.code, tt.message)
			}
		})
	}
}

func TestTraceSkippedSymbols(t *testing.T) {
	f := &tracecmd.FakeTrace{Record: requestSession(), Skip: []trace.Skipped{{
		Probe:  trace.Probe{Library: "/usr/lib/x86_64-linux-gnu/libcuda.so.1", Symbol: "cuLaunchKernelEx_ptsz", Role: trace.RoleLaunch},
		Reason: "no such function in the library",
	}}}
	code, _, stderr := runTrace(t, f, "requests", "--pid", "4343")
	want := "gpreemptctl: trace: not tracing cuLaunchKernelEx_ptsz (launch) in /usr/lib/x86_64-linux-gnu/libcuda.so.1: no such function in the library\n"
	if code != 0 || stderr != want {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// TestTraceRecord: --record writes the traced process's calls, which trace.ReadCalls gives back
// as they came, gzip'd or not; other processes' calls are not in it.
func TestTraceRecord(t *testing.T) {
	evs := requestSession()
	other := lcServer
	other.PID++
	evs = append(evs, tracetest.Request(other, 2, time.Millisecond, &tracetest.Clock{Now: traceStart})...)
	var want []*trace.Call
	for _, ev := range evs {
		if c, ok := ev.(*trace.Call); ok && c.PID == lcServer.PID {
			want = append(want, c)
		}
	}
	for _, name := range []string{"calls.jsonl", "calls.jsonl.gz"} {
		dir := t.TempDir()
		path := filepath.Join(dir, name)
		// A trace that fails leaves a file of that name as it was, and nothing beside it.
		if err := os.WriteFile(path, []byte("an earlier recording\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if code, _, _ := runTrace(t, &tracecmd.FakeTrace{Record: evs}, "requests", "--pid", "4343", "--record", path, "--duration", "-1s"); code != ctl.ExitUsage {
			t.Fatalf("%s: --duration -1s: exit %d", name, code)
		}
		if b, err := os.ReadFile(path); err != nil || string(b) != "an earlier recording\n" {
			t.Fatalf("%s: after a failed trace: %q, %v", name, b, err)
		}
		if es, _ := os.ReadDir(dir); len(es) != 1 {
			t.Fatalf("%s: %d files left beside it", name, len(es)-1)
		}
		if code, _, stderr := runTrace(t, &tracecmd.FakeTrace{Record: evs}, "requests", "--pid", "4343", "--record", path); code != 0 {
			t.Fatalf("%s: exit %d: %s", name, code, stderr)
		}
		f, err := os.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		got, err := trace.ReadCalls(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(got) != len(want) || len(want) < 20 {
			t.Fatalf("%s: %d calls back, want %d", name, len(got), len(want))
		}
		for i, c := range got {
			w := *want[i]
			w.Comm, w.Index, w.Arg0, w.Arg1, w.Str = "", 0, 0, 0, "" // what a recording leaves out
			if *c != w {
				t.Fatalf("%s: call %d: %+v, want %+v", name, i, *c, w)
			}
		}
	}
}
