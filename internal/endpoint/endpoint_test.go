package endpoint

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestParseLocal(t *testing.T) {
	cases := []struct {
		raw  string
		addr string
		path string
		err  string
	}{
		{raw: "http://127.0.0.1:8000/metrics", addr: "127.0.0.1:8000", path: "/metrics"},
		{raw: "http://[::1]:8000/metrics?x=1", addr: "[::1]:8000", path: "/metrics?x=1"},
		{raw: "http://127.0.0.2/", addr: "127.0.0.2:80", path: "/"},
		{raw: "http://127.0.0.1:9", addr: "127.0.0.1:9", path: "/"},
		{raw: "http://0.0.0.0:8000/metrics", addr: "127.0.0.1:8000", path: "/metrics"},
		{raw: "http://[::]:8000/metrics", addr: "[::1]:8000", path: "/metrics"},
		{raw: "http://[::ffff:127.0.0.1]:8000/metrics", addr: "127.0.0.1:8000", path: "/metrics"},
		{raw: "https://127.0.0.1:8000/metrics", err: "http://"},
		{raw: "http://localhost:8000/metrics", err: "IP literal"},
		{raw: "http://10.0.0.5:8000/metrics", err: "loopback"},
		{raw: "http://169.254.169.254/latest/meta-data", err: "loopback"},
		{raw: "http://user:pw@127.0.0.1:8000/metrics", err: "user information"},
		{raw: "http://127.0.0.1:8000/metrics#x", err: "fragment"},
		{raw: "http://127.0.0.1:0/metrics", err: "port"},
		{raw: "http://127.0.0.1:99999/metrics", err: "port"},
		{raw: "http://[fe80::1%25eth0]:8000/", err: "IP literal"},
		{raw: "http://127.0.0.1:8000/" + strings.Repeat("a", MaxPathLen), err: "longer"},
		{raw: "127.0.0.1:8000", err: ""},
	}
	for _, tc := range cases {
		addr, path, err := ParseLocal(tc.raw)
		if tc.err != "" || tc.addr == "" {
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v %q %v, want an error with %q", tc.raw, addr, path, err, tc.err)
			}
			continue
		}
		if err != nil || addr != netip.MustParseAddrPort(tc.addr) || path != tc.path {
			t.Errorf("%q: %v %q %v, want %v %q", tc.raw, addr, path, err, tc.addr, tc.path)
		}
	}
}

func TestPod(t *testing.T) {
	cases := []struct {
		ip, path string
		port     uint16
		want     string
		err      bool
	}{
		{ip: "10.1.2.3", port: 8000, want: "http://10.1.2.3:8000/metrics"},
		{ip: "fd00::5", port: 8000, path: "/stats/prom", want: "http://[fd00::5]:8000/stats/prom"},
		{ip: "", port: 8000, err: true},
		{ip: "0.0.0.0", port: 8000, err: true},
		{ip: "10.1.2.3", port: 8000, path: "http://evil/", err: true},
		{ip: "10.1.2.3", port: 8000, path: "//evil/metrics", err: true},
		{ip: "10.1.2.3", port: 8000, path: "metrics", err: true},
		{ip: "pod.example", port: 8000, err: true},
	}
	for _, tc := range cases {
		addr, path, err := Pod(tc.ip, tc.port, tc.path)
		if tc.err {
			if err == nil {
				t.Errorf("%q %d %q: %v %q, want an error", tc.ip, tc.port, tc.path, addr, path)
			}
			continue
		}
		if got := (Spec{Addr: addr, Path: path}).URL(); err != nil || got != tc.want {
			t.Errorf("%q %d %q: %q %v, want %q", tc.ip, tc.port, tc.path, got, err, tc.want)
		}
	}
}

func TestPresets(t *testing.T) {
	for _, p := range Presets {
		if err := p.Check(); err != nil {
			t.Errorf("%s: %v", p.Name, err)
		}
		got, err := LookupPreset(p.Name)
		if err != nil || got.Name != p.Name {
			t.Errorf("%s: %v", p.Name, err)
		}
	}
	if _, err := LookupPreset("vLLM"); err == nil || !strings.Contains(err.Error(), "vllm, sglang, tgi, triton") {
		t.Errorf("an unknown preset: %v", err)
	}
	for name, want := range map[string]time.Duration{"vllm:e2e_request_latency_seconds": time.Second, "tgi_request_duration": time.Second,
		"nv_inference_first_response_histogram_ms": time.Millisecond, "x_us": time.Microsecond, "x_milliseconds": time.Millisecond} {
		if got := Unit(name); got != want {
			t.Errorf("Unit(%q) = %v, want %v", name, got, want)
		}
	}
	for _, m := range []Metrics{{}, {Request: Metric{[]string{"a b"}}}, {Request: Metric{[]string{"1a"}}}, {TTFT: Metric{[]string{"a"}}, ModelLabel: "a:b"}} {
		if err := m.Check(); err == nil {
			t.Errorf("%+v: checked", m)
		}
	}
}

// FuzzParseLocal: a policy's URL is from outside; whatever is accepted is
// on loopback, http, and fetches the path accepted.
func FuzzParseLocal(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:8000/metrics", "http://[::1]/", "http://0.0.0.0:1/a?b", "http://10.0.0.1/", "http://127.1/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		addr, path, err := ParseLocal(raw)
		if err != nil {
			return
		}
		if !addr.Addr().IsLoopback() || addr.Port() == 0 || !strings.HasPrefix(path, "/") || len(path) > MaxPathLen {
			t.Fatalf("%q: %v %q", raw, addr, path)
		}
		a2, p2, err := ParseLocal(Spec{Addr: addr, Path: path}.URL())
		if err != nil || a2 != addr || p2 != path {
			t.Fatalf("%q: %v %q does not round-trip: %v %q %v", raw, addr, path, a2, p2, err)
		}
	})
}
