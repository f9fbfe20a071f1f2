package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
	"github.com/gpreempt/gpreempt/tsg"
)

// apiRig serves the API over a real unix socket; the peer is this test
// process (SO_PEERCRED), seen through reconciletest.Procs as uid.
type apiRig struct {
	*rig
	api    *server.API
	client *http.Client
	sock   string
	peer   *server.Peer // nil: the kernel's answer
}

// asServer starts this test process as a GPU process "server" of uid,
// classed, and makes it the peer of the requests that follow; it returns
// its pid.
func (a *apiRig) asServer(uid uint32) int {
	a.T.Helper()
	me := os.Getpid()
	last := a.Start(me, policy.Process{Comm: "server", UID: uid})
	a.Tick(last + 30*time.Millisecond)
	a.peer = &server.Peer{PID: me, UID: uid}
	return me
}

// newAPIRig serves the API; each of opts may change it and its server
// before it serves.
func newAPIRig(t *testing.T, opts ...func(*server.API, *http.Server)) *apiRig {
	return newAPIRigOn(t, newRig(t, reconciletest.Policy), opts...)
}

// newAPIRigOn is newAPIRig over the rig g.
func newAPIRigOn(t *testing.T, g *rig, opts ...func(*server.API, *http.Server)) *apiRig {
	a := &apiRig{rig: g}
	a.api = &server.API{Rec: g.Rec, Metrics: g.m, Log: testlog.New(t), Inspect: g.Procs,
		Groups: func(int) []uint32 { return nil },
		Reload: func() error { return errors.New("line 3: rules: nope") }}
	a.api.PeerOf = func(r *http.Request) (server.Peer, error) {
		p, err := server.RequestPeer(r)
		if a.peer != nil {
			return *a.peer, nil
		}
		return p, err
	}
	// The peer a test poses as holds the credentials it connected with.
	a.api.Creds = func(pid int) (uint32, []uint32, error) {
		if a.peer != nil {
			return a.peer.UID, append([]uint32{a.peer.GID}, a.peer.Groups...), nil
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
		if err != nil {
			return 0, nil, err
		}
		return procfs.StatusIDs(b)
	}
	a.sock = filepath.Join(t.TempDir(), "d.sock")
	l, err := net.Listen("unix", a.sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := a.api.Server()
	for _, o := range opts {
		o(a.api, srv)
	}
	go srv.Serve(a.api.Listener(l))
	t.Cleanup(func() { srv.Close() })
	a.client = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", a.sock)
	}}, Timeout: 10 * time.Second}
	return a
}

