// Package server is gpreemptd's unix-socket API: its routes, each
// request's peer checked from SO_PEERCRED against the policy's limits,
// each peer's share of connections and requests capped, class changes
// rate-limited, bodies decoded as strict JSON (docs/DAEMON.md). The wire
// types are internal/api's; what the API serves it reaches through the
// reconciler and small interfaces of its own (Metrics, SLO, Gate).
package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"os/user"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
)

// Bounds of the socket API: a request is a few hundred bytes.
const (
	MaxBody = 64 << 10
	// MaxHeaderBytes bounds a request's header, here and on the
	// daemon's metrics server.
	MaxHeaderBytes = 16 << 10
	// MaxInFlight bounds the requests served at once (503 beyond), and
	// MaxInFlightPerPeer those of one peer (a uid; a pod with
	// --kubernetes): a peer's further requests wait for one of its own
	// to end (PeerQueueWait at most, then 503), so one peer's slow bodies
	// or costly requests leave the daemon's time to the others.
	MaxInFlight        = 64
	MaxInFlightPerPeer = 2
	// MaxConns bounds the open connections: each holds a descriptor, and
	// a daemon out of them cannot open the pidfds its work needs.
	// MaxConnsPerPeer bounds one peer's. A connection past either is
	// closed at once: none waits in the listen backlog, where one peer's
	// idle keep-alive connections would hold every other peer's.
	MaxConns        = 1024
	MaxConnsPerPeer = 32
)

// API serves the daemon's unix-socket API (docs/DAEMON.md).
type API struct {
	Rec     *reconcile.Reconciler
	Metrics Metrics // nil: none
	Log     *slog.Logger
	// Now is the clock of the refusals' log rate (default time.Now).
	Now func() time.Time
	// refusals: refusals logged in the second since since, and those
	// not logged since the last line.
	refusals struct {
		sync.Mutex
		since            time.Time
		logged, unlogged int
	}
	// Inspect reads a peer process (its uid, cgroup) for the policy's
	// request limits.
	Inspect reconcile.Inspector
	// Groups lists a peer's groups (gids) for the admin check; default
	// /proc/PID/status.
	Groups func(pid int) []uint32
	// Reload re-reads the policy file.
	Reload func() error
	// Status adds the daemon's own fields to GET /v1/status.
	Status func() map[string]any
	// SLO takes the pushed latency windows and says whether engines
	// should pre-preempt; nil: no SLO loop.
	SLO SLO
	// Gate is the daemon's request gate, told which LCs gate their own
	// requests; nil: none.
	Gate Gate
	// PeerOf identifies the peer of a request (tests replace it).
	PeerOf func(*http.Request) (Peer, error)
	// PeerKey names whose share of the connections and requests in flight
	// a connection counts against (MaxConnsPerPeer, MaxInFlightPerPeer);
	// nil: its uid (SO_PEERCRED). With --kubernetes: its pod, where it is
	// in one, since a node's pods may all run as root.
	PeerKey func(net.Conn) (string, error)
	// PeerQueueWait bounds how long a request waits for one of its
	// peer's MaxInFlightPerPeer places (0: DefaultPeerQueueWait).
	PeerQueueWait time.Duration
	// Creds reads a process's credentials now (effective uid, then the
	// effective gid and the supplementary groups), to re-check a
	// connection's against them at each request; nil: /proc/PID/status.
	Creds func(pid int) (uid uint32, gids []uint32, err error)
	// PodCheck, when set (gpreemptd --kubernetes), decides class requests
	// from processes in pods: handled false when the peer is in no pod
	// (the policy's limits then decide); else err says why the request is
	// refused, or is nil when the pod may have it (the target is in the
	// peer's pod, the class at most the pod's).
	PodCheck func(peerPID, targetPID int, want class.Name) (handled bool, err error)

	inflight inflight
	changes  changeLimiter
}

// Metrics counts what the API serves and refuses, and exports what LC
// processes push: the daemon's Prometheus metrics.
type Metrics interface {
	// Request counts a request served, by route and status code.
	Request(route, code string)
	// Refused counts a request refused (403), by what it asked.
	Refused(request string)
	// RefusedConn counts a connection closed as accepted, by server and
	// the cap it was past.
	RefusedConn(server, cap string)
	// Pushed exports what a process pushed, under its comm.
	Pushed(s api.HintStats, comm string)
}

