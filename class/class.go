// Package class is gpreempt's scheduling vocabulary: the classes a GPU
// process can be put in (lc, burstable, be), their priority order, their
// weights, and the per-channel-group settings (timeslice, runlist interleave
// level) each maps to. It does no I/O: gpreemptctl, prepreempt, the
// benchmark harness and gpreemptd all read the same table from here.
//
// A class's timeslice is the timeslice of one unit of weight. Groups of
// the same class share the GPU in the ratio of their weights, because the
// driver's round-robin gives each group its whole timeslice in turn. Each
// turn begins with the group's context being restored, which costs it a
// fixed part of its slice (the class's slice overhead, ~20 us on an H100),
// so a group of weight w gets the overhead plus w times the rest of one
// unit's slice: work, not timeslice, splits in the ratio of the weights.
// Measured on an H100 with two fixed-work BE processes, plain timeslice
// ratios split throughput 3.04:1 at 3000:1000 us, 8.3:1 at 4000:500 us,
// 3.25:1 at 600:200 us, 3.54:1 at 300:100 us and 4.44:1 at 150:50 us: each
// is (T1 - c) : (T2 - c) with c between 19.6 and 22.2 us (docs/BENCHMARKS.md,
// docs/SLO.md).
package class

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpreempt/gpreempt/tsg"
)

// ErrInvalid marks a class name, weight or setting that is malformed or out
// of range. It wraps tsg.ErrInvalidArgument, so a CLI maps it to its usage
// exit code like any other bad value.
var ErrInvalid = fmt.Errorf("%w: class", tsg.ErrInvalidArgument)

// Name is a class name.
type Name string

const (
	// LC is latency-critical work (inference): once resident it is not
	// switched out for other classes' work; HIGH interleave.
	LC Name = "lc"
	// Burstable is work that should keep up but may wait: a driver-like
	// timeslice and MEDIUM interleave.
	Burstable Name = "burstable"
	// BE is best-effort work (training, batch): a short timeslice, so the
	// hardware yields to LC within microseconds; LOW interleave.
	BE Name = "be"
)

// Names lists the classes from the highest priority to the lowest.
var Names = []Name{LC, Burstable, BE}

// ParseName accepts a class name in any case.
func ParseName(s string) (Name, error) {
	n := Name(strings.ToLower(strings.TrimSpace(s)))
	if n.Rank() < 0 {
		return "", fmt.Errorf("%w %q: want lc, burstable or be", ErrInvalid, s)
	}
	return n, nil
}

// Rank orders the classes: be 0, burstable 1, lc 2; -1 for an unknown name.
func (n Name) Rank() int {
	switch n {
	case BE:
		return 0
	case Burstable:
		return 1
	case LC:
		return 2
	}
	return -1
}

// AtMost reports whether n is no higher than limit: a process allowed at
// most burstable may ask for burstable or be, not lc.
func (n Name) AtMost(limit Name) bool { return n.Rank() >= 0 && n.Rank() <= limit.Rank() }

// Above is the class ranked just above n; false for lc (and an unknown
// name).
func (n Name) Above() (Name, bool) {
	for _, m := range Names {
		if m.Rank() == n.Rank()+1 && n.Rank() >= 0 {
			return m, true
		}
	}
	return "", false
}

func (n Name) String() string { return string(n) }

// UnmarshalText parses a name, so configuration and JSON requests are
// checked where they are decoded.
func (n *Name) UnmarshalText(b []byte) error {
	v, err := ParseName(string(b))
	if err != nil {
		return err
	}
	*n = v
	return nil
}

// Weight bounds. A weight multiplies what its class's timeslice leaves
// after the slice overhead; the result must stay within tsg's timeslice
// range.
const (
	MinWeight     = 1
	MaxWeight     = 1000
	DefaultWeight = 1
)

// CheckWeight returns an error naming w when it is outside
// [MinWeight, MaxWeight].
func CheckWeight(w int) error {
	if w < MinWeight || w > MaxWeight {
		return fmt.Errorf("%w weight %d out of range [%d, %d]", ErrInvalid, w, MinWeight, MaxWeight)
	}
	return nil
}

