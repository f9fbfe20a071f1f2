package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/procfs"
	"github.com/gpreempt/gpreempt/tsg"
)

// DefaultPeerQueueWait is how long a request waits for a place among
// its peer's requests in flight.
const DefaultPeerQueueWait = 2 * time.Second

// inflight counts the requests being served, in all and per peer; a
// peer's requests past its share wait for its own to end, never for
// another peer's.
type inflight struct {
	mu    sync.Mutex
	n     int
	peers map[string]*peerSlots
}

type peerSlots struct {
	slots chan struct{}
	users int // requests holding or waiting for a slot
}

// take admits one more request of peer, waiting at most wait for a place
// among the peer's; false: none came, or the daemon is full.
func (f *inflight) take(ctx context.Context, peer string, wait time.Duration) bool {
	f.mu.Lock()
	if f.peers == nil {
		f.peers = map[string]*peerSlots{}
	}
	p := f.peers[peer]
	if p == nil {
		p = &peerSlots{slots: make(chan struct{}, MaxInFlightPerPeer)}
		f.peers[peer] = p
	}
	p.users++
	f.mu.Unlock()
	got := false
	select {
	case p.slots <- struct{}{}:
		got = true
	default:
		t := time.NewTimer(wait)
		select {
		case p.slots <- struct{}{}:
			got = true
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if got && f.n < MaxInFlight {
		f.n++
		return true
	}
	if got {
		<-p.slots
	}
	f.leave(peer, p)
	return false
}

func (f *inflight) done(peer string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n--
	p := f.peers[peer]
	<-p.slots
	f.leave(peer, p)
}

// leave drops a request's hold on its peer's slots (f.mu held).
func (f *inflight) leave(peer string, p *peerSlots) {
	if p.users--; p.users == 0 {
		delete(f.peers, peer)
	}
}

// Listener wraps the API's unix listener with the connection caps
// (MaxConns, MaxConnsPerPeer, by PeerKey).
func (a *API) Listener(l net.Listener) net.Listener {
	key := a.PeerKey
	if key == nil {
		key = uidKey
	}
	return NewCapListener(l, MaxConns, MaxConnsPerPeer, key, func(key, why string) {
		if a.Metrics != nil {
			a.Metrics.RefusedConn("socket", why)
		}
		if a.Log != nil {
			a.Log.Debug("connection refused", "peer", key, "cap", why)
		}
	})
}

// uidKey counts a connection against its uid.
func uidKey(c net.Conn) (string, error) {
	p, err := PeerOf(c)
	if err != nil {
		return "", err
	}
	return "uid " + strconv.FormatUint(uint64(p.UID), 10), nil
}

// peerKeyOf is the key the request's connection was counted under (""
// for a request served without one, as tests' are).
func peerKeyOf(r *http.Request) string {
	if c, ok := r.Context().Value(connKey{}).(*capConn); ok {
		return c.key
	}
	return ""
}

type connKey struct{}

// Server returns an http.Server for the API with its time and size
// bounds; serve it on a unix listener.
func (a *API) Server() *http.Server {
	return &http.Server{
		Handler:           a.Handler(),
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       30 * time.Second,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(a.Log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(context.WithValue(ctx, connKey{}, c), acceptedKey{}, procfs.BootTicks())
		},
	}
}

// acceptedKey holds when the connection was accepted, in procfs.BootTicks.
type acceptedKey struct{}

// samePeer says whether the peer's pid still names the process that
// connected, the process now holding it having started at start (see
// samePeer). A request served without a socket (tests') has nothing to
// check.
func (a *API) samePeer(r *http.Request, start uint64) error {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	accepted, ok2 := r.Context().Value(acceptedKey{}).(uint64)
	if !ok || !ok2 {
		return nil
	}
	return samePeer(c, accepted, start)
}

// peerProcess reads the peer's process as /proc has it now and its start
// time, answering 404 when it is gone, and refuses (refuse answers) one
// that is not the process that connected; ok false: answered.
func (a *API) peerProcess(w http.ResponseWriter, r *http.Request, peer Peer, refuse func(why string)) (policy.Process, uint64, bool) {
	info, start, err := a.Inspect.Process(peer.PID)
	if err != nil {
		writeErr(w, http.StatusNotFound, "pid %d: %v", peer.PID, err)
		return info, 0, false
	}
	if err := a.samePeer(r, start); err != nil {
		refuse(fmt.Sprintf("pid %d: %v", peer.PID, err))
		return info, 0, false
	}
	return info, start, true
}

// ErrPeerChanged: the peer's credentials are not those it connected with
// (a root client that dropped to another uid, a process that changed its
// groups). A connection's rights are those of its peer as it is now: it
// must reconnect.
var ErrPeerChanged = errors.New("the peer's credentials changed since it connected")

// currentPeer re-checks a connection's rights at each request: SO_PEERCRED
// is what the peer was at connect, so its pid must still name the process
// that connected (samePeer) and that process must hold the same
// credentials now (effective uid and gid, supplementary groups). The
// credentials are read before the pid is checked to still be the peer's,
// so that they are the peer's own. A connection handed to another process
// (SCM_RIGHTS, an inherited fd) acts for its opener while the opener
// lives unchanged: what the opener gave away, it could have done itself.
func (a *API) currentPeer(r *http.Request, peer Peer) error {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	accepted, ok2 := r.Context().Value(acceptedKey{}).(uint64)
	if !ok || !ok2 {
		return nil // served without a socket (tests'): nothing to check
	}
	creds := a.Creds
	if creds == nil {
		creds = procCreds
	}
	uid, gids, err := creds(peer.PID)
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrPeerGone, err)
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(peer.PID) + "/stat")
	if err != nil {
		return fmt.Errorf("%w (%v)", ErrPeerGone, err)
	}
	start, err := tsg.StartTime(stat)
	if err != nil {
		return err
	}
	if err := samePeer(c, accepted, start); err != nil {
		return err
	}
	switch {
	case uid != peer.UID:
		return fmt.Errorf("%w: uid %d then, %d now", ErrPeerChanged, peer.UID, uid)
	case len(gids) == 0 || gids[0] != peer.GID:
		return fmt.Errorf("%w: gid %d then, %v now", ErrPeerChanged, peer.GID, gids)
	case peer.Groups != nil && !sameGroups(peer.Groups, gids[1:]):
		return fmt.Errorf("%w: groups %v then, %v now", ErrPeerChanged, peer.Groups, gids[1:])
	}
	return nil
}

// procCreds reads a process's effective uid, effective gid and
// supplementary groups from /proc/PID/status.
func procCreds(pid int) (uint32, []uint32, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, nil, err
	}
	return procfs.StatusIDs(b)
}

func sameGroups(a, b []uint32) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(slices.Compact(a), slices.Compact(b))
}

func (a *API) peer(r *http.Request) (Peer, error) {
	if a.PeerOf != nil {
		return a.PeerOf(r)
	}
	return RequestPeer(r)
}

// RequestPeer is the peer of a request the API's Server accepted, as the
// kernel gives it (PeerOf its connection): who asks, where API.PeerOf is
// not set.
func RequestPeer(r *http.Request) (Peer, error) {
	c, ok := r.Context().Value(connKey{}).(net.Conn)
	if !ok {
		return Peer{}, errors.New("no connection")
	}
	return PeerOf(c)
}
