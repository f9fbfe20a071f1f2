package prepreempt

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
)

// fakeDaemon takes stats pushes on a unix socket and answers with reply.
type fakeDaemon struct {
	mu     sync.Mutex
	pushes []api.Stats
	reply  api.StatsReply
	delay  time.Duration // before each reply
}

func startFakeDaemon(t *testing.T, d *fakeDaemon) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/stats", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var s api.Stats
		if err := json.Unmarshal(b, &s); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		d.mu.Lock()
		d.pushes = append(d.pushes, s)
		reply := d.reply
		d.mu.Unlock()
		time.Sleep(d.delay)
		json.NewEncoder(w).Encode(reply)
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestReporterPushesWindows(t *testing.T) {
	d := &fakeDaemon{reply: api.StatsReply{Prepreempt: false, SLO: true}}
	sock := startFakeDaemon(t, d)
	e, _, _ := simEngine(t, Options{}, 0, 0, 0)
	r := NewReporter(e, ReporterOptions{Socket: sock})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.since = now
	for i := 1; i <= 100; i++ {
		r.Record(time.Duration(i) * 10 * time.Microsecond)
	}
	now = now.Add(time.Second)
	reply, err := r.Push(context.Background())
	if err != nil || reply.Prepreempt || !reply.SLO {
		t.Fatalf("push: %+v, %v", reply, err)
	}
	if e.Stats().Prepreempt {
		t.Error("the daemon's word not passed to the engine")
	}
	now = now.Add(500 * time.Millisecond)
	d.mu.Lock()
	d.reply.Prepreempt = true
	d.mu.Unlock()
	if _, err := r.Push(context.Background()); err != nil { // an empty window
		t.Fatal(err)
	}
	if !e.Stats().Prepreempt {
		t.Error("engine not turned back on")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.pushes) != 2 {
		t.Fatalf("%d pushes", len(d.pushes))
	}
	w := d.pushes[0].Window
	if w == nil || w.DurationMs != 1000 || w.Requests != 100 || w.LatencyUs["p50"] != 510 || w.LatencyUs["p99"] != 990 ||
		w.LatencyUs["max"] != 1000 || w.LatencyUs["mean"] != 505 || d.pushes[0].Engine == nil || !d.pushes[0].Engine.Prepreempt {
		t.Errorf("first push %+v window %+v", d.pushes[0], w)
	}
	if w := d.pushes[1].Window; w == nil || w.DurationMs != 500 || w.Requests != 0 || len(w.LatencyUs) != 0 || d.pushes[1].Requests != 100 {
		t.Errorf("second push %+v window %+v", d.pushes[1], w)
	}
}

func TestReporterWithoutDaemon(t *testing.T) {
	r := NewReporter(nil, ReporterOptions{Socket: filepath.Join(t.TempDir(), "none")})
	r.Record(time.Millisecond)
	if _, err := r.Push(context.Background()); !errors.Is(err, api.ErrUnavailable) {
		t.Fatalf("push without a daemon: %v, want ErrUnavailable", err)
	}
}

func TestReporterBoundsAWindow(t *testing.T) {
	r := NewReporter(nil, ReporterOptions{})
	for i := range maxWindowSamples + 1000 {
		r.Record(time.Duration(i))
	}
	if len(r.lat.vals) != maxWindowSamples {
		t.Errorf("window kept %d samples, want %d", len(r.lat.vals), maxWindowSamples)
	}
	w, _, total := r.window()
	if len(r.lat.vals) != 0 || w.Requests != maxWindowSamples+1000 || total != maxWindowSamples+1000 || w.LatencyUs["max"] == 0 {
		t.Errorf("window %+v total %d", w, total)
	}
}

