// Package procfs reads the /proc files gpreemptd's parts share: a
// process's state letter, its credentials, its cgroup and its
// environment (a process's start time is tsg.StartTime), and the clock
// start times count in (BootTicks). Callers read the files and hand the
// bytes in.
package procfs

import (
	"bytes"
	"errors"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// StatState is the state letter of /proc/PID/stat (R, S, T, ...): the
// field after the command, which may itself hold ')'.
func StatState(stat []byte) (byte, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return 0, false
	}
	return stat[i+2], true
}

// StatusIDs reads the effective uid and the supplementary groups (with
// the effective gid) from /proc/PID/status.
func StatusIDs(status []byte) (euid uint32, gids []uint32, err error) {
	found := false
	for _, line := range strings.Split(string(status), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		switch k {
		case "Uid":
			if len(f) >= 2 {
				u, err := strconv.ParseUint(f[1], 10, 32)
				if err == nil {
					euid, found = uint32(u), true
				}
			}
		case "Gid":
			if len(f) >= 2 {
				if g, err := strconv.ParseUint(f[1], 10, 32); err == nil {
					gids = append(gids, uint32(g))
				}
			}
		case "Groups":
			for _, s := range f {
				if g, err := strconv.ParseUint(s, 10, 32); err == nil {
					gids = append(gids, uint32(g))
				}
			}
		}
	}
	if !found {
		return 0, gids, errors.New("status: no Uid line")
	}
	return euid, gids, nil
}

// CgroupPath is the cgroup v2 path from /proc/PID/cgroup ("0::/path"),
// else the first hierarchy's.
func CgroupPath(b []byte) string {
	first := ""
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			return parts[2]
		}
		if first == "" {
			first = parts[2]
		}
	}
	return first
}

// Environ splits /proc/PID/environ.
func Environ(b []byte) map[string]string {
	env := map[string]string{}
	for _, kv := range bytes.Split(b, []byte{0}) {
		k, v, ok := strings.Cut(string(kv), "=")
		if ok && k != "" {
			env[k] = v
		}
	}
	return env
}

// BootTicks is now in /proc/PID/stat's start-time unit: USER_HZ (100 on
// every Linux ABI) ticks of CLOCK_BOOTTIME.
func BootTicks() uint64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return 0
	}
	return uint64(ts.Nano()) / uint64(time.Second/100)
}
