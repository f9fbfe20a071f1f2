package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/utils/cpuset"
)

// ErrWorker marks a worker process that failed: it died, never became
// ready, or exited with an error.
var ErrWorker = errors.New("worker failed")

// readyPrefix starts the line a worker prints on stdout once it can be
// measured and its TSGs exist.
const readyPrefix = "READY pid="

// alonePrefix starts the line an LC run with --alone prints after its first
// go line: its requests in BE's idle halves (parseAlone).
const alonePrefix = "ALONE "

// worker is a child process running a BE or LC workload.
type worker struct {
	label string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	log   *slog.Logger

	ready chan int      // receives the pid from the READY line, once
	alone chan string   // receives the ALONE line's values (lc_decode.py --alone), once
	done  chan struct{} // closed when the process has exited
	// waitErr is the process's exit error, valid after done is closed.
	waitErr error
	// stderr keeps the end of the worker's stderr for error messages.
	stderr *tailBuffer
	files  []*os.File
}

// startWorker starts argv with its stdout and stderr copied into
// dir/label.stdout and dir/label.stderr, and watches stdout for the READY
// line.
// cpus, if not empty, pins the worker and every thread it makes to those
// CPUs from its first instruction.
func startWorker(label, dir string, argv, env []string, cpus cpuset.CPUSet, log *slog.Logger) (*worker, error) {
	outFile, err := os.Create(fmt.Sprintf("%s/%s.stdout", dir, label))
	if err != nil {
		return nil, err
	}
	errFile, err := os.Create(fmt.Sprintf("%s/%s.stderr", dir, label))
	if err != nil {
		return nil, errors.Join(err, outFile.Close())
	}
	w := &worker{
		label:  label,
		log:    log.With("worker", label),
		ready:  make(chan int, 1),
		alone:  make(chan string, 1),
		done:   make(chan struct{}),
		stderr: &tailBuffer{max: 4096},
		files:  []*os.File{outFile, errFile},
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = childEnv(os.Environ(), env)
	cmd.Stderr = io.MultiWriter(errFile, w.stderr)
	// Own process group: a Ctrl-C at the terminal reaches the orchestrator
	// only, which then stops the workers in order. Pdeathsig: workers do not
	// outlive an orchestrator that is killed outright.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, errors.Join(err, w.closeFiles())
	}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, errors.Join(err, w.closeFiles())
	}
	w.cmd = cmd
	if err := startOn(cmd, cpus); err != nil {
		return nil, errors.Join(fmt.Errorf("%w: start %s (%s): %w", ErrWorker, label, argv[0], err), w.closeFiles())
	}
	w.log.Info("started", "pid", cmd.Process.Pid, "argv", strings.Join(argv, " "), "cpus", cpus.String())

	var copied sync.WaitGroup
	copied.Add(1)
	go func() {
		defer copied.Done()
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		sent, sentAlone := false, false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(outFile, line)
			if rest, ok := strings.CutPrefix(line, readyPrefix); ok && !sent {
				if pid, err := strconv.Atoi(strings.TrimSpace(rest)); err == nil {
					w.ready <- pid
					sent = true
				}
			}
			if rest, ok := strings.CutPrefix(line, alonePrefix); ok && sent && !sentAlone {
				w.alone <- rest
				sentAlone = true
			}
		}
		// Drain whatever the scanner refused (an over-long line) so that
		// the child never blocks on a full pipe.
		_, _ = io.Copy(outFile, stdout)
	}()
	go func() {
		// Wait must not run before the stdout reader has seen EOF, or it
		// closes the pipe under it.
		copied.Wait()
		w.waitErr = cmd.Wait()
		_ = w.closeFiles()
		close(w.done)
	}()
	return w, nil
}

