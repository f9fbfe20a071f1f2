package cliutil

import (
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestManPageDefaultTrue: a switch on unless turned off reads so on the
// page, at every level (app, command, subcommand), and only such a switch;
// the app's own definitions are left as they were.
func TestManPageDefaultTrue(t *testing.T) {
	on := &cli.BoolFlag{Name: "wait", Value: true, Usage: "wait for it"}
	sub := &cli.Command{Name: "tsg", Flags: []cli.Flag{&cli.BoolFlag{Name: "mount-tracefs", Value: true, Usage: "mount it"}}}
	app := &cli.App{
		Name:  "prog",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "nvml", Value: true, Usage: "use NVML"}, &cli.BoolFlag{Name: "verbose", Usage: "say more"}},
		Commands: []*cli.Command{
			{Name: "preempt", Flags: []cli.Flag{on, &cli.DurationFlag{Name: "timeout", Usage: "at most"}}},
			{Name: "trace", Subcommands: []*cli.Command{sub}},
		},
	}
	page, err := ManPage(app, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		flag string
		on   bool
	}{{"nvml", true}, {"verbose", false}, {"wait", true}, {"timeout", false}, {"mount-tracefs", true}} {
		i := strings.Index(page, `\fB--`+tt.flag+`\fP`)
		if i < 0 {
			t.Fatalf("--%s not on the page:\n%s", tt.flag, page)
		}
		line, _, _ := strings.Cut(page[i:], "\n.PP")
		if got := strings.Contains(line, "(default: true; --"+tt.flag+"=false turns it off)"); got != tt.on {
			t.Errorf("--%s reads as on by default: %v, want %v:\n%s", tt.flag, got, tt.on, line)
		}
	}
	if on.Usage != "wait for it" || sub.Flags[0].(*cli.BoolFlag).Usage != "mount it" || app.Flags[0].(*cli.BoolFlag).Usage != "use NVML" {
		t.Errorf("the app's own flags changed: %q, %q, %q", on.Usage, sub.Flags[0].(*cli.BoolFlag).Usage, app.Flags[0].(*cli.BoolFlag).Usage)
	}
}
