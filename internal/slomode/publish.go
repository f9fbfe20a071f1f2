package slomode

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/slo"
	"github.com/gpreempt/gpreempt/internal/slo/objective"
)

// lcWindow is one LC process's window: its status rows (one per
// objective) and its samples to the controllers.
type lcWindow struct {
	rows    []api.SLOLC
	samples []slo.LCSample
	key     string        // its key to the controllers
	tokens  bool          // its tpot_ objectives count tokens
	began   time.Duration // when the window began (the reconciler's clock)
}

// lcSamples reads each LC process's latest window, by pid.
func (l *Loop) lcSamples(pol *policy.Policy, lcs []policy.ProcRef, now time.Duration) map[int]lcWindow {
	window := pol.SLO.Window
	out := map[int]lcWindow{}
	for _, p := range lcs {
		o, ok := pol.Objective(p.Decision)
		ls := api.SLOLC{PID: p.PID, Comm: p.Comm}
		if !ok {
			ls.Signal = "no objective"
			out[p.PID] = lcWindow{rows: []api.SLOLC{ls}}
			continue
		}
		// What the app pushes, or what request tracing sees of it while
		// the loop has it traced (toTrace): one source at a time, and
		// each its own key to the controller, for a traced request is
		// not what the app measures (no CPU-side work before its first
		// launch) and the two do not share a baseline.
		s, ok := l.Latency.Latest(p.PID)
		src, key := sampleSource{p.PID, SourcePushed}, p.Key()
		if w := l.tracing[key]; l.Traced != nil && w != nil && w.traced {
			s, ok = l.Traced.Latest(p.PID)
			src.kind, key = "traced", key+"/traced"
		}
		// Its server's histograms, where it pushed no fresh window.
		if src.kind == SourcePushed && l.Scraped != nil && !(ok && now-s.At <= 2*window) {
			if ss, sok := l.Scraped.Latest(p.PID); sok {
				s, ok = ss, true
				src.kind, key = SourceScraped, key+"/scraped"
			}
		}
		if ok && s.Source == "" { // a source that does not name itself is what it was read from
			s.Source = map[string]string{SourcePushed: SourcePushed, "traced": SourceTracedRequest, SourceScraped: SourceScraped}[src.kind]
		}
		w := lcWindow{key: key}
		// A traced or scraped window is one of the loop's: the one closed
		// when the mode came on spans the time it was off.
		fresh := ok && s.Seq != l.used[src] && now-s.At <= 2*window && (src.kind == "pushed" || s.Window <= 2*window)
		if fresh {
			l.used[src], w.began = s.Seq, s.At-s.Window
		}
		// One row, and one sample, per objective: a process may bound
		// its median and its tail.
		for _, o := range o {
			ls := ls
			ls.Objective = o.String()
			if ok {
				ls.Source = s.Source
			}
			switch {
			case !ok:
				ls.Signal = "none pushed"
				if l.Traced != nil {
					ls.Signal = "none pushed or traced"
				}
			case !fresh:
				ls.Signal = "stale"
			case s.Source == SourceTracedStep && o.Metric == "":
				// Its traced latency is per step: a request objective would judge a step.
				ls.Signal = "refused: this LC is never quiet, so its traced latency is per step; use a tpot_ objective, or push or scrape its requests"
			default:
				sample, signal := lcSample(s, o, p, key)
				ls.Signal = signal
				if sample == nil {
					break
				}
				ls.Samples, ls.Requests = max(len(sample.Values), sample.Count), s.Requests
				ls.P50Us = float64(sample.P50) / 1e3
				w.tokens = w.tokens || o.Metric == MetricTPOT
				w.samples = append(w.samples, *sample)
			}
			w.rows = append(w.rows, ls)
		}
		out[p.PID] = w
	}
	return out
}

// lcSample is s against objective o as the controllers take it: the window's own values of o's
// metric, else its quantile over its count; nil, and why, where s has neither.
func lcSample(s LatencySample, o objective.Objective, p policy.ProcRef, key string) (*slo.LCSample, string) {
	out := &slo.LCSample{Key: key, Source: s.Source, Owner: p.Owner, Objective: o, Values: s.Samples[o.Metric]}
	if len(out.Values) > 0 {
		out.P50 = slices.Sorted(slices.Values(out.Values))[(len(out.Values)-1)/2]
		return out, s.Source
	}
	name, median := quantileName(o.Quantile), "p50"
	if o.Metric != "" {
		name, median = o.Metric+"_"+name, o.Metric+"_p50"
	}
	out.P50 = s.Quantiles[median]
	lat, ok := s.Quantiles[name]
	if !ok {
		return nil, s.Source + " without " + name
	}
	// A time per output token is a quantile of the window's tokens: an LLM server finishes a
	// request or two a second.
	out.Latency, out.Count = lat, s.Requests
	if o.Metric == MetricTPOT && s.Tokens > 0 {
		out.Count = s.Tokens
	}
	return out, s.Source
}

