package tracecmd

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"

	"github.com/gpreempt/gpreempt/internal/stats"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/internal/trace/request"
)

var hintsCommand = &cli.Command{
	Name:  "hints",
	Usage: "hinted requests: hint -> GPU residency -> release -> completion (completion with --pid)",
	Description: "Uprobes on the hint API (libgpreempt.so: gpreempt_hint, gpreempt_ready, gpreempt_cancel)\n" +
		"and on libcuda: one line per hinted request, from the hint to its release (the request's\n" +
		"CPU-side preparation) and from the release to the return of the next synchronization\n" +
		"(what the GPU added). GPU residency (the spinner holding the GPU) shows once the spinner\n" +
		"stamps it; until then the column reads -.",
	Flags: append([]cli.Flag{
		tracePIDFlag,
		&cli.StringFlag{Name: "lib", Usage: "the hint library to probe (default: " + trace.LibGPreempt + "; with --pid the one it has mapped, else from LD_LIBRARY_PATH or the linker's cache)"},
		&cli.StringFlag{Name: "hint-symbol", Value: trace.DefaultHintSymbol, Usage: "the function announcing a request"},
		&cli.StringFlag{Name: "ready-symbol", Value: trace.DefaultReadySymbol, Usage: "the function releasing it"},
		&cli.StringFlag{Name: "cancel-symbol", Value: trace.DefaultCancelSymbol, Usage: "the function cancelling it"},
		libcudaFlag, launchFlag, syncFlag,
	}, traceCommonFlags...),
	Action: func(c *cli.Context) error {
		pid := c.Int("pid")
		if pid < 0 {
			return fmt.Errorf("%w: --pid %d", cmdutil.ErrInvalidArgument, pid)
		}
		hintLib, err := findLibrary(trace.LibGPreempt, c.String("lib"), pid, "lib")
		if err != nil {
			return err
		}
		var ps []trace.Probe
		ps = append(ps, probes(hintLib, trace.RoleHint, []string{c.String("hint-symbol")})...)
		ps = append(ps, probes(hintLib, trace.RoleReady, []string{c.String("ready-symbol")})...)
		ps = append(ps, probes(hintLib, trace.RoleCancel, []string{c.String("cancel-symbol")})...)
		// A uprobe on libcuda's entry points traps on every call of every
		// process mapping it (tens of microseconds in a VM); the hint
		// API's functions start with a NOP the kernel can probe without a
		// trap. So libcuda is probed only for one process.
		tracker := request.NewHintTracker()
		if pid > 0 {
			cuda, err := findLibrary(trace.LibCUDA, c.String("libcuda"), pid, "libcuda")
			if err != nil {
				return err
			}
			ps = append(ps, probes(cuda, trace.RoleLaunch, c.StringSlice("launch-symbols"))...)
			ps = append(ps, probes(cuda, trace.RoleSync, c.StringSlice("sync-symbols"))...)
		} else {
			tracker.EndAtRelease = true
			fmt.Fprintln(c.App.ErrWriter, "gpreemptctl: trace hints: without --pid, libcuda is not probed (it would slow every CUDA process): requests end at their release, completion is not measured")
		}
		return runTrace(c, trace.Options{Probes: ps, PID: pid}, func(o *traceOut) traceHandler {
			return &hintsTrace{out: o, tracker: tracker}
		})
	},
}

type hintsTrace struct {
	out      *traceOut
	tracker  *request.HintTracker
	header   bool
	interval int
	// Histograms in microseconds of the completed hints.
	resident, prep, release, total stats.Hist
	completed, canceled            int
}

// hintLine is one timeline as -o json prints it.
type hintLine struct {
	Type string  `json:"type"`
	Time float64 `json:"time_s"`
	request.HintTimeline
	HintToResidentUs    *uint64 `json:"hint_to_resident_us"`
	PreparationUs       *uint64 `json:"preparation_us"`
	ReleaseToCompleteUs *uint64 `json:"release_to_complete_us"`
	TotalUs             *uint64 `json:"total_us"`
}

// optUs is a span in microseconds, or nil when one of its ends is not
// known (JSON null; "-" in text).
func optUs(d time.Duration, known bool) *uint64 {
	if !known {
		return nil
	}
	us := usecs(d)
	return &us
}

