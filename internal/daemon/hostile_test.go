package daemon

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

// Tests of the attacks of issue 40 on the socket API and the metrics
// server, each as a hostile local user or pod would make it.

// testCredsArg makes the test binary a client that connects to the socket
// given, changes its credentials as told, then asks for a reload and
// prints the answer's status code.
const testCredsArg = "__test-creds-then-reload"

func init() {
	if len(os.Args) < 4 || os.Args[1] != testCredsArg {
		return
	}
	c, err := net.Dial("unix", os.Args[2])
	if err == nil {
		switch os.Args[3] {
		case "setresuid":
			err = syscall.Setresuid(1001, 1001, 1001)
		case "seteuid":
			err = syscall.Setresuid(-1, 1001, -1)
		case "setgroups":
			err = syscall.Setgroups([]int{4242})
		}
	}
	if err == nil {
		_, err = io.WriteString(c, "POST /v1/reload HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\n\r\n")
	}
	if err == nil {
		var resp *http.Response
		if resp, err = http.ReadResponse(bufio.NewReader(c), nil); err == nil {
			fmt.Println(resp.StatusCode)
			os.Exit(0)
		}
	}
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}

// rawRequest sends one request as written (no cleaning of the path) on a
// connection of its own and returns the status code.
func rawRequest(t *testing.T, sock, method, path string) int {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "%s %s HTTP/1.1\r\nHost: d\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", method, path)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// routes are the endpoint label values the socket's routes give.
var routes = []string{"/v1/status", "/v1/processes", "/v1/classes", "/v1/reload", "/v1/class", "/v1/stats", "other"}

// endpointLabels lists the endpoint label values of the request counter.
func endpointLabels(t testing.TB, m *Metrics) []string {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "gpreemptd_socket_requests_total" {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "endpoint" && !slices.Contains(out, l.GetValue()) {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// TestAPIMetricLabelsAreRoutes (issue 40, finding 1): a path of the
// client's choosing, redirected (307), unknown (404), or sent with another
// method, never becomes a label value: a client making a new path each
// time made a new series each time, until the daemon ran out of memory.
func TestAPIMetricLabelsAreRoutes(t *testing.T) {
	a := newAPIRig(t)
	for _, tc := range []struct {
		name, method, path string // %d: a new value each request
		code               int
	}{
		{"redirect through dot-dot", "GET", "/v1/%d/../status", 307},
		{"redirect of a doubled slash", "GET", "/v1//%d/..//processes", 307},
		{"unknown path", "GET", "/v1/nope-%d", 404},
		{"unknown path, escaped", "POST", "/v1/%%2e%%2e%d", 404},
		{"known path, other method", "DELETE", "/v1/class?x=%d", 404},
		{"known path with a query", "GET", "/v1/status?%d", 200},
		{"method of its own", "X%d", "/v1/status", 404},
	} {
		for i := range 50 {
			method, path := tc.method, tc.path
			if strings.Contains(method, "%d") {
				method = fmt.Sprintf(method, i)
			} else {
				path = fmt.Sprintf(path, i)
			}
			if code := rawRequest(t, a.sock, method, path); code != tc.code {
				t.Fatalf("%s: %s %s: %d, want %d", tc.name, method, path, code, tc.code)
			}
		}
		for _, l := range endpointLabels(t, a.m) {
			if !slices.Contains(routes, l) {
				t.Fatalf("%s: endpoint label %q is not a route", tc.name, l)
			}
		}
	}
}

// TestAPIPeerCannotStarveAnother (issue 40, finding 3): one peer's many
// keep-alive connections, or its many requests with slow bodies, leave
// another peer served. The peers here are told apart by the name each
// client binds its end to (the daemon's are by uid, or pod).
func TestAPIPeerCannotStarveAnother(t *testing.T) {
	for _, tc := range []struct {
		name  string
		conns int
		// attack sends one connection's request; it returns the
		// connection's answer: 0 for a connection the daemon closed.
		attack string
	}{
		{"keep-alive connections", 256, "GET /v1/status HTTP/1.1\r\nHost: d\r\n\r\n"},
		// Expect: 100-continue: the daemon says 100 as the handler starts
		// reading the body, so the attacker knows its request is in
		// flight, and never sends the body.
		{"slow bodies", 64, "POST /v1/class HTTP/1.1\r\nHost: d\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			a := newAPIRig(t, func(api *server.API, srv *http.Server) {
				api.PeerKey = func(c net.Conn) (string, error) {
					who, _, _ := strings.Cut(filepath.Base(c.RemoteAddr().String()), "-")
					return who, nil
				}
				// Only the caps end the attack here, not the timeouts; the
				// attacker's requests past its share are refused at once.
				srv.ReadTimeout, srv.IdleTimeout = time.Hour, time.Hour
				api.PeerQueueWait = time.Nanosecond
			})
			dial := func(who string, i int) (net.Conn, error) {
				return net.DialUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, who+"-"+strconv.Itoa(i)), Net: "unix"}, &net.UnixAddr{Name: a.sock, Net: "unix"})
			}
			answers := map[int]int{}
			for i := range tc.conns {
				c, err := dial("attacker", i)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				io.WriteString(c, tc.attack)
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				code := 0
				if err == nil {
					code = resp.StatusCode
				}
				answers[code]++
			}
			t.Logf("the attacker's answers: %v", answers)
			victim := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: func(context.Context, string, string) (net.Conn, error) {
				return dial("victim", 0)
			}}}
			resp, err := victim.Get("http://d/v1/classes")
			if err != nil {
				t.Fatalf("the other peer's request: %v", err)
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				t.Fatalf("the other peer's request: %d, want 200", resp.StatusCode)
			}
		})
	}
}

