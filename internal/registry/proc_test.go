package registry

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
)

func TestParseStat(t *testing.T) {
	// Fields 3..22 after the comm; starttime last.
	const tail = " S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 23 24"
	tests := []struct {
		in      string
		want    ProcInfo
		wantErr string
	}{
		{"4242 (python3)" + tail, ProcInfo{Start: 424242, Comm: "python3"}, ""},
		{"7 (a) b (c))" + tail, ProcInfo{Start: 424242, Comm: "a) b (c)"}, ""},
		{"7 (spaces in name)" + tail + "\n", ProcInfo{Start: 424242, Comm: "spaces in name"}, ""},
		{"7 python3" + tail, ProcInfo{}, "no (comm)"},
		{"7 (x) S 1 2", ProcInfo{}, "fields after comm"},
		{"7 (x)" + strings.Replace(tail, "424242", "-1", 1), ProcInfo{}, "starttime"},
		{")7 (", ProcInfo{}, "no (comm)"},
	}
	for _, tt := range tests {
		got, err := parseStat([]byte(tt.in))
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseStat(%q) = %v, want an error containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("4242 (python3) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 424242 23 24"))
	f.Add([]byte("1 ()) R"))
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := parseStat(b)
		if err == nil && !strings.Contains(string(b), "("+info.Comm+")") {
			t.Fatalf("comm %q is not what the parentheses held in %q", info.Comm, b)
		}
	})
}

func TestProcFS(t *testing.T) {
	self, err := ProcFS{}.Stat(os.Getpid())
	if err != nil || self.Start == 0 || self.Comm == "" {
		t.Errorf("Stat(self) = %+v, %v", self, err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "stat"), []byte("7 (x) S 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := ProcFS{Root: root}
	if _, err := fs.Stat(8); !errors.Is(err, ioctl.ErrNoSuchProcess) {
		t.Errorf("missing pid: %v", err)
	}
	if _, err := fs.Stat(7); err == nil || !strings.Contains(err.Error(), "pid 7") {
		t.Errorf("short stat: %v", err)
	}
}
