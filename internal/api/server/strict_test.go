package server

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestDecodeJSONStrict (issue 40, finding 9): a body means one thing:
// a key given twice, a field named in another case, or an unknown field
// is refused, at any depth.
func TestDecodeJSONStrict(t *testing.T) {
	for _, tc := range []struct {
		body  string
		class bool // a class request, else a stats push
		ok    bool
	}{
		{`{"class":"be"}`, true, true},
		{`{"pid":0,"class":"be"}`, true, true},
		{`{"class":"lc","class":"be"}`, true, false},
		{`{"CLASS":"lc"}`, true, false},
		{`{"Class":"lc"}`, true, false},
		{`{"class":"be","PID":0}`, true, false},
		{`{"class":"be","x":1}`, true, false},
		{`{"requests":1,"request_latency_us":{"p50":1}}`, false, true},
		{`{"requests":1,"requests":2}`, false, false},
		{`{"Requests":1}`, false, false},
		{`{"request_latency_us":{"p50":1,"p50":2}}`, false, false},
		{`{"window":{"duration_ms":1000,"Duration_ms":5}}`, false, false},
		{`{"window":{"duration_ms":1000,"duration_ms":5}}`, false, false},
		{`{"engine":{"prepreempt":true,"PREPREEMPT":false}}`, false, false},
		{`{"pid":0,"requests":1,"engine":{"prepreempt":true}}`, false, true},
		{`{"window":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 41), false, false},
	} {
		var err error
		if tc.class {
			_, _, _, err = ParseClassRequest([]byte(tc.body))
		} else {
			_, _, err = ParseStats([]byte(tc.body))
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.body, err, tc.ok)
		}
	}
}

// selfDecoding decodes its JSON itself: its Go fields do not name its keys.
type selfDecoding struct{ X int }

func (s *selfDecoding) UnmarshalJSON([]byte) error { return nil }

// TestCheckStrictTypes: the strict walk follows the target's types: a
// map's keys are free but each once; a type that decodes itself keeps its
// keys, each once; an embedded struct's fields are the outer one's.
func TestCheckStrictTypes(t *testing.T) {
	type inner struct {
		A int `json:"a"`
	}
	type target struct {
		inner
		M map[string]int `json:"m"`
		S *selfDecoding  `json:"s"`
		L []inner        `json:"l"`
		B int            `json:"b,omitempty"`
	}
	for _, tc := range []struct {
		body string
		ok   bool
	}{
		{`{"a":1,"b":2,"m":{"x":1,"X":2},"s":{"Any":1},"l":[{"a":1},{"a":2}]}`, true},
		{`{"A":1}`, false},
		{`{"m":{"x":1,"x":2}}`, false},
		{`{"s":{"k":1,"k":2}}`, false},
		{`{"l":[{"a":1,"a":2}]}`, false},
		{`{"l":[{"A":1}]}`, false},
		{`{"inner":{"a":1}}`, false},
	} {
		var v target
		_, err := DecodeJSON([]byte(tc.body), &v)
		if (err == nil) != tc.ok {
			t.Errorf("%s: %v, want ok %v", tc.body, err, tc.ok)
		}
	}
}

// TestInflightQueuesPerPeer: a peer's requests past its share wait for
// its own to end, never for another peer's, and are served when one does.
func TestInflightQueuesPerPeer(t *testing.T) {
	var f inflight
	ctx := context.Background()
	for range MaxInFlightPerPeer {
		if !f.take(ctx, "a", 0) {
			t.Fatal("a's share refused")
		}
	}
	if f.take(ctx, "a", 0) {
		t.Fatal("a served past its share")
	}
	queued := make(chan bool, 1)
	go func() { queued <- f.take(ctx, "a", time.Hour) }()
	for range MaxInFlightPerPeer {
		if !f.take(ctx, "b", 0) { // no wait: b's places are free
			t.Fatal("b refused while a's requests fill a's share")
		}
	}
	f.done("a")
	if !<-queued {
		t.Fatal("a's queued request not served when one of a's ended")
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if f.take(canceled, "a", time.Hour) {
		t.Fatal("a request whose client left was served")
	}
	for _, p := range []string{"a", "a", "b", "b"} {
		f.done(p)
	}
	if f.n != 0 || len(f.peers) != 0 {
		t.Errorf("after all ended: %d in flight, %d peers kept", f.n, len(f.peers))
	}
}