// Class is one class's settings.
type Class struct {
	Name Name `json:"name"`
	// Timeslice is the timeslice of one unit of weight.
	Timeslice time.Duration `json:"timeslice"`
	// Interleave is the runlist interleave level of the class's groups.
	Interleave tsg.Level `json:"interleave"`
	// SliceOverhead is the part of each timeslice a group loses to being
	// switched in (its context restored): weights split what is left.
	// 0: weights multiply the whole timeslice.
	SliceOverhead time.Duration `json:"slice_overhead"`
}

// MaxSliceOverhead bounds Class.SliceOverhead.
const MaxSliceOverhead = time.Millisecond

// Check validates c's name, timeslice and level.
func (c Class) Check() error {
	if c.Name.Rank() < 0 {
		return fmt.Errorf("%w %q: want lc, burstable or be", ErrInvalid, c.Name)
	}
	if err := tsg.CheckTimeslice(c.Timeslice); err != nil {
		return fmt.Errorf("class %s: %w", c.Name, err)
	}
	if c.Interleave > tsg.LevelHigh {
		return fmt.Errorf("%w %s: interleave level %v: want low, medium or high", ErrInvalid, c.Name, c.Interleave)
	}
	if c.SliceOverhead < 0 || c.SliceOverhead > MaxSliceOverhead {
		return fmt.Errorf("%w %s: slice overhead %v out of range [0, %v]", ErrInvalid, c.Name, c.SliceOverhead, MaxSliceOverhead)
	}
	return nil
}

// TimesliceFor is the timeslice of a group of class c with weight w: the
// slice overhead plus w times what one unit's timeslice leaves after it,
// within tsg's range. A class timeslice at or under the overhead leaves
// no work to split; it is then multiplied whole.
func (c Class) TimesliceFor(w int) (time.Duration, error) { return c.TimesliceAt(c.Timeslice, w) }

// TimesliceAt is TimesliceFor with one unit's timeslice at unit instead of
// c.Timeslice (a timeslice chosen at run time: SLO mode's for BE,
// prepreempt's for its own LC), the slice overhead still c's.
func (c Class) TimesliceAt(unit time.Duration, w int) (time.Duration, error) {
	if err := CheckWeight(w); err != nil {
		return 0, fmt.Errorf("class %s: %w", c.Name, err)
	}
	base, work := time.Duration(0), unit
	if c.SliceOverhead > 0 && unit > c.SliceOverhead {
		base, work = c.SliceOverhead, unit-c.SliceOverhead
	}
	ts := base + work*time.Duration(w)
	if (ts-base)/time.Duration(w) != work { // overflow
		ts = tsg.MaxTimeslice + 1
	}
	if err := tsg.CheckTimeslice(ts); err != nil {
		return 0, fmt.Errorf("class %s weight %d: %w", c.Name, w, err)
	}
	return ts, nil
}

// Settings is what a group of class c with weight w is given.
func (c Class) Settings(w int) (tsg.Settings, error) { return c.SettingsAt(c.Timeslice, w) }

// SettingsAt is what a group of class c with weight w is given with one
// unit's timeslice at unit (TimesliceAt).
func (c Class) SettingsAt(unit time.Duration, w int) (tsg.Settings, error) {
	ts, err := c.TimesliceAt(unit, w)
	if err != nil {
		return tsg.Settings{}, err
	}
	return tsg.Settings{Timeslice: tsg.Some(ts), Interleave: tsg.Some(c.Interleave)}, nil
}

// The defaults. LC: 5 s, so that once resident LC work is not switched out
// for BE; BE: 200 us, which yields to LC within one switch (~170-200 us on
// an H100) while keeping two BE processes from thrashing each other (1 us
// is the fastest yield; both measured in docs/GPU-RESULTS.md). Burstable:
// 2 ms, what libcuda gives every compute group itself. Slice overhead:
// 20 us, fitted on an H100 (package comment).
const (
	DefaultLCTimeslice        = 5 * time.Second
	DefaultBurstableTimeslice = 2 * time.Millisecond
	DefaultBETimeslice        = 200 * time.Microsecond
	DefaultSliceOverhead      = 20 * time.Microsecond
)

// SwitchTime is what one switch of the GPU between two processes' channel
// groups costs, as the vocabulary's planning figure (docs/GPU-FACTS.md):
// the pre-preemption engine's first estimate of it, and the unit a request
// gate's cost to BE (two a request) and its auto mode (a request of four or
// fewer gains nothing) are counted in.
const SwitchTime = 200 * time.Microsecond

