// Package scrape measures an LC's latency with no change to the app: an
// LLM server's own Prometheus histograms (end-to-end request latency,
// time to first token, time per output token), fetched once a window,
// each window's values taken from the buckets' growth since the last
// fetch. Presets name each server's metrics (internal/endpoint);
// a fetch goes to the one address its endpoint names (checked again when
// the connection is made), follows no redirect, and reads a bounded body
// within a bounded time. Scraped is SLO mode's WindowedSource of these
// windows (docs/SLO.md, "Scraped latency").
package scrape

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// Bounds of one fetch.
const (
	// DefaultTimeout bounds a fetch, connection to last byte: a loopback
	// or pod-network fetch of a few hundred kilobytes takes milliseconds,
	// and a window (default 1 s) must not wait on a server that hangs.
	DefaultTimeout = 500 * time.Millisecond
	// DefaultMaxBody bounds a body: a vLLM server's exposition is tens
	// of kilobytes; a server with many models and LoRAs, a few megabytes.
	DefaultMaxBody = 8 << 20
	// DefaultParallel bounds the fetches in flight at once.
	DefaultParallel = 8
)

var (
	// ErrRedirect: the server answered with a redirect, which is never
	// followed (it could name any host).
	ErrRedirect = errors.New("redirect refused")
	// ErrTooLarge: the body ran past the bound.
	ErrTooLarge = errors.New("metrics body too large")
	// ErrAddress: the connection was to be made to an address other than
	// the endpoint's.
	ErrAddress = errors.New("address not the endpoint's")
)

// Fetcher fetches an endpoint's exposition.
type Fetcher struct {
	Timeout time.Duration
	MaxBody int64
}

// Fetch GETs spec's URL, connecting only to spec.Addr, and returns its
// body and whether it is OpenMetrics text.
func (f Fetcher) Fetch(ctx context.Context, spec endpoint.Spec) ([]byte, bool, error) {
	timeout := cmpOr(f.Timeout, DefaultTimeout)
	maxBody := cmpOr(f.MaxBody, DefaultMaxBody)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c := client(spec.Addr, timeout)
	defer c.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, spec.URL(), nil)
	if err != nil {
		return nil, false, err
	}
	// The Prometheus text format first: every server here serves it, and
	// OpenMetrics only when asked for.
	req.Header.Set("Accept", "text/plain;version=0.0.4;q=1,application/openmetrics-text;version=1.0.0;q=0.5")
	req.Header.Set("User-Agent", "gpreemptd")
	resp, err := c.Do(req)
	if err != nil {
		return nil, false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, false, fmt.Errorf("GET %s: %s", spec.URL(), resp.Status)
	}
	if resp.ContentLength > maxBody {
		return nil, false, fmt.Errorf("GET %s: %w: %d bytes, at most %d", spec.URL(), ErrTooLarge, resp.ContentLength, maxBody)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBody+1))
	if err != nil {
		return nil, false, fmt.Errorf("GET %s: %w", spec.URL(), err)
	}
	if int64(len(body)) > maxBody {
		return nil, false, fmt.Errorf("GET %s: %w: over %d bytes", spec.URL(), ErrTooLarge, maxBody)
	}
	mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	return body, mt == "application/openmetrics-text", nil
}

func cmpOr[T int64 | time.Duration](v, def T) T {
	if v > 0 {
		return v
	}
	return def
}

// client is an HTTP client that connects to addr alone: no proxy (the
// environment's would be another host), no redirect, and a dialer that
// refuses any other address at connect time (after any resolution), so
// that neither a name nor a redirect can lead elsewhere.
func client(addr netip.AddrPort, timeout time.Duration) *http.Client {
	d := &net.Dialer{Timeout: timeout, Control: func(network, address string, _ syscall.RawConn) error {
		got, err := netip.ParseAddrPort(address)
		if err != nil || got.Addr().Unmap() != addr.Addr().Unmap() || got.Port() != addr.Port() {
			return fmt.Errorf("%w: %s (%s), not %s", ErrAddress, address, network, addr)
		}
		return nil
	}}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		DisableKeepAlives:      true,
		MaxResponseHeaderBytes: 64 << 10,
		ResponseHeaderTimeout:  timeout,
	}
	return &http.Client{Transport: tr, Timeout: timeout, CheckRedirect: func(*http.Request, []*http.Request) error {
		return ErrRedirect
	}}
}

// Resolver gives an LC process's latency endpoint: a policy rule's, or its
// pod's; false for one that has none.
type Resolver func(p policy.ProcRef) (endpoint.Spec, bool)

// Scraped is SLO mode's source of scraped windows (signal.WindowedSource).
// Roll fetches the endpoint of each LC process that has one, once per
// endpoint however many processes share it, at most Parallel at a time,
// and returns within the fetch timeout; Latest gives a process its
// endpoint's window.
type Scraped struct {
	Resolve Resolver
	Fetch   Fetcher
	// Parallel bounds the fetches in flight (0: DefaultParallel).
	Parallel int
	Log      *slog.Logger

	mu     sync.Mutex
	byPID  map[int]string // pid -> endpoint key, this window
	states map[string]*state
}

// state is one endpoint across windows: the cumulative histograms at the
// last fetch (the next window's start), and the last window taken.
type state struct {
	spec   endpoint.Spec
	at     time.Duration // the last fetch that decoded (the reconciler's clock)
	prev   map[string]Hist
	sample signal.Latency
	ok     bool // sample is this window's
	seq    uint64
	err    error // the last fetch's (a change is logged)
}