// SLO is SLO mode as the API meets it (slomode.Loop): it takes the pushed
// windows and says what each pushing engine should do.
type SLO interface {
	Push(pid int, s api.Stats)
	Reply(pid int) api.StatsReply
}

// Gate is the daemon's request gate as the API meets it (gate.Gate): told
// each pushing engine's own gate, it says which mode the engine takes.
type Gate interface {
	Pushed(pid int, e *api.Engine) string
}

// Handler routes the API.
func (a *API) Handler() http.Handler {
	if a.Log == nil {
		a.Log = slog.New(slog.DiscardHandler)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/status", a.status)
	mux.HandleFunc("GET /v1/processes", a.processes)
	mux.HandleFunc("GET /v1/classes", a.classes)
	mux.HandleFunc("POST /v1/reload", a.reload)
	mux.HandleFunc("POST /v1/class", a.class)
	mux.HandleFunc("POST /v1/stats", a.stats)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		peer := peerKeyOf(r)
		wait := a.PeerQueueWait
		if wait <= 0 {
			wait = DefaultPeerQueueWait
		}
		if !a.inflight.take(r.Context(), peer, wait) {
			w.Header().Set("Retry-After", "1")
			writeErr(w, http.StatusServiceUnavailable, "busy: %d requests at once in all, %d of one peer", MaxInFlight, MaxInFlightPerPeer)
			return
		}
		defer a.inflight.done(peer)
		rec := &statusRecorder{ResponseWriter: w, code: 200}
		mux.ServeHTTP(rec, r)
		if a.Metrics != nil {
			// The mux set the pattern it routed by: the label is one of
			// the routes, never the path the client sent.
			a.Metrics.Request(endpointLabel(r.Pattern), strconv.Itoa(rec.code))
		}
	})
}

// endpointLabel is the metric label of a request routed by pattern: the
// route's path ("/v1/status", a redirect to it included), or "other" for
// what no route serves.
func endpointLabel(pattern string) string {
	_, path, ok := strings.Cut(pattern, " ")
	if !ok {
		path = pattern
	}
	if path == "" || path == "/" {
		return "other"
	}
	return path
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"encode"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	w.Write(append(b, '\n'))
}

func writeErr(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, api.ErrorBody{Error: fmt.Sprintf(format, args...)})
}

func (a *API) status(w http.ResponseWriter, r *http.Request) {
	st := map[string]any{}
	if a.Status != nil {
		st = a.Status()
	}
	procs := a.Rec.Snapshot()
	groups := 0
	for _, p := range procs {
		groups += len(p.Groups)
	}
	st["processes"], st["groups"] = len(procs), groups
	writeJSON(w, http.StatusOK, st)
}

// processes lists the processes the daemon holds: every one to root and
// the policy's admin, a caller's own (its uid's) to anyone else. Each
// entry names a pid, its uid, comm and cgroup (under Kubernetes, pod
// UIDs): the opaque metric labels would be undone by a full list.
func (a *API) processes(w http.ResponseWriter, r *http.Request) {
	peer, err := a.peer(r)
	if err != nil {
		writeErr(w, http.StatusForbidden, "cannot identify the peer: %v", err)
		return
	}
	all := a.Rec.Snapshot()
	// Admin rights are the peer's now, not at connect.
	if a.currentPeer(r, peer) == nil && a.Rec.Policy().IsAdmin(peer.UID, a.groupsOf(peer), groupName) {
		writeJSON(w, http.StatusOK, all)
		return
	}
	own := []reconcile.ProcStatus{}
	for _, p := range all {
		if p.UID == peer.UID {
			own = append(own, p)
		}
	}
	writeJSON(w, http.StatusOK, own)
}

// RefusalLogBurst is how many refusals are logged a second at most; the
// others are counted (gpreemptd_socket_refused_total) and their number
// said in the next line logged. One line per refused request let one
// client write 3,000 lines in 2.9 s, past journald's rate limit, which
// then dropped the daemon's own messages.
const RefusalLogBurst = 10

