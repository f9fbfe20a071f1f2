package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/gate"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/scrape"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slomode"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/tsg"
)

// What SLO mode needs of the daemon, the daemon's parts give.
var (
	_ slomode.Reconciler    = (*reconcile.Reconciler)(nil)
	_ slomode.Metrics       = (*Metrics)(nil)
	_ slomode.Pauser        = (*pause.Holder)(nil)
	_ slomode.Steerer       = (*gate.Gate)(nil)
	_ signal.WindowedSource = (*signals.TracedLatency)(nil)
	_ signal.WindowedSource = (*scrape.Scraped)(nil)
	_ signal.ShareSource    = (*signals.BEProgress)(nil)
)

// NewSLOLoop returns SLO mode over the reconciler rec, on its clock,
// publishing to m; the daemon sets the loop's Pause, Gate and sources.
func NewSLOLoop(rec *reconcile.Reconciler, m *Metrics, log *slog.Logger) *slomode.Loop {
	return slomode.New(rec, func() time.Duration { return rec.Now() }, m, log)
}

// openSignals opens what SLO mode measures by: LC request tracing (--trace-requests), the LC
// servers' own histograms, and BE progress (--be-progress, on by default).
func (d *Daemon) openSignals(ctx context.Context, cfg Config) error {
	if cfg.TraceRequests {
		t, untrace, err := signals.OpenTracedLatency(ctx, cfg.LibCUDA, d.log)
		switch {
		case err != nil && cfg.LibCUDA != "" && errors.Is(err, trace.ErrNoLibrary):
			return fmt.Errorf("%w: --libcuda: %w", tsg.ErrInvalidArgument, err)
		case err != nil:
			return fmt.Errorf("--trace-requests: %w", err)
		}
		d.slo.Traced, d.untrace, d.traced = t, untrace, t
		t.Ceiling, t.AsMeasured = d.rec.Policy().Gate.Idle, cfg.TraceAsMeasured
		lib := cfg.LibCUDA
		if lib == "" {
			lib = "each LC process's own, that process alone"
		}
		d.log.Info("request tracing: LC processes that push no latency are measured from libcuda", "libcuda", lib, "per_cpu", !cfg.TraceAsMeasured)
	}
	// LC processes whose rule or pod names their server's metrics are
	// measured from its histograms (before tracing; a push wins).
	d.slo.Scraped = &scrape.Scraped{Resolve: latencyEndpoints(d.rec, cfg.MetricsEndpoint), Log: d.log}
	if cfg.BEProgress {
		if cfg.LibCUDA != "" {
			if _, err := trace.FindLibrary(trace.LibCUDA, cfg.LibCUDA, 0); err != nil {
				return fmt.Errorf("%w: --libcuda: %w", tsg.ErrInvalidArgument, err)
			}
		}
		c, err := trace.OpenLaunchCounter(d.log)
		if err != nil {
			d.log.Warn("BE progress: not measured, BE share unknown in SLO mode", "err", err)
		} else {
			p := signals.NewBEProgress(c, d.log)
			if cfg.LibCUDA != "" {
				p.Library = signals.BELibrary(cfg.LibCUDA)
			}
			d.counter, d.slo.Share = c, p
		}
	}
	return nil
}
