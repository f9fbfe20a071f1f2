package daemon

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// Peer is who is on the other end of a socket connection, as the kernel
// says (SO_PEERCRED: the credentials at connect time; SO_PEERGROUPS: the
// supplementary groups then).
type Peer struct {
	PID    int      `json:"pid"`
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
}

// PeerOf reads SO_PEERCRED and SO_PEERGROUPS of a unix-socket connection
// (Groups is nil where the kernel does not give them).
func PeerOf(c net.Conn) (Peer, error) {
	var p Peer
	err := control(c, func(fd int) error {
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil {
			return err
		}
		p = Peer{PID: int(cred.Pid), UID: cred.Uid, GID: cred.Gid}
		p.Groups, _ = peerGroups(fd)
		return nil
	})
	return p, err
}

// control runs f on c's socket.
func control(c net.Conn, f func(fd int) error) error {
	uc, ok := c.(syscall.Conn) // a *net.UnixConn, or a limitedConn holding one
	if !ok {
		return errors.New("not a unix socket connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := raw.Control(func(fd uintptr) { ferr = f(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// ErrPeerGone: the process that connected has exited. The connection
// still names its pid, which may be another process's by now.
var ErrPeerGone = errors.New("the process that connected is gone")

// samePeer says whether pid, read from SO_PEERCRED, still names the
// process that connected c, given the start time (USER_HZ ticks since
// boot, /proc/PID/stat) of the process that has that pid now, read
// before the call, and the time the daemon accepted c in the same unit.
// A connection keeps its peer's pid after the peer exits, and a process
// that connected, forked and exited leaves a child that speaks with the
// pid of whoever gets the number next.
//   - Where the kernel gives a pidfd of the peer (SO_PEERPIDFD, Linux
//     6.5): the peer still lives, so pid has named it all along.
//   - Elsewhere: a process that started after c was accepted is not the
//     peer (a reuse between the peer's connect and the accept is not
//     caught).
func samePeer(c net.Conn, accepted, start uint64) error {
	err := control(c, func(fd int) error {
		pidfd, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PEERPIDFD)
		if errors.Is(err, unix.ESRCH) || errors.Is(err, unix.EINVAL) {
			// The peer has no task left to make a pidfd of (EINVAL
			// before Linux 6.9, ESRCH since).
			return fmt.Errorf("%w (%v)", ErrPeerGone, err)
		}
		if err != nil {
			return err
		}
		defer unix.Close(pidfd)
		if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
			return fmt.Errorf("%w (%v)", ErrPeerGone, err)
		}
		return nil
	})
	if err == nil || errors.Is(err, ErrPeerGone) {
		return err
	}
	// No pidfd of the peer here (ENOPROTOOPT before Linux 6.5).
	if start > accepted {
		return fmt.Errorf("%w (its pid names a process that started after the connection)", ErrPeerGone)
	}
	return nil
}

// limitListener accepts at most n connections open at once; past that,
// new ones wait in the listen backlog. Its connections keep the
// *net.UnixConn they are (PeerOf reads the socket), unlike x/net's
// netutil.LimitListener, which hides it behind net.Conn.
func limitListener(l net.Listener, n int) net.Listener {
	return &limited{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limited struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limited) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		<-l.slots // not a unix socket (never, on the daemon's): not counted
		return c, nil
	}
	return &limitedConn{UnixConn: uc, release: func() { <-l.slots }}, nil
}

func (l *limited) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitedConn frees its slot once, at its first Close.
type limitedConn struct {
	*net.UnixConn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.UnixConn.Close()
	c.once.Do(c.release)
	return err
}
