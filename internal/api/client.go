// Package api is gpreemptd's unix-socket API as its clients see it: the
// wire types of each request and answer, and the Go client that sends
// them; gpreemptd's server and SLO mode use the same types. It imports no
// gpreempt package (no BPF, no Prometheus), so prepreempt and libgpreempt
// can use it to ask for their class when they lack the rights to class
// themselves.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"
)

// DefaultSocket is where gpreemptd listens unless told otherwise.
const DefaultSocket = "/run/gpreempt/gpreemptd.sock"

// SocketEnv names the variable that overrides DefaultSocket.
const SocketEnv = "GPREEMPTD_SOCKET"

// Errors a caller acts on.
var (
	// ErrUnavailable: no daemon answers on the socket; fall back to
	// classing yourself.
	ErrUnavailable = errors.New("gpreemptd not reachable")
	// ErrForbidden: the daemon refused (another pid, or a class above the
	// policy's limit for this uid/cgroup).
	ErrForbidden = errors.New("refused by gpreemptd")
	// ErrTooMany: more class changes than the policy allows this uid
	// (requests.changes_per_second, requests.burst); Error.RetryAfter says
	// when the next one is due.
	ErrTooMany = errors.New("too many class changes for gpreemptd")
)

// Error is the daemon's answer to a request it did not serve.
type Error struct {
	Code int
	Msg  string
	// RetryAfter is the daemon's Retry-After, with a 429.
	RetryAfter time.Duration
}

func (e *Error) Error() string { return fmt.Sprintf("gpreemptd: %d: %s", e.Code, e.Msg) }

// Is makes a 403 match ErrForbidden, a 429 ErrTooMany.
func (e *Error) Is(target error) bool {
	return target == ErrForbidden && e.Code == http.StatusForbidden ||
		target == ErrTooMany && e.Code == http.StatusTooManyRequests
}

// Client is a connection to one daemon socket.
type Client struct {
	Socket string
	http   *http.Client
}

// SocketPath is socket, else $GPREEMPTD_SOCKET, else DefaultSocket.
func SocketPath(socket string) string {
	if socket != "" {
		return socket
	}
	if s := os.Getenv(SocketEnv); s != "" {
		return s
	}
	return DefaultSocket
}

// New returns a client of the daemon at socket (see SocketPath).
func New(socket string) *Client {
	socket = SocketPath(socket)
	return &Client{Socket: socket, http: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}}
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://gpreemptd"+path, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w at %s: %w", ErrUnavailable, c.Socket, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) != nil || e.Error == "" {
			e.Error = string(bytes.TrimSpace(b))
		}
		ce := &Error{Code: resp.StatusCode, Msg: e.Error}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			ce.RetryAfter = time.Duration(s) * time.Second
		}
		return ce
	}
	if out != nil && len(b) > 0 {
		return json.Unmarshal(b, out)
	}
	return nil
}

// ClassRequest is POST /v1/class. PID 0 means the caller.
type ClassRequest struct {
	PID   int    `json:"pid"`
	Class string `json:"class"`
}

// ClassReply is the daemon's answer to a class request.
type ClassReply struct {
	PID    int    `json:"pid"`
	Class  string `json:"class"`
	Groups int    `json:"groups"`
	// Pending: the process has no channel group yet; it is classed when
	// its context appears.
	Pending bool `json:"pending,omitempty"`
}

// ErrorBody is every error's answer.
type ErrorBody struct {
	Error string `json:"error"`
}

// RequestClass asks for class ("lc", "be:3") for the calling process's
// own contexts.
func (c *Client) RequestClass(ctx context.Context, class string) (ClassReply, error) {
	var r ClassReply
	// pid 0 is "the caller": the daemon takes it from SO_PEERCRED, which
	// is right across pid namespaces (a container's os.Getpid is not the
	// host's pid).
	body := map[string]any{"pid": 0, "class": class}
	err := c.do(ctx, http.MethodPost, "/v1/class", body, &r)
	// Past this uid's change limit: wait for the next change once, where
	// it is due before ctx ends.
	var e *Error
	if errors.As(err, &e) && e.Code == http.StatusTooManyRequests {
		if d, ok := ctx.Deadline(); !ok || time.Until(d) > e.RetryAfter {
			t := time.NewTimer(e.RetryAfter)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return r, err
			case <-t.C:
			}
			err = c.do(ctx, http.MethodPost, "/v1/class", body, &r)
		}
	}
	return r, err
}

