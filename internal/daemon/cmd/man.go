package cmd

import (
	"io"

	"github.com/gpreempt/gpreempt/internal/cliutil"
)

// manDescription is the page's DESCRIPTION: what the flags do not say.
const manDescription = `gpreemptd classes every new CUDA context of the node a debounce after its last setup call ` +
	`(eBPF on the RM ioctls, or a /proc scan where BPF is refused), applies the class its policy ` +
	`gives to every channel group of the process, re-applies drift, serves a unix-socket API ` +
	`(gpreemptctl daemon status|classes|reload) and Prometheus metrics, and restores the driver's ` +
	`defaults on shutdown. It runs as root (CAP_SYS_PTRACE over the GPU processes, and CAP_BPF, ` +
	`CAP_PERFMON for tracing).

FILES: /etc/gpreempt/gpreemptd.yaml, the policy (reloaded on change and on SIGHUP); ` +
	`/run/gpreempt/gpreemptd.sock, the socket (its lock file beside it); ` +
	`the systemd unit gpreemptd.service.

EXIT STATUS: 0 ok; 1 failure; 2 bad policy, flags or an argument (gpreemptd takes flags only; --check-config FILE... exits 2 when any file is bad); ` +
	`3 another gpreemptd holds the lock.

See /usr/local/share/doc/gpreempt/DAEMON.md (docs/DAEMON.md in the source).`

// ManPage is gpreemptd(8), generated from its flags (make man).
func ManPage() (string, error) {
	code := ExitOK
	app := newApp(io.Discard, io.Discard, &code)
	app.Description = manDescription
	return cliutil.ManPage(app, 8)
}