var _ signal.WindowedSource = (*Scraped)(nil)

// Roll closes the window ending at now for the LC processes lcs: each
// endpoint is fetched, and its window is what its histograms grew by
// since the last fetch. It returns within the fetch timeout: a fetch not
// done by then gives no window. An endpoint no process names any more is
// forgotten (Roll(now, nil) forgets every one).
func (s *Scraped) Roll(now time.Duration, lcs []policy.ProcRef) {
	byPID := map[int]string{}
	specs := map[string]endpoint.Spec{}
	for _, p := range lcs {
		if s.Resolve == nil {
			break
		}
		if sp, ok := s.Resolve(p); ok {
			k := sp.Key()
			byPID[p.PID], specs[k] = k, sp
		}
	}
	s.mu.Lock()
	if s.states == nil {
		s.states = map[string]*state{}
	}
	for k := range s.states {
		if _, ok := specs[k]; !ok {
			delete(s.states, k)
		}
	}
	work := make([]*state, 0, len(specs))
	for k, sp := range specs {
		st := s.states[k]
		if st == nil {
			st = &state{spec: sp}
			s.states[k] = st
		}
		work = append(work, st)
	}
	s.byPID = byPID
	timeout := cmpOr(s.Fetch.Timeout, DefaultTimeout)
	s.mu.Unlock()

	// One deadline for the whole Roll, queueing for a fetch slot included.
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	f := s.Fetch
	f.Timeout = timeout
	type result struct {
		body []byte
		om   bool
		err  error
	}
	results := make([]result, len(work))
	sem := make(chan struct{}, cmpOr(int64(s.Parallel), DefaultParallel))
	var wg sync.WaitGroup
	for i, st := range work {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
				r := &results[i]
				r.body, r.om, r.err = f.Fetch(ctx, st.spec)
			case <-ctx.Done():
				results[i].err = fmt.Errorf("GET %s: not started within %v: %w", st.spec.URL(), timeout, ctx.Err())
			}
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, st := range work {
		s.take(st, results[i].body, results[i].om, results[i].err, now)
	}
}

// take makes st's window ending at now from a fetch's body (s.mu held).
func (s *Scraped) take(st *state, body []byte, om bool, err error, now time.Duration) {
	var cur map[string]Hist
	if err == nil {
		cur, err = Decode(body, om, st.spec.Metrics, st.spec.Model)
	}
	switch {
	case err != nil && st.err == nil:
		s.log().Warn("scrape: no latency from the endpoint", "endpoint", st.spec.String(), "err", err)
	case err == nil && st.err != nil:
		s.log().Info("scrape: the endpoint answers again", "endpoint", st.spec.String())
	}
	st.ok, st.err = false, err
	if err != nil {
		// The next window starts at the next fetch that decodes: what the
		// histograms grew by meanwhile spans more than a window.
		st.prev = nil
		return
	}
	prev, at := st.prev, st.at
	st.prev, st.at = cur, now
	if prev == nil {
		return // the first fetch: a window starts here
	}
	smp := signal.Latency{At: now, Window: now - at, Source: signal.Scraped,
		Quantiles: map[string]time.Duration{}, Samples: map[string][]time.Duration{}, Buckets: map[string][]time.Duration{}}
	counts := map[string]int{}
	for key, h := range cur {
		p, ok := prev[key]
		if !ok {
			// A series a server makes at its first value (a labelled
			// one): everything in it came since the last fetch.
			p = Hist{Name: h.Name, Bounds: h.Bounds, Counts: make([]float64, len(h.Counts))}
		}
		d, ok := Delta(p, h)
		if !ok || p.Name != h.Name {
			s.log().Info("scrape: a histogram went down or changed (the server restarted?): no window",
				"endpoint", st.spec.String(), "metric", h.Name)
			return
		}
		unit, n := endpoint.Unit(h.Name), d.N()
		if counts[key] = n; n == 0 {
			continue
		}
		smp.Samples[key] = d.Values(unit, signal.MaxSamples)
		for _, b := range d.Bounds {
			if !math.IsInf(b, 1) {
				smp.Buckets[key] = append(smp.Buckets[key], toDuration(b, unit))
			}
		}
		prefix := ""
		if key != signal.MetricRequest {
			prefix = key + "_"
		}
		for _, q := range signal.Quantiles {
			smp.Quantiles[prefix+q.Name] = toDuration(d.Quantile(q.Q), unit)
		}
	}
	smp.Requests, smp.Tokens = counts[signal.MetricRequest], counts[signal.MetricTPOT]
	if _, ok := cur[signal.MetricRequest]; !ok {
		// No request histogram (Triton): each request has one first response.
		smp.Requests = counts[signal.MetricTTFT]
	}
	st.seq++
	smp.Seq = st.seq
	st.sample, st.ok = smp, true
}

// Latest is process pid's endpoint's window, the one the last Roll took;
// false where it has no endpoint, or the last fetch gave no window (the
// first one, a failure, a server restart).
func (s *Scraped) Latest(pid int) (signal.Latency, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.states[s.byPID[pid]]
	if st == nil || !st.ok {
		return signal.Latency{}, false
	}
	return st.sample, true
}

func (s *Scraped) log() *slog.Logger {
	if s.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Log
}