// RequestClass asks the daemon at socketPath ("" for the default) for
// class for the calling process. ErrUnavailable when no daemon answers,
// ErrForbidden when the policy does not allow it, ErrTooMany when this
// uid asked for more changes than it allows (waited out once where ctx
// leaves the time).
func RequestClass(ctx context.Context, socketPath, class string) error {
	_, err := New(socketPath).RequestClass(ctx, class)
	return err
}

// Stats is what an LC process pushes: quantiles ("p50", "p90", "p99",
// "p999", "max", "mean") in microseconds.
type Stats struct {
	Requests         uint64             `json:"requests"`
	RequestLatencyUs map[string]float64 `json:"request_latency_us,omitempty"`
	SpinnerHoldUs    map[string]float64 `json:"spinner_hold_us,omitempty"`
	ExpiredHolds     uint64             `json:"expired_holds"`
	// Window is the request latency over the interval since the last
	// push: what the daemon's SLO mode steers by.
	Window *Window `json:"window,omitempty"`
	// Engine is the hint engine's own decision.
	Engine *Engine `json:"engine,omitempty"`
}

// Window is the request latency an app measured over one interval: from
// a request's arrival (or its first launch) to its result, as the app
// defines its requests.
type Window struct {
	// DurationMs is the interval's length.
	DurationMs float64 `json:"duration_ms"`
	// Requests completed in it.
	Requests uint64 `json:"requests"`
	// LatencyUs: quantiles ("p50", "p90", "p99", "p999", "max", "mean")
	// in microseconds; an LLM server's also "ttft_p50" .. "tpot_p999".
	LatencyUs map[string]float64 `json:"latency_us"`
	// SamplesUs are the window's own values in microseconds by metric
	// ("request", "ttft", "tpot"), at most MaxWindowSamples each (evenly
	// thinned from the sorted values past that): SLO mode accumulates
	// them over windows until they are enough to count.
	SamplesUs map[string][]float64 `json:"samples_us,omitempty"`
	// Tokens: the output tokens its tpot_ quantiles are taken over, each
	// one's time since the token before (0: one time per request).
	// A tpot_ objective counts them as its window's samples.
	Tokens uint64 `json:"tokens,omitempty"`
}

// MaxWindowSamples bounds Window.SamplesUs per metric.
const MaxWindowSamples = 256

// ThinSamples is at most MaxWindowSamples of sorted, evenly spaced by
// rank (the distribution kept), in microseconds.
func ThinSamples(sorted []time.Duration) []float64 {
	n := min(len(sorted), MaxWindowSamples)
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(sorted[i*len(sorted)/n]) / 1e3
	}
	return out
}

// Engine is what a hint engine says of its own decisions.
type Engine struct {
	// Prepreempt: the engine launches spinners (false: told to stop, or
	// not benefiting for any class).
	Prepreempt bool `json:"prepreempt"`
	// SkippedNoBenefit counts hints that got no spinner because their
	// class did not benefit.
	SkippedNoBenefit uint64 `json:"skipped_no_benefit"`
	// Gate is the engine's request gate mode ("off", "on", "auto"; empty
	// from engines without one). An engine that gates its own requests is
	// left out of the daemon's gate.
	Gate string `json:"gate,omitempty"`
}

