package daemon

import (
	"net/http"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/api/server"
	"github.com/gpreempt/gpreempt/internal/reconcile"
	"github.com/gpreempt/gpreempt/internal/reconcile/reconciletest"
	"github.com/gpreempt/gpreempt/tsg"
)

// TestRequestCostIndependentOfCallersFiles: where NVML does not answer, a
// process's GPUs are read from the device files among its descriptors. A
// caller holding thousands of open files made each of its requests a scan
// of them all, twice, once under the reconciler's lock (19,900 files: 200
// requests took 91 s of CPU). The scan is now cached by process identity
// (pid and start time) and bounded: a peer's many requests, granted, held
// or refused by the change limit, cost one walk, of at most
// tsg.FDWalkBatch descriptors. Walks are counted, not timed.
func TestRequestCostIndependentOfCallersFiles(t *testing.T) {
	tests := []struct {
		name  string
		files int
	}{
		{"few files", 0},
		{"thousands of files", 5000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range tt.files {
				f, err := os.Open(os.DevNull)
				if err != nil {
					t.Skipf("opening %d files: %v", tt.files, err)
				}
				t.Cleanup(func() { f.Close() })
			}
			frozen := time.Unix(1e9, 0)
			var scans, examined atomic.Int64
			pi := &reconcile.ProcInspector{FDs: &tsg.FDCache{Now: func() time.Time { return frozen }}}
			pi.FDs.OnWalk = func(pid, _, n int) {
				if pid == os.Getpid() {
					scans.Add(1)
					for e := examined.Load(); int64(n) > e && !examined.CompareAndSwap(e, int64(n)); e = examined.Load() {
					}
				}
			}
			g := newRigInspecting(t, reconciletest.Policy, func(reconciletest.Procs) reconcile.Inspector { return pi })
			a := newAPIRigOn(t, g, func(api *server.API, _ *http.Server) { api.Inspect = pi })
			me := a.asServer(1000)
			pid := strconv.Itoa(me)
			codes := map[int]int{}
			for i := range 200 {
				cls := "be"
				if i%2 == 1 && i > 100 {
					cls = "lc" // changes, until the change limit answers 429
				}
				code, body := a.do("POST", "/v1/class", `{"pid":`+pid+`,"class":"`+cls+`"}`)
				if code != 200 && code != 429 {
					t.Fatalf("request %d: %d %s", i, code, body)
				}
				codes[code]++
			}
			if codes[429] == 0 {
				t.Errorf("no request refused by the change limit (%v): the refused ones were not exercised", codes)
			}
			if n := scans.Load(); n != 1 {
				t.Errorf("%d requests (%v) made %d scans of the caller's descriptors, want 1", 200, codes, n)
			}
			if n := examined.Load(); n > tsg.FDWalkBatch {
				t.Errorf("a walk examined %d descriptors, want at most %d", n, tsg.FDWalkBatch)
			}
		})
	}
}
