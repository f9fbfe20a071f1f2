package api

// The "slo" object of GET /v1/status: SLO mode's searches, their frontiers, LCs and BE.

import (
	"math"
	"strconv"
	"strings"
)

// SLO is the "slo" object of GET /v1/status: the SLO mode's state. The
// mode searches a BE timeslice per GPU with an LC process (Searches); the
// fields marked "of the search" are its when there is one search, and
// left empty when there are several.
type SLO struct {
	Enabled bool `json:"enabled"`
	// Window is the observation window.
	Window string `json:"window,omitempty"`
	// BETimeslice is the BE timeslice (of one unit of weight) chosen: of
	// the search ("" with no LC: BE keeps the policy's); Arm the whole
	// arm ("200µs+gate"), Phase the search's (fallback, calibrating,
	// deciding), Calibration what learning references cost: of the one
	// search.
	BETimeslice string          `json:"be_timeslice,omitempty"`
	Arm         string          `json:"arm,omitempty"`
	Phase       string          `json:"phase,omitempty"`
	Calibration *SLOCalibration `json:"calibration,omitempty"`
	Safe        string          `json:"safe,omitempty"`
	// SharedFloor is the shortest BE timeslice chosen while two or more
	// BE processes share a GPU beside an LC.
	SharedFloor string `json:"shared_floor,omitempty"`
	Ladder      string `json:"ladder,omitempty"`
	// BEShare is BE progress relative to BE alone, of the search; nil:
	// unknown.
	BEShare *float64 `json:"be_share,omitempty"`
	// BE is each BE process's progress, where the daemon measures it.
	BE         []SLOBE `json:"be,omitempty"`
	MinBEShare float64 `json:"min_be_share,omitempty"`
	// WorstLC is the highest latency/objective among LC processes, over
	// every search; nil: no LC latency counted this window.
	WorstLC *float64 `json:"worst_lc_vs_objective,omitempty"`
	// LC lists each LC process against each objective, with the GPUs of
	// the one search it is in.
	LC []SLOLC `json:"lc,omitempty"`
	// Last is the last decision; LastChange the last that changed the
	// timeslice: of the search.
	Last       *SLODecision `json:"last,omitempty"`
	LastChange *SLODecision `json:"last_change,omitempty"`
	// Changes counts the changes of every search.
	Changes int `json:"changes"`
	// Prepreempt is what hint engines are told: false if any search
	// tells its engines to stop pre-preempting.
	Prepreempt bool `json:"prepreempt"`
	// Calibrate is how LC baselines are learnt: "shortest" (beside BE
	// under the shortest timeslice) or "pause" (BE stopped).
	Calibrate string `json:"calibrate,omitempty"`
	// BEStopped lists the BE processes stopped now to learn an LC alone.
	BEStopped []int `json:"be_stopped,omitempty"`
	// Engines is each pushing process's engine state, by pid.
	Engines map[string]Engine `json:"engines,omitempty"`
	// Searches is the search of each GPU with an LC process, by GPU.
	Searches []SLOSearch `json:"searches,omitempty"`
}

// SLOSearch is the SLO mode on one set of GPUs (those GPU processes join:
// a process on two GPUs joins them): the BE timeslice it chose for the BE
// processes on them.
type SLOSearch struct {
	// GPUs are the set's GPU indices; none for the node's search, of every
	// process while one is on no GPU NVML lists.
	GPUs        []int           `json:"gpus"`
	BETimeslice string          `json:"be_timeslice"`
	Arm         string          `json:"arm,omitempty"`
	Phase       string          `json:"phase,omitempty"`
	Calibration *SLOCalibration `json:"calibration,omitempty"`
	BEShare     *float64        `json:"be_share,omitempty"`
	WorstLC     *float64        `json:"worst_lc_vs_objective,omitempty"`
	LCs         int             `json:"lcs"`
	Last        *SLODecision    `json:"last,omitempty"`
	LastChange  *SLODecision    `json:"last_change,omitempty"`
	Changes     int             `json:"changes"`
	Prepreempt  bool            `json:"prepreempt"`
	// Arms is the search's frontier: the arm in force and each it has
	// measured, in the ladder's order.
	Arms []SLOArm `json:"arms,omitempty"`
}

// SLOArm is what a search knows of one arm: its worst LC objective's
// latency over its target (the mean of its measurements and that mean's
// bounds, nil where not known: an unmeasured arm's lower bound may come
// from a neighbour), the BE share measured under it (nil: not measured),
// its verdict against every LC objective ("meets", "misses", "might meet",
// then ", BE under its minimum" where it is known to give BE less than
// classes.be.min_share) and the windows its back-off from exploring has
// left (0: none).
type SLOArm struct {
	Arm           string   `json:"arm"`
	LCVsObjective *float64 `json:"lc_vs_objective,omitempty"`
	Lo            *float64 `json:"lo,omitempty"`
	Hi            *float64 `json:"hi,omitempty"`
	BEShare       *float64 `json:"be_share,omitempty"`
	Verdict       string   `json:"verdict"`
	RetryIn       int      `json:"retry_in_windows,omitempty"`
}

// SLOCalibration is what learning LC references has cost a search:
// windows BE was paused, windows of calibration in all (paused or at the
// shortest BE timeslice), of the windows it has run.
type SLOCalibration struct {
	Paused  int `json:"paused_windows"`
	Windows int `json:"windows"`
	Of      int `json:"of"`
}

