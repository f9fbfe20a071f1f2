package class

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/tsg"
)

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
		err  bool
	}{
		{"lc", LC, false}, {"LC", LC, false}, {" Burstable ", Burstable, false}, {"be", BE, false},
		{"", "", true}, {"high", "", true}, {"be:3", "", true},
	} {
		got, err := ParseName(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("ParseName(%q) = %q, %v; want %q, err %v", tc.in, got, err, tc.want, tc.err)
		}
		if err != nil && !errors.Is(err, tsg.ErrInvalidArgument) {
			t.Errorf("ParseName(%q): %v does not wrap tsg.ErrInvalidArgument", tc.in, err)
		}
	}
}

func TestAtMost(t *testing.T) {
	for _, tc := range []struct {
		n, limit Name
		want     bool
	}{
		{BE, LC, true}, {Burstable, LC, true}, {LC, LC, true},
		{LC, Burstable, false}, {Burstable, Burstable, true}, {BE, Burstable, true},
		{LC, BE, false}, {Burstable, BE, false}, {BE, BE, true},
		{"bogus", LC, false},
	} {
		if got := tc.n.AtMost(tc.limit); got != tc.want {
			t.Errorf("%s.AtMost(%s) = %v, want %v", tc.n, tc.limit, got, tc.want)
		}
	}
}

