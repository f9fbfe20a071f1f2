package slomode

import (
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/testlog"
)

// fixedWindows is a signal.WindowedSource whose windows the test sets.
type fixedWindows struct {
	fixedLatency
	rolled [][]policy.ProcRef
}

func (f *fixedWindows) Roll(_ time.Duration, lcs []policy.ProcRef) { f.rolled = append(f.rolled, lcs) }

// TestScrapedSource: a scraped window stands for an LC that pushes none,
// before tracing (which then leaves it alone), and a fresh push wins
// over it.
func TestScrapedSource(t *testing.T) {
	pol, err := policy.Parse([]byte(strings.Replace(sloPolicy, `lc: {objective: "p50<=1.05x"}`, `lc: {objective: "p50<=500ms"}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	lc := policy.ProcRef{PID: 100, Start: 1, Comm: "lc-server"}
	lc.Decision = pol.Decide(policy.Process{PID: 100, Comm: "lc-server"})
	window := pol.SLO.Window
	now := 10 * window
	scrapedWin := signal.Latency{At: now, Window: window, Source: signal.Scraped, Requests: 30, Seq: 4,
		Quantiles: map[string]time.Duration{"p50": 300 * time.Millisecond}}
	pushedWin := signal.Latency{At: now, Window: window, Requests: 30, Seq: 9, Quantiles: map[string]time.Duration{"p50": 200 * time.Millisecond}}
	for _, tc := range []struct {
		name       string
		pushed     fixedLatency
		scraped    fixedLatency
		wantSignal string
		wantP50    time.Duration
		wantKey    string
		traced     bool // request tracing is asked for it (after TraceAfter windows)
	}{
		{"scraped, no push", fixedLatency{}, fixedLatency{100: scrapedWin}, "scraped", 300 * time.Millisecond, lc.Key() + "/scraped", false},
		{"a fresh push wins", fixedLatency{100: pushedWin}, fixedLatency{100: scrapedWin}, "pushed", 200 * time.Millisecond, lc.Key(), false},
		{"a stale push: scraped", fixedLatency{100: func() signal.Latency { s := pushedWin; s.At = now - 3*window; return s }()}, fixedLatency{100: scrapedWin}, "scraped", 300 * time.Millisecond, lc.Key() + "/scraped", false},
		{"no scraped window: traced", fixedLatency{}, fixedLatency{}, "none pushed or traced", 0, lc.Key(), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc := &fixedWindows{fixedLatency: tc.scraped}
			traced := &fixedWindows{fixedLatency: fixedLatency{}}
			l := &Loop{log: testlog.New(t), used: map[sampleSource]uint64{}, tracing: map[string]*traceWant{},
				Latency: tc.pushed, Scraped: sc, Traced: traced}
			l.toTrace(pol, []policy.ProcRef{lc}, now-TraceAfter*window)
			if got := l.toTrace(pol, []policy.ProcRef{lc}, now); (len(got) == 1) != tc.traced {
				t.Errorf("traced %v, want %v", got, tc.traced)
			}
			w := l.lcSamples(pol, []policy.ProcRef{lc}, now)[100]
			if len(w.rows) != 1 || !strings.HasPrefix(w.rows[0].Signal, tc.wantSignal) {
				t.Fatalf("rows %+v, want signal %q", w.rows, tc.wantSignal)
			}
			if tc.wantP50 == 0 {
				if len(w.samples) != 0 {
					t.Fatalf("samples %+v", w.samples)
				}
				return
			}
			if len(w.samples) != 1 || w.samples[0].Points[0].V != tc.wantP50 || w.key != tc.wantKey {
				t.Fatalf("samples %+v key %q, want p50 %v key %q", w.samples, w.key, tc.wantP50, tc.wantKey)
			}
			// A window is used once.
			if again := l.lcSamples(pol, []policy.ProcRef{lc}, now)[100]; len(again.samples) != 0 {
				t.Errorf("the same window used twice: %+v", again.rows)
			}
		})
	}
}
