package cliutil

import "github.com/urfave/cli/v2"

// ManPage renders app's manual page in section from its own definitions.
// urfave/cli's page gives a default only for a flag that takes a value, so
// a switch on unless turned off (gpreemptd --nvml, gpreemptctl preempt
// --wait, gpreempt-bench run --slo-push) would read as off: its usage says
// so, as --help does. app's own flags and commands are left as they were.
func ManPage(app *cli.App, section int) (string, error) {
	page := *app
	page.Flags = manFlags(app.Flags)
	page.Commands = cloneCommands(app.Commands)
	manCommands(page.Commands)
	return page.ToManWithSection(section)
}

func manCommands(cmds []*cli.Command) {
	for _, c := range cmds {
		c.Flags = manFlags(c.Flags)
		manCommands(c.Subcommands)
	}
}

func manFlags(flags []cli.Flag) []cli.Flag {
	out := make([]cli.Flag, len(flags))
	for i, f := range flags {
		if b, ok := f.(*cli.BoolFlag); ok && b.Value {
			c := *b
			c.Usage += " (default: true; --" + b.Name + "=false turns it off)"
			f = &c
		}
		out[i] = f
	}
	return out
}