// StatsReply is the daemon's answer to a push.
type StatsReply struct {
	// Prepreempt: whether the engine should pre-preempt (false in SLO
	// mode while the chosen BE timeslice is at or above the policy's
	// slo.prepreempt_below).
	Prepreempt bool `json:"prepreempt"`
	// SLO: the daemon runs in SLO mode and steers by the pushed windows.
	SLO bool `json:"slo"`
	// Gate, for a process of class lc, is the policy's request gate mode
	// ("off", "on", "auto"), which its engine takes for its own requests;
	// empty for other processes.
	Gate string `json:"gate,omitempty"`
	// NextWindowMs, in SLO mode, is when the daemon next reads the pushed
	// windows (milliseconds from the reply), and WindowMs how often it
	// does. A reporter whose period is the window pushes just before that
	// read: each of its windows then begins as the daemon's decision takes
	// effect, and the window after a change is judged by the setting
	// that followed it (docs/SLO.md "Aligned windows").
	NextWindowMs float64 `json:"next_window_ms,omitempty"`
	WindowMs     float64 `json:"window_ms,omitempty"`
}

// HintStats is POST /v1/stats: what an LC process's hint engine pushes,
// and the pusher's pid (0: the caller).
type HintStats struct {
	PID int `json:"pid"`
	Stats
}

// Quantiles are the quantiles a push's request latency and spinner hold
// may carry; a window's latency also carries an LLM server's ttft_ and
// tpot_ p50 .. p999.
var Quantiles = []string{"p50", "p90", "p99", "p999", "max", "mean"}

// PushStats sends the calling process's statistics to the daemon, which
// exports them as metrics until the process exits and, in SLO mode,
// steers the BE timeslice by their window.
func (c *Client) PushStats(ctx context.Context, s Stats) (StatsReply, error) {
	r := StatsReply{Prepreempt: true}
	err := c.do(ctx, http.MethodPost, "/v1/stats", HintStats{0, s}, &r)
	return r, err
}

// PushStats sends the calling process's statistics to the daemon at
// socketPath ("" for the default); see Client.PushStats.
func PushStats(ctx context.Context, socketPath string, s Stats) (StatsReply, error) {
	return New(socketPath).PushStats(ctx, s)
}

// Status is GET /v1/status.
func (c *Client) Status(ctx context.Context) (map[string]any, error) {
	var m map[string]any
	return m, c.do(ctx, http.MethodGet, "/v1/status", nil, &m)
}

// Group is a channel group as the daemon lists it.
type Group struct {
	ID struct {
		Client string `json:"client"`
		Handle string `json:"handle"`
	} `json:"id"`
	Engine      string `json:"engine"`
	TimesliceUs uint64 `json:"timeslice_us"`
	Interleave  string `json:"interleave"`
	GPU         string `json:"gpu,omitempty"`
}

// Process is a process as the daemon holds it.
type Process struct {
	PID     int    `json:"pid"`
	Comm    string `json:"comm"`
	UID     uint32 `json:"uid"`
	Cgroup  string `json:"cgroup,omitempty"`
	GPUs    string `json:"gpus,omitempty"`
	Class   string `json:"class"`
	Rule    string `json:"rule,omitempty"`
	Pending bool   `json:"pending,omitempty"`
	// Status is its classing's state ("done", "pending", "failed"),
	// Attempts the failures in a row and Error the last one.
	Status   string  `json:"status"`
	Attempts int     `json:"attempts,omitempty"`
	Error    string  `json:"error,omitempty"`
	Groups   []Group `json:"groups"`
}

// Processes is GET /v1/processes.
func (c *Client) Processes(ctx context.Context) ([]Process, error) {
	var ps []Process
	return ps, c.do(ctx, http.MethodGet, "/v1/processes", nil, &ps)
}

// Classes is GET /v1/classes.
type Classes struct {
	Classes []struct {
		Name       string `json:"name"`
		Timeslice  string `json:"timeslice"`
		Interleave string `json:"interleave"`
	} `json:"classes"`
	Default string `json:"default"`
	Rules   []struct {
		Name    string `json:"name"`
		Line    int    `json:"line"`
		Class   string `json:"class"`
		FromEnv string `json:"class_from_env,omitempty"`
	} `json:"rules"`
	Source string `json:"source,omitempty"`
}

// Classes is GET /v1/classes.
func (c *Client) Classes(ctx context.Context) (Classes, error) {
	var cl Classes
	return cl, c.do(ctx, http.MethodGet, "/v1/classes", nil, &cl)
}

// Reload asks the daemon to re-read its policy file.
func (c *Client) Reload(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/v1/reload", struct{}{}, nil)
}
