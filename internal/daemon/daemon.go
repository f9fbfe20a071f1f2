// Package daemon is gpreemptd: it wires its parts into one daemon that
// holds a policy over every GPU process of the node. The reconciler
// (internal/reconcile) classes contexts from the events of an eBPF source
// or a /proc scan; the socket API (internal/api/server, over the wire
// types of internal/api) lets processes ask for their class and push their
// latency; SLO mode (internal/slomode) steers by its signals
// (internal/daemon/signals), through the request gate (internal/daemon/gate)
// and the pauser (internal/daemon/pause); Prometheus metrics say how it
// went. This package holds the wiring: configuration, the lock, the loops,
// reload and shutdown, and the metrics.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpreempt/gpreempt/class"
	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/daemon/gate"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/gpu"
	"github.com/gpreempt/gpreempt/internal/libfile"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/scrape"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/tsg"
)

// Defaults of gpreemptd's flags.
const (
	DefaultSocket       = "/run/gpreempt/gpreemptd.sock"
	DefaultPolicy       = "/etc/gpreempt/gpreemptd.yaml"
	DefaultMetricsAddr  = "127.0.0.1:9477"
	DefaultScanInterval = 2 * time.Second
)

// ErrAlreadyRunning: another gpreemptd holds the lock beside the socket.
var ErrAlreadyRunning = errors.New("another gpreemptd is running")

// Config is one daemon.
type Config struct {
	PolicyFile string
	Socket     string
	// MetricsAddr is a loopback TCP address for /metrics; "" disables.
	MetricsAddr string
	// MetricsPIDs labels the per-process series with pids (else with an
	// opaque name; Metrics.SetPIDLabels).
	MetricsPIDs bool
	// Mode: "auto" (BPF, else scan), "bpf" (fail without it) or "scan".
	Mode string
	// ScanInterval is the /proc scan's period in scan mode.
	ScanInterval time.Duration
	// TraceRequests measures the request latency of LC processes that
	// push none with uprobes on libcuda (signals.TracedLatency), for SLO mode.
	// LibCUDA is the library probed for every process that maps it ("":
	// each LC process that pushes none, through the libcuda it has
	// mapped).
	TraceRequests bool
	LibCUDA       string
	// TraceAsMeasured judges traced LCs by their latency as measured, never per their CPU's speed.
	TraceAsMeasured bool
	// BEProgress counts the BE processes' kernel launches (uprobes on
	// their libcuda, signals.BEProgress) for the SLO mode's BE share. Where the
	// kernel refuses, BE share stays unknown and the daemon runs on.
	BEProgress bool
	// ResyncInterval is the period of the same scan in bpf mode, a safety
	// net for events the ring buffer dropped (0: 30 s; negative: never).
	ResyncInterval time.Duration
	// PolicyPoll is how often the policy file's mtime is checked (0: 2 s;
	// negative: never).
	PolicyPoll time.Duration
	// LeaveSettings skips restoring the groups on shutdown.
	LeaveSettings bool
	Reconcile     reconcile.Options
	// PodCheck decides socket requests from processes in pods
	// (server.API.PodCheck); nil outside Kubernetes.
	PodCheck func(peerPID, targetPID int, want class.Name) (handled bool, err error)
	// MetricsEndpoint gives the latency endpoint of a process in a pod
	// (its annotations, at its pod's own address; kube.Agent.MetricsEndpoint),
	// before the policy's rules; nil outside Kubernetes.
	MetricsEndpoint func(pid int) (endpoint.Spec, bool)
	// PeerKey names whose share of the socket's connections and requests
	// a connection counts against (server.API.PeerKey); nil: its uid.
	PeerKey func(net.Conn) (string, error)
	// Tenant names whose part of the gate's share an LC's holds count
	// against (gate.Gate.Tenant); nil: its uid.
	Tenant func(pid int) string
	// Scan bounds discovery (tsg.ScanOptions).
	Scan tsg.ScanOptions
	Log  *slog.Logger

	// For tests: the host, an event source to use instead of BPF, GPU
	// info and the inspector. Nil: the real ones.
	Host    tsg.Host
	Events  reconcile.Events
	GPU     gpu.Info
	Inspect reconcile.Inspector
	Version string
}