// Finite is f as a status number: nil (left out) where it is NaN or
// infinite, which JSON cannot carry.
func Finite(f float64) *float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// GPUList is a search's GPUs as its key: "0", "0,1"; "all" for the
// node's search (none).
func GPUList(gpus []int) string {
	if len(gpus) == 0 {
		return "all"
	}
	s := make([]string, len(gpus))
	for i, g := range gpus {
		s[i] = strconv.Itoa(g)
	}
	return strings.Join(s, ",")
}

// GPUName names a search's GPUs: "GPU 0", "GPUs 0,1", or "all GPUs".
func GPUName(gpus []int) string {
	switch len(gpus) {
	case 0:
		return "all GPUs"
	case 1:
		return "GPU " + GPUList(gpus)
	}
	return "GPUs " + GPUList(gpus)
}

// SLOLC is one LC process against its objective.
type SLOLC struct {
	PID       int    `json:"pid"`
	Comm      string `json:"comm"`
	Objective string `json:"objective"`
	// LatencyUs is the last measurement's latency at the objective's
	// quantile (0: none yet), Ratio that over the target it was judged by.
	LatencyUs float64 `json:"latency_us"`
	// TargetUs is what the objective allows now (0: reference not known
	// yet); Reference names what a relative objective is measured against
	// ("standalone (BE stopped or idle) 6.1ms, its last sample 2s ago",
	// "standalone through this measurement (BE idle) 6.3ms, 12 samples",
	// "beside BE under 1µs ...").
	TargetUs  float64  `json:"target_us"`
	Reference string   `json:"reference,omitempty"`
	Ratio     *float64 `json:"ratio,omitempty"`
	Requests  int      `json:"requests"`
	// Source is where the LC's latency comes from: "pushed",
	// "traced-request", "traced-step" or "scraped" ("": none yet).
	Source string `json:"source,omitempty"`
	// Samples are this window's (requests, or tokens for a tpot_
	// objective); Pending those accumulated toward the next measurement,
	// which counts once it holds enough; Measurements those made of this
	// process against this objective: one more is the latency and ratio
	// of a new one.
	Samples      int `json:"samples"`
	Pending      int `json:"pending"`
	Measurements int `json:"measurements"`
	// P50Us is the median of this window's samples as the daemon sees
	// them (0: none).
	P50Us float64 `json:"p50_us,omitempty"`
	// FromMonoNs and ToMonoNs bound, on CLOCK_MONOTONIC, the span
	// (from, to] in which this window's samples ended (0: no window
	// shown). Pushed: the app's own window, ending as its push came in.
	// Scraped: from the scrape before to this one, each begun as a window
	// ended (the server reads its histograms as it answers, a fetch's
	// time later). Traced-step: the window. Traced-request: the window
	// less the process's quiet gap at each end, as a request ends at its
	// last synchronize's return and is counted once the process has been
	// quiet that long; from the busy period's start where the window holds
	// requests run back to back, which ended anywhere in it.
	FromMonoNs int64 `json:"from_mono_ns,omitempty"`
	ToMonoNs   int64 `json:"to_mono_ns,omitempty"`
	// Signal says where the latency came from, or why there is none.
	Signal string `json:"signal"`
	// GPUs are the search the row is of (SLOSearch.GPUs).
	GPUs []int `json:"gpus,omitempty"`
}

// SLOBE is one BE process's progress: kernel launches per second, against
// its rate when BE ran alone.
type SLOBE struct {
	PID  int    `json:"pid"`
	Comm string `json:"comm"`
	// LaunchesPerS is the last window's rate (0: none counted).
	LaunchesPerS float64 `json:"launches_per_s"`
	// AlonePerS is its rate in windows without LC, the median of the last
	// few (0: not learnt yet).
	AlonePerS float64 `json:"alone_per_s"`
	// Share is LaunchesPerS over AlonePerS, at most 1; nil: unknown.
	Share *float64 `json:"share,omitempty"`
	// Signal says whether it is counted, or why not.
	Signal string `json:"signal"`
	// Apart: it shares no GPU with an LC process, keeps the policy's
	// timeslice, and BE share leaves it out.
	Apart bool `json:"apart,omitempty"`
	// Timeslice is the BE timeslice (of one unit of weight) the SLO mode
	// gives it: the shortest its GPUs' searches chose ("" when apart).
	Timeslice string `json:"timeslice,omitempty"`
}

// SLODecision is one decision of the SLO mode.
type SLODecision struct {
	// Window counts the loop's windows since start.
	Window      int    `json:"window"`
	BETimeslice string `json:"be_timeslice"`
	Arm         string `json:"arm,omitempty"`
	Phase       string `json:"phase,omitempty"`
	Changed     bool   `json:"changed"`
	Cause       string `json:"cause"`
	Reason      string `json:"reason"`
	Fallback    bool   `json:"fallback,omitempty"`
	// BEBelowMinimum: the setting held gives BE less than its minimum
	// share (no setting meets the LC objectives within it).
	BEBelowMinimum bool `json:"be_below_minimum,omitempty"`
	// Bound: no setting meets every objective; what stands in the way.
	Bound string `json:"bound,omitempty"`
	// Aligned: every LC window it judged began as the decision before
	// took effect (StatsReply.NextWindowMs).
	Aligned bool `json:"aligned,omitempty"`
	// Converged: the search has converged; explorations are budgeted from
	// now on (docs/SLO.md).
	Converged bool `json:"converged,omitempty"`
}