func (a *apiRig) do(method, path, body string) (int, string) {
	a.T.Helper()
	req, err := http.NewRequest(method, "http://gpreemptd"+path, strings.NewReader(body))
	if err != nil {
		a.T.Fatal(err)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		a.T.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestAPIClassOwnPidOnlyWithinLimit(t *testing.T) {
	a := newAPIRig(t)
	me := os.Getpid()
	last := a.Start(me, policy.Process{Comm: "server", UID: 1000})
	a.Tick(last + 30*time.Millisecond) // default none: left alone

	// Peer identified by the kernel: this process, as uid 1000 through
	// the inspector (the kernel's uid wins: see below).
	a.peer = &server.Peer{PID: me, UID: 1000}
	code, body := a.do("POST", "/v1/class", `{"pid":`+strconv.Itoa(me)+`,"class":"lc"}`)
	if code != 200 || !strings.Contains(body, `"groups": 4`) {
		t.Fatalf("own lc: %d %s", code, body)
	}
	a.WantAll(me, 5000000, 2)

	// Another's pid: 403.
	code, body = a.do("POST", "/v1/class", `{"pid":1,"class":"be"}`)
	if code != 403 || !strings.Contains(body, "own pid only") {
		t.Errorf("other pid: %d %s", code, body)
	}
	// Above the limit for uid 2000 (default_max be): 403.
	a.peer = &server.Peer{PID: me, UID: 2000}
	code, body = a.do("POST", "/v1/class", `{"class":"lc"}`)
	if code != 403 || !strings.Contains(body, "above what the policy allows") {
		t.Errorf("over limit: %d %s", code, body)
	}
	code, _ = a.do("POST", "/v1/class", `{"class":"be"}`)
	if code != 200 {
		t.Errorf("be within limit: %d", code)
	}
	a.WantAll(me, 200, 0)

	// The client package, as prepreempt/libgpreempt use it.
	ctx := context.Background()
	if err := api.RequestClass(ctx, a.sock, "lc"); !errors.Is(err, api.ErrForbidden) {
		t.Errorf("client lc over the limit: %v, want ErrForbidden", err)
	}
	if err := api.RequestClass(ctx, a.sock, "be:2"); err != nil {
		t.Errorf("client be:2: %v", err)
	}
	a.WantAll(me, 380, 0) // 20 us + 2 x 180 us
	if r, err := api.PushStats(ctx, a.sock, api.Stats{Requests: 1, RequestLatencyUs: map[string]float64{"p99": 70},
		Window: &api.Window{DurationMs: 1000, Requests: 1, LatencyUs: map[string]float64{"p99": 70}}}); err != nil || !r.Prepreempt || r.SLO {
		t.Errorf("client stats: %+v, %v; want prepreempt, no SLO", r, err)
	}
	if err := api.RequestClass(ctx, filepath.Join(t.TempDir(), "none"), "be"); !errors.Is(err, api.ErrUnavailable) {
		t.Errorf("no daemon: %v, want ErrUnavailable", err)
	}
}

func TestAPIPeerCredFromKernel(t *testing.T) {
	a := newAPIRig(t)
	a.Procs[os.Getpid()] = policy.Process{Comm: "t"}
	code, body := a.do("POST", "/v1/class", `{"pid":1,"class":"be"}`)
	if code != 403 || !strings.Contains(body, "pid "+strconv.Itoa(os.Getpid())+" may ask") {
		t.Fatalf("%d %s", code, body)
	}
}

func TestAPIBadInput(t *testing.T) {
	a := newAPIRig(t)
	a.Procs[os.Getpid()] = policy.Process{Comm: "t"}
	for _, tc := range []struct {
		method, path, body string
		code               int
	}{
		{"POST", "/v1/class", `{bad`, 400},
		{"POST", "/v1/class", `{"class":"lc","extra":1}`, 400},
		{"POST", "/v1/class", `{"class":"lc"} {}`, 400},
		{"POST", "/v1/class", `{"class":"turbo"}`, 400},
		{"POST", "/v1/class", `{"class":"be:0"}`, 400},
		{"POST", "/v1/class", `{"pid":-4,"class":"be"}`, 400},
		{"POST", "/v1/class", `[]`, 400},
		{"POST", "/v1/class", `{"class":"be","pad":"` + strings.Repeat("x", server.MaxBody) + `"}`, 413},
		{"POST", "/v1/stats", `{"request_latency_us":{"p42":1}}`, 400},
		{"POST", "/v1/stats", `{"request_latency_us":{"p99":-1}}`, 400},
		{"POST", "/v1/stats", `{"pid":1}`, 403},
		{"POST", "/v1/stats", `{"window":{"duration_ms":0,"requests":1,"latency_us":{"p50":1}}}`, 400},
		{"POST", "/v1/stats", `{"window":{"duration_ms":1000,"requests":3,"latency_us":{}}}`, 400},
		{"POST", "/v1/stats", `{"window":{"duration_ms":1000,"requests":3,"latency_us":{"p95":1}}}`, 400},
		{"POST", "/v1/stats", `{"window":{"duration_ms":1000,"requests":3,"latency_us":{"p50":1e13}}}`, 400},
		{"POST", "/v1/stats", `{"window":{"duration_ms":1000,"requests":-3}}`, 400},
		{"POST", "/v1/stats", `{"engine":{"prepreempt":1}}`, 400},
		{"GET", "/v1/class", ``, 404},
		{"GET", "/nope", ``, 404},
		{"GET", "/v1/../etc/passwd", ``, 404},
		{"POST", "/v1/reload", ``, 422}, // root, but the file is bad: kept
	} {
		code, body := a.do(tc.method, tc.path, tc.body)
		if code != tc.code {
			t.Errorf("%s %s %.40q: %d %s, want %d", tc.method, tc.path, tc.body, code, body, tc.code)
		}
	}
	a.peer = &server.Peer{PID: os.Getpid(), UID: 1234}
	if code, body := a.do("POST", "/v1/reload", ``); code != 403 {
		t.Errorf("reload by uid 1234: %d %s", code, body)
	}
	// Still serving.
	if code, _ := a.do("GET", "/v1/status", ""); code != 200 {
		t.Fatalf("status after bad input: %d", code)
	}
}

func TestAPISlowClientDoesNotBlock(t *testing.T) {
	a := newAPIRig(t)
	// A client that sends half a header and stalls.
	c, err := net.Dial("unix", a.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("POST /v1/class HTTP/1.1\r\nHost: x\r\n"))
	if code, _ := a.do("GET", "/v1/processes", ""); code != 200 {
		t.Fatalf("processes while a client stalls: %d", code)
	}
	// The server drops it after ReadHeaderTimeout.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Fatalf("stalled connection not closed by the server: %v", err)
	}
}

func TestAPIStatsAndProcesses(t *testing.T) {
	a := newAPIRig(t)
	me := os.Getpid()
	last := a.Start(me, policy.Process{Comm: "trainer"})
	a.Tick(last + 30*time.Millisecond)
	code, _ := a.do("POST", "/v1/stats", `{"requests":10,"request_latency_us":{"p50":36,"p99":74},"spinner_hold_us":{"p99":200},"expired_holds":2}`)
	if code != 200 {
		t.Fatalf("stats: %d", code)
	}
	var procs []struct {
		Class  string
		Groups []struct {
			TimesliceUs uint64 `json:"timeslice_us"`
			Interleave  string
		}
	}
	code, body := a.do("GET", "/v1/processes", "")
	if err := json.Unmarshal([]byte(body), &procs); err != nil || code != 200 {
		t.Fatalf("processes: %d %v %s", code, err, body)
	}
	if len(procs) != 1 || procs[0].Class != "be" || len(procs[0].Groups) != 4 || procs[0].Groups[0].TimesliceUs != 200 || procs[0].Groups[0].Interleave != "low" {
		t.Errorf("processes = %+v", procs)
	}
	code, body = a.do("GET", "/v1/classes", "")
	if code != 200 || !strings.Contains(body, `"timeslice": "200us"`) {
		t.Errorf("classes: %d %s", code, body)
	}
	mfs, _ := a.m.Registry.Gather()
	found := false
	for _, mf := range mfs {
		found = found || mf.GetName() == "gpreemptd_hint_request_latency_seconds"
	}
	if !found {
		t.Error("pushed stats not in the metrics")
	}
	a.Feed(&trace.TaskExit{PID: uint32(me), At: uint64(last + time.Second)})
	mfs, _ = a.m.Registry.Gather()
	for _, mf := range mfs {
		if mf.GetName() == "gpreemptd_hint_request_latency_seconds" && len(mf.GetMetric()) > 0 {
			t.Error("pushed stats kept after exit")
		}
	}
}

// FuzzAPI throws arbitrary requests at the API, method and path
// included, as the server parses them: never a 5xx, never a panic,
// bounded work, and the request counter's endpoint label is one of the
// routes whatever the path.
func FuzzAPI(f *testing.F) {
	for _, s := range []string{`{"class":"lc"}`, `{"pid":0,"class":"be:3"}`, `{"requests":1,"request_latency_us":{"p50":1}}`, `{`, `null`, `{"pid":1e99}`,
		`{"window":{"duration_ms":1000,"requests":30,"latency_us":{"p50":36,"p99":70}},"engine":{"prepreempt":true,"skipped_no_benefit":3}}`,
		`{"class":"lc","CLASS":"be"}`} {
		for _, p := range []string{"/v1/class", "/v1/stats", "/v1/reload", "/v1/status"} {
			f.Add("POST", p, []byte(s))
		}
	}
	f.Add("GET", "/v1/x/../status", []byte(nil))
	f.Add("GET", "//v1//classes/", []byte(nil))
	f.Add("PUT", "/v1/%2e%2e/class?x=1", []byte(nil))
	f.Add("CONNECT", "/v1/status", []byte(nil))
	f.Add("GET", "*", []byte(nil))
	f.Add("GET", "http://other/v1/processes", []byte(nil))
	pol, err := policy.Parse([]byte(reconciletest.Policy))
	if err != nil {
		f.Fatal(err)
	}
	insp := reconciletest.Procs{1: {Comm: "x"}}
	rec := reconcile.New(pol, nopController{}, insp, NewMetrics(nil).Reconcile, reconcile.Options{}, nil)
	m := NewMetrics(nil)
	a := &server.API{Rec: rec, Metrics: m, Inspect: insp, SLO: NewSLOLoop(rec, m, nil), PeerOf: func(*http.Request) (server.Peer, error) { return server.Peer{PID: 1, UID: 1000}, nil }}
	h := a.Handler()
	f.Fuzz(func(t *testing.T, method, path string, body []byte) {
		// The request as the server reads it off the wire; one it cannot
		// parse, it answers 400 itself.
		raw := fmt.Sprintf("%s %s HTTP/1.1\r\nHost: d\r\nContent-Length: %d\r\n\r\n", method, path, len(body))
		r, err := http.ReadRequest(bufio.NewReader(io.MultiReader(strings.NewReader(raw), bytes.NewReader(body))))
		if err != nil {
			return
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code >= 500 && w.Code != 501 {
			t.Fatalf("%s %s %q: %d %s", method, path, body, w.Code, w.Body)
		}
		for _, l := range endpointLabels(t, m) {
			if !slices.Contains(routes, l) {
				t.Fatalf("%s %s: endpoint label %q is not a route", method, path, l)
			}
		}
	})
}

type nopController struct{}

func (nopController) Groups(context.Context, int) ([]reconcile.GroupState, error) { return nil, nil }
func (nopController) Apply(context.Context, int, func(reconcile.GroupState) (tsg.Settings, bool)) ([]reconcile.GroupState, error) {
	return nil, nil
}

// TestSLOStatusSharesNothing: GET /v1/status encodes a Status copy without
// the loop's lock while pushes write engine states; a map shared between
// the two killed the daemon ("concurrent map iteration and map write").
func TestSLOStatusSharesNothing(t *testing.T) {
	pol, err := policy.Parse([]byte(reconciletest.Policy))
	if err != nil {
		t.Fatal(err)
	}
	rec := reconcile.New(pol, nopController{}, reconciletest.Procs{}, NewMetrics(nil).Reconcile, reconcile.Options{}, nil)
	l := NewSLOLoop(rec, NewMetrics(nil), nil)
	l.Push(1, api.Stats{Engine: &EngineState{Prepreempt: true}})
	snap := l.Status()
	l.Push(2, api.Stats{Engine: &EngineState{Prepreempt: true}})
	if len(snap.Engines) != 1 {
		t.Errorf("a status read before a push holds %d engines after it, want 1: the copy shares the loop's map", len(snap.Engines))
	}
}

// TestAPIBodyErrors: a body over MaxBody is 413; one that cannot be read
// otherwise (broken chunked encoding) is a 400 saying why.
func TestAPIBodyErrors(t *testing.T) {
	a := newAPIRig(t)
	a.peer = &server.Peer{PID: os.Getpid(), UID: 1000}
	if code, body := a.do("POST", "/v1/stats", `{"requests":1,"x":"`+strings.Repeat("a", server.MaxBody)+`"}`); code != http.StatusRequestEntityTooLarge {
		t.Errorf("oversized body: %d %s", code, body)
	}
	c, err := net.Dial("unix", a.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "POST /v1/stats HTTP/1.1\r\nHost: d\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "reading the body") {
		t.Errorf("broken chunked body: %d %s", resp.StatusCode, b)
	}
}

// TestAPIPushFromAnyName: a process may name itself with bytes that are
// not UTF-8 (prctl PR_SET_NAME); its push is still taken, its metrics
// labelled with the name made valid.
func TestAPIPushFromAnyName(t *testing.T) {
	a := newAPIRig(t)
	me := os.Getpid()
	a.Procs[me] = policy.Process{Comm: "srv\xff\xfe", UID: 1000}
	a.peer = &server.Peer{PID: me, UID: 1000}
	if code, body := a.do("POST", "/v1/stats", `{"requests":3,"request_latency_us":{"p50":40}}`); code != 200 {
		t.Fatalf("push: %d %s", code, body)
	}
	if v := gaugeValue(t, a.m, "gpreemptd_hint_requests", map[string]string{"process": a.m.ProcessLabel(me), "comm": "srv\uFFFD"}); v != 3 {
		t.Errorf("hint requests %v, want 3 under the name made valid", v)
	}
}

// TestAPIClassFailedApplyChangesNothing: a request whose apply fails (RM
// refuses a SET mid-way) is an error to the caller, its groups hold the
// class they held (the apply is all or nothing), and so does the process,
// as /v1/processes shows; a retry later keeps it so.
func TestAPIClassFailedApplyChangesNothing(t *testing.T) {
	a := newAPIRig(t)
	me := a.asServer(1000)
	if code, body := a.do("POST", "/v1/class", `{"class":"be"}`); code != 200 {
		t.Fatalf("be: %d %s", code, body)
	}
	a.WantAll(me, 200, tsg.LevelLow)
	compute := a.Groups(me)[0]
	a.Driver.AddFault(&rmfake.Fault{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, Object: compute.Handle, Nth: 1, Status: ioctl.NV_ERR_INVALID_STATE})
	code, body := a.do("POST", "/v1/class", `{"class":"lc"}`)
	if code != http.StatusInternalServerError || !strings.Contains(body, "NV_ERR_INVALID_STATE") {
		t.Errorf("lc with RM refusing a SET: %d %s, want 500 naming the refusal", code, body)
	}
	check := func(when string) {
		t.Helper()
		a.WantAll(me, 200, tsg.LevelLow)
		if _, procs := a.do("GET", "/v1/processes", ""); !strings.Contains(procs, `"class": "be"`) || strings.Contains(procs, `"class": "lc"`) {
			t.Errorf("%s: /v1/processes %s, want the process still be", when, procs)
		}
	}
	check("after the failed request")
	for range 6 { // the bounded retries of the failed classing
		a.Tick(a.Now + time.Second)
	}
	check("after the retries")
}

// TestAPIWeightWithinLimit: a weight does not buy what a class above the
// limit gives: a uid allowed be at most may ask for be weights whose
// timeslice stays under burstable's 2 ms (20 us + 10 x 180 us = 1820 us),
// not be:11 (2000 us) or be:1000 (180 ms); its class is left as it was.
// class_from_env is capped the same way.
func TestAPIWeightWithinLimit(t *testing.T) {
	a := newAPIRig(t)
	me := a.asServer(2000) // reconciletest.Policy's default_max: be
	tests := []struct {
		class  string
		code   int
		wantUs uint64
	}{
		{"be:10", 200, 1820},
		{"be:11", 403, 1820},
		{"be:1000", 403, 1820},
		{"be", 200, 200},
	}
	for _, tt := range tests {
		code, body := a.do("POST", "/v1/class", `{"class":"`+tt.class+`"}`)
		if code != tt.code || (code == 403 && !strings.Contains(body, "weight 10 at most")) {
			t.Errorf("%s: %d %s, want %d", tt.class, code, body, tt.code)
		}
		a.WantAll(me, tt.wantUs, tsg.LevelLow)
	}
}

// startsInspector gives chosen pids a start time of their own.
type startsInspector struct {
	reconciletest.Procs
	starts map[int]uint64
}

func (s startsInspector) Process(pid int) (policy.Process, uint64, error) {
	p, start, err := s.Procs.Process(pid)
	if v, ok := s.starts[pid]; ok && err == nil {
		start = v
	}
	return p, start, err
}

// TestAPIPeerGoneIsRefused: a connection keeps naming its peer's pid after
// the peer exits. A process that connects, forks and exits leaves a child
// that speaks with that pid; once another user's LC process has the
// number, the child's class request and stats push are refused, and the
// LC keeps its class. Through the real socket: SO_PEERPIDFD where the
// kernel has it, else the pid's process started after the accept.
func TestAPIPeerGoneIsRefused(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3 to connect, fork and exit")
	}
	// The inspector gives the pid a start time of its own once it is
	// another's (starts is filled then).
	starts := map[int]uint64{}
	g := newRigInspecting(t, reconciletest.Policy, func(f reconciletest.Procs) reconcile.Inspector { return startsInspector{f, starts} })
	a := newAPIRigOn(t, g, func(api *server.API, _ *http.Server) { api.Inspect = startsInspector{g.Procs, starts} })
	a.api.PeerOf = nil // the kernel's SO_PEERCRED
	script := `
import os, socket, sys
c = socket.socket(socket.AF_UNIX); c.connect(sys.argv[1])
if os.fork() == 0:
    for body in (b'{"class":"be"}', b'{"requests":1,"window":{"duration_ms":1000,"requests":50,"latency_us":{"p50":1e6}}}'):
        sys.stdin.readline()  # the test: the pid is another's now
        path = b"/v1/class" if b"class" in body else b"/v1/stats"
        c.sendall(b"POST %s HTTP/1.1\r\nHost: d\r\nContent-Length: %d\r\n\r\n%s" % (path, len(body), body))
        head = b""
        while b"\r\n\r\n" not in head:
            head += c.recv(1)
        n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0].split(b":")[1])
        rest = b""
        while len(rest) < n:
            rest += c.recv(n - len(rest))
        print(head.split(b" ")[1].decode(), rest.decode().replace("\n", " "), flush=True)
    os._exit(0)
print(os.getpid(), flush=True)
os._exit(0)  # the connector exits at once
`
	// Pipes of our own: the child outlives the connector, whose Wait
	// would close exec's.
	inR, stdin, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	out, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); out.Close() })
	cmd := exec.Command("python3", "-c", script, a.sock)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		t.Fatal(err)
	}
	out.SetReadDeadline(time.Now().Add(20 * time.Second))
	lines := bufio.NewScanner(out)
	if !lines.Scan() {
		t.Fatalf("no pid from the connector: %v", lines.Err())
	}
	dead, err := strconv.Atoi(lines.Text())
	if err != nil {
		t.Fatal(err)
	}
	cmd.Wait() // the connector has exited and is reaped: its pid is free
	// Another user's LC process gets the number (uid 1000 may hold lc),
	// after the connection was accepted.
	starts[dead] = procfs.BootTicks() + 100
	last := a.Start(dead, policy.Process{Comm: "victim", UID: 1000, Env: map[string]string{"GPREEMPT_CLASS": "lc"}})
	a.Tick(last + 30*time.Millisecond)
	a.WantAll(dead, 5000000, tsg.LevelHigh)
	for _, what := range []string{"class request", "stats push"} {
		io.WriteString(stdin, "go\n")
		if !lines.Scan() {
			t.Fatalf("%s: no answer: %v", what, lines.Err())
		}
		if code, body, _ := strings.Cut(lines.Text(), " "); code != "403" || !strings.Contains(body, "the process that connected is gone") {
			t.Errorf("%s from the exited connector's child: %s %s, want 403", what, code, body)
		}
	}
	a.WantAll(dead, 5000000, tsg.LevelHigh)
	if v := gaugeValue(t, a.m, "gpreemptd_hint_requests", map[string]string{"process": a.m.ProcessLabel(dead)}); !math.IsNaN(v) {
		t.Errorf("the child's push was taken as pid %d's: hint requests %v", dead, v)
	}
}

