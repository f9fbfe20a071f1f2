package bench

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// PrepDist is the distribution of an LC request's CPU-side preparation time
// (the work before its kernel launch: decoding, batching, ...). It matters to
// pre-preemption, which has to predict when preparation ends.
type PrepDist struct {
	// Min and Max bound a uniform distribution; Min == Max is a fixed time.
	Min, Max time.Duration
}

// ParsePrep parses a preparation-time distribution:
//
//	""  or "0"              none
//	"500us"                 fixed
//	"fixed:500us"           fixed
//	"uniform:300us:700us"   uniform in [300us, 700us]
func ParsePrep(s string) (PrepDist, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" {
		return PrepDist{}, nil
	}
	parts := strings.Split(s, ":")
	bad := func(err error) (PrepDist, error) {
		return PrepDist{}, fmt.Errorf("%w: prep distribution %q: %v (want DURATION, fixed:DURATION or uniform:MIN:MAX)", ErrInvalidArgument, s, err)
	}
	parse := func(v string) (time.Duration, error) {
		d, err := time.ParseDuration(v)
		if err == nil && d < 0 {
			err = fmt.Errorf("negative duration %s", v)
		}
		return d, err
	}
	switch {
	case len(parts) == 1, len(parts) == 2 && parts[0] == "fixed":
		d, err := parse(parts[len(parts)-1])
		if err != nil {
			return bad(err)
		}
		return PrepDist{Min: d, Max: d}, nil
	case len(parts) == 3 && parts[0] == "uniform":
		lo, err := parse(parts[1])
		if err != nil {
			return bad(err)
		}
		hi, err := parse(parts[2])
		if err != nil {
			return bad(err)
		}
		if hi < lo {
			return bad(fmt.Errorf("max %v below min %v", hi, lo))
		}
		return PrepDist{Min: lo, Max: hi}, nil
	default:
		return bad(fmt.Errorf("unknown form"))
	}
}

// String renders d in the form ParsePrep accepts.
func (d PrepDist) String() string {
	switch {
	case d.Max == 0:
		return "0"
	case d.Min == d.Max:
		return fmtDuration(d.Min)
	default:
		return "uniform:" + fmtDuration(d.Min) + ":" + fmtDuration(d.Max)
	}
}

// Mean is the distribution's mean: the preparation time a request
// announces when it gives a hint.
func (d PrepDist) Mean() time.Duration { return (d.Min + d.Max) / 2 }

// Sample draws one preparation time.
func (d PrepDist) Sample(r *rand.Rand) time.Duration {
	if d.Max <= d.Min {
		return d.Min
	}
	return d.Min + time.Duration(r.Int64N(int64(d.Max-d.Min)+1))
}

// fmtDuration renders d with ASCII units ("200us", "3.5ms"), which both Go's
// time.ParseDuration and gpreemptctl accept; time.Duration.String uses "µs".
func fmtDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	case d%time.Millisecond == 0:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d%time.Microsecond == 0 && d < time.Millisecond:
		return fmt.Sprintf("%dus", d/time.Microsecond)
	case d%time.Microsecond == 0:
		// 'f', not %g: a long backstop in %g has an exponent no flag parser takes.
		return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64) + "ms"
	default:
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
}
