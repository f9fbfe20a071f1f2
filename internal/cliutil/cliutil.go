// Package cliutil gives gpreempt's command-line programs (gpreemptctl,
// gpreempt-bench) one way to answer a usage error: the error alone, wrapped
// in the program's usage sentinel so that it exits with code 2, printed
// once by the program's main; help only when asked for with --help. It
// also renders each program's manual page (ManPage).
package cliutil

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// Strict makes app and every command below it behave alike on a usage
// error: a bad flag, an argument a command does not take, an unknown
// command or subcommand. The error returned wraps invalid (the program's
// usage sentinel) and names the command; nothing else is printed. urfave/cli
// would otherwise print the command's help on stdout, where it breaks a
// JSON pipeline, and answer an unknown command with "No help topic".
//
// A command that takes positional arguments says so with ArgsUsage; one
// without is refused any. A group (a command with subcommands and no
// action of its own) refuses to run without a known subcommand. An app
// without an action of its own prints its help when run with no arguments
// at all.
//
// The commands are copied first: urfave/cli changes the commands an app
// runs (help names, help subcommands and flags added as help is shown),
// and command definitions are package variables, so that one app's run
// must not change the next's.
func Strict(app *cli.App, invalid error) {
	app.Commands = cloneCommands(app.Commands)
	strictCommands(app.Commands, invalid)
	app.OnUsageError = usageError(invalid)
	if app.Action == nil {
		app.Action = rootAction(invalid)
	}
}

func strictCommands(cmds []*cli.Command, invalid error) {
	for _, cmd := range cmds {
		cmd.OnUsageError = usageError(invalid)
		if len(cmd.Subcommands) > 0 {
			strictCommands(cmd.Subcommands, invalid)
			if cmd.Action == nil {
				cmd.Action = unknownSubcommand(invalid)
			}
			continue
		}
		if cmd.ArgsUsage == "" && cmd.Action != nil {
			action := cmd.Action
			cmd.Action = func(c *cli.Context) error {
				if err := NoArgs(c, invalid); err != nil {
					return err
				}
				return action(c)
			}
		}
	}
}

func cloneCommands(cmds []*cli.Command) []*cli.Command {
	out := make([]*cli.Command, len(cmds))
	for i, c := range cmds {
		cp := *c
		cp.Flags = slices.Clone(c.Flags)
		cp.Subcommands = cloneCommands(c.Subcommands)
		out[i] = &cp
	}
	return out
}

// usageError names the command whose flags were wrong.
func usageError(invalid error) cli.OnUsageErrorFunc {
	return func(c *cli.Context, err error, _ bool) error {
		if errors.Is(err, invalid) {
			return err
		}
		if name := CommandName(c); name != "" && name != c.App.Name {
			return fmt.Errorf("%w: %s: %v", invalid, name, err)
		}
		return fmt.Errorf("%w: %v", invalid, err)
	}
}

// unknownSubcommand is the action of a group, reached only when no
// subcommand matched.
func unknownSubcommand(invalid error) cli.ActionFunc {
	return func(c *cli.Context) error {
		var names []string
		for _, s := range c.Command.Subcommands {
			if !s.Hidden && s.Name != "help" {
				names = append(names, s.Name)
			}
		}
		want := strings.Join(names, ", ")
		if c.NArg() == 0 {
			return fmt.Errorf("%w: %s needs a subcommand: %s (see --help)", invalid, CommandName(c), want)
		}
		return fmt.Errorf("%w: %s: unknown subcommand %q: want %s", invalid, CommandName(c), c.Args().First(), want)
	}
}

// rootAction runs when no command matched: help when there are no
// arguments at all, else the unknown command named.
func rootAction(invalid error) cli.ActionFunc {
	return func(c *cli.Context) error {
		if c.NArg() == 0 {
			return cli.ShowAppHelp(c)
		}
		return fmt.Errorf("%w: unknown command %q (see %s --help)", invalid, c.Args().First(), c.App.Name)
	}
}

// NoArgs refuses positional arguments for a command that takes none,
// wrapping invalid.
func NoArgs(c *cli.Context, invalid error) error {
	if c.NArg() > 0 {
		return fmt.Errorf("%w: %s takes no arguments, got %q", invalid, CommandName(c), c.Args().Slice())
	}
	return nil
}

// CommandName is the command's path below the app, as the user typed it:
// "trace rpc", "ps".
func CommandName(c *cli.Context) string {
	if c.Command == nil {
		return ""
	}
	if name := c.Command.HelpName; name != "" {
		return strings.TrimPrefix(name, c.App.Name+" ")
	}
	return c.Command.Name
}