// TestPushCarriesTheWindowsHolds: each push carries the quantiles of the
// spinner holds that finished since the last one (what
// gpreemptd_hint_spinner_hold_seconds shows), and none once no spinner
// ran in a window.
func TestPushCarriesTheWindowsHolds(t *testing.T) {
	e, clk, _ := simEngine(t, Options{InitialSwitch: 100 * time.Microsecond}, 0, 50*time.Microsecond, 0)
	d := &fakeDaemon{reply: api.StatsReply{Prepreempt: true, SLO: true}}
	rep := NewReporter(e, ReporterOptions{Socket: startFakeDaemon(t, d)})
	hold := func(n int, d time.Duration) {
		t.Helper()
		for range n {
			before := len(e.Stats().HeldSamples)
			r, err := e.Hint(context.Background(), "infer", 50*time.Microsecond)
			if err != nil {
				t.Fatal(err)
			}
			clk.advance(50*time.Microsecond + d) // resident, then held d
			if err := r.Ready(); err != nil {
				t.Fatal(err)
			}
			waitStats(t, e, func(s Stats) bool { return len(s.HeldSamples) == before+1 })
		}
	}
	push := func() api.Stats {
		t.Helper()
		if _, err := rep.Push(context.Background()); err != nil {
			t.Fatal(err)
		}
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.pushes[len(d.pushes)-1]
	}
	hold(3, time.Millisecond)
	hold(1, 4*time.Millisecond)
	if got := push().SpinnerHoldUs; got["p50"] != 1000 || got["max"] != 4000 || got["mean"] != 1750 {
		t.Errorf("first window's holds %v, want p50 1000, max 4000, mean 1750 us", got)
	}
	hold(2, 200*time.Microsecond)
	if got := push().SpinnerHoldUs; got["p50"] != 200 || got["max"] != 200 {
		t.Errorf("second window's holds %v, want those of its own two spinners (200 us)", got)
	}
	if got := push(); got.SpinnerHoldUs != nil || got.Engine == nil || !got.Engine.Prepreempt {
		t.Errorf("a window with no spinner pushed holds %v, engine %+v", got.SpinnerHoldUs, got.Engine)
	}
	if w := e.TakeWindow(); w.Holds != 0 || w.HoldUs != nil {
		t.Errorf("the window after a push: %+v", w)
	}
}

// TestHoldWindowBounded: past maxWindowHolds a window keeps a sample of
// its holds and counts them all. The recorder is the zero value, as New
// (the engine on a GPU) makes it.
func TestHoldWindowBounded(t *testing.T) {
	var r statsRecorder
	for i := range maxWindowHolds + 100 {
		r.held(time.Duration(i+1) * time.Microsecond)
	}
	if len(r.holds.vals) != maxWindowHolds {
		t.Errorf("window kept %d holds, want %d", len(r.holds.vals), maxWindowHolds)
	}
	if _, n := r.holds.take(); n != maxWindowHolds+100 || len(r.holds.vals) != 0 {
		t.Errorf("took a window of %d holds, %d left", n, len(r.holds.vals))
	}
}

