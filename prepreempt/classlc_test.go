package prepreempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
)

// TestClassLC: a process that is not root asks gpreemptd for the LC class
// and classes itself only where no daemon answers; root classes itself.
func TestClassLC(t *testing.T) {
	for _, tt := range []struct {
		name      string
		euid      int
		daemon    error
		wantAsked bool
		wantSelf  bool
	}{
		// Root or not, the daemon first: a class set by hand under it is drift.
		{"daemon sets the class", 1000, nil, true, false},
		{"root: the daemon sets the class", 0, nil, true, false},
		{"no daemon: the timeslice by hand", 1000, fmt.Errorf("dial: %w", api.ErrUnavailable), true, true},
		{"refused: the policy decides", 1000, fmt.Errorf("403: %w", api.ErrForbidden), true, false},
		{"refused, root: by hand", 0, fmt.Errorf("403: %w", api.ErrForbidden), true, true},
		{"other daemon error: the timeslice by hand", 1000, errors.New("bad reply"), true, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			asked, self := false, false
			geteuid = func() int { return tt.euid }
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
			t.Cleanup(func() { geteuid, requestClass, selfClassLC = defaultGeteuid, defaultRequestClass, defaultSelfClassLC })
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
	defaultGeteuid      = geteuid
	defaultRequestClass = requestClass
	defaultSelfClassLC  = selfClassLC
)