func fmtUs(p *uint64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func (t *hintsTrace) Event(ev trace.Event) error {
	h, ok := t.tracker.Apply(ev)
	if !ok {
		return nil
	}
	// Without libcuda traced a timeline ends at its release.
	end := h.Complete
	if end == 0 {
		end = h.Release
	}
	line := hintLine{Type: "hint", Time: t.out.seconds(end), HintTimeline: h,
		HintToResidentUs:    optUs(h.HintToResident(), h.Resident != 0),
		PreparationUs:       optUs(h.Preparation(), h.Release != 0),
		ReleaseToCompleteUs: optUs(h.ReleaseToComplete(), h.Release != 0 && h.Complete != 0 && !h.Canceled),
		TotalUs:             optUs(h.Total(), h.Complete != 0),
	}
	if h.Canceled {
		t.canceled++
	} else {
		t.completed++
		if p := line.TotalUs; p != nil {
			t.total.Add(float64(*p))
		}
		if p := line.HintToResidentUs; p != nil {
			t.resident.Add(float64(*p))
		}
		if p := line.PreparationUs; p != nil {
			t.prep.Add(float64(*p))
		}
		if p := line.ReleaseToCompleteUs; p != nil {
			t.release.Add(float64(*p))
		}
	}
	if t.out.json {
		return t.out.jsonLine(line)
	}
	if !t.header {
		t.header = true
		fmt.Fprintf(t.out.w, "%-10s %-7s %-7s %-15s %-12s %-7s %-9s %-12s %-12s %-17s %s\n",
			"TIME(s)", "PID", "TID", "COMM", "CLASS", "HANDLE", "EXPECTED", "RESIDENT(us)", "PREPARED(us)", "RELEASE->DONE(us)", "TOTAL(us)")
	}
	done := fmtUs(line.ReleaseToCompleteUs)
	if h.Canceled {
		done = "canceled"
	}
	_, err := fmt.Fprintf(t.out.w, "%-10.6f %-7d %-7d %-15s %-12s %-7d %-9s %-12s %-12s %-17s %s\n",
		line.Time, h.PID, h.TID, cmdutil.OrDash(h.Comm), cmdutil.OrDash(h.Class), h.Handle, fmt.Sprintf("%dus", h.ExpectedPrepUs),
		fmtUs(line.HintToResidentUs), fmtUs(line.PreparationUs), done, fmtUs(line.TotalUs))
	return err
}

func (t *hintsTrace) Interval() error {
	t.interval++
	if err := t.print(fmt.Sprintf("interval %d", t.interval), nil); err != nil {
		return err
	}
	t.resident, t.prep, t.release, t.total = stats.Hist{}, stats.Hist{}, stats.Hist{}, stats.Hist{}
	t.completed, t.canceled = 0, 0
	return nil
}

func (t *hintsTrace) End(lost uint64) error { return t.print("summary", &lost) }

func (t *hintsTrace) print(title string, lost *uint64) error {
	hists := []struct {
		key, name string
		h         *stats.Hist
	}{
		{"hint_to_resident", "hint -> GPU residency", &t.resident},
		{"preparation", "hint -> release (preparation)", &t.prep},
		{"release_to_complete", "release -> completion", &t.release},
		{"total", "hint -> completion", &t.total},
	}
	if t.out.json {
		views := map[string]histView{}
		for _, h := range hists {
			views[h.key] = viewHist(h.h, "usecs")
		}
		return t.out.jsonLine(struct {
			Type       string              `json:"type"`
			Title      string              `json:"title"`
			Completed  int                 `json:"completed"`
			Canceled   int                 `json:"canceled"`
			Failed     int                 `json:"failed"`
			Histograms map[string]histView `json:"histograms"`
			Lost       *uint64             `json:"lost,omitempty"`
		}{"hints", title, t.completed, t.canceled, t.tracker.Failed, views, lost})
	}
	w := t.out.w
	t.out.separate()
	fmt.Fprintf(w, "%s: %d hinted requests completed, %d canceled, %d hints failed\n", title, t.completed, t.canceled, t.tracker.Failed)
	for _, h := range hists {
		if h.h.N == 0 {
			if h.h == &t.resident {
				fmt.Fprintf(w, "\n%s: not reported (the spinner does not stamp residency yet)\n", h.name)
			}
			continue
		}
		fmt.Fprintf(w, "\n%s: avg %.0fus, min %.0fus, max %.0fus\n", h.name, h.h.Mean(), h.h.Min, h.h.Max)
		if err := writeHist(w, h.h, "usecs"); err != nil {
			return err
		}
	}
	if lost != nil {
		_, err := fmt.Fprintf(w, "%d events lost\n", *lost)
		return err
	}
	return nil
}
