package version

import (
	"os"
	"regexp"
	"runtime/debug"
	"testing"
)

func TestFrom(t *testing.T) {
	stamped := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Settings: []debug.BuildSetting{
			{Key: "GOOS", Value: "linux"}, {Key: "GOARCH", Value: "arm64"},
			{Key: "vcs.revision", Value: "0f52e92c"}, {Key: "vcs.time", Value: "2026-11-22T11:58:03Z"}, {Key: "vcs.modified", Value: "true"},
		}}, true
	}
	unstamped := func() (*debug.BuildInfo, bool) { return nil, false }
	tests := []struct {
		name                  string
		read                  func() (*debug.BuildInfo, bool)
		linkRev, linkModified string
		want                  string
	}{
		{"toolchain stamp", stamped, "", "", Release() + " (revision 0f52e92c, modified)"},
		{"nothing", unstamped, "", "", Release() + " (revision unknown)"},
		// -buildvcs=false: only the Makefile's -X says where it came from.
		{"linked", unstamped, "194bf34c", "false", Release() + " (revision 194bf34c)"},
		{"linked wins", stamped, "194bf34c", "true", Release() + " (revision 194bf34c, modified)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			saved, savedM := revision, modified
			defer func() { revision, modified = saved, savedM }()
			revision, modified = tt.linkRev, tt.linkModified
			if got := From(tt.read).String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
	if p := From(stamped).Platform; p != "linux/arm64" {
		t.Errorf("platform %q", p)
	}
}

// TestReleaseEverywhere: the Python package and the chart carry the release
// version of VERSION.
func TestReleaseEverywhere(t *testing.T) {
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.]+)?$`).MatchString(Release()) {
		t.Fatalf("VERSION %q is not a semantic version", Release())
	}
	for _, f := range []struct{ path, pattern string }{
		{"../../python/pyproject.toml", `(?m)^version = "([^"]*)"$`},
		{"../../python/_build/gpreempt_build.py", `(?m)^VERSION = "([^"]*)"$`},
		{"../../python/gpreempt/__init__.py", `(?m)^__version__ = "([^"]*)"$`},
		{"../../deploy/helm/gpreempt/Chart.yaml", `(?m)^appVersion: "([^"]*)"$`},
		{"../../deploy/helm/gpreempt/Chart.yaml", `(?m)^version: (\S+)$`},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		m := regexp.MustCompile(f.pattern).FindSubmatch(b)
		if m == nil {
			t.Errorf("%s: no %s", f.path, f.pattern)
			continue
		}
		if string(m[1]) != Release() {
			t.Errorf("%s says %s, VERSION %s", f.path, m[1], Release())
		}
	}
}