// Table holds one Class per name.
type Table map[Name]Class

// Defaults returns the default table; callers may change their copy.
func Defaults() Table {
	return Table{
		LC:        {Name: LC, Timeslice: DefaultLCTimeslice, Interleave: tsg.LevelHigh, SliceOverhead: DefaultSliceOverhead},
		Burstable: {Name: Burstable, Timeslice: DefaultBurstableTimeslice, Interleave: tsg.LevelMedium, SliceOverhead: DefaultSliceOverhead},
		BE:        {Name: BE, Timeslice: DefaultBETimeslice, Interleave: tsg.LevelLow, SliceOverhead: DefaultSliceOverhead},
	}
}

// Check validates every class of t and that each is filed under its own
// name. A table need not hold every class.
func (t Table) Check() error {
	var errs []error
	for _, n := range t.names() {
		c := t[n]
		if c.Name != n {
			errs = append(errs, fmt.Errorf("%w %q filed under %q", ErrInvalid, c.Name, n))
			continue
		}
		if err := c.Check(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Get returns class n, or an error naming it when t has no such class.
func (t Table) Get(n Name) (Class, error) {
	c, ok := t[n]
	if !ok {
		return Class{}, fmt.Errorf("%w %q: not defined", ErrInvalid, n)
	}
	return c, nil
}

// Settings is what a group of class n with weight w is given under t.
func (t Table) Settings(n Name, w int) (tsg.Settings, error) {
	c, err := t.Get(n)
	if err != nil {
		return tsg.Settings{}, err
	}
	return c.Settings(w)
}

func (t Table) names() []Name {
	var ns []Name
	for n := range t {
		ns = append(ns, n)
	}
	slices.SortFunc(ns, func(a, b Name) int { return b.Rank() - a.Rank() })
	return ns
}

// MarshalJSON writes the table in priority order, timeslices as "200us".
func (t Table) MarshalJSON() ([]byte, error) {
	type entry struct {
		Name          Name   `json:"name"`
		Timeslice     string `json:"timeslice"`
		Interleave    string `json:"interleave"`
		SliceOverhead string `json:"slice_overhead"`
	}
	var out []entry
	for _, n := range t.names() {
		c := t[n]
		out = append(out, entry{c.Name, tsg.Micros(c.Timeslice / time.Microsecond).String(), c.Interleave.String(),
			tsg.Micros(c.SliceOverhead / time.Microsecond).String()})
	}
	return json.Marshal(out)
}

// Spec is a class and a weight, as users write it: "be", "be:3".
type Spec struct {
	Name   Name `json:"class"`
	Weight int  `json:"weight"`
}

// ParseSpec parses "NAME" or "NAME:WEIGHT".
func ParseSpec(s string) (Spec, error) {
	name, weight, hasWeight := strings.Cut(strings.TrimSpace(s), ":")
	n, err := ParseName(name)
	if err != nil {
		return Spec{}, err
	}
	sp := Spec{Name: n, Weight: DefaultWeight}
	if hasWeight {
		w, err := strconv.Atoi(strings.TrimSpace(weight))
		if err != nil {
			return Spec{}, fmt.Errorf("%w %q: weight %q is not a whole number", ErrInvalid, s, weight)
		}
		if err := CheckWeight(w); err != nil {
			return Spec{}, fmt.Errorf("%q: %w", s, err)
		}
		sp.Weight = w
	}
	return sp, nil
}

func (s Spec) String() string {
	if s.Weight == DefaultWeight || s.Weight == 0 {
		return string(s.Name)
	}
	return fmt.Sprintf("%s:%d", s.Name, s.Weight)
}

// ParseSliceOverhead parses a slice overhead: a duration such as "20us",
// or "0" for none.
func ParseSliceOverhead(s string) (time.Duration, error) {
	t := strings.TrimSpace(s)
	if t == "0" {
		return 0, nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 || d > MaxSliceOverhead || d%time.Microsecond != 0 {
		return 0, fmt.Errorf("%w slice overhead %q: want whole microseconds from 0 to %v, such as 20us", ErrInvalid, s, MaxSliceOverhead)
	}
	return d, nil
}
