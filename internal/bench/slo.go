package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
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
	BETimeslice string `json:"be_timeslice"`
	// Arm is the whole arm chosen ("200µs+gate"): the timeslice alone
	// hides a move to or from the gate or pre-preemption.
	Arm     string   `json:"arm,omitempty"`
	BEShare *float64 `json:"be_share,omitempty"`
	WorstLC *float64 `json:"worst_lc_vs_objective,omitempty"`
	Changes int      `json:"changes"`
	// Aligned: the last decision judged LC windows that began as the one
	// before took effect (docs/SLO.md, aligned windows); nil before any.
	Aligned *bool `json:"aligned,omitempty"`
	// Window is the daemon's count of the last decision's window (0:
	// none yet): a new value marks a new window.
	Window int `json:"window,omitempty"`
	// BEStopped: a BE process was stopped to learn an LC alone.
	BEStopped bool `json:"be_stopped,omitempty"`
	// Converged: the daemon's search had converged (its explorations budgeted).
	Converged bool `json:"converged,omitempty"`
	// Cause is the cause of the daemon's last arm change (violation,
	// explore, ...): whether a change protected the LC or sought BE.
	Cause string `json:"change_cause,omitempty"`
	// LC is each LC process as the status showed it.
	LC []SLOLCSample `json:"lc,omitempty"`
	// Arms is the search's frontier (a run of one GPU, one search), kept
	// in the last read alone: what SLO mode knew of each arm at the end.
	Arms []api.SLOArm `json:"arms,omitempty"`
}

// SLOLCSample is one LC process in one status read: its last window's
// latency as the daemon saw it.
type SLOLCSample struct {
	PID       int     `json:"pid"`
	Objective string  `json:"objective,omitempty"`
	Source    string  `json:"source,omitempty"`
	Samples   int     `json:"samples,omitempty"`
	P50Us     float64 `json:"p50_us,omitempty"`
	LatencyUs float64 `json:"latency_us,omitempty"`
	// TargetUs is what the objective allows (api.SLOLC's: a relative
	// objective's reference times its factor; 0: not known yet).
	TargetUs float64 `json:"target_us,omitempty"`
	// FromMonoNs and ToMonoNs are the span (from, to] the window's samples
	// ended in (api.SLOLC's; 0: a daemon that does not say).
	FromMonoNs int64 `json:"from_mono_ns,omitempty"`
	ToMonoNs   int64 `json:"to_mono_ns,omitempty"`
	// Pending is what accumulated toward the next measurement (api.SLOLC's):
	// it falls to 0 as one counts, or as the arm moves.
	Pending int `json:"pending,omitempty"`
	// Measurements is how many SLO mode made (api.SLOLC's; 0: a daemon
	// that does not count them, whose new ones are told by latency and
	// Pending).
	Measurements int `json:"measurements,omitempty"`
	// RequestsVary is the status's traced row's requests_vary for the
	// process (nil: not traced): whether back-to-back requests were left
	// undivided as the read was made.
	RequestsVary *bool `json:"requests_vary,omitempty"`
}

