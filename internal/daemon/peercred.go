package daemon

import (
	"errors"
	"net"

	"golang.org/x/sys/unix"
)

// Peer is who is on the other end of a socket connection, as the kernel
// says (SO_PEERCRED: the credentials at connect time).
type Peer struct {
	PID int    `json:"pid"`
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

// PeerOf reads SO_PEERCRED of a unix-socket connection.
func PeerOf(c net.Conn) (Peer, error) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return Peer{}, err
	}
	if cerr != nil {
		return Peer{}, cerr
	}
	return Peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}, nil
}
