package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	if err := write(filepath.Join(dir, "man")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"gpreemptctl.8": `.TH gpreemptctl 8`, "gpreemptd.8": `.TH gpreemptd 8`, "gpreempt-bench.1": `.TH gpreempt-bench 1`} {
		b, err := os.ReadFile(filepath.Join(dir, "man", name))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("%s does not start its page with %q:\n%.300s", name, want, b)
		}
	}
}