// logRefused counts a refused request and logs it within the rate.
func (a *API) logRefused(request string, args ...any) {
	if a.Metrics != nil {
		a.Metrics.Refused(request)
	}
	now := time.Now()
	if a.Now != nil {
		now = a.Now()
	}
	a.refusals.Lock()
	if now.Sub(a.refusals.since) >= time.Second {
		a.refusals.since, a.refusals.logged = now, 0
	}
	if a.refusals.logged >= RefusalLogBurst {
		a.refusals.unlogged++
		a.refusals.Unlock()
		return
	}
	a.refusals.logged++
	unlogged := a.refusals.unlogged
	a.refusals.unlogged = 0
	a.refusals.Unlock()
	a.Log.Warn("refused", append([]any{"request", request, "not_logged_before", unlogged}, args...)...)
}

// ClassesBody is GET /v1/classes.
type ClassesBody struct {
	Classes class.Table `json:"classes"`
	Default string      `json:"default"`
	Rules   []RuleBody  `json:"rules"`
	Source  string      `json:"source,omitempty"`
}

// RuleBody is a rule as listed.
type RuleBody struct {
	Name    string `json:"name"`
	Line    int    `json:"line"`
	Class   string `json:"class"`
	FromEnv string `json:"class_from_env,omitempty"`
}

func (a *API) classes(w http.ResponseWriter, r *http.Request) {
	pol := a.Rec.Policy()
	body := ClassesBody{Classes: a.Rec.Classes(), Default: pol.Default.String(), Source: pol.Source, Rules: []RuleBody{}}
	for _, ru := range pol.Rules {
		c := ru.Decision.String()
		if ru.EnvOnly {
			c = ""
		}
		body.Rules = append(body.Rules, RuleBody{Name: ru.Name, Line: ru.Line, Class: c, FromEnv: ru.ClassFromEnv})
	}
	writeJSON(w, http.StatusOK, body)
}

// groupsOf is the peer's gid and supplementary groups as the kernel gave
// them at connect (SO_PEERGROUPS), never read from /proc by its pid,
// which may name another process by now.
func (a *API) groupsOf(peer Peer) []uint32 {
	if a.Groups != nil {
		return a.Groups(peer.PID)
	}
	return append([]uint32{peer.GID}, peer.Groups...)
}

func groupName(gid uint32) string {
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return ""
	}
	return g.Name
}

func (a *API) reload(w http.ResponseWriter, r *http.Request) {
	peer, err := a.peer(r)
	if err != nil {
		writeErr(w, http.StatusForbidden, "cannot identify the peer: %v", err)
		return
	}
	if err := a.currentPeer(r, peer); err != nil {
		a.logRefused("reload", "peer_pid", peer.PID, "peer_uid", peer.UID, "why", err)
		writeErr(w, http.StatusForbidden, "pid %d: %v", peer.PID, err)
		return
	}
	if !a.Rec.Policy().IsAdmin(peer.UID, a.groupsOf(peer), groupName) {
		a.logRefused("reload", "peer_pid", peer.PID, "peer_uid", peer.UID, "why", "not root nor in the policy's admin")
		writeErr(w, http.StatusForbidden, "reload needs root or the policy's admin uid/group")
		return
	}
	if a.Reload == nil {
		writeErr(w, http.StatusNotImplemented, "no policy file to reload")
		return
	}
	if err := a.Reload(); err != nil {
		writeErr(w, http.StatusUnprocessableEntity, "%v (the running policy is kept)", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"reloaded": true, "source": a.Rec.Policy().Source})
}

// peerAndBody identifies the peer and reads a body of at most MaxBody
// bytes, answering the request itself when either fails.
func (a *API) peerAndBody(w http.ResponseWriter, r *http.Request) (Peer, []byte, bool) {
	peer, err := a.peer(r)
	if err != nil {
		writeErr(w, http.StatusForbidden, "cannot identify the peer: %v", err)
		return peer, nil, false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		writeErr(w, http.StatusRequestEntityTooLarge, "body larger than %d bytes", MaxBody)
		return peer, nil, false
	}
	if err != nil {
		writeErr(w, http.StatusBadRequest, "reading the body: %v", err)
		return peer, nil, false
	}
	if err := a.currentPeer(r, peer); err != nil {
		a.logRefused(endpointLabel(r.Pattern), "peer_pid", peer.PID, "peer_uid", peer.UID, "why", err)
		writeErr(w, http.StatusForbidden, "pid %d: %v", peer.PID, err)
		return peer, nil, false
	}
	return peer, b, true
}