// Daemon is a running gpreemptd.
type Daemon struct {
	cfg     Config
	log     *slog.Logger
	rec     *reconcile.Reconciler
	slo     *slomode.Loop
	gate    *gate.Gate
	pause   *pause.Pauser
	metrics *Metrics
	ctl     reconcile.Controller
	lister  reconcile.Lister
	inspect reconcile.Inspector
	events  reconcile.Events
	// lost reads how many events the ring buffer dropped (nil in scan
	// mode); a rise triggers a resync at once.
	lost func() uint64
	// untrace detaches request tracing (nil: off); traced is it.
	untrace func() error
	traced  *signals.TracedLatency
	// counter counts BE launches (nil: off).
	counter *trace.LaunchCounter
	modeV   atomic.Value
	mode    string // at start
	started time.Time
	lock    *os.File
	sock    net.Listener
	api     *http.Server
	mserver *http.Server
	mlis    net.Listener

	reloadMu sync.Mutex
	polStat  fs.FileInfo
	// hup is registered in New, so a SIGHUP after New never kills the
	// daemon.
	hup chan os.Signal
}

// New loads the policy, takes the lock, opens the socket and the metrics
// listener and the event source. It does not start serving: Run does.
func New(ctx context.Context, cfg Config) (_ *Daemon, err error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Socket == "" {
		cfg.Socket = DefaultSocket
	}
	if cfg.ScanInterval <= 0 {
		cfg.ScanInterval = DefaultScanInterval
	}
	if cfg.ResyncInterval == 0 {
		cfg.ResyncInterval = 30 * time.Second
	}
	if cfg.PolicyPoll == 0 {
		cfg.PolicyPoll = 2 * time.Second
	}
	// One cache of the processes' descriptors for the discovery, the
	// /proc scan and the inspector: one walk serves all three.
	fds := &tsg.FDCache{}
	if cfg.Host == nil {
		cfg.Host = tsg.ProcHost{FDs: fds}
	}
	if cfg.Reconcile.SelfPID == 0 {
		cfg.Reconcile.SelfPID = os.Getpid()
	}
	if abs, err := filepath.Abs(cfg.PolicyFile); err == nil {
		cfg.PolicyFile = abs
	}
	d := &Daemon{cfg: cfg, log: cfg.Log, started: time.Now(), lister: cfg.Host}
	defer func() {
		if err != nil {
			d.close()
		}
	}()
	pol, err := policy.ParseFile(cfg.PolicyFile)
	if err != nil {
		return nil, err
	}
	d.warnPolicy(pol)
	d.polStat, _ = os.Stat(cfg.PolicyFile)
	if err := d.takeLock(); err != nil {
		return nil, err
	}
	// First, what a previous daemon left stopped and no watchdog resumed
	// (its whole cgroup killed with its watchdog, say).
	d.pause = &pause.Pauser{StateDir: LockDir(cfg.Socket), Log: d.log}
	if n, err := d.pause.ResumeRecorded(); n > 0 || err != nil {
		d.log.Warn("resumed BE processes a previous gpreemptd left stopped", "processes", n, "err", err)
	}
	if d.inspect = cfg.Inspect; d.inspect == nil {
		d.inspect = &reconcile.ProcInspector{GPU: cfg.GPU, FDs: fds}
	}
	scan := cfg.Scan
	scan.Logger = d.log
	d.ctl = &reconcile.TSGController{Source: tsg.NewAttachSource(cfg.Host, scan)}
	d.metrics = NewMetrics(nil)
	d.metrics.SetPIDLabels(cfg.MetricsPIDs)
	d.rec = reconcile.New(pol, d.ctl, d.inspect, d.metrics.Reconcile, cfg.Reconcile, d.log)
	d.metrics.SetGroups(d.rec.GroupsByClass)
	d.slo = NewSLOLoop(d.rec, d.metrics, d.log)
	// One pauser, two holders: a BE the gate and calibration both stop
	// runs again once both released it.
	d.slo.Pause = d.pause.Holder("slo")
	d.gate = gate.New(d.rec, d.pause.Holder("gate"), d.log)
	if cfg.Tenant != nil {
		d.gate.Tenant = cfg.Tenant
	}
	d.slo.Gate = d.gate // SLO mode chooses, per GPU, whether the gate holds
	// The node's own libcuda is read whoever owns it (a process's
	// library is read only if root's, or this very file).
	if lib, err := trace.FindLibrary(trace.LibCUDA, cfg.LibCUDA, 0); err == nil {
		libfile.Trust(lib)
	}
	if err := d.gate.Register(d.metrics.Registry); err != nil {
		return nil, err
	}
	d.metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpreemptd_pause_self_resumed_total",
		Help: "BE processes found running while held stopped (resumed by their owner), and stopped again."},
		func() float64 { return float64(d.pause.SelfResumed()) }))
	if err := d.openSignals(ctx, cfg); err != nil {
		return nil, err
	}

	if err := d.openEvents(ctx); err != nil {
		return nil, err
	}
	d.metrics.setMode(d.mode)
	d.modeV.Store(d.mode)
	if d.lost != nil {
		d.metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "gpreemptd_trace_lost_events_total",
			Help: "RM events the BPF ring buffer dropped (each drop triggers a /proc resync)."}, func() float64 { return float64(d.lost()) }))
	}
	if err := d.listen(); err != nil {
		return nil, err
	}
	d.hup = make(chan os.Signal, 1)
	signal.Notify(d.hup, syscall.SIGHUP)
	return d, nil
}

