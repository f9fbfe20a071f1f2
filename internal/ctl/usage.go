package ctl

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpreempt/gpreempt/internal/ctl/cmdutil"
)

// strictUsage makes every command of the tree behave alike on a usage
// error: the error (wrapped in ErrInvalidArgument, exit code 2) is all that
// is printed, once, by Run; help is printed only when asked for with
// --help. urfave/cli would otherwise print the command's help on stdout,
// where it breaks a `-o json` pipeline, and answer an unknown subcommand
// with "No help topic".
//
// A command that takes positional arguments says so with ArgsUsage; one
// without is refused any. A group (a command with subcommands and no
// action of its own) refuses to run without a known subcommand.
func strictUsage(cmds []*cli.Command) {
	for _, cmd := range cmds {
		cmd.OnUsageError = usageError
		if len(cmd.Subcommands) > 0 {
			strictUsage(cmd.Subcommands)
			if cmd.Action == nil {
				cmd.Action = unknownSubcommand
			}
			continue
		}
		if cmd.ArgsUsage == "" && cmd.Action != nil {
			action := cmd.Action
			cmd.Action = func(c *cli.Context) error {
				if err := cmdutil.NoArgs(c); err != nil {
					return err
				}
				return action(c)
			}
		}
	}
}

// cloneCommands copies a command tree. urfave/cli changes the commands an
// app runs (help names, help subcommands and flags added as help is
// shown), and the definitions are package variables: each app gets its own
// copy, so that one app's run cannot change the next's.
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
func usageError(c *cli.Context, err error, _ bool) error {
	if errors.Is(err, ErrInvalidArgument) {
		return err
	}
	if name := cmdutil.CommandName(c); name != "" && name != c.App.Name {
		return fmt.Errorf("%w: %s: %v", ErrInvalidArgument, name, err)
	}
	return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
}

// unknownSubcommand is the action of a group, reached only when no
// subcommand matched.
func unknownSubcommand(c *cli.Context) error {
	var names []string
	for _, s := range c.Command.Subcommands {
		if !s.Hidden && s.Name != "help" {
			names = append(names, s.Name)
		}
	}
	want := strings.Join(names, ", ")
	if c.NArg() == 0 {
		return fmt.Errorf("%w: %s needs a subcommand: %s (see --help)", ErrInvalidArgument, cmdutil.CommandName(c), want)
	}
	return fmt.Errorf("%w: %s: unknown subcommand %q: want %s", ErrInvalidArgument, cmdutil.CommandName(c), c.Args().First(), want)
}

// rootAction runs when no command matched: help when there are no
// arguments at all, else the unknown command named.
func rootAction(c *cli.Context) error {
	if c.NArg() == 0 {
		return cli.ShowAppHelp(c)
	}
	return fmt.Errorf("%w: unknown command %q (see %s --help)", ErrInvalidArgument, c.Args().First(), c.App.Name)
}
