package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
	"github.com/gpreempt/gpreempt/internal/version"
	"github.com/gpreempt/gpreempt/ioctl"
)

// versionInfo is what `gpreemptctl version` prints: the build (the same
// for every gpreempt binary) and the driver ABIs this one knows.
type versionInfo struct {
	version.Info
	// ABIs are the driver ABIs gpreempt knows, oldest first.
	ABIs []abiView `json:"driver_abis"`
	// Below is the first driver version no known ABI covers.
	Below string `json:"supported_below"`
}

type abiView struct {
	Name  string `json:"name"`
	Since string `json:"since"`
	Note  string `json:"note,omitempty"`
}

// buildInfo is the binary's version (Env.Version replaces it in tests) and
// the ABIs it knows.
func buildInfo(env Env) versionInfo {
	get := env.Version
	if get == nil {
		get = version.Get
	}
	v := versionInfo{Info: get()}
	abis, limit := ioctl.KnownABIs()
	for _, a := range abis {
		av := abiView{Name: a.Name, Since: a.Since.String()}
		if a.ScheduleSkipEnable {
			av.Note = "3-byte GPFIFO_SCHEDULE parameters"
		}
		v.ABIs = append(v.ABIs, av)
	}
	v.Below = limit.String()
	return v
}

func printVersion(c *cli.Context, env Env, json bool) error {
	v := buildInfo(env)
	w := c.App.Writer
	if json {
		return cmdutil.WriteJSON(w, v)
	}
	// The first line is every gpreempt binary's (version.Info.Line).
	fmt.Fprintln(w, v.Info.Line("gpreemptctl"))
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	if v.Time != "" {
		fmt.Fprintf(tw, "revision time\t%s\n", v.Time)
	}
	fmt.Fprintf(tw, "go\t%s %s\n", v.Go, v.Platform)
	for i, a := range v.ABIs {
		label := ""
		if i == 0 {
			label = "driver ABIs"
		}
		line := fmt.Sprintf("%s: from %s", a.Name, a.Since)
		if a.Note != "" {
			line += " (" + a.Note + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, line)
	}
	fmt.Fprintf(tw, "\tbefore %s or from %s on: refused unless --allow-unsupported-driver\n", v.ABIs[0].Since, v.Below)
	return tw.Flush()
}

var versionCommand = &cli.Command{
	Name:  "version",
	Usage: "print gpreemptctl's version, the Go it was built with and the driver ABIs it knows",
	Action: func(c *cli.Context) error {
		return printVersion(c, rt(c).env, rt(c).json)
	},
}

// printVersionFlag is what --version prints: what the version command does
// (cliutil.VersionKey).
func printVersionFlag(c *cli.Context) {
	env, _ := c.App.Metadata["env"].(Env)
	if err := printVersion(c, env, c.String("output") == "json"); err != nil {
		fmt.Fprintf(c.App.ErrWriter, "gpreemptctl: %v\n", err)
	}
}