// latencyEndpoints says where SLO mode scrapes an LC process's latency:
// its pod's endpoint (pod: nil outside Kubernetes), else its rule's in
// rec's policy.
func latencyEndpoints(rec *reconcile.Reconciler, pod func(pid int) (endpoint.Spec, bool)) scrape.Resolver {
	return func(p policy.ProcRef) (endpoint.Spec, bool) {
		if p.Decision.Exempt || p.Decision.Spec.Name != class.LC {
			return endpoint.Spec{}, false
		}
		if pod != nil {
			if spec, ok := pod(p.PID); ok {
				return spec, true
			}
		}
		return rec.Policy().Latency(p.Decision)
	}
}

func (d *Daemon) takeLock() error {
	f, err := takeLock(d.cfg.Socket)
	if err != nil {
		return err
	}
	d.lock = f
	return nil
}

func (d *Daemon) openEvents(ctx context.Context) error {
	if d.cfg.Events != nil {
		d.events, d.mode = d.cfg.Events, d.cfg.Events.Mode()
		return nil
	}
	switch d.cfg.Mode {
	case "", "auto", "bpf":
		ev, tr, err := reconcile.OpenTraceEvents(ctx, d.log)
		if err == nil {
			d.events, d.mode, d.lost = ev, "bpf", tr.Lost
			if c, ok := d.ctl.(*reconcile.TSGController); ok {
				c.Known, c.Log = ev.Known, d.log // classing opens traced groups without a scan
			}
			d.log.Info("mode", "mode", "bpf", "why", "RM ioctl tracepoints attached")
			return nil
		}
		if d.cfg.Mode == "bpf" {
			return fmt.Errorf("--mode bpf: %w", err)
		}
		d.mode = "scan"
		d.log.Warn("mode", "mode", "scan", "interval", d.cfg.ScanInterval, "why", fmt.Sprintf("BPF tracing unavailable: %v", err))
	case "scan":
		d.mode = "scan"
		d.log.Info("mode", "mode", "scan", "interval", d.cfg.ScanInterval, "why", "--mode scan")
	default:
		return fmt.Errorf("%w: --mode %q: want auto, bpf or scan", tsg.ErrInvalidArgument, d.cfg.Mode)
	}
	return nil
}

