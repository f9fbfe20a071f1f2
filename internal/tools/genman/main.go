// Command genman writes the manual pages of gpreemptctl and gpreemptd
// (section 8) and gpreempt-bench (section 1), generated from their command definitions,
// into the directory it is given: `make man` runs it.
package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpreempt/gpreempt/internal/bench"
	"github.com/gpreempt/gpreempt/internal/cliutil"
	"github.com/gpreempt/gpreempt/internal/ctl"
	daemoncmd "github.com/gpreempt/gpreempt/internal/daemon/cmd"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: genman DIR")
		os.Exit(2)
	}
	if err := write(os.Args[1]); err != nil {
		fmt.Fprintf(os.Stderr, "genman: %v\n", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	ctlPage, err := ctl.ManPage()
	if err != nil {
		return fmt.Errorf("gpreemptctl: %w", err)
	}
	benchPage, err := cliutil.ManPage(bench.NewApp(), 1)
	if err != nil {
		return fmt.Errorf("gpreempt-bench: %w", err)
	}
	daemonPage, err := daemoncmd.ManPage()
	if err != nil {
		return fmt.Errorf("gpreemptd: %w", err)
	}
	for name, page := range map[string]string{"gpreemptctl.8": ctlPage, "gpreemptd.8": daemonPage, "gpreempt-bench.1": benchPage} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(page), 0o644); err != nil {
			return err
		}
	}
	return nil
}
