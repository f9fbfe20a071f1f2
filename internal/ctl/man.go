package ctl

// ManPage renders gpreemptctl's manual page from the command definitions
// themselves (urfave/cli's ToMan), in section 8: it is an administration
// command that needs root. `make man` writes it out.
func ManPage() (string, error) {
	return NewApp(Env{}).ToManWithSection(8)
}
