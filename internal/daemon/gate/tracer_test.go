package gate

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/internal/policy"
	"github.com/gpreempt/gpreempt/internal/proctest"
	"github.com/gpreempt/gpreempt/internal/testlog"
	"github.com/gpreempt/gpreempt/internal/trace"
)

// The real tracer on a real process (a fake libcuda's LC, lcloop): a request's hold takes the LC's
// launch probes off and its end puts them back, and the gate hears how long each rewrite took,
// which launch_probes: auto weighs.
func TestTracerTimesRewrites(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("uprobes need root")
	}
	_, app := proctest.BuildLCLoop(t, t.TempDir(), "../..")
	cmd := exec.Command(app, "5")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	pid := cmd.Process.Pid
	proctest.WaitFor(t, "lcloop's libcuda mapped", func() bool { _, err := trace.FindLibrary(trace.LibCUDA, "", pid); return err == nil })

	be := proctest.Sleeper(t)
	be.GPUs = []int{0}
	pol := gatePolicy(policy.GateOn)
	pol.Gate.Idle = 10 * time.Millisecond // under lcloop's 30 ms of quiet between requests
	procs := &gateProcs{pol: pol, lc: []policy.ProcRef{{PID: pid, Start: 1, GPUs: []int{0}}}, be: []policy.ProcRef{be}}
	g := New(procs, &fakePause{stopped: map[int]bool{}}, testlog.New(t))
	ctx, cancel := context.WithCancel(context.Background())
	tr := NewTracer(ctx, g, testlog.New(t))
	g.Arm = tr.Arm
	var wg sync.WaitGroup
	wg.Go(func() { g.Run(ctx, tr.Follow) })
	t.Cleanup(func() { cancel(); wg.Wait(); tr.Close() })
	proctest.WaitFor(t, "lcloop followed with its launch probes on", func() bool {
		tr.mu.Lock()
		defer tr.mu.Unlock()
		return tr.armed[pid]
	})

	fmt.Fprintln(stdin, "go")
	var said int
	if _, err := fmt.Fscan(bufio.NewReader(stdout), &said); err != nil || said != pid {
		t.Fatalf("lcloop said %d (%v)", said, err)
	}
	proctest.WaitFor(t, "a detach and an attach timed", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		lc := g.lcs[pid]
		return lc != nil && len(lc.detaches) > 0 && len(lc.attaches) > 0
	})
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range append(g.lcs[pid].detaches, g.lcs[pid].attaches...) {
		if d <= 0 {
			t.Errorf("a rewrite timed at %v", d)
		}
	}
}
