package server

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// peerGroups reads SO_PEERGROUPS of socket fd: the connecting process's
// supplementary groups at connect time (Linux 4.13). x/sys has no typed
// getter for a gid_t array.
func peerGroups(fd int) ([]uint32, error) {
	buf := make([]uint32, 64)
	for {
		n := uint32(len(buf) * 4)
		_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_PEERGROUPS,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		switch {
		case e == unix.ERANGE && int(n/4) > len(buf) && n/4 <= 1<<16:
			buf = make([]uint32, n/4) // n is what it needs
		case e != 0:
			return nil, e
		default:
			return buf[:n/4], nil
		}
	}
}