// TestAPIRightsFollowCurrentCredentials (issue 40, finding 9): a
// connection's rights are its peer's as it is at each request, not as it
// was at connect: root that connects and then drops to another uid (or
// group list) is refused a reload.
func TestAPIRightsFollowCurrentCredentials(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: the client changes its uid")
	}
	// The kernel's and /proc's, set before the server serves.
	a := newAPIRig(t, func(api *server.API, _ *http.Server) { api.PeerOf, api.Creds = nil, nil })
	for _, tc := range []struct {
		change string
		code   int
	}{
		{"none", 422}, // root: admin, and the rig's reload fails
		{"setresuid", 403},
		{"seteuid", 403},
		{"setgroups", 403},
	} {
		out, err := exec.Command(os.Args[0], testCredsArg, a.sock, tc.change).Output()
		if err != nil {
			t.Fatalf("%s: %v", tc.change, err)
		}
		if got := strings.TrimSpace(string(out)); got != strconv.Itoa(tc.code) {
			t.Errorf("reload after %s: %s, want %d", tc.change, got, tc.code)
		}
	}
}

// TestMetricsServerBounds (issue 40, finding 6): the metrics server bounds
// every phase of a connection in time.
func TestMetricsServerBounds(t *testing.T) {
	srv := metricsServer(NewMetrics(nil).Registry, testlog.New(t))
	for _, tc := range []struct {
		name string
		v    time.Duration
	}{
		{"ReadHeaderTimeout", srv.ReadHeaderTimeout},
		{"ReadTimeout", srv.ReadTimeout},
		{"WriteTimeout", srv.WriteTimeout},
		{"IdleTimeout", srv.IdleTimeout},
	} {
		if tc.v <= 0 || tc.v > time.Minute {
			t.Errorf("%s = %v, want a bound within a minute", tc.name, tc.v)
		}
	}
	if srv.MaxHeaderBytes <= 0 || srv.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes = %d", srv.MaxHeaderBytes)
	}
}

// TestMetricsConnCap (issue 40, finding 6): connections to the metrics
// server past its caps are closed as accepted (2000 idle ones held 2000
// descriptors), and a scraper from another address is still served.
func TestMetricsConnCap(t *testing.T) {
	m := NewMetrics(nil)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	capped := m.metricsListener(l)
	srv := metricsServer(m.Registry, testlog.New(t))
	srv.ReadHeaderTimeout, srv.IdleTimeout = time.Hour, time.Hour // only the caps here
	go srv.Serve(capped)
	defer srv.Close()
	const extra = 20
	for range MaxMetricsConnsPerAddr + extra {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	refused := func() float64 { return testutil.ToFloat64(m.refusedConns.WithLabelValues("metrics", "peer")) }
	proctest.WaitFor(t, "the connections past the cap closed", func() bool { return refused() >= extra })
	if all, _ := capped.Held("127.0.0.1"); all != MaxMetricsConnsPerAddr {
		t.Errorf("%d connections held, want %d", all, MaxMetricsConnsPerAddr)
	}
	scraper := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		return (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext(ctx, network, addr)
	}}}
	resp, err := scraper.Get("http://" + l.Addr().String() + "/metrics")
	if err != nil {
		t.Fatalf("scrape from another address: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("scrape from another address: %d", resp.StatusCode)
	}
}

// TestMetricsLabelsCarryNoPIDs (issue 40, finding 6): the per-process
// series name a process by an opaque label, not its pid, unless asked
// (--metrics-pids): a scrape does not map host pids to GPU work. The
// label is one value in every series of a process, the SLO mode's too.
func TestMetricsLabelsCarryNoPIDs(t *testing.T) {
	const pid = 43210
	for _, tc := range []struct {
		pids bool
		want string // the process label; "": not the pid
	}{
		{false, ""},
		{true, strconv.Itoa(pid)},
	} {
		m := NewMetrics(nil)
		m.SetPIDLabels(tc.pids)
		m.Pushed(api.HintStats{PID: pid, Stats: api.Stats{Requests: 1, RequestLatencyUs: map[string]float64{"p50": 1}}}, "infer")
		one := 1.0
		m.SetSLO(api.SLO{Enabled: true, LC: []api.SLOLC{{PID: pid, Objective: "p99", Source: "pushed", Samples: 50, P50Us: 900, Ratio: &one, GPUs: []int{0}}}})
		mfs, err := m.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		var process []string
		for _, mf := range mfs {
			for _, x := range mf.GetMetric() {
				for _, l := range x.GetLabel() {
					if strings.Contains(l.GetValue(), strconv.Itoa(pid)) && !tc.pids {
						t.Errorf("%s{%s=%q}: the pid in a label", mf.GetName(), l.GetName(), l.GetValue())
					}
					if l.GetName() == "process" {
						process = append(process, l.GetValue())
					}
				}
			}
		}
		if len(process) != 6 { // 3 hint series (latency p50, expired holds, requests), 3 SLO
			t.Fatalf("pids %v: process labels %q, want 6", tc.pids, process)
		}
		for _, p := range process {
			if p != process[0] || (tc.want != "" && p != tc.want) {
				t.Errorf("pids %v: process labels %q, want one value, %q", tc.pids, process, tc.want)
			}
		}
		m.forget(pid)
		if n := testutil.CollectAndCount(m.hintRequests); n != 0 {
			t.Errorf("pids %v: %d series left after the exit", tc.pids, n)
		}
	}
}
