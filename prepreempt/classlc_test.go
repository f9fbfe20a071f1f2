package prepreempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/client"
)

// TestClassLC: a process that is not root asks gpreemptd for the LC class
// and classes itself only where no daemon answers; root classes itself.
func TestClassLC(t *testing.T) {
	for _, tt := range []struct {
		name      string
		daemon    error
		wantAsked bool
		wantSelf  bool
	}{
		// Root or not: a class set by hand under a daemon is drift.
		{"daemon sets the class", nil, true, false},
		{"no daemon: the timeslice by hand", fmt.Errorf("dial: %w", client.ErrUnavailable), true, true},
		{"refused: the policy decides", fmt.Errorf("403: %w", client.ErrForbidden), true, false},
		{"other daemon error: the timeslice by hand", errors.New("bad reply"), true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked, self := false, false
			requestClass = func(ctx context.Context, socket, class string) error {
				asked = true
				if socket != "/run/x.sock" || class != "lc" {
					t.Errorf("asked %q for %q", socket, class)
				}
				if _, ok := ctx.Deadline(); !ok {
					t.Error("the request to the daemon has no deadline")
				}
				return tt.daemon
			}
			selfClassLC = func(ctx context.Context, ts time.Duration, log *slog.Logger) error {
				self = true
				return nil
			}
			t.Cleanup(func() { requestClass, selfClassLC = defaultRequestClass, defaultSelfClassLC })
			if err := classLC(t.Context(), Options{DaemonSocket: "/run/x.sock"}, slog.New(slog.DiscardHandler)); err != nil {
				t.Fatal(err)
			}
			if asked != tt.wantAsked || self != tt.wantSelf {
				t.Errorf("asked the daemon %v, classed itself %v; want %v, %v", asked, self, tt.wantAsked, tt.wantSelf)
			}
		})
	}
}

var (
	defaultRequestClass = requestClass
	defaultSelfClassLC  = selfClassLC
)