func (a *API) class(w http.ResponseWriter, r *http.Request) {
	peer, b, ok := a.peerAndBody(w, r)
	if !ok {
		return
	}
	req, sp, code, err := ParseClassRequest(b)
	if err != nil {
		writeErr(w, code, "%v", err)
		return
	}
	if req.PID == 0 {
		req.PID = peer.PID
	}
	refuse := func(why string) {
		a.logRefused("class", "peer_pid", peer.PID, "peer_uid", peer.UID, "pid", req.PID, "class", sp.String(), "why", why)
		writeErr(w, http.StatusForbidden, "%s", why)
	}
	// The peer as /proc has it now, and whether that is still the process
	// that connected.
	info, start, ok := a.peerProcess(w, r, peer, refuse)
	if !ok {
		return
	}
	handled := false
	if a.PodCheck != nil {
		if handled, err = a.PodCheck(peer.PID, req.PID, sp.Name); handled && err != nil {
			refuse(err.Error())
			return
		}
	}
	if handled && req.PID != peer.PID {
		start = 0 // another process of the pod: its own start is not known here
	}
	pol := a.Rec.Policy()
	if !handled {
		if req.PID != peer.PID {
			refuse(fmt.Sprintf("pid %d may ask for its own pid only, not %d", peer.PID, req.PID))
			return
		}
		if info.UID != peer.UID {
			// The kernel's word over /proc's, and the name with it.
			info.UID, info.User = peer.UID, ""
			if u, err := user.LookupId(strconv.FormatUint(uint64(peer.UID), 10)); err == nil {
				info.User = u.Username
			}
		}
		max := pol.MaxRequest(info)
		if max == "" || !sp.Name.AtMost(max) {
			m := string(max)
			if m == "" {
				m = "nothing"
			}
			refuse(fmt.Sprintf("class %s is above what the policy allows uid %d in cgroup %q (%s)", sp.Name, info.UID, info.Cgroup, m))
			return
		}
		if w := pol.MaxRequestWeight(sp.Name, max); sp.Weight > w {
			above, _ := max.Above()
			refuse(fmt.Sprintf("class %s: weight %d is above what the policy allows uid %d in cgroup %q (%s: weight %d at most, the longest timeslice under %s's)", sp, sp.Weight, info.UID, info.Cgroup, sp.Name, w, above))
			return
		}
	}
	// The change limit is per uid; for a request the pod check decided,
	// per container (its uid and cgroup): a node's pods may all run as
	// root, and a pod cannot make cgroups of its own.
	who := fmt.Sprintf("uid %d", peer.UID)
	if handled {
		who = fmt.Sprintf("uid %d in cgroup %s", peer.UID, info.Cgroup)
	}
	per, burst := pol.Requests.ChangeRate()
	admit := func() error { return a.changes.admit(who, reconcile.ClockTime(a.Rec.Now()), per, burst) }
	n, err := a.Rec.Request(r.Context(), req.PID, start, sp, admit)
	if err != nil {
		var tooMany *ErrTooMany
		switch {
		case errors.As(err, &tooMany):
			a.logRefused("class", "peer_pid", peer.PID, "peer_uid", peer.UID, "class", sp.String(), "why", err)
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(tooMany.Retry.Seconds()))))
			writeErr(w, http.StatusTooManyRequests, "%v", err)
		case reconcile.IsGone(err):
			writeErr(w, http.StatusNotFound, "%v", err)
		case errors.Is(err, class.ErrInvalid):
			writeErr(w, http.StatusBadRequest, "%v", err)
		default:
			writeErr(w, http.StatusInternalServerError, "%v", err)
		}
		return
	}
	a.Log.Info("request", "pid", req.PID, "uid", peer.UID, "class", sp.String(), "groups", n)
	writeJSON(w, http.StatusOK, api.ClassReply{PID: req.PID, Class: sp.String(), Groups: n, Pending: n == 0})
}

// quantileNames bounds the label values a pusher can create.
var quantileNames = func() map[string]bool {
	m := map[string]bool{}
	for _, q := range api.Quantiles {
		m[q] = true
	}
	return m
}()

// windowQuantiles are those a latency window may carry: the request's,
// and an LLM server's time to first token and per output token (what
// objectives such as tpot_p50<=12ms bound).
var windowQuantiles = func() map[string]bool {
	m := maps.Clone(quantileNames)
	for _, metric := range objective.Metrics {
		for _, q := range []string{"p50", "p90", "p99", "p999"} {
			m[metric+"_"+q] = true
		}
	}
	return m
}()

