package bench

import (
	"fmt"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/gpreempt/gpreempt/internal/stats"
)

// cdfPoints bounds the points drawn per scenario: enough for a smooth curve
// and an exact tail, few enough for a small file.
const cdfPoints = 2000

// PlotCDF draws every scenario's LC latency CDF on one log-x chart. It
// writes nothing when no scenario has LC samples.
func PlotCDF(path string, res *Results) error {
	p := plot.New()
	p.Title.Text = "LC request latency (launch to synchronize)"
	p.X.Label.Text = "latency (us, log scale)"
	p.Y.Label.Text = "fraction of requests"
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = logTicks{}
	p.Y.Tick.Marker = plot.ConstantTicks{{Value: 0, Label: "0"}, {Value: 0.25, Label: "0.25"}, {Value: 0.5, Label: "0.5"}, {Value: 0.75, Label: "0.75"}, {Value: 0.9}, {Value: 0.99}, {Value: 1, Label: "1"}}
	// The legend goes in a band above y = 1, where no CDF is drawn, so it
	// never hides a curve whatever the latencies.
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())

	drawn := 0
	for _, sr := range res.Scenarios {
		if sr.LC == nil || len(sr.LC.Samples) == 0 {
			continue
		}
		lat := make([]float64, len(sr.LC.Samples))
		for i, s := range sr.LC.Samples {
			// Log scales cannot show zero; a sub-microsecond latency is
			// impossible anyway.
			lat[i] = math.Max(float64(s.LatencyNs)/1e3, 0.1)
		}
		pts := stats.CDF(lat, cdfPoints)
		xys := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			xys[i].X, xys[i].Y = pt.X, pt.Y
		}
		line, err := plotter.NewLine(xys)
		if err != nil {
			return fmt.Errorf("%s: %w", sr.Name, err)
		}
		line.Color = plotutil.Color(drawn)
		line.Dashes = plotutil.Dashes(drawn / len(plotutil.DefaultColors))
		line.Width = vg.Points(1.5)
		p.Add(line)
		label := sr.Name
		if sr.LCLatencyUs != nil {
			label = fmt.Sprintf("%s (p50 %.0f, p99 %.0f us)", sr.Name, sr.LCLatencyUs.P50, sr.LCLatencyUs.P99)
		}
		p.Legend.Add(label, line)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	p.Y.Min, p.Y.Max = 0, 1+0.075*float64(drawn)
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// logTicks labels a log axis at 1, 2 and 5 times each power of ten, which
// reads better over the one to two decades latency plots span than gonum's
// powers of ten alone; over a narrower range, where that would leave fewer
// than three labels, it labels every multiple.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	if lo <= 0 || hi <= lo {
		return nil
	}
	var values []float64
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m <= 9; m++ {
			if v := m * math.Pow(10, e); v >= lo && v <= hi {
				values = append(values, v)
			}
		}
	}
	major := func(v float64) bool {
		m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9))
		return math.Abs(m-1) < 1e-6 || math.Abs(m-2) < 1e-6 || math.Abs(m-5) < 1e-6
	}
	labelAll := 0
	for _, v := range values {
		if major(v) {
			labelAll++
		}
	}
	ticks := make([]plot.Tick, len(values))
	for i, v := range values {
		ticks[i].Value = v
		if labelAll < 3 || major(v) {
			ticks[i].Label = fmt.Sprintf("%g", v)
		}
	}
	return ticks
}

// timelineBuckets bounds the points of the latency-over-time chart.
const timelineBuckets = 300

