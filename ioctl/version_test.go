package ioctl

import (
	"errors"
	"testing"
)

func TestParseDriverVersion(t *testing.T) {
	tests := []struct {
		in      string
		want    DriverVersion
		wantErr bool
	}{
		{"580.159.04", DriverVersion{580, 159, 4}, false},
		{"550.120", DriverVersion{550, 120, 0}, false},
		{" 595.45.04\n", DriverVersion{595, 45, 4}, false},
		{"580.142\x00\x00\x00", DriverVersion{580, 142, 0}, false},
		{"", DriverVersion{}, true},
		{"580", DriverVersion{}, true},
		{"580.x.1", DriverVersion{}, true},
		{"580..1", DriverVersion{}, true},
		{"1.2.3.4", DriverVersion{}, true},
		{"-1.2", DriverVersion{}, true},
		{"+1.2", DriverVersion{}, true},
		{"99999999999.1", DriverVersion{}, true},
	}
	for _, tt := range tests {
		got, err := ParseDriverVersion(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDriverVersion(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if got != tt.want {
			t.Errorf("ParseDriverVersion(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func FuzzParseDriverVersion(f *testing.F) {
	for _, s := range []string{"580.159.04", "550.120", "", "1.2.3.4", "580.\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseDriverVersion(s)
		if err != nil {
			return
		}
		// Whatever parses must print and parse back to the same version.
		again, err := ParseDriverVersion(v.String())
		if err != nil || again != v {
			t.Fatalf("%q -> %v -> %q -> %v, %v", s, v, v.String(), again, err)
		}
	})
}

func TestLookupABI(t *testing.T) {
	tests := []struct {
		v            string
		allow        bool
		wantName     string
		wantErr      bool
		wantSkipByte bool
	}{
		{"535.216.01", false, "535", false, false},
		{"550.120", false, "535", false, false},
		{"570.86.15", false, "535", false, false},
		{"575.51.02", false, "575", false, true},
		{"580.159.04", false, "575", false, true},
		{"595.45.04", false, "575", false, true},
		{"470.256.02", false, "", true, false},
		{"610.1", false, "", true, false},
		{"610.1", true, "575", true, true},
	}
	for _, tt := range tests {
		v, err := ParseDriverVersion(tt.v)
		if err != nil {
			t.Fatal(err)
		}
		abi, err := LookupABI(v, tt.allow)
		if (err != nil) != tt.wantErr {
			t.Errorf("LookupABI(%s, %v) error = %v, wantErr %v", tt.v, tt.allow, err, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrUnsupportedDriver) {
			t.Errorf("LookupABI(%s): error %v is not ErrUnsupportedDriver", tt.v, err)
		}
		if abi.Name != tt.wantName {
			t.Errorf("LookupABI(%s, %v) = ABI %q, want %q", tt.v, tt.allow, abi.Name, tt.wantName)
		}
		if tt.wantName != "" {
			want := 2
			if tt.wantSkipByte {
				want = 3
			}
			if got := len(abi.ScheduleParams(true)); got != want {
				t.Errorf("%s: GPFIFO_SCHEDULE params are %d bytes, want %d", tt.v, got, want)
			}
		}
	}
}