// The daemon's gate mode reaches the engine; a push says the engine's.
func TestReporterPassesTheGate(t *testing.T) {
	d := &fakeDaemon{reply: api.StatsReply{Prepreempt: true, Gate: "auto"}}
	sock := startFakeDaemon(t, d)
	e, _, _ := simEngine(t, Options{}, 0, 0, 0)
	r := NewReporter(e, ReporterOptions{Socket: sock})
	if _, err := r.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Gate() != GateAuto {
		t.Errorf("engine gate %v, want auto from the daemon", e.Gate())
	}
	d.mu.Lock()
	d.reply.Gate = "" // a daemon that says nothing leaves the mode alone
	d.mu.Unlock()
	if _, err := r.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.Gate() != GateAuto {
		t.Errorf("engine gate %v after a reply without one", e.Gate())
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if g := d.pushes[0].Engine.Gate; g != "off" {
		t.Errorf("first push said gate %q, want the engine's own (off)", g)
	}
	if g := d.pushes[1].Engine.Gate; g != "auto" {
		t.Errorf("second push said gate %q, want auto", g)
	}
}

// TestReporterPushesLLMWindows: an LLM server's window carries ttft_ and
// tpot_ quantiles and the tokens the tpot_ ones are over, in a form the
// daemon takes.
func TestReporterPushesLLMWindows(t *testing.T) {
	d := &fakeDaemon{reply: api.StatsReply{SLO: true}}
	r := NewReporter(nil, ReporterOptions{Socket: startFakeDaemon(t, d)})
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	r.since = now
	for i := range 3 {
		tokens := make([]time.Duration, 15)
		for j := range tokens {
			tokens[j] = time.Duration(10+i) * time.Millisecond
		}
		r.RecordLLM(200*time.Millisecond, time.Duration(20+i)*time.Millisecond, tokens)
	}
	now = now.Add(2 * time.Second)
	if _, err := r.Push(context.Background()); err != nil {
		t.Fatal(err)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	w := d.pushes[0].Window
	if w == nil || w.Requests != 3 || w.Tokens != 45 || w.LatencyUs["p50"] != 200e3 || w.LatencyUs["tpot_p50"] != 11e3 ||
		w.LatencyUs["tpot_p999"] != 12e3 || w.LatencyUs["ttft_p50"] != 21e3 {
		t.Fatalf("window %+v", w)
	}
	if _, ok := w.LatencyUs["tpot_max"]; ok {
		t.Error("tpot_max pushed: the daemon refuses it")
	}
	if len(w.SamplesUs["request"]) != 3 || len(w.SamplesUs["tpot"]) != 45 || len(w.SamplesUs["ttft"]) != 3 {
		t.Errorf("samples %v: want each request's, token's and first token's own", w.SamplesUs)
	}
	b, _ := json.Marshal(d.pushes[0])
	if _, _, err := server.ParseStats(b); err != nil {
		t.Errorf("the daemon refuses %s: %v", b, err)
	}
}

// TestNextPush: a reporter pushes just ahead of the daemon's read where
// the daemon reads once its period, else once a period; the Python
// package's Reporter waits the same.
func TestNextPush(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name         string
		period, took time.Duration
		reply        api.StatsReply
		want         time.Duration
	}{
		{"not in SLO mode", 500 * ms, 0, api.StatsReply{NextWindowMs: 300, WindowMs: 500}, 500 * ms},
		{"no read time: a period from the push's start", 500 * ms, 30 * ms, api.StatsReply{SLO: true, WindowMs: 500}, 470 * ms},
		{"a push longer than the period", 500 * ms, 600 * ms, api.StatsReply{}, 0},
		{"another period", time.Second, 0, api.StatsReply{SLO: true, NextWindowMs: 300, WindowMs: 500}, time.Second},
		{"read far ahead", 500 * ms, 30 * ms, api.StatsReply{SLO: true, NextWindowMs: 480, WindowMs: 500}, 467500 * time.Microsecond},
		{"read just ahead: the next one", 500 * ms, 0, api.StatsReply{SLO: true, NextWindowMs: 5, WindowMs: 500}, 492500 * time.Microsecond},
		{"read mid-window", 500 * ms, 0, api.StatsReply{SLO: true, NextWindowMs: 240, WindowMs: 500}, 727500 * time.Microsecond},
		{"the lead is at most 20 ms", 2 * time.Second, 0, api.StatsReply{SLO: true, NextWindowMs: 1500, WindowMs: 2010}, 1480 * ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextPush(tc.period, tc.took, tc.reply); got != tc.want {
				t.Errorf("nextPush(%v, %v, %+v) = %v, want %v", tc.period, tc.took, tc.reply, got, tc.want)
			}
			py, err := exec.LookPath("python3")
			if err != nil {
				t.Skip("no python3 to check the Python package's Reporter")
			}
			b, _ := json.Marshal(tc.reply)
			out, err := exec.Command(py, "-c", "import json, sys; sys.path.insert(0, '../python'); import gpreempt; "+
				"print(round(gpreempt.next_push(float(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3])) * 1e6))",
				strconv.FormatFloat(tc.period.Seconds(), 'g', -1, 64), string(b), strconv.FormatFloat(tc.took.Seconds(), 'g', -1, 64)).CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v: %s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != strconv.FormatInt(tc.want.Microseconds(), 10) {
				t.Errorf("python next_push = %s us, want %d", got, tc.want.Microseconds())
			}
		})
	}
}

// TestPythonReporterAligns: the Python package's Reporter takes its next
// wait from the daemon's reply to its push, as the Go one does.
func TestPythonReporterAligns(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3 to run the Python package's Reporter")
	}
	// The daemon answers 100 ms late: unaligned, the next push comes a
	// period (10 s) after this one began, so the wait is under 9.9 s
	// (and over 0 unless a push took the whole period).
	for _, tc := range []struct {
		name     string
		reply    api.StatsReply
		min, max float64
	}{
		{"aligned", api.StatsReply{SLO: true, NextWindowMs: 7000, WindowMs: 10000}, 6.98, 6.98},
		{"no read time", api.StatsReply{SLO: true}, 1e-6, 9.9},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sock := startFakeDaemon(t, &fakeDaemon{reply: tc.reply, delay: 100 * time.Millisecond})
			out, err := exec.Command(py, "-c", "import sys; sys.path.insert(0, '../python'); import gpreempt; "+
				"r = gpreempt.Reporter(sys.argv[1], 10); r.record(1000); r.push(); print(round(r._wait, 6))", sock).CombinedOutput()
			if err != nil {
				t.Fatalf("python: %v: %s", err, out)
			}
			got, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
			if err != nil || got < tc.min || got > tc.max {
				t.Errorf("the Reporter's next wait after a push: %s s, want %g-%g", out, tc.min, tc.max)
			}
		})
	}
}
