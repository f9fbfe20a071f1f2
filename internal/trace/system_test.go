package trace

import "testing"

func TestParseKernelRelease(t *testing.T) {
	tests := []struct {
		in           string
		major, minor int
		ok           bool
	}{
		{"6.18.44-fc-v669\n", 6, 18, true},
		{"6.10.0-rc3", 6, 10, true},
		{"6.9", 6, 9, true},
		{"5.15.0-105-generic", 5, 15, true},
		{"6", 0, 0, false},
		{"x.1", 0, 0, false},
		{"6.x", 0, 0, false},
		{"", 0, 0, false},
	}
	for _, tt := range tests {
		major, minor, ok := parseKernelRelease(tt.in)
		if major != tt.major || minor != tt.minor || ok != tt.ok {
			t.Errorf("parseKernelRelease(%q) = %d, %d, %v; want %d, %d, %v", tt.in, major, minor, ok, tt.major, tt.minor, tt.ok)
		}
	}
}

func FuzzParseKernelRelease(f *testing.F) {
	for _, s := range []string{"6.18.44-fc-v669", "6.10.0-rc3", "5.15", "-1.-2", "6."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		major, minor, ok := parseKernelRelease(s)
		if ok && (major < 0 || minor < 0) || !ok && (major != 0 || minor != 0) {
			t.Errorf("parseKernelRelease(%q) = %d, %d, %v", s, major, minor, ok)
		}
	})
}