func (d *Daemon) listen() error {
	// A socket left by a daemon that died: we hold the lock, so it is
	// stale.
	if err := os.Remove(d.cfg.Socket); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	l, err := net.Listen("unix", d.cfg.Socket)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	api := &server.API{Rec: d.rec, Metrics: d.metrics, Log: d.log, Inspect: d.inspect, Reload: d.Reload, Status: d.status, PodCheck: d.cfg.PodCheck, PeerKey: d.cfg.PeerKey, SLO: d.slo, Gate: d.gate}
	d.sock = api.Listener(l)
	// Any local process may connect: what it may do is decided per
	// request from SO_PEERCRED.
	if err := os.Chmod(d.cfg.Socket, 0o666); err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	d.api = api.Server()
	if d.cfg.MetricsAddr != "" {
		host, _, err := net.SplitHostPort(d.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("%w: --metrics-addr %q: %v", tsg.ErrInvalidArgument, d.cfg.MetricsAddr, err)
		}
		if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
			d.log.Warn("metrics served beyond loopback", "addr", d.cfg.MetricsAddr)
		}
		ml, err := net.Listen("tcp", d.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		d.mlis = d.metrics.metricsListener(ml)
		d.mserver = metricsServer(d.metrics.Registry, d.log)
	}
	return nil
}

func (d *Daemon) status() map[string]any {
	pol := d.rec.Policy()
	st := map[string]any{
		"pid": os.Getpid(), "version": d.cfg.Version, "mode": d.Mode(), "policy": pol.Source,
		"started": d.started.UTC().Format(time.RFC3339), "uptime_s": int(time.Since(d.started).Seconds()),
		"socket": d.cfg.Socket, "metrics": d.cfg.MetricsAddr, "leave_settings": d.cfg.LeaveSettings,
		"debounce": d.rec.Options().Debounce.String(), "max_wait": d.rec.Options().MaxWait.String(),
		"slo": d.slo.Status(), "classes": d.rec.Classes(), "gate": d.gate.Stats(),
	}
	if d.traced != nil {
		// Each traced LC's request definition: per request or per step, its
		// quiet gap, its last window.
		st["traced"] = d.traced.Status()
	}
	return st
}

// Reconciler is the daemon's reconciler.
func (d *Daemon) Reconciler() *reconcile.Reconciler { return d.rec }

// SLO is the daemon's SLO mode.
func (d *Daemon) SLO() *slomode.Loop { return d.slo }

// Metrics are the daemon's metrics.
func (d *Daemon) Metrics() *Metrics { return d.metrics }

// Mode is "bpf" or "scan".
func (d *Daemon) Mode() string { return d.modeV.Load().(string) }

// Reload re-reads the policy file; a file that does not parse keeps the
// running policy and says why.
func (d *Daemon) Reload() error {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	d.polStat, _ = os.Stat(d.cfg.PolicyFile)
	pol, err := policy.ParseFile(d.cfg.PolicyFile)
	if err != nil {
		d.metrics.reloads.WithLabelValues("refused").Inc()
		d.log.Error("reload refused; keeping the running policy", "err", err)
		return err
	}
	d.rec.SetPolicy(pol)
	d.metrics.reloads.WithLabelValues("ok").Inc()
	d.log.Info("policy reloaded", "file", d.cfg.PolicyFile, "rules", len(pol.Rules))
	d.warnPolicy(pol)
	return nil
}

// warnPolicy logs what in pol is valid but does not do what it reads as (policy.Warnings).
func (d *Daemon) warnPolicy(pol *policy.Policy) {
	for _, w := range pol.Warnings() {
		d.log.Warn("policy: "+w, "file", d.cfg.PolicyFile)
	}
}

func (d *Daemon) policyChanged() bool {
	d.reloadMu.Lock()
	defer d.reloadMu.Unlock()
	st, err := os.Stat(d.cfg.PolicyFile)
	if err != nil {
		return false
	}
	old := d.polStat
	if old != nil && st.ModTime().Equal(old.ModTime()) && st.Size() == old.Size() {
		return false
	}
	d.polStat = st
	return true
}

