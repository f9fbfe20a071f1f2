package server

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

// CapListener caps the connections held open: at most total in all and
// perKey per peer key (key names the peer: its uid, its pod). A
// connection past either cap is closed at once, never left to wait in the
// listen backlog, where one peer's idle connections would keep every
// other peer's from being accepted. Its connections keep the socket they
// are (PeerOf reads it through SyscallConn).
type CapListener struct {
	net.Listener
	key           func(net.Conn) (string, error)
	total, perKey int
	// refused is told of each connection closed at accept (tests and
	// metrics count them); why is "total", "peer" or "unknown peer".
	refused func(key, why string)

	mu   sync.Mutex
	n    int
	open map[string]int
}

// NewCapListener caps l's connections (CapListener); refused, when set,
// is told of each one closed as accepted.
func NewCapListener(l net.Listener, total, perKey int, key func(net.Conn) (string, error), refused func(key, why string)) *CapListener {
	if refused == nil {
		refused = func(string, string) {}
	}
	return &CapListener{Listener: l, key: key, total: total, perKey: perKey, refused: refused, open: map[string]int{}}
}

// Accept returns the next connection within the caps, closing those past
// them on the way.
func (l *CapListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		key, err := l.key(c)
		if err != nil {
			c.Close()
			l.refused("", "unknown peer")
			continue
		}
		if why := l.take(key); why != "" {
			c.Close()
			l.refused(key, why)
			continue
		}
		return &capConn{Conn: c, key: key, release: func() { l.release(key) }}, nil
	}
}

// take counts a connection of key in, or says which cap it is past.
func (l *CapListener) take(key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.n >= l.total:
		return "total"
	case l.open[key] >= l.perKey:
		return "peer"
	}
	l.n++
	l.open[key]++
	return ""
}

func (l *CapListener) release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n--
	if l.open[key]--; l.open[key] <= 0 {
		delete(l.open, key)
	}
}

// Held is how many connections are open, in all and of key.
func (l *CapListener) Held(key string) (all, ofKey int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.open[key]
}

// capConn frees its place once, at its first Close.
type capConn struct {
	net.Conn
	key     string
	once    sync.Once
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// SyscallConn is the socket's, for PeerOf and samePeer.
func (c *capConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket connection")
	}
	return sc.SyscallConn()
}
