package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gpreempt/gpreempt/internal/daemon/client"
)

// switchSuffix marks an slo: scenario whose LC changes half-way.
const switchSuffix = "@switch"

// switchRate is how much faster the kernel LC's requests come after the
// switch.
const switchRate = 5

// switchArgs are an LC worker's options for sc's switch: for the PyTorch
// LC, eager from the middle request on; for the kernel LC, the period
// divided by switchRate from the middle on, with as many more requests as
// keep the second half as long as the first. requests is the run's
// request count before the switch is accounted for; it returns the count
// to run.
func switchArgs(sc Scenario, requests int, period time.Duration) (args []string, total int) {
	if !sc.Switch {
		return nil, requests
	}
	half := max(requests/2, 1)
	if sc.Runtime.Python() {
		return []string{"--switch-after", strconv.Itoa(half)}, requests
	}
	return []string{"--switch-after", strconv.Itoa(half), "--switch-period", fmtDuration(period / switchRate)}, half + switchRate*half
}

// SLOSample is gpreemptd's SLO mode as one GET /v1/status showed it during
// an slo: scenario's measurement.
type SLOSample struct {
	MonoNs int64 `json:"mono_ns"`
	// BETimeslice is the BE timeslice (of one unit of weight) the daemon
	// chose; "" while the policy's own is in force.
	BETimeslice string   `json:"be_timeslice"`
	BEShare     *float64 `json:"be_share,omitempty"`
	WorstLC     *float64 `json:"worst_lc_vs_objective,omitempty"`
	Changes     int      `json:"changes"`
}

// parseSLOStatus reads the slo section of GET /v1/status's JSON.
func parseSLOStatus(b []byte) (SLOSample, error) {
	var st struct {
		SLO *struct {
			Enabled     bool     `json:"enabled"`
			BETimeslice string   `json:"be_timeslice"`
			BEShare     *float64 `json:"be_share"`
			WorstLC     *float64 `json:"worst_lc_vs_objective"`
			Changes     int      `json:"changes"`
		} `json:"slo"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return SLOSample{}, fmt.Errorf("gpreemptd status: %w", err)
	}
	if st.SLO == nil || !st.SLO.Enabled {
		return SLOSample{}, fmt.Errorf("gpreemptd status: SLO mode not enabled (policy: slo: {enabled: true})")
	}
	return SLOSample{BETimeslice: st.SLO.BETimeslice, BEShare: st.SLO.BEShare, WorstLC: st.SLO.WorstLC, Changes: st.SLO.Changes}, nil
}

// sloPoller records the daemon's SLO status every interval until its
// context ends. Its fetch, clock and sleep are injected for tests.
type sloPoller struct {
	fetch    func(ctx context.Context) ([]byte, error)
	mono     func() int64
	sleep    func(ctx context.Context, d time.Duration) error
	interval time.Duration
}

// poll returns the samples taken until ctx ends, and the first error of a
// status that was read but not in SLO mode (a status that cannot be read
// is skipped: the daemon may be busy).
func (p sloPoller) poll(ctx context.Context) ([]SLOSample, error) {
	var out []SLOSample
	for ctx.Err() == nil {
		b, err := p.fetch(ctx)
		if err == nil {
			s, err := parseSLOStatus(b)
			if err != nil {
				return out, err
			}
			s.MonoNs = p.mono()
			out = append(out, s)
		}
		if p.sleep(ctx, p.interval) != nil {
			break
		}
	}
	return out, nil
}

// fetchStatus is GET /v1/status on the daemon's socket, raw.
func fetchStatus(socket string) func(ctx context.Context) ([]byte, error) {
	c := client.New(socket)
	return func(ctx context.Context) ([]byte, error) {
		m, err := c.Status(ctx)
		if err != nil {
			return nil, err
		}
		return json.Marshal(m)
	}
}

// startSLOPoll starts recording the daemon's SLO status; the returned
// function stops it and stores the samples in the run's result.
func (run *scenarioRun) startSLOPoll(ctx context.Context) func() {
	if !run.sc.SLO || run.r.o.SLOPoll <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	p := sloPoller{
		fetch: fetchStatus(run.r.o.DaemonSocket),
		mono:  func() int64 { return monoNs(time.Now()) },
		sleep: func(ctx context.Context, d time.Duration) error {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-t.C:
				return nil
			}
		},
		interval: run.r.o.SLOPoll,
	}
	done := make(chan struct{})
	var samples []SLOSample
	var err error
	go func() { defer close(done); samples, err = p.poll(ctx) }()
	return func() {
		cancel()
		<-done
		run.sr.SLO = samples
		if err != nil {
			run.r.log.Warn("gpreemptd SLO status", "err", err)
		}
	}
}

// sloLine is the report's line for one run's samples: the timeslices the
// daemon chose, in order, and its changes.
func sloLine(ss []SLOSample) string {
	if len(ss) == 0 {
		return "no status read"
	}
	var seq []string
	for _, s := range ss {
		ts := s.BETimeslice
		if ts == "" {
			ts = "policy"
		}
		if len(seq) == 0 || seq[len(seq)-1] != ts {
			seq = append(seq, ts)
		}
	}
	last := ss[len(ss)-1]
	line := fmt.Sprintf("BE timeslice %v over %d samples, %d changes", seq, len(ss), last.Changes)
	if last.BEShare != nil {
		line += fmt.Sprintf(", BE share %.1f%%", 100**last.BEShare)
	}
	return line
}
