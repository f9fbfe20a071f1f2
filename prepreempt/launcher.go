package prepreempt

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalidOption marks an Options field, or a Hint argument, that is out
// of range or unknown.
var ErrInvalidOption = errors.New("prepreempt: invalid option")

// Launcher picks how the engine launches the spinners it schedules.
type Launcher string

const (
	// LauncherGoroutine: one goroutine per hint sleeps, then spins, to the
	// spinner's launch time. The default.
	LauncherGoroutine Launcher = "goroutine"
	// LauncherPoller: one goroutine locked to its OS thread polls the
	// scheduled launches while hints keep coming, and parks after
	// Options.PollerIdle without one. It avoids waking a goroutine per hint
	// (which in a VM may cost more than the launch lead) at the price of a
	// busy core while LC traffic flows.
	LauncherPoller Launcher = "poller"
)

// Launchers lists the known launchers, the default first.
var Launchers = []Launcher{LauncherGoroutine, LauncherPoller}

// ParseLauncher accepts a launcher name in any case.
func ParseLauncher(s string) (Launcher, error) {
	l := Launcher(strings.ToLower(strings.TrimSpace(s)))
	if err := l.check(); err != nil {
		return "", err
	}
	return l, nil
}

func (l Launcher) check() error {
	switch l {
	case LauncherGoroutine, LauncherPoller:
		return nil
	}
	return fmt.Errorf("%w: launcher %q: want goroutine or poller", ErrInvalidOption, string(l))
}

func (l Launcher) String() string { return string(l) }

// UnmarshalText parses a launcher, so configuration files are checked where
// they are decoded.
func (l *Launcher) UnmarshalText(b []byte) error {
	v, err := ParseLauncher(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
