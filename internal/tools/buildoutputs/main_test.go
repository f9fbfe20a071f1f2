package main

import (
	"os"
	"testing"
)

func TestKindOf(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bpf, err := os.ReadFile("../../trace/rm_bpfel.o")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		head []byte
		want string
	}{
		{"this test binary", exe[:64], "ELF"},
		{"a BPF object bpf2go made", bpf[:64], ""},
		{"a big-endian BPF object", []byte("\x7fELF\x02\x02\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\xf7"), ""},
		{"an archive", []byte("!<arch>\nfoo.o/"), "ar archive"},
		{"Mach-O", []byte{0xcf, 0xfa, 0xed, 0xfe, 7, 0, 0, 1}, "Mach-O"},
		{"a Go file", []byte("package main\n"), ""},
		{"a truncated ELF header", []byte("\x7fELF\x02"), "ELF"},
		{"empty", nil, ""},
	}
	for _, tt := range tests {
		if got := kindOf(tt.head); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