// sloStatus reads the slo section of GET /v1/status's JSON, and its traced
// section undecoded; an error if SLO mode is off.
func sloStatus(b []byte) (*api.SLO, json.RawMessage, error) {
	var st struct {
		SLO    *api.SLO        `json:"slo"`
		Traced json.RawMessage `json:"traced"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, nil, fmt.Errorf("gpreemptd status: %w", err)
	}
	if st.SLO == nil || !st.SLO.Enabled {
		return nil, nil, fmt.Errorf("gpreemptd status: SLO mode not enabled (policy: slo: {enabled: true})")
	}
	return st.SLO, st.Traced, nil
}

// parseSLOStatus reads one SLO sample from GET /v1/status's JSON.
func parseSLOStatus(b []byte) (SLOSample, error) {
	st, tracedJSON, err := sloStatus(b)
	if err != nil {
		return SLOSample{}, err
	}
	s := SLOSample{BETimeslice: st.BETimeslice, Arm: st.Arm, BEShare: st.BEShare, WorstLC: st.WorstLC, Changes: st.Changes, BEStopped: len(st.BEStopped) > 0}
	if len(st.Searches) == 1 {
		s.Arms = st.Searches[0].Arms
	}
	if st.Last != nil {
		s.Aligned, s.Window, s.Converged = &st.Last.Aligned, st.Last.Window, st.Last.Converged
	}
	if st.LastChange != nil {
		s.Cause = st.LastChange.Cause
	}
	var traced []struct {
		PID          int  `json:"pid"`
		RequestsVary bool `json:"requests_vary"`
	}
	vary := map[int]*bool{}
	if tracedJSON != nil && json.Unmarshal(tracedJSON, &traced) == nil { // a section of another shape reads as none
		for _, t := range traced {
			vary[t.PID] = &t.RequestsVary
		}
	}
	for _, l := range st.LC {
		s.LC = append(s.LC, SLOLCSample{PID: l.PID, Objective: l.Objective, Source: l.Source, Samples: l.Samples, P50Us: l.P50Us, LatencyUs: l.LatencyUs,
			TargetUs: l.TargetUs, FromMonoNs: l.FromMonoNs, ToMonoNs: l.ToMonoNs, Pending: l.Pending, Measurements: l.Measurements, RequestsVary: vary[l.PID]})
	}
	return s, nil
}

// sloWindow asks gpreemptd for its SLO window, the period LC workers push
// their latency at: one push per observation.
// A policy that turns SLO mode on takes effect at the daemon's next step
// (a window after the reload at most): it is asked again every
// sloRetry for up to patience.
func sloWindow(ctx context.Context, fetch func(context.Context) ([]byte, error), patience time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(patience)
	var st *api.SLO
	for {
		b, err := fetch(ctx)
		if err != nil {
			return 0, fmt.Errorf("slo: scenarios need gpreemptd in SLO mode: %w", err)
		}
		if st, _, err = sloStatus(b); err == nil {
			break
		} else if !time.Now().Before(deadline) {
			return 0, fmt.Errorf("slo: scenarios: %w", err)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(sloRetry):
		}
	}
	w, err := time.ParseDuration(st.Window)
	if err != nil || w <= 0 {
		return 0, fmt.Errorf("slo: scenarios: gpreemptd status: SLO window %q: want a positive duration", st.Window)
	}
	return w, nil
}

// sloRetry and sloPatience: how often and how long the bench asks for
// SLO mode after a reload that turns it on.
const (
	sloRetry    = 250 * time.Millisecond
	sloPatience = 10 * time.Second
)

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
			if s.MonoNs = p.mono(); len(out) > 0 {
				out[len(out)-1].Arms = nil // the last read's frontier is the one kept
			}
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
	c := api.New(socket)
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
		fetch:    fetchStatus(run.r.o.DaemonSocket),
		mono:     func() int64 { return monoNs(time.Now()) },
		sleep:    func(ctx context.Context, d time.Duration) error { return sleepWatching(ctx, d) },
		interval: run.r.o.SLOPoll,
	}
	done := make(chan struct{})
	var samples []SLOSample
	var err error
	go func() { defer close(done); samples, err = p.poll(ctx) }()
	// Once: the caller stops it when the LCs end and defers it for the
	// error paths.
	return sync.OnceFunc(func() {
		cancel()
		<-done
		run.sr.SLO = samples
		if err != nil {
			run.r.log.Warn("gpreemptd SLO status", "err", err)
		}
	})
}

// beAloneLearnt reports whether gpreemptd's status st shows every BE
// process in pids either with its rate alone learnt or not counted, so
// that the LC may start; measured is false when the daemon counts no BE
// process at all (it runs without --be-progress, or BPF was refused).
func beAloneLearnt(st *api.SLO, pids []int) (done, measured bool) {
	if len(st.BE) == 0 {
		return false, false
	}
	for _, pid := range pids {
		i := slices.IndexFunc(st.BE, func(b api.SLOBE) bool { return b.PID == pid })
		if i < 0 || st.BE[i].AlonePerS <= 0 && !strings.HasPrefix(st.BE[i].Signal, "not counted") {
			return false, true
		}
	}
	return true, true
}

// beAloneWindows bounds how long an slo: scenario waits for gpreemptd to
// learn the BE processes' progress alone (it needs 3 windows, the first
// after it starts counting).
const beAloneWindows = 10

// waitBEAlone lets gpreemptd learn the BE processes' progress alone before
// the LC starts, as a daemon does on a node whose LC comes after its
// training: with the BE's rate alone known, BE share is measured through
// the run. A daemon that counts no BE progress is not waited for beyond
// three windows; one that has not learnt it after beAloneWindows is
// logged and the run goes on (BE share unknown for that process).
func (run *scenarioRun) waitBEAlone(ctx context.Context) error {
	fetch := fetchStatus(run.r.o.DaemonSocket)
	window, err := sloWindow(ctx, fetch, sloPatience)
	if err != nil {
		return err
	}
	var pids []int
	for _, w := range run.bes {
		pids = append(pids, w.pid())
	}
	start := time.Now()
	for {
		b, err := fetch(ctx)
		if err == nil {
			st, _, err := sloStatus(b)
			if err != nil {
				return err
			}
			done, measured := beAloneLearnt(st, pids)
			waited := time.Since(start)
			switch {
			case done:
				run.r.log.Info("gpreemptd learnt BE progress alone", "after", waited.Round(time.Millisecond))
				return nil
			case !measured && waited > 3*window:
				run.r.log.Info("gpreemptd measures no BE progress: BE share unknown to it")
				return nil
			case waited > beAloneWindows*window:
				run.r.log.Warn("gpreemptd did not learn BE progress alone; starting the LC", "waited", waited.Round(time.Millisecond))
				return nil
			}
		}
		if err := sleepWatching(ctx, window/4); err != nil {
			return err
		}
	}
}

// switchAtNs is when an slo: scenario's LC changed its workload: the
// arrival of its switch_after request (0: it did not, or the results do
// not say).
func switchAtNs(lc *LCResult) int64 {
	if lc == nil {
		return 0
	}
	var i int
	switch v := lc.Config["switch_after"].(type) {
	case int:
		i = v
	case float64: // read back from results.json
		i = int(v)
	}
	if i <= 0 || i >= len(lc.Samples) {
		return 0
	}
	return lc.Samples[i].ArrivalMonoNs
}

// sloLine is one run's SLO status samples in a line: the BE timeslices in
// the lead-in and in the measurement (from measureStartNs), and, when the
// LC changed its workload at changeNs (> 0), each setting chosen from then
// on with how long after the change it was first seen.
func sloLine(ss []SLOSample, measureStartNs, changeNs int64) string {
	if len(ss) == 0 {
		return "no status read"
	}
	seq := func(ss []SLOSample) []string {
		var seq []string
		for _, s := range ss {
			if ts := s.shown(); len(seq) == 0 || seq[len(seq)-1] != ts {
				seq = append(seq, ts)
			}
		}
		return seq
	}
	i := 0
	for i < len(ss) && ss[i].MonoNs < measureStartNs {
		i++
	}
	lead, measured := ss[:i], ss[i:]
	var parts []string
	before := 0
	if len(lead) > 0 {
		before = lead[len(lead)-1].Changes
		parts = append(parts, fmt.Sprintf("lead-in %v, %d changes", seq(lead), before-lead[0].Changes))
	}
	if len(measured) > 0 {
		last := measured[len(measured)-1]
		if len(lead) == 0 {
			before = measured[0].Changes
		}
		line := fmt.Sprintf("measured %v over %d samples, %d changes", seq(measured), len(measured), last.Changes-before)
		var sum float64
		var n, decided, aligned int
		for _, s := range measured {
			if s.BEShare != nil {
				sum, n = sum+*s.BEShare, n+1
			}
			if s.Aligned != nil {
				decided++
				if *s.Aligned {
					aligned++
				}
			}
		}
		if n > 0 {
			line += fmt.Sprintf(", BE share measured by gpreemptd %.1f%% (mean of %d samples)", 100*sum/float64(n), n)
		}
		if decided > 0 {
			line += fmt.Sprintf(", LC windows aligned in %d of %d", aligned, decided)
		}
		if span := time.Duration(last.MonoNs - measured[0].MonoNs); span >= 2*steadySpan {
			line += fmt.Sprintf(", at most %d in any %v of %v", mostChanges(measured, steadySpan), steadySpan, span.Round(time.Second))
		}
		if c := slices.IndexFunc(measured, func(s SLOSample) bool { return s.Converged }); c >= 0 {
			after, when := measured[c:], fmt.Sprintf("converged %.0fs in", float64(measured[c].MonoNs-measured[0].MonoNs)/1e9)
			if c == 0 && len(lead) > 0 && lead[len(lead)-1].Converged {
				when = "converged in the lead-in"
			}
			line += fmt.Sprintf("; %s: %d changes over the %v after", when, last.Changes-after[0].Changes, time.Duration(last.MonoNs-after[0].MonoNs).Round(time.Second))
			if cs := causes(after); cs != "" {
				line += " (" + cs + ")"
			}
			if time.Duration(last.MonoNs-after[0].MonoNs) >= 2*steadySpan {
				line += fmt.Sprintf(", at most %d in any %v", mostChanges(after, steadySpan), steadySpan)
			}
		}
		parts = append(parts, line)
	}
	if changeNs > 0 {
		if line := afterChange(ss, changeNs); line != "" {
			parts = append(parts, line)
		}
	}
	return "arm " + strings.Join(parts, "; ")
}

// steadySpan is the span over which a settled search may change its arm
// at most once (issue 51, must-show 5).
const steadySpan = 30 * time.Second

// mostChanges is the most arm changes ss shows within any span: the
// largest rise of the change count between two reads at most span apart.
func mostChanges(ss []SLOSample, span time.Duration) int {
	most, j := 0, 0
	for i := range ss {
		for j < len(ss)-1 && ss[j+1].MonoNs-ss[i].MonoNs <= int64(span) {
			j++
		}
		most = max(most, ss[j].Changes-ss[i].Changes)
	}
	return most
}

// causes lists the causes of the changes ss shows, in order; of changes
// between two reads only the last one's is known.
func causes(ss []SLOSample) string {
	var out []string
	for i := 1; i < len(ss); i++ {
		if n := ss[i].Changes - ss[i-1].Changes; n > 0 {
			out = append(out, cmp.Or(ss[i].Cause, "?")+map[bool]string{true: fmt.Sprintf(" (+%d before it, unread)", n-1)}[n > 1])
		}
	}
	return strings.Join(out, ", ")
}

// afterChange is the settings in ss from changeNs on, each with the time
// from changeNs to the first sample showing it ("" if no sample is that
// late). The first is the setting in force at the change.
func afterChange(ss []SLOSample, changeNs int64) string {
	i := slices.IndexFunc(ss, func(s SLOSample) bool { return s.MonoNs >= changeNs })
	if i < 0 {
		return ""
	}
	if i > 0 {
		i-- // in force when the LC changed
	}
	var seq []string
	for j, s := range ss[i:] {
		if ts := s.shown(); j == 0 || ts != ss[i+j-1].shown() {
			seq = append(seq, fmt.Sprintf("%s +%.1fs", ts, float64(max(s.MonoNs-changeNs, 0))/1e9))
		}
	}
	return fmt.Sprintf("after the LC's change: [%s]", strings.Join(seq, ", "))
}

// shown is the arm a sample shows (its BE timeslice where the daemon
// names no arm), "policy" while the policy's own timeslice is in force.
func (s SLOSample) shown() string {
	switch {
	case s.BETimeslice == "":
		return "policy"
	case s.Arm != "":
		return s.Arm
	}
	return s.BETimeslice
}
