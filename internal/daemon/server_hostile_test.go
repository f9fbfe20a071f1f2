package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
)

// TestAPIProcessesAreTheCallersOwn (issue 52, finding 8): GET
// /v1/processes answered anyone with every process's pid, uid, comm and
// cgroup, undoing the metrics' opaque labels (and under Kubernetes the
// cgroup carries pod UIDs). A caller sees its own uid's processes; root
// and the policy's admin see all.
func TestAPIProcessesAreTheCallersOwn(t *testing.T) {
	a := newAPIRig(t)
	me := os.Getpid()
	last := a.Start(me, policy.Process{Comm: "mine", UID: 1000})
	last = max(last, a.Start(4242, policy.Process{Comm: "theirs", UID: 2000, Cgroup: "/kubepods/pod-secret"}))
	a.Tick(last + 30*time.Millisecond)
	list := func(uid uint32) []reconcile.ProcStatus {
		t.Helper()
		a.peer = &server.Peer{PID: me, UID: uid}
		code, body := a.do("GET", "/v1/processes", "")
		if code != 200 {
			t.Fatalf("uid %d: %d %s", uid, code, body)
		}
		var ps []reconcile.ProcStatus
		if err := json.Unmarshal([]byte(body), &ps); err != nil {
			t.Fatal(err)
		}
		return ps
	}
	if ps := list(1000); len(ps) != 1 || ps[0].Comm != "mine" {
		t.Errorf("uid 1000 sees %+v; want its own process alone", ps)
	}
	if ps := list(3000); len(ps) != 0 {
		t.Errorf("uid 3000 sees %+v; want none", ps)
	}
	if ps := list(0); len(ps) != 2 {
		t.Errorf("root sees %d processes; want both", len(ps))
	}
}

// TestAPIRefusalsLoggedWithinARate (issue 52, finding 9): one WARN line a
// refused request let one client write 3,000 lines in 2.9 s, past
// journald's rate limit, which then dropped the daemon's own messages.
// Refusals are counted in a metric, and logged server.RefusalLogBurst a second at
// most, the next line saying how many were not (the API's clock, frozen
// here: no wall-clock time).
func TestAPIRefusalsLoggedWithinARate(t *testing.T) {
	var logs lockedBuffer
	var mu sync.Mutex
	now := time.Unix(1000, 0)
	a := newAPIRig(t, func(api *server.API, _ *http.Server) {
		api.Log = slog.New(slog.NewTextHandler(&logs, nil))
		api.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	})
	a.peer = &server.Peer{PID: os.Getpid(), UID: 1000}
	refuse := func() {
		t.Helper()
		// Statistics for another process than the caller: refused.
		if code, body := a.do("POST", "/v1/stats", `{"pid":1,"requests":1,"request_latency_us":{"p50":1}}`); code != 403 {
			t.Fatalf("%d %s; want 403", code, body)
		}
	}
	const n = 300
	for range n {
		refuse()
	}
	if got := logs.count("msg=refused"); got != server.RefusalLogBurst {
		t.Errorf("%d refusals in a second logged %d lines; want %d", n, got, server.RefusalLogBurst)
	}
	if got := counter(t, a.m, "gpreemptd_socket_refused_total", "stats"); got != n {
		t.Errorf("gpreemptd_socket_refused_total{request=stats} = %v; want %d", got, n)
	}
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	refuse()
	if !strings.Contains(logs.String(), "not_logged_before="+strconv.Itoa(n-server.RefusalLogBurst)) {
		t.Errorf("the next second's line does not say %d were not logged:\n%s", n-server.RefusalLogBurst, logs.String())
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *lockedBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}
