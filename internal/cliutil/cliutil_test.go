package cliutil

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

var errUsage = errors.New("usage")

// Package variables, as the programs' command definitions are.
var (
	plainCommand = &cli.Command{
		Name:   "plain",
		Flags:  []cli.Flag{&cli.IntFlag{Name: "n"}},
		Action: func(c *cli.Context) error { return nil },
	}
	argsCommand = &cli.Command{
		Name:      "args",
		ArgsUsage: "FILE...",
		Action:    func(c *cli.Context) error { return nil },
	}
	groupCommand = &cli.Command{
		Name: "group",
		Subcommands: []*cli.Command{
			{Name: "one", Action: func(c *cli.Context) error { return nil }},
			{Name: "two", Flags: []cli.Flag{&cli.BoolFlag{Name: "b"}}, Action: func(c *cli.Context) error { return nil }},
		},
	}
)

func newApp(out *bytes.Buffer) *cli.App {
	app := &cli.App{
		Name:           "prog",
		Writer:         out,
		ErrWriter:      out,
		Flags:          []cli.Flag{&cli.StringFlag{Name: "g"}},
		Commands:       []*cli.Command{plainCommand, argsCommand, groupCommand},
		ExitErrHandler: func(*cli.Context, error) {},
	}
	Strict(app, errUsage)
	return app
}

func TestStrict(t *testing.T) {
	tests := []struct {
		args    []string
		wantErr string // "" for success
		help    string // what the output must hold; "" for nothing at all
	}{
		{[]string{"plain", "--n", "3"}, "", ""},
		{[]string{"args", "a", "b"}, "", ""},
		{[]string{"group", "two", "--b"}, "", ""},
		{[]string{"plain", "--nope"}, "plain: flag provided but not defined: -nope", ""},
		{[]string{"plain", "--n", "x"}, `plain: invalid value "x" for flag -n`, ""},
		{[]string{"plain", "extra"}, `plain takes no arguments, got ["extra"]`, ""},
		{[]string{"group", "two", "--nope"}, "group two: flag provided but not defined: -nope", ""},
		{[]string{"group", "two", "extra"}, `group two takes no arguments, got ["extra"]`, ""},
		{[]string{"group"}, "group needs a subcommand: one, two (see --help)", ""},
		{[]string{"group", "three"}, `group: unknown subcommand "three": want one, two`, ""},
		{[]string{"--nope"}, "flag provided but not defined: -nope", ""},
		{[]string{"nosuch"}, `unknown command "nosuch" (see prog --help)`, ""},
		{nil, "", "USAGE:"},
		{[]string{"plain", "--help"}, "", "prog plain"},
		{[]string{"group", "--help"}, "", "prog group"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			err := newApp(&out).Run(append([]string{"prog"}, tt.args...))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("err = %v", err)
			case tt.wantErr != "" && (!errors.Is(err, errUsage) || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("err = %v, want one wrapping errUsage containing %q", err, tt.wantErr)
			}
			if tt.help == "" && out.Len() > 0 {
				t.Errorf("printed %q, want nothing", out.String())
			}
			if !strings.Contains(out.String(), tt.help) {
				t.Errorf("printed %q, want %q", out.String(), tt.help)
			}
		})
	}
}

// Each app gets its own copy of the commands: running one (which adds
// help flags and names) or making it strict twice leaves the definitions
// as they were.
func TestStrictLeavesDefinitions(t *testing.T) {
	var out bytes.Buffer
	for range 2 {
		if err := newApp(&out).Run([]string{"prog", "group", "two", "--help"}); err != nil {
			t.Fatal(err)
		}
	}
	if plainCommand.OnUsageError != nil || groupCommand.Action != nil || len(groupCommand.Subcommands[1].Flags) != 1 {
		t.Error("Strict changed the command definitions it was given")
	}
}