// Run serves until ctx is done, then restores every group it changed
// (unless LeaveSettings) and releases everything.
func (d *Daemon) Run(ctx context.Context) error {
	defer d.close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The SLO mode's first step (it only starts the controller): the
	// status shows the mode on from the first request served.
	d.slo.Step(d.rec.Now())
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	goRun := func(f func()) {
		wg.Add(1)
		go func() { defer wg.Done(); f() }()
	}
	goRun(func() {
		if err := d.api.Serve(d.sock); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("socket API: %w", err)
		}
	})
	if d.mserver != nil {
		goRun(func() {
			if err := d.mserver.Serve(d.mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics: %w", err)
			}
		})
	}
	// What exists already: adopt it (classed at once).
	d.scan(ctx)
	if d.events != nil {
		goRun(func() {
			err := d.events.Run(ctx, d.rec.Handle)
			if ctx.Err() == nil {
				d.log.Error("event source stopped; falling back to scanning", "err", err)
				d.modeV.Store("scan")
				d.metrics.setMode("scan")
				d.scanLoop(ctx, d.cfg.ScanInterval)
			}
		})
		if d.cfg.ResyncInterval > 0 {
			goRun(func() { d.scanLoop(ctx, d.cfg.ResyncInterval) })
		}
		if d.lost != nil {
			goRun(func() { d.resyncOnLoss(ctx) })
		}
	} else {
		goRun(func() { d.scanLoop(ctx, d.cfg.ScanInterval) })
	}
	goRun(func() { d.tickLoop(ctx) })
	goRun(func() { d.sloLoop(ctx) })
	goRun(func() {
		gt := gate.NewTracer(ctx, d.gate, d.log)
		d.gate.Arm = gt.Arm
		d.gate.Run(ctx, gt.Follow)
		if err := gt.Close(); err != nil {
			d.log.Warn("request gate: detaching", "err", err)
		}
	})
	goRun(func() { d.housekeeping(ctx) })
	d.log.Info("serving", "socket", d.cfg.Socket, "metrics", d.cfg.MetricsAddr, "mode", d.mode, "policy", d.cfg.PolicyFile)

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	cancel()
	shut, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	d.api.Shutdown(shut)
	if d.mserver != nil {
		d.mserver.Shutdown(shut)
	}
	// Every loop ends at ctx's end, unless one waits in the kernel for
	// good (a process's file it reads: attach bounds that, this is the
	// backstop). BE is resumed and the groups restored whether or not.
	if !waitBounded(&wg, shutdownWait) {
		d.log.Error("stopping: a loop did not end; resuming BE and restoring the groups without it", "waited", shutdownWait)
		d.resumeAll()
	} else {
		d.slo.Close()
	}
	if d.cfg.LeaveSettings {
		d.log.Info("leaving the groups' settings as they are (--leave-settings)")
	} else {
		rctx, rdone := context.WithTimeout(context.Background(), 20*time.Second)
		n, rerr := d.rec.RestoreAll(rctx)
		rdone()
		d.log.Info("restored driver defaults", "groups", n, "err", rerr)
	}
	return err
}

// shutdownWait bounds how long a stopping daemon waits for its loops
// before it restores (SIGTERM to exit within 5 s: the restore itself is
// a few calls per group).
const shutdownWait = 2 * time.Second

// waitBounded waits for wg until d has passed; it reports whether wg
// ended.
func waitBounded(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// resumeAll resumes every BE the daemon holds stopped.
func (d *Daemon) resumeAll() {
	if err := d.pause.ResumeAll(); err != nil {
		d.log.Error("resuming BE processes", "err", err)
	}
}

func (d *Daemon) close() {
	if d.pause != nil {
		if err := d.pause.Close(); err != nil {
			d.log.Error("resuming BE processes", "err", err)
		}
	}
	if d.hup != nil {
		signal.Stop(d.hup)
	}
	if d.sock != nil {
		d.sock.Close()
		os.Remove(d.cfg.Socket)
	}
	if d.mlis != nil {
		d.mlis.Close()
	}
	if c, ok := d.events.(interface{ Close() error }); ok {
		c.Close()
	}
	if d.counter != nil {
		d.counter.Close()
	}
	if d.untrace != nil {
		d.untrace()
	}
	if d.lock != nil {
		d.lock.Close() // releases the flock
	}
}