func TestParseSpec(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Spec
		err  string
	}{
		{"be", Spec{BE, 1}, ""},
		{"be:3", Spec{BE, 3}, ""},
		{"LC:1000", Spec{LC, 1000}, ""},
		{"be:0", Spec{}, `class weight 0 out of range [1, 1000]`},
		{"be:1001", Spec{}, `out of range`},
		{"be:x", Spec{}, `weight "x" is not a whole number`},
		{"gold:2", Spec{}, `class "gold"`},
	} {
		got, err := ParseSpec(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseSpec(%q) err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseSpec(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
		if back, _ := ParseSpec(got.String()); back != got {
			t.Errorf("ParseSpec(%q.String()=%q) = %+v", tc.in, got.String(), back)
		}
	}
}

func TestSettings(t *testing.T) {
	tab := Defaults()
	if err := tab.Check(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		n     Name
		w     int
		ts    time.Duration
		level tsg.Level
		err   bool
	}{
		{LC, 1, 5 * time.Second, tsg.LevelHigh, false},
		{LC, 2, 0, 0, true}, // 10 s is past tsg.MaxTimeslice
		{Burstable, 1, 2 * time.Millisecond, tsg.LevelMedium, false},
		{BE, 1, 200 * time.Microsecond, tsg.LevelLow, false},
		// Weights split the work after the 20 us slice overhead: 3:1 at the
		// default BE timeslice is 560:200 us (540:180 us of work).
		{BE, 3, 560 * time.Microsecond, tsg.LevelLow, false},
		{BE, 0, 0, 0, true},
	} {
		s, err := tab.Settings(tc.n, tc.w)
		if (err != nil) != tc.err {
			t.Errorf("Settings(%s, %d): err %v, want err %v", tc.n, tc.w, err, tc.err)
			continue
		}
		if err != nil {
			continue
		}
		if want := (tsg.Settings{Timeslice: tsg.Some(tc.ts), Interleave: tsg.Some(tc.level)}); s != want {
			t.Errorf("Settings(%s, %d) = %+v, want %+v", tc.n, tc.w, s, want)
		}
	}
	if _, err := (Table{}).Settings(BE, 1); err == nil {
		t.Error("an empty table gave settings for be")
	}
}

// SettingsAt takes one unit's timeslice from its argument, everything
// else (overhead, level) from the class; Settings is SettingsAt at the
// class's own.
func TestSettingsAt(t *testing.T) {
	be := Defaults()[BE]
	for _, tc := range []struct {
		unit time.Duration
		w    int
		ts   time.Duration
		err  bool
	}{
		{be.Timeslice, 1, 200 * time.Microsecond, false},
		{be.Timeslice, 3, 560 * time.Microsecond, false},
		{time.Millisecond, 1, time.Millisecond, false},
		{time.Millisecond, 3, 20*time.Microsecond + 3*980*time.Microsecond, false},
		{10 * time.Microsecond, 3, 30 * time.Microsecond, false}, // at or under the overhead: multiplied whole
		{10 * time.Millisecond, 1000, 0, true},                   // past tsg.MaxTimeslice
		{0, 1, 0, true},
		{time.Millisecond, 0, 0, true},
	} {
		s, err := be.SettingsAt(tc.unit, tc.w)
		if (err != nil) != tc.err {
			t.Errorf("SettingsAt(%v, %d): err %v, want err %v", tc.unit, tc.w, err, tc.err)
			continue
		}
		if want := (tsg.Settings{Timeslice: tsg.Some(tc.ts), Interleave: tsg.Some(tsg.LevelLow)}); err == nil && s != want {
			t.Errorf("SettingsAt(%v, %d) = %+v, want %+v", tc.unit, tc.w, s, want)
		}
		if tc.unit == be.Timeslice {
			if own, err := be.Settings(tc.w); err != nil || own != s {
				t.Errorf("Settings(%d) = %+v, %v; want SettingsAt's %+v", tc.w, own, err, s)
			}
		}
	}
}

func TestTableCheck(t *testing.T) {
	for name, tab := range map[string]Table{
		"misfiled":      {BE: {Name: LC, Timeslice: time.Millisecond, Interleave: tsg.LevelLow}},
		"timeslice":     {BE: {Name: BE, Timeslice: 10 * time.Second, Interleave: tsg.LevelLow}},
		"sub-us":        {BE: {Name: BE, Timeslice: 1500 * time.Nanosecond, Interleave: tsg.LevelLow}},
		"level":         {BE: {Name: BE, Timeslice: time.Millisecond, Interleave: tsg.LevelUnknown}},
		"unknown class": {"gold": {Name: "gold", Timeslice: time.Millisecond}},
		"overhead":      {BE: {Name: BE, Timeslice: time.Millisecond, Interleave: tsg.LevelLow, SliceOverhead: 2 * time.Millisecond}},
		"negative":      {BE: {Name: BE, Timeslice: time.Millisecond, Interleave: tsg.LevelLow, SliceOverhead: -time.Microsecond}},
	} {
		if err := tab.Check(); err == nil {
			t.Errorf("%s: Check passed", name)
		} else if !errors.Is(err, tsg.ErrInvalidArgument) {
			t.Errorf("%s: %v does not wrap tsg.ErrInvalidArgument", name, err)
		}
	}
}

func TestUnmarshalAndMarshal(t *testing.T) {
	var req struct {
		Class Name `json:"class"`
	}
	if err := json.Unmarshal([]byte(`{"class":"BE"}`), &req); err != nil || req.Class != BE {
		t.Fatalf("unmarshal: %v %q", err, req.Class)
	}
	if err := json.Unmarshal([]byte(`{"class":"gold"}`), &req); err == nil {
		t.Fatal("unmarshal accepted gold")
	}
	b, err := json.Marshal(Defaults())
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"lc","timeslice":"5s","interleave":"high","slice_overhead":"20us"},{"name":"burstable","timeslice":"2ms","interleave":"medium","slice_overhead":"20us"},{"name":"be","timeslice":"200us","interleave":"low","slice_overhead":"20us"}]`
	if string(b) != want {
		t.Errorf("marshal:\n got %s\nwant %s", b, want)
	}
}

// TestWeightsSplitWork: with a slice overhead c, a weight w gets c + w*(T-c),
// so the work per turn, T - c, splits in the ratio of the weights; the
// H100 points of the package comment each fit c = 19.6-22.2 us.
func TestWeightsSplitWork(t *testing.T) {
	us := time.Microsecond
	for _, tc := range []struct {
		ts, overhead time.Duration
		w            int
		want         time.Duration
	}{
		{200 * us, 20 * us, 3, 560 * us},
		{50 * us, 20 * us, 3, 110 * us},
		{100 * us, 20 * us, 1, 100 * us},
		{1000 * us, 20 * us, 4, 3940 * us},
		{200 * us, 0, 3, 600 * us},     // no overhead: the plain ratio
		{20 * us, 20 * us, 3, 60 * us}, // no work left to split: the plain ratio
		{us, 20 * us, 3, 3 * us},
	} {
		c := Class{Name: BE, Timeslice: tc.ts, Interleave: tsg.LevelLow, SliceOverhead: tc.overhead}
		got, err := c.TimesliceFor(tc.w)
		if err != nil || got != tc.want {
			t.Errorf("%v, overhead %v, weight %d: %v %v, want %v", tc.ts, tc.overhead, tc.w, got, err, tc.want)
		}
		if tc.ts > tc.overhead && tc.overhead > 0 {
			if work, unit := got-tc.overhead, tc.ts-tc.overhead; work != unit*time.Duration(tc.w) {
				t.Errorf("%v, weight %d: work %v is not %d x %v", tc.ts, tc.w, work, tc.w, unit)
			}
		}
	}
	// Past tsg's range is an error, not a wrap.
	c := Class{Name: BE, Timeslice: 3 * time.Second, Interleave: tsg.LevelLow, SliceOverhead: 20 * us}
	if _, err := c.TimesliceFor(MaxWeight); err == nil {
		t.Error("3 s x 1000 was accepted")
	}
}

func TestParseSliceOverhead(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true}, {"20us", 20 * time.Microsecond, true}, {" 1ms ", time.Millisecond, true}, {"0s", 0, true},
		{"20", 0, false}, {"-1us", 0, false}, {"2ms", 0, false}, {"1.5us", 0, false}, {"", 0, false},
	} {
		got, err := ParseSliceOverhead(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseSliceOverhead(%q) = %v, %v; want %v ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !errors.Is(err, tsg.ErrInvalidArgument) {
			t.Errorf("%q: %v does not wrap tsg.ErrInvalidArgument", tc.in, err)
		}
	}
}

func TestAbove(t *testing.T) {
	for _, tc := range []struct {
		n, want Name
		ok      bool
	}{{BE, Burstable, true}, {Burstable, LC, true}, {LC, "", false}, {"nope", "", false}} {
		if got, ok := tc.n.Above(); got != tc.want || ok != tc.ok {
			t.Errorf("%q.Above() = %q, %v; want %q, %v", tc.n, got, ok, tc.want, tc.ok)
		}
	}
}
