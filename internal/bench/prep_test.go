package bench

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestParsePrep(t *testing.T) {
	us := time.Microsecond
	tests := []struct {
		in      string
		want    PrepDist
		str     string
		wantErr bool
	}{
		{in: "", want: PrepDist{}, str: "0"},
		{in: "0", want: PrepDist{}, str: "0"},
		{in: "500us", want: PrepDist{500 * us, 500 * us}, str: "500us"},
		{in: "fixed:1.5ms", want: PrepDist{1500 * us, 1500 * us}, str: "1.5ms"},
		{in: "uniform:300us:700us", want: PrepDist{300 * us, 700 * us}, str: "uniform:300us:700us"},
		{in: "uniform:0s:1ms", want: PrepDist{0, time.Millisecond}, str: "uniform:0s:1ms"},
		{in: "uniform:700us:300us", wantErr: true},
		{in: "uniform:300us", wantErr: true},
		{in: "normal:1ms:1ms", wantErr: true},
		{in: "-5us", wantErr: true},
		{in: "500", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParsePrep(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidArgument) {
					t.Fatalf("ParsePrep(%q) = %v, %v; want ErrInvalidArgument", tt.in, got, err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParsePrep(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			}
			if got.String() != tt.str {
				t.Errorf("String() = %q, want %q", got.String(), tt.str)
			}
			// The rendering is what the orchestrator passes to workers, so it
			// must parse back to the same distribution.
			back, err := ParsePrep(got.String())
			if err != nil || back != got {
				t.Errorf("round trip %q -> %v, %v", got.String(), back, err)
			}
		})
	}
}

func TestPrepSample(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	d := PrepDist{Min: 300 * time.Microsecond, Max: 700 * time.Microsecond}
	var lo, hi time.Duration = time.Hour, 0
	for range 10000 {
		s := d.Sample(r)
		lo, hi = min(lo, s), max(hi, s)
	}
	if lo < d.Min || hi > d.Max || lo > 310*time.Microsecond || hi < 690*time.Microsecond {
		t.Fatalf("samples span [%v, %v], want about [%v, %v]", lo, hi, d.Min, d.Max)
	}
	if got := (PrepDist{Min: time.Millisecond, Max: time.Millisecond}).Sample(r); got != time.Millisecond {
		t.Fatalf("fixed sample %v", got)
	}
}

func TestFmtDuration(t *testing.T) {
	tests := map[time.Duration]string{
		0:                       "0s",
		time.Microsecond:        "1us",
		200 * time.Microsecond:  "200us",
		3500 * time.Microsecond: "3.5ms",
		3 * time.Millisecond:    "3ms",
		20 * time.Second:        "20s",
		1500 * time.Nanosecond:  "1500ns",
		1234 * time.Microsecond: "1.234ms",
		// a BE backstop with the kernel LC's 5x switch in it
		1061998500 * time.Microsecond: "1061998.5ms",
	}
	for d, want := range tests {
		if got := fmtDuration(d); got != want {
			t.Errorf("fmtDuration(%v) = %q, want %q", d, got, want)
		}
		if back, err := time.ParseDuration(fmtDuration(d)); err != nil || back != d {
			t.Errorf("%q does not parse back to %v: %v, %v", fmtDuration(d), d, back, err)
		}
	}
	if got := usArg(3 * time.Millisecond); got != "3000us" {
		t.Errorf("usArg(3ms) = %q", got)
	}
}
