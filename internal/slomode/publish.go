package slomode

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/signal"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/tsg"
)

// lcWindow is one LC process's window: its status rows (one per objective), samples and key.
type lcWindow struct {
	rows    []api.SLOLC
	samples []slo.LCSample
	key     string
	began   time.Duration // the reconciler's clock
}

// lcSamples reads each LC process's latest window, by pid: one source at a time, each its own key to the controllers
// (a traced request is not what the app measures, no CPU work before its first launch: the two share no baseline).
func (l *Loop) lcSamples(pol *policy.Policy, lcs []policy.ProcRef, now time.Duration) map[int]lcWindow {
	window := pol.SLO.Window
	out := map[int]lcWindow{}
	for _, p := range lcs {
		objs, ok := pol.Objective(p.Decision)
		if !ok {
			out[p.PID] = lcWindow{rows: []api.SLOLC{{PID: p.PID, Comm: p.Comm, Signal: "no objective"}}}
			continue
		}
		s, ok := l.Latency.Latest(p.PID)
		src, key := sampleSource{p.PID, signal.Pushed}, p.Key()
		if w := l.tracing[key]; l.Traced != nil && w != nil && w.traced {
			s, ok = l.Traced.Latest(p.PID)
			src.kind, key = signal.TracedRequest, key+"/traced"
		} else if l.Scraped != nil && !(ok && now-s.At <= 2*window) { // its server's, where it pushed no fresh window
			if ss, sok := l.Scraped.Latest(p.PID); sok {
				s, ok, src.kind, key = ss, true, signal.Scraped, key+"/scraped"
			}
		}
		if ok {
			s.Source = cmp.Or(s.Source, src.kind)
		}
		w := lcWindow{key: key}
		// A traced or scraped window is one the loop closed: the one closed as the mode came on spans the time it was off.
		fresh := ok && s.Seq != l.used[src] && now-s.At <= 2*window && (src.kind == signal.Pushed || s.Window <= 2*window)
		if fresh {
			l.used[src], w.began = s.Seq, s.At-s.Window
		}
		for _, o := range objs {
			row := api.SLOLC{PID: p.PID, Comm: p.Comm, Objective: o.String(), Source: s.Source}
			switch {
			case !ok && l.Traced != nil:
				row.Signal = "none pushed or traced"
			case !ok:
				row.Signal = "none pushed"
			case !fresh:
				row.Signal = "stale"
			case s.Source == signal.TracedStep && o.Metric == signal.MetricRequest: // it would judge a step
				row.Signal = "refused: this LC is never quiet, so its traced latency is per step; use a tpot_ objective, or push or scrape its requests"
			default:
				if sample := lcSample(s, o, p, key, &row); sample != nil {
					sample.GateTraps = l.Gate == nil || l.Gate.Traps(p.PID) // under a hold, not as alone
					w.samples = append(w.samples, *sample)
				}
			}
			w.rows = append(w.rows, row)
		}
		out[p.PID] = w
	}
	return out
}

// lcSample is s against o as the controllers take it (signal.Latency.Points), nil where s cannot judge o; row shows it or why not.
func lcSample(s signal.Latency, o objective.Objective, p policy.ProcRef, key string, row *api.SLOLC) *slo.LCSample {
	pts, requests, p50, why := s.Points(o)
	if why != "" {
		row.Signal = why
		return nil
	}
	row.Signal, row.Samples, row.Requests, row.P50Us = s.Source+map[bool]string{true: ", per its CPU's speed"}[s.JudgedPerCPU(o)], stats.Weight(pts), s.Requests, float64(p50)/1e3
	from, to := s.Span()
	row.FromMonoNs, row.ToMonoNs = int64(from), int64(to)
	return &slo.LCSample{Key: key, Owner: p.Owner, Objective: o, Points: pts, Requests: requests}
}