// ParseStats checks a decoded stats push.
func ParseStats(b []byte) (api.HintStats, int, error) {
	var s api.HintStats
	if code, err := DecodeJSON(b, &s); err != nil {
		return s, code, err
	}
	if s.PID < 0 {
		return s, http.StatusBadRequest, fmt.Errorf("pid %d", s.PID)
	}
	check := func(field string, m map[string]float64, names map[string]bool) error {
		if len(m) > len(names) {
			return fmt.Errorf("%s: too many quantiles", field)
		}
		for q, v := range m {
			if !names[q] {
				return fmt.Errorf("%s: quantile %q: want p50, p90, p99, p999, max or mean (a window's also ttft_ or tpot_ p50 .. p999)", field, q)
			}
			if v < 0 || v > 1e12 || v != v {
				return fmt.Errorf("%s: quantile %q: %v out of range [0, 1e12] us", field, q, v)
			}
		}
		return nil
	}
	for _, f := range []struct {
		name string
		m    map[string]float64
	}{{"request_latency_us", s.RequestLatencyUs}, {"spinner_hold_us", s.SpinnerHoldUs}} {
		if err := check(f.name, f.m, quantileNames); err != nil {
			return s, http.StatusBadRequest, err
		}
	}
	if w := s.Window; w != nil {
		if !(w.DurationMs > 0 && w.DurationMs <= 600e3) {
			return s, http.StatusBadRequest, fmt.Errorf("window.duration_ms: %v out of range (0, 600000]", w.DurationMs)
		}
		if err := check("window.latency_us", w.LatencyUs, windowQuantiles); err != nil {
			return s, http.StatusBadRequest, err
		}
		if w.Requests > 0 && len(w.LatencyUs) == 0 {
			return s, http.StatusBadRequest, fmt.Errorf("window: %d requests and no latency_us quantile", w.Requests)
		}
		if len(w.SamplesUs) > 3 {
			return s, http.StatusBadRequest, errors.New("window.samples_us: too many metrics")
		}
		for m, vs := range w.SamplesUs {
			if m != "request" && m != "ttft" && m != "tpot" {
				return s, http.StatusBadRequest, fmt.Errorf("window.samples_us: metric %q: want request, ttft or tpot", m)
			}
			if len(vs) > api.MaxWindowSamples {
				return s, http.StatusBadRequest, fmt.Errorf("window.samples_us.%s: %d values, at most %d", m, len(vs), api.MaxWindowSamples)
			}
			for _, v := range vs {
				if !(v > 0 && v <= 1e12) {
					return s, http.StatusBadRequest, fmt.Errorf("window.samples_us.%s: %v out of range (0, 1e12] us", m, v)
				}
			}
		}
		if _, ok := w.LatencyUs["tpot_p50"]; w.Tokens > 0 && !ok {
			return s, http.StatusBadRequest, fmt.Errorf("window: %d tokens and no latency_us tpot_p50 (tokens count the tpot_ quantiles' samples)", w.Tokens)
		}
	}
	return s, 0, nil
}

func (a *API) stats(w http.ResponseWriter, r *http.Request) {
	peer, b, ok := a.peerAndBody(w, r)
	if !ok {
		return
	}
	s, code, err := ParseStats(b)
	if err != nil {
		writeErr(w, code, "%v", err)
		return
	}
	if s.PID == 0 {
		s.PID = peer.PID
	}
	if s.PID != peer.PID {
		a.logRefused("stats", "peer_pid", peer.PID, "pid", s.PID, "why", "not its own pid")
		writeErr(w, http.StatusForbidden, "pid %d may push its own statistics only", peer.PID)
		return
	}
	info, _, ok := a.peerProcess(w, r, peer, func(why string) {
		a.logRefused("stats", "peer_pid", peer.PID, "why", why)
		writeErr(w, http.StatusForbidden, "%s", why)
	})
	if !ok {
		return
	}
	if a.Metrics != nil {
		a.Metrics.Pushed(s, info.Comm)
	}
	reply := api.StatsReply{Prepreempt: true}
	if a.SLO != nil {
		a.SLO.Push(peer.PID, s.Stats)
		reply = a.SLO.Reply(peer.PID)
	}
	if a.Gate != nil {
		reply.Gate = a.Gate.Pushed(peer.PID, s.Engine)
	}
	writeJSON(w, http.StatusOK, reply)
}