// startOn starts cmd from an OS thread whose CPU affinity is cpus (all CPUs
// when empty): a child inherits the mask of the thread that forks it, so
// no thread of the worker ever runs elsewhere. A child started from a
// thread that then could not be given its own mask back is killed: that
// thread exits, and Pdeathsig would kill it anyway.
func startOn(cmd *exec.Cmd, cpus cpuset.CPUSet) error {
	if cpus.IsEmpty() {
		return cmd.Start()
	}
	err := onCPUs(cpus, cmd.Start)
	if err != nil && cmd.Process != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}
	return err
}

// onCPUs runs f on an OS thread of its own pinned to exactly cpus (an error
// if the kernel narrows or refuses the mask: offline CPUs, or ones outside
// the cgroup's cpuset), then gives the thread its own mask back. A thread
// that cannot have it back never returns to the runtime: it exits.
func onCPUs(cpus cpuset.CPUSet, f func() error) error {
	var set unix.CPUSet
	for _, c := range cpus.List() {
		set.Set(c)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var was, got unix.CPUSet
		if err := unix.SchedGetaffinity(0, &was); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("read this thread's CPUs: %w", err)
			return
		}
		err := unix.SchedSetaffinity(0, &set)
		if err == nil {
			err = unix.SchedGetaffinity(0, &got)
		}
		if err == nil && got != set {
			err = fmt.Errorf("the kernel allows %d of them", got.Count())
		}
		if err != nil {
			err = fmt.Errorf("pin to CPUs %s: %w", cpus, err)
		} else {
			err = f()
		}
		if rerr := unix.SchedSetaffinity(0, &was); rerr != nil {
			errc <- errors.Join(err, fmt.Errorf("restore this thread's CPUs: %w", rerr))
			return // still locked: the thread exits with this goroutine
		}
		runtime.UnlockOSThread()
		errc <- err
	}()
	return <-errc
}

func (w *worker) closeFiles() error {
	var errs []error
	for _, f := range w.files {
		errs = append(errs, f.Close())
	}
	w.files = nil
	return errors.Join(errs...)
}

// pid returns the child's process id.
func (w *worker) pid() int { return w.cmd.Process.Pid }

// died describes the worker's exit for an error message.
func (w *worker) died() error {
	tail := strings.TrimSpace(w.stderr.String())
	if tail != "" {
		tail = "; its stderr ends:\n" + indent(tail)
	}
	return fmt.Errorf("%w: %s (pid %d) exited: %v%s", ErrWorker, w.label, w.pid(), w.waitErr, tail)
}

// waitReady waits for the READY line and checks that it names the child
// itself: gpreemptctl will be pointed at that pid, so it must be the
// process that owns the CUDA context.
func (w *worker) waitReady(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case pid := <-w.ready:
		if pid != w.pid() {
			return fmt.Errorf("%w: %s printed READY pid=%d but its pid is %d", ErrWorker, w.label, pid, w.pid())
		}
		w.log.Info("ready", "pid", pid)
		return nil
	case <-w.done:
		// The READY line may have raced with the exit.
		select {
		case <-w.ready:
			return fmt.Errorf("%w: %s exited right after READY: %w", ErrWorker, w.label, w.died())
		default:
		}
		return fmt.Errorf("before READY: %w", w.died())
	case <-t.C:
		return fmt.Errorf("%w: %s (pid %d) not READY within %v", ErrWorker, w.label, w.pid(), timeout)
	case <-ctx.Done():
		return ctx.Err()
	}
}