// publish sets the status, what hint engines and the gate are told, and the metrics (samples: nil as the mode comes on; per: each BE's timeslice).
func (l *Loop) publish(pol *policy.Policy, samples map[int]lcWindow, all []policy.ProcRef, per map[string]tsg.Opt[time.Duration]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := api.SLO{Enabled: true, Window: pol.SLO.Window.String(), Safe: l.conf.safe.String(), SharedFloor: l.conf.floor.String(), Prepreempt: true,
		Ladder: fmtLadder(pol.SLO.Rungs()), MinBEShare: pol.SLO.MinBEShare, Calibrate: map[bool]string{true: "pause", false: "shortest"}[l.conf.pause > 0]}
	told, holds, gateOn := map[int]bool{}, map[int]bool{}, l.Gate != nil && pol.Gate.Mode != policy.GateOff
	for _, s := range l.sorted() {
		d, ss, arm := s.decided, &s.status, s.ctl.Arm()
		pre := arm.Prepreempt || s.prepreempt == 0 && (pol.SLO.PrepreemptBelow <= 0 || arm.BETimeslice < pol.SLO.PrepreemptBelow) // as the arm says, else below prepreempt_below
		// An engine takes a word other than its last answer at its next push: pre-preemption (l.told), the gate where it gates itself (l.held).
		s.lagged = slices.ContainsFunc(s.lcs, func(p policy.ProcRef) bool {
			_, engine := l.engines[p.PID]
			held, steered := l.held[p.PID]
			return engine && pre != l.toldLocked(p.PID) || gateOn && arm.Gate != (held || !steered) && l.Gate.SelfGated(p.PID)
		})
		for _, p := range s.lcs {
			told[p.PID], holds[p.PID] = pre, arm.Gate // an LC process is in one search
		}
		ss.GPUs, ss.BETimeslice, ss.Arm, ss.LCs, ss.Prepreempt = s.gpus, arm.BETimeslice.String(), arm.String(), len(s.lcs), pre
		if d != nil && s.live() { // what an idle search decides applies to no BE: neither shown nor counted
			sd := &api.SLODecision{Window: l.windows, BETimeslice: d.Arm.BETimeslice.String(), Arm: d.Arm.String(), Phase: d.Phase, Changed: d.Changed,
				Cause: d.Cause, Reason: d.Reason, Fallback: d.Phase == slo.Fallback.String(), BEBelowMinimum: d.BEBelowMinimum, Aligned: d.Aligned, Bound: d.Bound, Converged: d.Converged}
			ss.Last, ss.BEShare, ss.WorstLC, ss.Phase = sd, api.Finite(d.BEShare), api.Finite(d.Worst), d.Phase
			ss.Calibration = &api.SLOCalibration{Paused: d.PausedWindows, Windows: d.CalibrationWindows, Of: d.Windows}
			ss.Arms = nil
			for _, v := range d.Arms {
				ss.Arms = append(ss.Arms, api.SLOArm{Arm: v.Arm.String(), LCVsObjective: api.Finite(v.Worst), Lo: api.Finite(v.Lo), Hi: api.Finite(v.Hi),
					BEShare: api.Finite(v.BEShare), Verdict: v.Verdict, RetryIn: v.RetryIn})
			}
			if d.Changed {
				ss.LastChange = sd
				ss.Changes++
			}
		}
		st.Changes += ss.Changes
		if !s.live() {
			continue
		}
		st.Searches = append(st.Searches, *ss)
		st.Prepreempt = st.Prepreempt && pre
		if w := ss.WorstLC; w != nil && (st.WorstLC == nil || *w > *st.WorstLC) { // this window's: a live search decided
			st.WorstLC = w
		}
		st.LC = append(st.LC, searchRows(s, d, samples)...)
	}
	if len(st.Searches) == 1 {
		ss := st.Searches[0]
		st.BETimeslice, st.BEShare, st.Last, st.LastChange = ss.BETimeslice, ss.BEShare, ss.Last, ss.LastChange
		st.Arm, st.Phase, st.Calibration = ss.Arm, ss.Phase, ss.Calibration
	}
	if l.Share != nil && l.windows > 0 {
		st.BE = l.Share.Status()
		for i, b := range st.BE {
			if j := slices.IndexFunc(all, func(p policy.ProcRef) bool { return p.PID == b.PID }); j >= 0 {
				ts, named := per[all[j].Key()]
				st.BE[i].Apart = named && !ts.Set
				if ts.Set {
					st.BE[i].Timeslice = ts.V.String()
				}
			}
		}
	}
	if l.pausing() {
		for _, p := range all { // by pid
			if l.beSearch[p.Key()] != nil && l.Pause.Holds(p) {
				st.BEStopped = append(st.BEStopped, p.PID)
			}
		}
	}
	l.metrics.SetSLO(st)
	if l.windows > 0 && st.Prepreempt != l.status.Prepreempt {
		l.log.Info("slo: hint engines told", "prepreempt", st.Prepreempt, "prepreempt_below", pol.SLO.PrepreemptBelow)
	}
	l.status, l.told, l.held = st, told, holds
}

// searchRows are the status rows of search s's LCs against its decision d (nil: none this window).
func searchRows(s *search, d *slo.Decision, samples map[int]lcWindow) (out []api.SLOLC) {
	for _, p := range s.lcs {
		w := samples[p.PID]
		for _, row := range w.rows {
			row.GPUs = s.gpus
			if d != nil {
				if i := slices.IndexFunc(d.LC, func(r slo.LCResult) bool { return r.Key == w.key && r.Objective == row.Objective }); i >= 0 {
					r := d.LC[i]
					row.TargetUs, row.LatencyUs, row.Ratio, row.Reference, row.Pending, row.Measurements = float64(r.Target)/1e3, float64(r.Latency)/1e3, api.Finite(r.Ratio), r.Reference, r.Pending, r.Made
					if !r.Counted && r.Pending > 0 && r.Target > 0 {
						what := map[bool]string{true: "tokens", false: "requests"}[strings.HasPrefix(row.Objective, "tpot_")]
						row.Signal = fmt.Sprintf("%s (%d %s accumulated toward a measurement)", row.Signal, r.Pending, what)
					}
				}
			}
			out = append(out, row)
		}
	}
	return out
}

func fmtLadder(l []time.Duration) string {
	return strings.ReplaceAll(strings.Trim(fmt.Sprint(l), "[]"), " ", ",")
}
