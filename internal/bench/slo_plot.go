package bench

import (
	"fmt"
	"math"
	"os"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// sloSeries is what slo.png draws of one run: LC p50 latency (us), the BE
// timeslice the daemon chose (us) and BE share (%): the bench's and the
// daemon's own measure, against seconds from the run's first request.
type sloSeries struct {
	name                  string
	latency, slice, share plotter.XYs
	measured              plotter.XYs
}

// sloSeriesOf returns sr's series; ok is false for a run without SLO
// samples. beOnly is the be-only run's BE rate of the same repetition (0:
// none): share is the BE timeline against it; measured is the share the
// daemon reported (gpreemptd --be-progress), where it did.
func sloSeriesOf(sr *ScenarioResult, beOnly float64) (s sloSeries, ok bool) {
	if len(sr.SLO) == 0 {
		return s, false
	}
	s.name = sr.Name
	t0 := sr.SLO[0].MonoNs
	if sr.LC != nil && len(sr.LC.Samples) > 0 {
		t0 = sr.LC.Samples[0].ArrivalMonoNs
		s.latency, _ = timeline(sr.LC.Samples, timelineBuckets)
	}
	for _, x := range sr.SLO {
		t := float64(x.MonoNs-t0) / 1e9
		if d, err := time.ParseDuration(x.BETimeslice); err == nil && d > 0 {
			s.slice = append(s.slice, plotter.XY{X: t, Y: float64(d) / float64(time.Microsecond)})
		}
		if x.BEShare != nil {
			s.measured = append(s.measured, plotter.XY{X: t, Y: 100 * *x.BEShare})
		}
	}
	if beOnly > 0 {
		for i, v := range sr.BETimeline {
			t := float64(sr.BETimelineStartMonoNs+int64(i)*int64(time.Second)+int64(time.Second/2)-t0) / 1e9
			s.share = append(s.share, plotter.XY{X: t, Y: 100 * v / beOnly})
		}
	}
	return s, true
}

// PlotSLO draws, for the first repetition of each slo: scenario, LC
// latency, the BE timeslice gpreemptd chose and BE share over the
// measurement, in three panels sharing the time axis. It writes nothing
// when no run has SLO samples.
func PlotSLO(path string, res *Results) error {
	var series []sloSeries
	runs := indexRuns(res)
	for _, sr := range res.Scenarios {
		if sr.Rep > 1 {
			continue
		}
		var beOnly float64
		if _, name := baselinesOf(sr); runs[runKey{name, repOf(sr)}] != nil {
			beOnly = runs[runKey{name, repOf(sr)}].BEPerSec
		}
		if s, ok := sloSeriesOf(sr, beOnly); ok {
			series = append(series, s)
		}
	}
	if len(series) == 0 {
		return nil
	}
	titles := []struct{ title, y string }{
		{"LC latency (p50 of consecutive requests)", "us"},
		{"BE timeslice chosen by gpreemptd", "us (log scale)"},
		{"BE share: BE rate per second over the be-only run's (solid), as gpreemptd measured it (dashed)", "%"},
	}
	plots := make([][]*plot.Plot, 3)
	for i, t := range titles {
		p := plot.New()
		p.Title.Text = t.title
		p.Y.Label.Text = t.y
		if i == 2 {
			p.X.Label.Text = "time into the measurement (s; before 0: the LC's lead-in)"
		}
		if i == 1 {
			p.Y.Scale = plot.LogScale{}
			p.Y.Tick.Marker = logTicks{}
		}
		p.Add(plotter.NewGrid())
		p.Legend.Top = true
		plots[i] = []*plot.Plot{p}
	}
	for k, s := range series {
		for i, xys := range []plotter.XYs{s.latency, s.slice, s.share} {
			if len(xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			line.Color = plotutil.Color(k)
			line.Width = vg.Points(1)
			if i == 1 {
				line.StepStyle = plotter.PostStep
			}
			plots[i][0].Add(line)
			if i == 0 || (i == 1 && len(s.latency) == 0) {
				plots[i][0].Legend.Add(s.name, line)
			}
		}
		if len(s.measured) > 0 {
			line, err := plotter.NewLine(s.measured)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			line.Color, line.Width, line.Dashes = plotutil.Color(k), vg.Points(1), []vg.Length{vg.Points(4), vg.Points(3)}
			plots[2][0].Add(line)
		}
	}
	// One time axis for the three panels.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, row := range plots {
		xmin, xmax = math.Min(xmin, row[0].X.Min), math.Max(xmax, row[0].X.Max)
	}
	for _, row := range plots {
		p := row[0]
		p.X.Min, p.X.Max = xmin, xmax
		if math.IsInf(p.Y.Min, 0) || p.Y.Min == p.Y.Max {
			p.Y.Min, p.Y.Max = 1, 10 // an empty panel
		}
	}
	img := vgimg.New(9*vg.Inch, 9*vg.Inch)
	dc := draw.New(img)
	canvases := plot.Align(plots, draw.Tiles{Rows: 3, Cols: 1, PadY: vg.Points(8), PadTop: vg.Points(4), PadBottom: vg.Points(4), PadLeft: vg.Points(4), PadRight: vg.Points(4)}, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
