package pause

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The watchdog's messages: what String writes parses back, and anything
// else is refused with the reason, a wall-clock or duration deadline
// among them.
func TestParseWatchdogMsg(t *testing.T) {
	for _, tc := range []struct {
		text string
		fds  int
		want watchdogCmd
		err  string // "" : parses
	}{
		{"hold 42 1234 5000000000", 1, watchdogCmd{hold: true, pid: 42, start: 1234, deadline: 5 * time.Second}, ""},
		{"drop 42 1234", 0, watchdogCmd{pid: 42, start: 1234}, ""},
		{"drop 42 0", 0, watchdogCmd{pid: 42}, ""},
		{"hold 42 1234 2s", 1, watchdogCmd{}, "want CLOCK_MONOTONIC nanoseconds"},
		{"hold 42 1234 1h59m58.5s", 1, watchdogCmd{}, "want CLOCK_MONOTONIC nanoseconds"},
		{"hold 42 1234 2026-01-02T15:04:05Z", 1, watchdogCmd{}, "want CLOCK_MONOTONIC nanoseconds"},
		{"hold 42 1234 0", 1, watchdogCmd{}, "positive integer"},
		{"hold 42 1234 -5", 1, watchdogCmd{}, "positive integer"},
		{"hold 42 1234 99999999999999999999", 1, watchdogCmd{}, "positive integer"},
		{"hold 42 1234 5000000000", 0, watchdogCmd{}, "carries one pidfd, got 0"},
		{"hold 42 1234 5000000000", 2, watchdogCmd{}, "carries one pidfd, got 2"},
		{"drop 42 1234", 1, watchdogCmd{}, "carries no descriptor"},
		{"hold 42 1234", 1, watchdogCmd{}, `want "hold PID START DEADLINE"`},
		{"drop 42 1234 5", 0, watchdogCmd{}, `or "drop PID START"`},
		{"hold  42 1234 5", 1, watchdogCmd{}, "want \"hold"},
		{"stop 42 1234", 0, watchdogCmd{}, "want \"hold"},
		{"", 0, watchdogCmd{}, "want \"hold"},
		{"drop 0 1", 0, watchdogCmd{}, "pid \"0\""},
		{"drop -1 1", 0, watchdogCmd{}, "pid \"-1\""},
		{"drop +7 1", 0, watchdogCmd{}, "pid \"+7\""},
		{"drop x 1", 0, watchdogCmd{}, "pid \"x\""},
		{"drop 7 -1", 0, watchdogCmd{}, "start time \"-1\""},
	} {
		got, err := parseWatchdogMsg(tc.text, tc.fds)
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("parseWatchdogMsg(%q, %d): %v", tc.text, tc.fds, err)
		case tc.err == "" && got != tc.want:
			t.Errorf("parseWatchdogMsg(%q, %d) = %+v, want %+v", tc.text, tc.fds, got, tc.want)
		case tc.err == "" && got.String() != tc.text:
			t.Errorf("%+v.String() = %q, want %q", got, got.String(), tc.text)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("parseWatchdogMsg(%q, %d) = %+v, %v; want an error with %q", tc.text, tc.fds, got, err, tc.err)
		}
	}
}

func FuzzParseWatchdogMsg(f *testing.F) {
	f.Add("hold 42 1234 5000000000", 1)
	f.Add("drop 42 1234", 0)
	f.Add("hold 42 1234 2s", 1)
	f.Add("drop 0 1", 0)
	f.Fuzz(func(t *testing.T, text string, fds int) {
		c, err := parseWatchdogMsg(text, fds)
		if err != nil {
			if len(err.Error()) > 2000 { // quotes of at most 80 and 32 characters, 10 bytes each at worst
				t.Errorf("error of %d bytes: its quotes are not bounded", len(err.Error()))
			}
			return
		}
		if c.pid <= 0 || c.hold && c.deadline <= 0 {
			t.Errorf("parseWatchdogMsg(%q) = %+v: pid or deadline not positive", text, c)
		}
		back, err := parseWatchdogMsg(c.String(), fds)
		if err != nil || back != c {
			t.Errorf("%q -> %+v -> %q -> %+v, %v", text, c, c.String(), back, err)
		}
	})
}

// A message the watchdog cannot read is refused on its stderr, and it
// goes on serving: a hold after it is held, and resumed once the daemon's
// end closes.
func TestWatchdogRefusesMalformedMessage(t *testing.T) {
	be := sleeper(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	theirs := os.NewFile(uintptr(fds[1]), "watchdog")
	cmd := exec.Command(os.Args[0], WatchdogArg, "3")
	cmd.ExtraFiles = []*os.File{theirs}
	var errb strings.Builder
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	theirs.Close()
	pidfd, err := unix.PidfdOpen(be.PID, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pidfd)
	sock := fds[0]
	for _, m := range []struct {
		text string
		fds  []int
	}{
		{"hold 1 2 3s", []int{pidfd}},
		{"hold 1 2", nil},
	} {
		var oob []byte
		if m.fds != nil {
			oob = unix.UnixRights(m.fds...)
		}
		if err := unix.Sendmsg(sock, []byte(m.text), oob, nil, unix.MSG_NOSIGNAL); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.PidfdSendSignal(pidfd, unix.SIGSTOP, nil, 0); err != nil {
		t.Fatal(err)
	}
	waitState(t, be.PID, true)
	hold := watchdogCmd{hold: true, pid: be.PID, start: be.Start, deadline: monotonic() + time.Hour}.String()
	if err := unix.Sendmsg(sock, []byte(hold), unix.UnixRights(pidfd), nil, unix.MSG_NOSIGNAL); err != nil {
		t.Fatal(err)
	}
	unix.Close(sock) // the daemon is gone: what the watchdog holds is resumed
	if err := cmd.Wait(); err != nil {
		t.Errorf("watchdog: %v; stderr %q", err, errb.String())
	}
	waitState(t, be.PID, false)
	for _, want := range []string{`refused: message "hold 1 2 3s": deadline "3s": want CLOCK_MONOTONIC nanoseconds`, `refused: message "hold 1 2": want`} {
		if !strings.Contains(errb.String(), want) {
			t.Errorf("stderr %q: want %q", errb.String(), want)
		}
	}
}
