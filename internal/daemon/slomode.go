package daemon

import (
	"log/slog"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/gate"
	"github.com/gpreempt/gpreempt/internal/daemon/pause"
	"github.com/gpreempt/gpreempt/internal/daemon/signals"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/scrape"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slomode"
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
