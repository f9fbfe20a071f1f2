package pytorch

import (
	"bufio"
	"context"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/endpoint"
	"github.com/gpreempt/gpreempt/internal/scrape"
)

// vLLM's bucket boundaries, as its server exports them (vllm/v1/metrics).
var vllmBounds = map[string][]float64{
	"vllm:e2e_request_latency_seconds": {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0},
	"vllm:time_to_first_token_seconds": {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0},
	"vllm:inter_token_latency_seconds": {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0},
}

// exporter runs lc_decode.py's VLLMMetrics (no torch needed) in python3:
// it serves on a port the kernel picks, observes what the test writes on
// its stdin (latency, ttft, then the token intervals, in ns, a line a
// request), and prints "ok" after each.
const exporter = `
import sys
sys.path.insert(0, sys.argv[1])
import lc_decode
m = lc_decode.VLLMMetrics('gpt2 "x"')
print(m.serve(0), flush=True)
for line in sys.stdin:
    v = [int(x) for x in line.split()]
    m.observe(v[0], v[1], v[2:])
    print("ok", flush=True)
`

// TestVLLMMetrics: the LLM LC's exporter serves what gpreemptd's vllm
// preset scrapes, with vLLM's names and buckets, in the text format a
// Prometheus parser reads.
func TestVLLMMetrics(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not found: the exporter is Python")
	}
	dir := t.TempDir()
	for _, n := range []string{"lc_decode.py", "lc_infer.py"} {
		b, err := FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(py, "-c", exporter, dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Wait()
	})
	out := bufio.NewScanner(stdout)
	line := func() string {
		t.Helper()
		if !out.Scan() {
			t.Fatalf("the exporter ended: %v", out.Err())
		}
		return out.Text()
	}
	port, err := strconv.Atoi(line())
	if err != nil || port <= 0 || port > 65535 {
		t.Fatalf("port %d: %v", port, err)
	}
	p, _ := endpoint.LookupPreset("vllm")
	spec := endpoint.Spec{Addr: netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), uint16(port)), Path: "/metrics",
		Preset: "vllm", Metrics: p.Metrics, Model: `gpt2 "x"`}
	// A request of 700 ms, 30 ms to its first token, then 15 tokens 20 ms
	// apart; and one of 1.2 s.
	reqs := [][]int64{{700e6, 30e6}, {1200e6, 90e6}}
	for range 15 {
		reqs[0] = append(reqs[0], 20e6)
		reqs[1] = append(reqs[1], 60e6)
	}
	for _, r := range reqs {
		var f []string
		for _, v := range r {
			f = append(f, strconv.FormatInt(v, 10))
		}
		io.WriteString(stdin, strings.Join(f, " ")+"\n")
		if l := line(); l != "ok" {
			t.Fatalf("the exporter said %q", l)
		}
	}
	body, om, err := (scrape.Fetcher{Timeout: time.Minute}).Fetch(context.Background(), spec)
	if err != nil || om {
		t.Fatalf("fetch: %v (OpenMetrics %v)", err, om)
	}
	hs, err := scrape.Decode(body, false, spec.Metrics, spec.Model)
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	want := map[string]struct {
		name  string
		count float64
	}{"": {"vllm:e2e_request_latency_seconds", 2}, "ttft": {"vllm:time_to_first_token_seconds", 2}, "tpot": {"vllm:inter_token_latency_seconds", 30}}
	for key, w := range want {
		h := hs[key]
		if h.Name != w.name || h.Count() != w.count || !slices.Equal(h.Bounds[:len(h.Bounds)-1], vllmBounds[w.name]) {
			t.Errorf("%q: %+v, want %s with %v values and vLLM's buckets", key, h, w.name, w.count)
		}
	}
	// Where the values fall: 0.7 s in (0.5, 0.8], 1.2 s in (1.0, 1.5].
	if e := hs[""]; e.Counts[1] != 0 || e.Counts[2] != 1 || e.Counts[4] != 2 {
		t.Errorf("e2e buckets %v", e.Counts)
	}
	// The app's own histogram, buckets 5% apart: the same requests, each in a bucket no wider
	// than 5% of its bottom (what a relative objective of 1.05x or more needs).
	fine := endpoint.Metrics{Request: endpoint.Metric{Names: []string{"app_request_latency_seconds"}}, ModelLabel: "model_name"}
	fh, err := scrape.Decode(body, false, fine, spec.Model)
	if err != nil {
		t.Fatal(err)
	}
	f := fh[""]
	if f.Count() != 2 || len(f.Bounds) != 227 || f.Bounds[0] != 0.001 {
		t.Fatalf("app_request_latency_seconds: %v values, %d bounds from %v", f.Count(), len(f.Bounds), f.Bounds[0])
	}
	for i := 1; i < len(f.Bounds)-1; i++ {
		if r := f.Bounds[i] / f.Bounds[i-1]; r < 1.049 || r > 1.051 {
			t.Fatalf("bucket %d: (%v, %v], %.4fx", i, f.Bounds[i-1], f.Bounds[i], r)
		}
	}
	if p50 := f.Quantile(0.25); p50 < 0.7/1.05 || p50 > 0.7*1.05 {
		t.Errorf("the 700 ms request read %v s, more than a bucket away", p50)
	}
	// Another model's series: none.
	if other, err := scrape.Decode(body, false, spec.Metrics, "llama"); err != nil || len(other) != 0 {
		t.Errorf("another model: %v %v", other, err)
	}
}