// publish sets the status, what hint engines are told, and the metrics,
// after a window whose decisions are decided, over the LC windows
// samples (none when the mode came on), which gave each BE process of all
// the timeslice per names.
func (l *Loop) publish(pol *policy.Policy, decided map[*search]*slo.Decision, samples map[int]lcWindow, all []policy.ProcRef, per map[string]time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prevPre := l.status.Prepreempt
	st := api.SLO{Enabled: true, Window: pol.SLO.Window.String(), Safe: l.conf.safe.String(), SharedFloor: l.conf.floor.String(),
		Ladder: ladderOrDefault(pol.SLO.Ladder), MinBEShare: pol.SLO.MinBEShare, Calibrate: calibrateName(l.conf.pause),
		Engines: l.status.Engines, Prepreempt: true}
	told := map[int]bool{}
	metrics := map[string]slo.Decision{}
	var worst float64 = math.NaN()
	var lcRows []api.SLOLC
	for _, s := range l.sorted() {
		d := decided[s]
		ss := &s.status
		arm := s.ctl.Arm()
		ss.GPUs, ss.BETimeslice, ss.Arm, ss.LCs = s.gpus, arm.BETimeslice.String(), arm.String(), len(s.lcs)
		// Engines pre-preempt as the arm says where pre-preemption is an
		// arm; elsewhere below slo.prepreempt_below.
		pre := arm.Prepreempt || s.prepreempt == 0 && (pol.SLO.PrepreemptBelow <= 0 || arm.BETimeslice < pol.SLO.PrepreemptBelow)
		// An engine takes a word other than the one its last push was
		// answered with (l.status and l.told are still that publish's) at
		// its next push: the window now running.
		lags := func(p policy.ProcRef) bool {
			_, engine := st.Engines[strconv.Itoa(p.PID)]
			return engine && pre != l.toldLocked(p.PID)
		}
		s.lagged = slices.ContainsFunc(s.lcs, lags) || s.gateLag
		ss.Prepreempt = pre
		// What an idle search decides applies to no BE: neither shown nor
		// counted.
		if d != nil && s.live() {
			sd := &api.SLODecision{Window: l.windows, BETimeslice: d.BETimeslice.String(), Arm: d.Arm.String(), Phase: d.Phase, Changed: d.Changed,
				Cause: d.Cause, Reason: d.Reason, Fallback: d.Fallback, BEBelowMinimum: d.BEBelowMinimum, Aligned: d.Aligned, Bound: d.Bound}
			ss.Last, ss.BEShare, ss.WorstLC, ss.Phase = sd, finite(d.BEShare), finite(d.Worst), d.Phase
			ss.Calibration = &api.SLOCalibration{Paused: d.PausedWindows, Windows: d.CalibrationWindows, Of: d.Windows}
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
		for _, p := range s.lcs {
			told[p.PID] = pre // an LC process is in one search
		}
		if d != nil {
			metrics[s.key] = *d
			if !math.IsNaN(d.Worst) && (math.IsNaN(worst) || d.Worst > worst) {
				worst = d.Worst
			}
		} else {
			metrics[s.key] = slo.Decision{BETimeslice: s.ctl.Arm().BETimeslice, Cause: slo.CauseNoSignal, Worst: math.NaN(), BEShare: math.NaN()}
		}
		lcRows = append(lcRows, searchRows(s, d, samples)...)
	}
	st.WorstLC, st.LC = finite(worst), lcRows
	if len(st.Searches) == 1 {
		ss := st.Searches[0]
		st.BETimeslice, st.BEShare, st.Last, st.LastChange = ss.BETimeslice, ss.BEShare, ss.Last, ss.LastChange
		st.Arm, st.Phase, st.Calibration = ss.Arm, ss.Phase, ss.Calibration
	}
	if l.Share != nil && l.windows > 0 {
		st.BE = l.Share.Status()
		for i := range st.BE {
			b := &st.BE[i]
			if j := slices.IndexFunc(all, func(p policy.ProcRef) bool { return p.PID == b.PID }); j >= 0 {
				ts, named := per[all[j].Key()]
				b.Apart = named && ts == 0
				if ts > 0 {
					b.Timeslice = ts.String()
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
	l.metrics.SetBEStopped(len(st.BEStopped))
	l.metrics.SetSLO(true, metrics)
	if l.windows > 0 && st.Prepreempt != prevPre {
		l.log.Info("slo: hint engines told", "prepreempt", st.Prepreempt, "prepreempt_below", pol.SLO.PrepreemptBelow)
	}
	l.status, l.told = st, told
}

// searchRows are the status rows of search s's LC processes in their
// windows samples, against its decision d (nil: none this window).
func searchRows(s *search, d *slo.Decision, samples map[int]lcWindow) []api.SLOLC {
	var out []api.SLOLC
	var res []slo.LCResult
	if d != nil {
		res = d.LC
	}
	for _, p := range s.lcs {
		w := samples[p.PID]
		for _, row := range w.rows {
			row.GPUs = s.gpus
			for _, r := range res {
				if r.Key == w.key && r.Objective == row.Objective {
					row.TargetUs, row.Ratio, row.Reference, row.Pending = float64(r.Target)/1e3, finite(r.Ratio), r.Reference, r.Pending
					row.LatencyUs = float64(r.Latency) / 1e3
					if !r.Counted && r.Pending > 0 && r.Target > 0 {
						what := "requests"
						if w.tokens && strings.HasPrefix(row.Objective, "tpot_") {
							what = "tokens"
						}
						row.Signal = fmt.Sprintf("%s (%d %s accumulated toward a measurement)", row.Signal, r.Pending, what)
					}
				}
			}
			out = append(out, row)
		}
	}
	return out
}

func finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// ladderOrDefault is the ladder in force, as the status shows it.
func ladderOrDefault(l []time.Duration) string {
	if len(l) == 0 {
		l = slo.DefaultLadder
	}
	return fmtLadder(l)
}

func fmtLadder(l []time.Duration) string {
	s := ""
	for i, d := range l {
		if i > 0 {
			s += ","
		}
		s += d.String()
	}
	return s
}

func calibrateName(pause int) string {
	if pause > 0 {
		return "pause"
	}
	return "shortest"
}