// waitAlone waits for the ALONE line and returns its latencies and CPU loop times in µs.
func (w *worker) waitAlone(ctx context.Context, timeout time.Duration) (lat, meter []float64, err error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case rest := <-w.alone:
		if lat, meter, err = parseAlone(rest); err != nil {
			return nil, nil, fmt.Errorf("%w: %s's ALONE line: %w", ErrWorker, w.label, err)
		}
		return lat, meter, nil
	case <-w.done:
		select { // the line may have raced with the exit
		case <-w.alone:
			return nil, nil, fmt.Errorf("right after its ALONE line: %w", w.died())
		default:
			return nil, nil, fmt.Errorf("before its ALONE line: %w", w.died())
		}
	case <-t.C:
		return nil, nil, fmt.Errorf("%w: %s (pid %d) printed no ALONE line within %v", ErrWorker, w.label, w.pid(), timeout)
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// parseAlone reads an ALONE line's requests, "LATENCY:METER" in ns and comma-separated (the
// latency and the CPU loop's time around it), into µs.
func parseAlone(line string) (lat, meter []float64, err error) {
	for f := range strings.SplitSeq(strings.TrimSpace(line), ",") {
		l, m, ok := strings.Cut(f, ":")
		lns, err1 := strconv.ParseInt(l, 10, 64)
		mns, err2 := strconv.ParseInt(m, 10, 64)
		if !ok || err1 != nil || err2 != nil || lns <= 0 || mns <= 0 {
			return nil, nil, fmt.Errorf("%q is no latency:CPU loop in ns", f)
		}
		lat, meter = append(lat, float64(lns)/1e3), append(meter, float64(mns)/1e3)
	}
	return lat, meter, nil
}

// sendGo releases a worker started with --wait-go (with --alone, twice).
func (w *worker) sendGo() error {
	if _, err := io.WriteString(w.stdin, "go\n"); err != nil {
		select { // a closed pipe is a worker gone: say how, once its exit is in
		case <-w.done:
			return fmt.Errorf("release: %w", w.died())
		case <-time.After(5 * time.Second):
			return fmt.Errorf("%w: release %s: %w", ErrWorker, w.label, err)
		}
	}
	return nil
}

// wait waits for the worker to exit by itself, and fails if it exits with
// an error, takes longer than timeout, or any of others dies first.
func (w *worker) wait(ctx context.Context, timeout time.Duration, others ...*worker) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			if w.waitErr != nil {
				return w.died()
			}
			return nil
		case <-t.C:
			return fmt.Errorf("%w: %s (pid %d) still running after %v", ErrWorker, w.label, w.pid(), timeout)
		case <-ctx.Done():
			return ctx.Err()
		case <-anyDone(others):
			for _, o := range others {
				if o.exited() {
					return fmt.Errorf("while %s ran: %w", w.label, o.died())
				}
			}
		}
	}
}

// stop asks the worker to finish (SIGTERM: BE workers then drain, write
// their result and exit 0) and waits; after grace it kills it.
func (w *worker) stop(grace time.Duration) error {
	if w.exited() {
		if w.waitErr != nil {
			return w.died()
		}
		return nil
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
		if w.waitErr != nil {
			return w.died()
		}
		return nil
	case <-time.After(grace):
		w.kill()
		return fmt.Errorf("%w: %s (pid %d) ignored SIGTERM for %v and was killed", ErrWorker, w.label, w.pid(), grace)
	}
}

// kill ends the worker at once and waits for it, for cleanup after errors.
func (w *worker) kill() {
	if w.exited() {
		return
	}
	_ = w.cmd.Process.Kill()
	<-w.done
}

func (w *worker) exited() bool {
	select {
	case <-w.done:
		return true
	default:
		return false
	}
}

// anyDone returns a channel closed when any of ws has exited (nil, which
// blocks forever, for none).
func anyDone(ws []*worker) <-chan struct{} {
	if len(ws) == 0 {
		return nil
	}
	ch := make(chan struct{})
	go func() {
		// One goroutine per call; it ends when a worker exits, and every
		// worker is eventually stopped or killed.
		cases := make(chan struct{}, len(ws))
		for _, w := range ws {
			go func() { <-w.done; cases <- struct{}{} }()
		}
		<-cases
		close(ch)
	}()
	return ch
}

// sleepWatching sleeps for d, failing early if ctx ends or a worker dies.
func sleepWatching(ctx context.Context, d time.Duration, ws ...*worker) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-anyDone(ws):
		for _, w := range ws {
			if w.exited() {
				return w.died()
			}
		}
		return nil
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}
