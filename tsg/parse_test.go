package tsg

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestParseTimeslice(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{"200us", 200 * time.Microsecond, false},
		{"200µs", 200 * time.Microsecond, false},
		{"2ms", 2 * time.Millisecond, false},
		{"1.5ms", 1500 * time.Microsecond, false},
		{"1us", time.Microsecond, false},
		{"5s", 5 * time.Second, false},
		{" 2ms ", 2 * time.Millisecond, false},
		{"0us", 0, true},
		{"500ns", 0, true},
		{"1500ns", 0, true},
		{"6s", 0, true},
		{"-2ms", 0, true},
		{"200", 0, true},
		{"fast", 0, true},
		{"", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseTimeslice(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseTimeslice(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err != nil && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParseTimeslice(%q) error %v is not ErrInvalidArgument", tt.in, err)
		}
		if got != tt.want {
			t.Errorf("ParseTimeslice(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseTimeslice(f *testing.F) {
	for _, s := range []string{"200us", "2ms", "5s", "1.5ms", "0", "-1us", "9999999h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := ParseTimeslice(s)
		if err != nil {
			return
		}
		if CheckTimeslice(d) != nil {
			t.Fatalf("ParseTimeslice(%q) = %v, outside the range it promises", s, d)
		}
	})
}

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in      string
		want    Level
		wantErr bool
	}{
		{"low", LevelLow, false},
		{"HIGH", LevelHigh, false},
		{"medium", LevelMedium, false},
		{"2", LevelHigh, false},
		{"3", 0, true},
		{"urgent", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseLevel(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, %v", tt.in, got, err)
		}
	}
}

func TestMicrosString(t *testing.T) {
	for us, want := range map[Micros]string{1: "1us", 200: "200us", 1024: "1024us", 2000: "2ms", 5000000: "5s", 1500000: "1500ms"} {
		if got := us.String(); got != want {
			t.Errorf("Micros(%d) = %q, want %q", uint64(us), got, want)
		}
	}
}

// Opt says whether it is set apart from its value, and Settings built of
// Opts compare by value: equal settings are one batch key.
func TestOpt(t *testing.T) {
	for _, tc := range []struct {
		name   string
		o      Opt[time.Duration]
		or     time.Duration
		set    bool
		String string
	}{
		{"unset", Opt[time.Duration]{}, time.Second, false, "unset"},
		{"zero set", Some(time.Duration(0)), 0, true, "0s"},
		{"set", Some(200 * time.Microsecond), 200 * time.Microsecond, true, "200µs"},
		{"value without set", Opt[time.Duration]{V: time.Millisecond}, time.Second, false, "unset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.Or(time.Second); got != tc.or {
				t.Errorf("Or = %v, want %v", got, tc.or)
			}
			if _, set := tc.o.Get(); set != tc.set {
				t.Errorf("Get set = %v, want %v", set, tc.set)
			}
			if got := tc.o.String(); got != tc.String {
				t.Errorf("String = %q, want %q", got, tc.String)
			}
		})
	}
	a := Settings{Timeslice: Some(200 * time.Microsecond), Interleave: Some(LevelLow)}
	b := Settings{Timeslice: Some(200 * time.Microsecond), Interleave: Some(LevelLow)}
	c := Settings{Timeslice: Some(200 * time.Microsecond)}
	batches := map[Settings]int{a: 1}
	batches[b]++
	batches[c]++
	if len(batches) != 2 || batches[a] != 2 || batches[c] != 1 {
		t.Errorf("batches %v: want a and b as one key, c another", batches)
	}
}

// A group's id prints and encodes as the daemon's status and logs always
// showed it, and orders by client, then handle.
func TestGroupID(t *testing.T) {
	g := Group{PID: 4242, FD: 8, Client: 0xc1d00022, Device: 0x5c000002, Handle: 0x5c000015}
	id := g.ID()
	if id != (GroupID{Client: 0xc1d00022, Handle: 0x5c000015}) {
		t.Fatalf("ID() = %+v", id)
	}
	if got := id.String(); got != "0xc1d00022/0x5c000015" {
		t.Errorf("String() = %q", got)
	}
	b, err := json.Marshal(id)
	if err != nil || string(b) != `{"client":"0xc1d00022","handle":"0x5c000015"}` {
		t.Errorf("json = %s, %v", b, err)
	}
	var back GroupID
	if err := json.Unmarshal(b, &back); err != nil || back != id {
		t.Errorf("read back %+v, %v", back, err)
	}
	for _, tt := range []struct {
		a, b GroupID
		want int
	}{
		{GroupID{1, 2}, GroupID{1, 2}, 0},
		{GroupID{1, 9}, GroupID{2, 1}, -1},
		{GroupID{2, 1}, GroupID{1, 9}, 1},
		{GroupID{1, 1}, GroupID{1, 2}, -1},
		{GroupID{0x5c000000, 1}, GroupID{0xc1d00022, 1}, -1},
	} {
		if got := tt.a.Compare(tt.b); got != tt.want {
			t.Errorf("%v.Compare(%v) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