// TestAPIRepeatedRequestCostsNothing: asking again for the class a process
// holds makes no control call (requests are not rate-limited, and each
// apply holds the reconciler while it talks to the driver); one that
// changes it does.
func TestAPIRepeatedRequestCostsNothing(t *testing.T) {
	a := newAPIRig(t)
	me := a.asServer(1000)
	reads := func() int { return a.Driver.Controls(ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE) }
	if code, body := a.do("POST", "/v1/class", `{"class":"lc"}`); code != 200 {
		t.Fatalf("lc: %d %s", code, body)
	}
	before := reads()
	for range 5 {
		if code, body := a.do("POST", "/v1/class", `{"class":"lc"}`); code != 200 || !strings.Contains(body, `"groups": 4`) {
			t.Fatalf("lc again: %d %s", code, body)
		}
	}
	if n := reads() - before; n != 0 {
		t.Errorf("5 repeated requests read %d timeslices, want 0 (no control call)", n)
	}
	if code, _ := a.do("POST", "/v1/class", `{"class":"be"}`); code != 200 || reads() == before {
		t.Errorf("a changed request: %d, %d reads; want 200 and the apply's read-back", code, reads()-before)
	}
	a.WantAll(me, 200, tsg.LevelLow)
}

// TestAPIChangeLimit: class changes are bounded per uid by a token bucket
// (the defaults: 32 at once, then 4 a second) on the daemon's clock. Past it
// a change is answered 429 with Retry-After and changes nothing; a
// request for the class held is not a change, and another uid has a
// bucket of its own.
func TestAPIChangeLimit(t *testing.T) {
	a := newAPIRig(t)
	me := a.asServer(1000)
	per, burst := policy.Requests{}.ChangeRate()
	if per != 4 || burst != 32 {
		t.Fatalf("defaults %v/s, burst %d; this test is written for 4/s, 32", per, burst)
	}
	classes := []string{"lc", "be"}
	for i := range burst {
		if code, body := a.do("POST", "/v1/class", `{"class":"`+classes[i%2]+`"}`); code != 200 {
			t.Fatalf("change %d of the burst: %d %s", i+1, code, body)
		}
	}
	a.WantAll(me, 200, tsg.LevelLow) // the last: be
	reads := a.Driver.Controls(ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE)
	req, _ := http.NewRequest("POST", "http://gpreemptd/v1/class", strings.NewReader(`{"class":"lc"}`))
	resp, err := a.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" || !strings.Contains(string(body), "uid 1000 asked for more class changes") {
		t.Errorf("change past the burst: %d, Retry-After %q, %s; want 429, 1, naming the uid", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
	a.WantAll(me, 200, tsg.LevelLow)
	if n := a.Driver.Controls(ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE) - reads; n != 0 {
		t.Errorf("the refused change made %d control calls", n)
	}
	if _, procs := a.do("GET", "/v1/processes", ""); !strings.Contains(procs, `"class": "be"`) {
		t.Errorf("after the refused change: %s, want the process still be", procs)
	}
	// The class it holds: not a change.
	if code, body := a.do("POST", "/v1/class", `{"class":"be"}`); code != 200 {
		t.Errorf("the class held, bucket empty: %d %s", code, body)
	}
	// The client package waits out Retry-After once (the daemon's clock
	// stands still here, so the second try is refused too) and says so.
	refused := func() float64 {
		x := series(t, a.m, "gpreemptd_socket_requests_total", func(x *dto.Metric) bool {
			l := map[string]string{}
			for _, p := range x.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			return l["endpoint"] == "/v1/class" && l["code"] == "429"
		})
		return x.GetCounter().GetValue()
	}
	before := refused()
	_, err = api.New(a.sock).RequestClass(context.Background(), "lc")
	var ce *api.Error
	if !errors.Is(err, api.ErrTooMany) || !errors.As(err, &ce) || ce.RetryAfter != time.Second {
		t.Errorf("client past the limit: %v, want server.ErrTooMany retrying after 1s", err)
	}
	if n := refused() - before; n != 2 {
		t.Errorf("the client asked %v times, want 2 (once more after Retry-After)", n)
	}
	// Another uid: a bucket of its own.
	a.peer = &server.Peer{PID: me, UID: 2000}
	if code, body := a.do("POST", "/v1/class", `{"class":"be:2"}`); code != 200 {
		t.Errorf("uid 2000's first change: %d %s", code, body)
	}
	// A quarter of a second later, one change is due to uid 1000 again,
	// not two.
	a.peer = &server.Peer{PID: me, UID: 1000}
	a.Tick(a.Now + 250*time.Millisecond)
	if code, body := a.do("POST", "/v1/class", `{"class":"lc"}`); code != 200 {
		t.Errorf("a change due: %d %s", code, body)
	}
	a.WantAll(me, 5000000, tsg.LevelHigh)
	if code, _ := a.do("POST", "/v1/class", `{"class":"be"}`); code != http.StatusTooManyRequests {
		t.Errorf("the next change: %d, want 429", code)
	}
}
