package server

import (
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/slomode"
)

func FuzzDecoders(f *testing.F) {
	f.Add([]byte(`{"pid":3,"class":"lc"}`))
	f.Add([]byte(`{"requests":1,"spinner_hold_us":{"max":1}}`))
	f.Add([]byte(`{"window":{"duration_ms":1000,"requests":30,"latency_us":{"p50":36,"p99":70}}}`))
	f.Add([]byte(`{"window":{"duration_ms":1000,"requests":30,"latency_us":{"p50":400000,"tpot_p50":9000,"ttft_p99":90000}}}`))
	f.Add([]byte(`{"window":{"duration_ms":1000,"requests":2,"tokens":30,"latency_us":{"p50":400000,"tpot_p50":9000}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, sp, _, err := ParseClassRequest(b); err == nil && (req.PID < 0 || sp.Name.Rank() < 0) {
			t.Fatalf("accepted %+v %+v", req, sp)
		}
		if s, _, err := ParseStats(b); err == nil {
			if s.PID < 0 {
				t.Fatalf("accepted %+v", s)
			}
			if w := s.Window; w != nil {
				if _, tpot := w.LatencyUs["tpot_p50"]; !(w.DurationMs > 0 && w.DurationMs <= 600e3) || (w.Requests > 0 && len(w.LatencyUs) == 0) || w.Tokens > 0 && !tpot {
					t.Fatalf("accepted window %+v", *w)
				}
				for q, v := range w.LatencyUs {
					if !windowQuantiles[q] || !(v >= 0 && v <= 1e12) {
						t.Fatalf("accepted window quantile %q = %v", q, v)
					}
				}
				for m, vs := range w.SamplesUs {
					if m != "request" && m != "ttft" && m != "tpot" || len(vs) > api.MaxWindowSamples ||
						slices.ContainsFunc(vs, func(v float64) bool { return !(v > 0 && v <= 1e12) }) {
						t.Fatalf("accepted window samples %q = %v", m, vs)
					}
				}
				slomode.New(nil, func() time.Duration { return 0 }, nil, nil).Push(1, api.Stats{Window: w})
			}
		}
	})
}

// TestBodyIsOneObject: a request body is one JSON object; null (which
// decodes into nothing), a list or a scalar is refused with 400.
func TestBodyIsOneObject(t *testing.T) {
	for _, b := range []string{"null", " null ", "[]", "1", `"x"`, "", "  "} {
		if _, code, err := ParseStats([]byte(b)); err == nil || code != http.StatusBadRequest {
			t.Errorf("stats %q: %d %v, want 400", b, code, err)
		}
		if _, _, code, err := ParseClassRequest([]byte(b)); err == nil || code != http.StatusBadRequest {
			t.Errorf("class %q: %d %v, want 400", b, code, err)
		}
	}
	if _, _, err := ParseStats([]byte(" {} ")); err != nil {
		t.Errorf("stats {}: %v", err)
	}
}

// TestPeerOfGivesTheGroups: the peer's groups come from the kernel at
// connect (SO_PEERGROUPS), as the admin check of a reload takes them.
func TestPeerOfGivesTheGroups(t *testing.T) {
	s := proctest.SelfPeer(t)
	p, err := PeerOf(s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.Getgroups()
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for _, g := range p.Groups {
		got = append(got, int(g))
	}
	slices.Sort(got)
	slices.Sort(want)
	if p.PID != os.Getpid() || int(p.UID) != os.Geteuid() || !slices.Equal(got, want) {
		t.Errorf("PeerOf = %+v, want pid %d uid %d groups %v", p, os.Getpid(), os.Geteuid(), want)
	}
}

// TestCapListener: a connection past the total cap or its peer's is
// closed as accepted, never left in the backlog; closing one (twice counts
// once) frees its place; the connections are still unix sockets to
// PeerOf.
func TestCapListener(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "l.sock")
	inner, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var refused []string
	refusals := func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(refused) }
	byName := func(c net.Conn) (string, error) { return filepath.Base(c.RemoteAddr().String())[:1], nil }
	l := NewCapListener(inner, 3, 2, byName, func(key, why string) {
		mu.Lock()
		defer mu.Unlock()
		refused = append(refused, key+" "+why)
	})
	defer l.Close()
	dir := t.TempDir()
	n := 0
	dial := func(peer rune) {
		t.Helper()
		n++
		c, err := net.DialUnix("unix", &net.UnixAddr{Name: filepath.Join(dir, string(peer)+strconv.Itoa(n)), Net: "unix"}, &net.UnixAddr{Name: sock, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
	}
	var held []net.Conn
	for _, tc := range []struct {
		refusedFirst string // peers connecting first, refused
		close        int    // then this held connection is closed (-1: none)
		peer         string // the peer then accepted
		wantRefused  []string
	}{
		{"", -1, "a", nil},
		{"", -1, "a", nil},
		{"a", -1, "b", []string{"a peer"}},             // a's third: past its cap
		{"bc", 0, "c", []string{"b total", "c total"}}, // past the total of 3, until one is closed
	} {
		mu.Lock()
		refused = nil
		mu.Unlock()
		for _, p := range tc.refusedFirst {
			dial(p)
		}
		accepted := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				t.Error(err)
			}
			accepted <- c
		}()
		proctest.WaitFor(t, "the refusals", func() bool { return len(refusals()) == len(tc.refusedFirst) })
		if tc.close >= 0 {
			held[tc.close].Close()
			held[tc.close].Close() // twice: one place freed
		}
		dial(rune(tc.peer[0]))
		c := <-accepted
		held = append(held, c)
		if got := c.(*capConn).key; got != tc.peer {
			t.Errorf("accepted %s's connection, want %s's", got, tc.peer)
		}
		if got := refusals(); !slices.Equal(got, tc.wantRefused) {
			t.Errorf("before %s's: refused %q, want %q", tc.peer, got, tc.wantRefused)
		}
	}
	if all, ofA := l.Held("a"); all != 3 || ofA != 1 {
		t.Errorf("held %d in all, %d of a; want 3 and 1", all, ofA)
	}
	if p, err := PeerOf(held[1]); err != nil || p.PID != os.Getpid() {
		t.Errorf("PeerOf through the cap: %+v, %v", p, err)
	}
}

// TestChangeLimiterBound: the buckets kept stay bounded: past maxBuckets
// the full ones are dropped, and an asker that still owes changes is kept.
func TestChangeLimiterBound(t *testing.T) {
	var l changeLimiter
	t0 := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	for range 3 {
		if err := l.admit("busy", t0, 0.1, 3); err != nil {
			t.Fatal(err)
		}
	}
	var tooMany *ErrTooMany
	if err := l.admit("busy", t0, 0.1, 3); !errors.As(err, &tooMany) || tooMany.Retry.Round(time.Millisecond) != 10*time.Second {
		t.Fatalf("fourth at once: %v, want ErrTooMany in 10s", err)
	}
	for i := range maxBuckets {
		if err := l.admit(strconv.Itoa(i), t0, 1, 3); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(l.buckets); n != maxBuckets+1 {
		t.Fatalf("%d buckets, want %d (none full yet)", n, maxBuckets+1)
	}
	// Five seconds on the others are full again; busy owes half a change.
	t5 := t0.Add(5 * time.Second)
	if err := l.admit("new", t5, 1, 3); err != nil {
		t.Fatal(err)
	}
	if _, kept := l.buckets["busy"]; !kept || len(l.buckets) != 2 {
		t.Errorf("after pruning: %d buckets, busy kept %v; want busy and new", len(l.buckets), kept)
	}
	if err := l.admit("busy", t5, 0.1, 3); !errors.As(err, &tooMany) || tooMany.Retry.Round(time.Millisecond) != 5*time.Second {
		t.Errorf("busy five seconds on: %v, want still limited, for 5s", err)
	}
	// A reload that raises the rate to 1/s at t5 + 0.6 s: the bucket holds
	// 0.56 changes by then, and fills at the new rate from there.
	if err := l.admit("busy", t5.Add(600*time.Millisecond), 1, 3); !errors.As(err, &tooMany) || tooMany.Retry.Round(time.Millisecond) != 440*time.Millisecond {
		t.Errorf("the rate gone to 1/s: %v, want limited for 440ms", err)
	}
	if err := l.admit("busy", t5.Add(1040*time.Millisecond), 1, 3); err != nil {
		t.Errorf("440 ms later: %v", err)
	}
}

// TestWindowSamples: a window's own values are taken per metric within
// bounds, and refused with 400 naming what was wrong past them.
func TestWindowSamples(t *testing.T) {
	many := strings.TrimSuffix(strings.Repeat("1,", api.MaxWindowSamples+1), ",")
	for _, tc := range []struct {
		name, samples string
		want          string // "": accepted
	}{
		{"request and tpot", `{"request":[700000,710000],"tpot":[9000,11000]}`, ""},
		{"unknown metric", `{"queue":[1]}`, `metric "queue"`},
		{"zero", `{"request":[0]}`, "out of range"},
		{"negative", `{"ttft":[-5]}`, "out of range"},
		{"too many", `{"request":[` + many + `]}`, "at most"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := `{"window":{"duration_ms":1000,"requests":2,"latency_us":{"p50":700000},"samples_us":` + tc.samples + `}}`
			_, code, err := ParseStats([]byte(b))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || code != http.StatusBadRequest || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%d %v, want 400 naming %q", code, err, tc.want)
			}
		})
	}
}
