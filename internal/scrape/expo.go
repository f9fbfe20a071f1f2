package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/signal"
)

// ErrFormat marks an exposition that does not decode, or a histogram
// that is not one.
var ErrFormat = errors.New("metrics exposition")

// Hist is a cumulative histogram: counts of values at or under each upper
// bound, ascending, the last +Inf (its count the total).
type Hist struct {
	// Name is the metric's name in the exposition.
	Name   string
	Bounds []float64
	Counts []float64
}

// Count is the number of values in h.
func (h Hist) Count() float64 {
	if len(h.Counts) == 0 {
		return 0
	}
	return h.Counts[len(h.Counts)-1]
}

// Decode reads a text exposition (Prometheus text 0.0.4, or OpenMetrics
// text when openMetrics) and returns the histograms m names, by the
// signal.Latency metric they stand for (a metric none of whose names is
// exposed is left out). Series of one name are summed by bucket; where
// model is set, only those whose m.ModelLabel is model.
func Decode(body []byte, openMetrics bool, m endpoint.Metrics, model string) (map[string]Hist, error) {
	if openMetrics {
		body = fromOpenMetrics(body)
	}
	p := expfmt.NewTextParser(modelUTF8)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	out := map[string]Hist{}
	for _, w := range wanted(m) {
		for _, name := range w.metric.Names {
			mf, ok := fams[name]
			if !ok {
				continue
			}
			h, n, err := sum(mf, m.ModelLabel, model)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				h.Name = name
				out[w.key] = h
			}
			break // the first name exposed: another is the same values renamed
		}
	}
	return out, nil
}

// modelUTF8 accepts every name Prometheus's text format can carry
// (vLLM's and SGLang's have colons, which the classic rule allows too).
const modelUTF8 = model.UTF8Validation

type want struct {
	key    string
	metric endpoint.Metric
}

// wanted pairs m's histograms with the signal.Latency metric each is.
func wanted(m endpoint.Metrics) []want {
	return []want{{signal.MetricRequest, m.Request}, {signal.MetricTTFT, m.TTFT}, {signal.MetricTPOT, m.TPOT}}
}

// sum adds mf's series (those whose label is model, where model is set)
// bucket by bucket; n is how many it added. Series must share their
// buckets.
func sum(mf *dto.MetricFamily, label, model string) (Hist, int, error) {
	name := mf.GetName()
	if t := mf.GetType(); t != dto.MetricType_HISTOGRAM {
		return Hist{}, 0, fmt.Errorf("%w: %s is a %s, not a histogram", ErrFormat, name, strings.ToLower(t.String()))
	}
	var h Hist
	n := 0
	for _, s := range mf.GetMetric() {
		if model != "" && labelValue(s, label) != model {
			continue
		}
		one, err := cumulative(name, s.GetHistogram())
		if err != nil {
			return Hist{}, 0, err
		}
		if n == 0 {
			h = one
		} else {
			if !slices.Equal(h.Bounds, one.Bounds) {
				return Hist{}, 0, fmt.Errorf("%w: %s: series with different buckets", ErrFormat, name)
			}
			for i := range h.Counts {
				h.Counts[i] += one.Counts[i]
			}
		}
		n++
	}
	return h, n, nil
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// cumulative is one series' buckets with +Inf last (the text format may
// leave it out: the count is then its count).
func cumulative(name string, dh *dto.Histogram) (Hist, error) {
	if dh == nil {
		return Hist{}, fmt.Errorf("%w: %s: a series without buckets", ErrFormat, name)
	}
	var h Hist
	for _, b := range dh.GetBucket() {
		ub, c := b.GetUpperBound(), float64(b.GetCumulativeCount())
		if b.CumulativeCountFloat != nil {
			c = b.GetCumulativeCountFloat()
		}
		if math.IsNaN(ub) || math.IsNaN(c) || c < 0 || math.IsInf(c, 0) {
			return Hist{}, fmt.Errorf("%w: %s: bucket %v holds %v", ErrFormat, name, ub, c)
		}
		if k := len(h.Bounds); k > 0 && (ub <= h.Bounds[k-1] || c < h.Counts[k-1]) {
			return Hist{}, fmt.Errorf("%w: %s: buckets not ascending or not cumulative at le=%v", ErrFormat, name, ub)
		}
		h.Bounds, h.Counts = append(h.Bounds, ub), append(h.Counts, c)
	}
	count := float64(dh.GetSampleCount())
	if dh.SampleCountFloat != nil {
		count = dh.GetSampleCountFloat()
	}
	if k := len(h.Bounds); k == 0 || !math.IsInf(h.Bounds[k-1], 1) {
		if k > 0 && count < h.Counts[k-1] {
			return Hist{}, fmt.Errorf("%w: %s: count %v under its buckets' %v", ErrFormat, name, count, h.Counts[k-1])
		}
		h.Bounds, h.Counts = append(h.Bounds, math.Inf(1)), append(h.Counts, count)
	}
	if len(h.Bounds) < 2 {
		return Hist{}, fmt.Errorf("%w: %s: no finite bucket", ErrFormat, name)
	}
	return h, nil
}

// fromOpenMetrics rewrites OpenMetrics text into the Prometheus text the
// parser reads: the "# EOF" and "# UNIT" lines go, as do exemplars and
// timestamps (OpenMetrics writes them in seconds, with a fraction), and
// its types that the text format lacks become untyped. A histogram's
// _created series stays, as a family of its own that no preset names.
func fromOpenMetrics(b []byte) []byte {
	var out bytes.Buffer
	out.Grow(len(b))
	for line := range bytes.Lines(b) {
		line = bytes.TrimRight(line, "\n")
		switch {
		case len(line) == 0:
			continue
		case line[0] == '#':
			f := strings.Fields(string(line))
			if len(f) >= 2 && f[1] == "TYPE" && len(f) == 4 {
				switch f[3] {
				case "counter", "gauge", "histogram", "summary", "untyped":
				case "gaugehistogram":
					line = []byte(strings.Join(f[:3], " ") + " gauge_histogram")
				default: // unknown, info, stateset
					line = []byte(strings.Join(f[:3], " ") + " untyped")
				}
			} else if len(f) < 2 || f[1] != "HELP" {
				continue // # EOF, # UNIT, a comment
			}
		default:
			line = sampleOnly(line)
		}
		out.Write(line)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// sampleOnly is an OpenMetrics sample line without what follows its value
// (a timestamp, an exemplar): the name, the labels (quoted values may hold
// spaces and '#'), the value.
func sampleOnly(line []byte) []byte {
	i := bytes.IndexAny(line, "{ ")
	if i < 0 {
		return line
	}
	if line[i] == '{' {
		end := labelsEnd(line, i+1)
		if end < 0 {
			return line // the parser says what is wrong with it
		}
		i = end + 1
	}
	for i < len(line) && line[i] == ' ' {
		i++
	}
	if j := bytes.IndexByte(line[i:], ' '); j >= 0 {
		return line[:i+j]
	}
	return line
}

// labelsEnd is the index of the '}' closing the labels that start at
// from, outside quoted values; -1 if none does.
func labelsEnd(line []byte, from int) int {
	quoted := false
	for i := from; i < len(line); i++ {
		switch c := line[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case !quoted && c == '}':
			return i
		}
	}
	return -1
}
