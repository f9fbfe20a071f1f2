package ctl

import "github.com/gpreempt/gpreempt/internal/cliutil"

// ManPage renders gpreemptctl's manual page from the command definitions
// themselves (urfave/cli's ToMan), in section 8: it is an administration
// command that needs root. `make man` writes it out.
func ManPage() (string, error) {
	return cliutil.ManPage(NewApp(Env{}), 8)
}
