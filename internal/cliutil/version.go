package cliutil

import (
	"fmt"

	"github.com/urfave/cli/v2"
)

// VersionKey names, in an app's Metadata, a func(*cli.Context) that prints
// what --version prints after the one version line, where the app has more
// to say (gpreemptctl: the Go and the driver ABIs).
const VersionKey = "version"

// urfave/cli's --version flag and printer are package globals, shared by
// every app in a binary (genman and the tests hold all three): one printer,
// set here, keeps each app's own first line. App.Version is
// internal/version's Info.String, so the line is Info.Line's.
func init() {
	// No -v, which reads as "verbose" to most.
	cli.VersionFlag = &cli.BoolFlag{Name: "version", Usage: "print the version"}
	cli.VersionPrinter = func(c *cli.Context) {
		if more, ok := c.App.Metadata[VersionKey].(func(*cli.Context)); ok {
			more(c)
			return
		}
		fmt.Fprintf(c.App.Writer, "%s version %s\n", c.App.Name, c.App.Version)
	}
}
