package trace

import (
	"errors"
	"fmt"

	"github.com/gpreempt/gpreempt/internal/libfile"
	"github.com/gpreempt/gpreempt/ioctl"
)

// Sentinel errors for the ways tracing cannot start. Each is wrapped with
// what was tried; the kernel's own error follows as the cause.
var (
	// ErrNotRoot: the caller lacks the capabilities to load BPF programs
	// and open perf events (root, or CAP_BPF with CAP_PERFMON). It is an
	// ioctl.ErrPermission, so gpreemptctl exits with its permission code.
	ErrNotRoot = fmt.Errorf("tracing needs root (or CAP_BPF and CAP_PERFMON): %w", ioctl.ErrPermission)
	// ErrBPFUnavailable: the kernel refuses the BPF features the tracer
	// needs (tracepoint programs, ring buffers, uprobes).
	ErrBPFUnavailable = errors.New("BPF tracing unavailable in this kernel")
	// ErrNoTracefs: tracefs is not mounted (and was not to be, or could
	// not be, mounted): the syscall tracepoints' ids are only found there.
	ErrNoTracefs = errors.New("tracefs not mounted")
	// ErrNoLibrary: the library to put uprobes on was not found (nor
	// readable as one: libfile.ErrNotFound).
	ErrNoLibrary = libfile.ErrNotFound
	// ErrUntrustedLibrary: the file named as a library is not one the
	// daemon reads (libfile.ErrUntrusted), or no longer the file the
	// process mapped.
	ErrUntrustedLibrary = libfile.ErrUntrusted
	// ErrNoSymbols: none of the requested functions is in the library.
	ErrNoSymbols = errors.New("no traceable function in library")
	// ErrDecode: a ring-buffer record does not have the layout of any
	// event the programs send.
	ErrDecode = errors.New("malformed trace record")
)
