package main

import (
	"bytes"
	"strings"
	"testing"
)

// Events as go test -json writes them (go1.26), trimmed to the fields read.
const (
	passing = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"    a_test.go:9: noise\n"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Output":"PASS\n"}
{"Action":"output","Package":"example.com/a","Output":"ok  \texample.com/a\t0.01s\n"}
{"Action":"pass","Package":"example.com/a"}
`
	skipped = `{"Action":"run","Package":"example.com/tsg","Test":"TestGPUDiscover"}
{"Action":"output","Package":"example.com/tsg","Test":"TestGPUDiscover","Output":"=== RUN   TestGPUDiscover\n"}
{"Action":"output","Package":"example.com/tsg","Test":"TestGPUDiscover","Output":"    gpu_test.go:25: no NVIDIA driver here (open /dev/nvidiactl: no such file or directory)\n"}
{"Action":"output","Package":"example.com/tsg","Test":"TestGPUDiscover","Output":"--- SKIP: TestGPUDiscover (0.00s)\n"}
{"Action":"skip","Package":"example.com/tsg","Test":"TestGPUDiscover"}
{"Action":"run","Package":"example.com/tsg","Test":"TestBare"}
{"Action":"output","Package":"example.com/tsg","Test":"TestBare","Output":"--- SKIP: TestBare (0.00s)\n"}
{"Action":"skip","Package":"example.com/tsg","Test":"TestBare"}
{"Action":"output","Package":"example.com/tsg","Output":"ok  \texample.com/tsg\t0.02s\n"}
{"Action":"pass","Package":"example.com/tsg"}
`
	failing = `{"Action":"run","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"    b_test.go:7: got 1, want 2\n"}
{"Action":"output","Package":"example.com/b","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBad"}
{"Action":"output","Package":"example.com/b","Output":"FAIL\n"}
{"Action":"output","Package":"example.com/b","Output":"FAIL\texample.com/b\t0.01s\n"}
{"Action":"fail","Package":"example.com/b"}
`
	buildFailed = `{"ImportPath":"example.com/c","Action":"build-output","Output":"# example.com/c\n"}
{"ImportPath":"example.com/c","Action":"build-output","Output":"c.go:3:1: syntax error\n"}
{"ImportPath":"example.com/c","Action":"build-fail"}
{"Action":"output","Package":"example.com/c","Output":"FAIL\texample.com/c [build failed]\n"}
{"Action":"fail","Package":"example.com/c"}
`
)

func TestReport(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		failed bool
		out    string
	}{
		{"pass", passing, false, "ok  \texample.com/a\t0.01s\n"},
		{"skips with reasons", passing + skipped, false, "ok  \texample.com/a\t0.01s\n" +
			"ok  \texample.com/tsg\t0.02s\n" +
			"\n2 tests skipped:\n" +
			"SKIP example.com/tsg TestBare: (no reason given)\n" +
			"SKIP example.com/tsg TestGPUDiscover: no NVIDIA driver here (open /dev/nvidiactl: no such file or directory)\n"},
		{"failure shown", failing, true, "    b_test.go:7: got 1, want 2\n--- FAIL: TestBad (0.00s)\nFAIL\texample.com/b\t0.01s\n"},
		{"build failure", buildFailed, true, "# example.com/c\nc.go:3:1: syntax error\nFAIL\texample.com/c [build failed]\n"},
		{"no test files", `{"Action":"start","Package":"example.com/e"}
{"Action":"output","Package":"example.com/e","Output":"?   \texample.com/e\t[no test files]\n"}
{"Action":"skip","Package":"example.com/e"}
`, false, "?   \texample.com/e\t[no test files]\n"},
		{"not an event", "go: downloading example.com/d v1.0.0\n", false, "go: downloading example.com/d v1.0.0\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newReport()
			var out bytes.Buffer
			if err := r.read(strings.NewReader(tt.in), &out); err != nil {
				t.Fatal(err)
			}
			r.writeSkips(&out)
			if r.failed != tt.failed || out.String() != tt.out {
				t.Errorf("failed %v, output:\n%q\nwant failed %v, output:\n%q", r.failed, out.String(), tt.failed, tt.out)
			}
		})
	}
}
