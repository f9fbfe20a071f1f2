// Package version is the one version every gpreempt artefact reports: the
// three binaries, libgpreempt, the Python package and the Helm chart's
// appVersion.
//
// The release version is the file VERSION beside this one (embedded, so a
// plain `go build` knows it too). The revision and whether the tree was
// modified come from git: the Makefile sets them with -ldflags -X, which
// holds under -buildvcs=false as well; without them, the toolchain's own VCS
// stamp is used where it exists.
package version

import (
	_ "embed"
	"fmt"
	goruntime "runtime"
	"runtime/debug"
	"strings"
)

//go:embed VERSION
var releaseFile string

// Set by the Makefile (-ldflags -X github.com/gpreempt/gpreempt/internal/version.revision=...).
var (
	revision string
	revTime  string
	modified string // "true" or "false"
)

// Info is what a binary says of its build.
type Info struct {
	// Version is the release version, as in VERSION ("0.1.0").
	Version string `json:"version"`
	// Revision is the git commit the build came from ("" when unknown).
	Revision string `json:"revision,omitempty"`
	// Time is the commit's time (RFC 3339).
	Time string `json:"revision_time,omitempty"`
	// Modified: the tree had changes not in Revision.
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// Release is the release version, as in VERSION.
func Release() string { return strings.TrimSpace(releaseFile) }

// Get is this binary's Info.
func Get() Info { return From(debug.ReadBuildInfo) }

// From is Info with read in place of debug.ReadBuildInfo (for tests): what
// the Makefile linked in wins over what the toolchain stamped.
func From(read func() (*debug.BuildInfo, bool)) Info {
	v := Info{Version: Release(), Go: goruntime.Version(), Platform: goruntime.GOOS + "/" + goruntime.GOARCH}
	goos, goarch := goruntime.GOOS, goruntime.GOARCH
	if bi, ok := read(); ok && bi != nil {
		if bi.GoVersion != "" {
			v.Go = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Revision = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			case "GOOS":
				goos = s.Value
			case "GOARCH":
				goarch = s.Value
			}
		}
	}
	v.Platform = goos + "/" + goarch
	if revision != "" {
		v.Revision, v.Time, v.Modified = revision, revTime, modified == "true"
	}
	return v
}

// Line is the version line every gpreempt binary prints first for
// --version: "gpreemptd version 0.1.0 (revision 194bf34c...)".
func (v Info) Line(binary string) string { return binary + " version " + v.String() }

// String is the one-line form every binary prints:
// "0.1.0 (revision 194bf34c..., modified)", or "0.1.0 (revision unknown)".
func (v Info) String() string {
	rev := v.Revision
	if rev == "" {
		rev = "unknown"
	}
	s := fmt.Sprintf("%s (revision %s", v.Version, rev)
	if v.Modified {
		s += ", modified"
	}
	return s + ")"
}