// PlotTimeline draws each scenario run's LC latency over its measurement
// (p50 and p99 of consecutive buckets of requests, time from the start of
// the window), which is what shows drift in a long soak. It writes nothing
// when no run has LC samples.
func PlotTimeline(path string, res *Results) error {
	p := plot.New()
	p.Title.Text = "LC latency over time (p50 solid, p99 dashed)"
	p.X.Label.Text = "time into the measurement (s)"
	p.Y.Label.Text = "latency (us, log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = logTicks{}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	drawn := 0
	for _, sr := range res.Scenarios {
		if sr.LC == nil || len(sr.LC.Samples) == 0 || (sr.Rep > 1) {
			// One repetition per scenario keeps the chart readable.
			continue
		}
		p50, p99 := timeline(sr.LC.Samples, timelineBuckets)
		for i, xys := range []plotter.XYs{p50, p99} {
			line, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("%s: %w", sr.Name, err)
			}
			line.Color = plotutil.Color(drawn)
			line.Width = vg.Points(1)
			if i == 1 {
				line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
			} else {
				p.Legend.Add(sr.Name, line)
			}
			p.Add(line)
		}
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// timeline splits samples (in arrival order) into at most buckets runs of
// consecutive requests and returns each run's p50 and p99 latency (us)
// against its first arrival's time since the first request (s).
func timeline(samples []LCSample, buckets int) (p50, p99 plotter.XYs) {
	n := len(samples)
	size := max(1, (n+buckets-1)/buckets)
	t0 := samples[0].ArrivalMonoNs
	lat := make([]float64, 0, size)
	for start := 0; start < n; start += size {
		lat = lat[:0]
		for _, s := range samples[start:min(start+size, n)] {
			lat = append(lat, math.Max(float64(s.LatencyNs)/1e3, 0.1))
		}
		sum := stats.Summarize(lat)
		x := float64(samples[start].ArrivalMonoNs-t0) / 1e9
		p50 = append(p50, plotter.XY{X: x, Y: sum.P50})
		p99 = append(p99, plotter.XY{X: x, Y: sum.P99})
	}
	return p50, p99
}

// PlotFrontier draws, for the scenarios that share the GPU, the LC's
// median p50 ratio to standalone against the BE throughput kept (each
// point with its repetitions' range), and the BE a request gate allows at
// the LC's busy fraction: the frontier each setting reaches. It writes
// nothing when no scenario has both.
func PlotFrontier(path string, res *Results) error {
	p := plot.New()
	p.Title.Text = "LC latency against BE kept (median and range over repetitions)"
	p.X.Label.Text = "BE throughput kept (vs be-only)"
	p.Y.Label.Text = "LC p50 vs standalone"
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	drawn, bound := 0, 0.0
	for _, s := range res.Summaries {
		if s.P50 == nil || s.BE == nil {
			continue
		}
		bound = max(bound, s.BEBound)
		pts := plotter.XYs{{X: s.BE.Median, Y: s.P50.Median}}
		sc, err := plotter.NewScatter(pts)
		if err != nil {
			return fmt.Errorf("%s: %w", s.Name, err)
		}
		sc.Color = plotutil.Color(drawn)
		sc.Shape = plotutil.Shape(drawn)
		sc.Radius = vg.Points(4)
		p.Add(sc)
		// The repetitions' range, as a cross through the median.
		for _, seg := range []plotter.XYs{{{X: s.BE.Min, Y: s.P50.Median}, {X: s.BE.Max, Y: s.P50.Median}},
			{{X: s.BE.Median, Y: s.P50.Min}, {X: s.BE.Median, Y: s.P50.Max}}} {
			l, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			l.Color = sc.Color
			p.Add(l)
		}
		p.Legend.Add(fmt.Sprintf("%s: %.2fx, BE %.0f%%", s.Name, s.P50.Median, 100*s.BE.Median), sc)
		drawn++
	}
	if drawn == 0 {
		return nil
	}
	one, err := plotter.NewLine(plotter.XYs{{X: 0, Y: 1}, {X: 1, Y: 1}})
	if err != nil {
		return err
	}
	one.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(one)
	if bound > 0 {
		b, err := plotter.NewLine(plotter.XYs{{X: bound, Y: 0}, {X: bound, Y: 3}})
		if err != nil {
			return err
		}
		b.Dashes = []vg.Length{vg.Points(6), vg.Points(2)}
		b.Color = plotutil.Color(7)
		p.Add(b)
		p.Legend.Add(fmt.Sprintf("BE a gate allows (1 - busy - 2 switches/request): %.0f%%", 100*bound), b)
	}
	p.X.Min, p.X.Max = 0, 1.05
	p.Y.Min = 0
	return p.Save(8*vg.Inch, 6*vg.Inch, path)
}
