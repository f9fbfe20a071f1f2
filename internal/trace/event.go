package trace

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Record kinds, the first 32-bit word of every ring-buffer record (enum
// event_kind in bpf/rmioctl.c, enum call_kind in bpf/calls.c).
const (
	kindRMCall     = 1
	kindTaskExit   = 2
	kindCallEnter  = 3
	kindCallReturn = 4
)

// Flags of rm_event: which copies of user memory the programs could read.
const (
	readArgEnter  = 1 << 0
	readArgExit   = 1 << 1
	readHeadEnter = 1 << 2
	readHeadExit  = 1 << 3
)

// Event is one decoded trace record: *RMCall, *TaskExit or *Call (and, once
// the spinner stamps them, request.Residency of package
// internal/trace/request).
type Event interface {
	// Time is when the event ended, in CLOCK_MONOTONIC nanoseconds (the
	// clock of bpf_ktime_get_ns).
	Time() uint64
}

// RMCall is one NVIDIA RM ioctl (NV_ESC_RM_ALLOC, _FREE or _CONTROL) as the
// syscall tracepoints saw it. Exactly one of Alloc, Free and Control is set
// when the parameter block could be read; none when it could not (a bad
// pointer: the ioctl then fails with EFAULT).
type RMCall struct {
	PID, TID uint32
	Comm     string
	FD       int32
	// Request is the ioctl request number: _IOWR('F', escape, size).
	Request uint32
	// Enter and Exit are the syscall's entry and return times.
	Enter, Exit uint64
	// Ret is the syscall's return value: 0, or -errno when the call did
	// not reach RM (or the file is not NVIDIA's).
	Ret int64
	// Status is RM's answer, read back from the parameter block at exit;
	// StatusKnown is false when that read failed.
	Status      ioctl.NvStatus
	StatusKnown bool

	Alloc   *Alloc
	Free    *Free
	Control *Control
}

// Alloc is the NVOS21/NVOS64 block of an NV_ESC_RM_ALLOC.
type Alloc struct {
	Client ioctl.Handle
	Parent ioctl.Handle
	// Object is the new handle: RM's choice (read at exit) when the caller
	// passed 0, as for clients.
	Object     ioctl.Handle
	Class      uint32
	ParamsSize uint32
	// Long is true for the 48-byte NVOS64 form (libcuda's), false for
	// NVOS21.
	Long bool
}

// Free is the NVOS00 block of an NV_ESC_RM_FREE.
type Free struct {
	Client ioctl.Handle
	Parent ioctl.Handle
	Object ioctl.Handle
}

// Control is the NVOS54 block of an NV_ESC_RM_CONTROL. For channel-group
// controls (0xa06cXXXX) the programs also copy the first bytes of the
// control's parameters: In as the caller passed them, Out as RM left them.
type Control struct {
	Client     ioctl.Handle
	Object     ioctl.Handle
	Cmd        uint32
	Flags      uint32
	ParamsSize uint32
	In, Out    []byte
}

// TaskExit is a process's end (its main thread's). RM frees the objects of
// the process's files without any ioctl.
type TaskExit struct {
	PID  uint32
	Comm string
	At   uint64
}

// CallKind says whether a Call is a function's entry or its return.
type CallKind uint8

const (
	CallEnter CallKind = iota + 1
	CallReturn
)

func (k CallKind) String() string {
	switch k {
	case CallEnter:
		return "enter"
	case CallReturn:
		return "return"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Call is the entry into, or return from, a traced user-space function.
type Call struct {
	Kind     CallKind
	PID, TID uint32
	Comm     string
	At       uint64
	// Role and Index come from the attach cookie: what the function is
	// for, and its index in the tracer's symbol table.
	Role  Role
	Index uint32
	// Symbol is the function's name, filled in by the tracer from Index.
	Symbol string
	// Arg0 and Arg1 are the first two integer arguments (at entry); Ret
	// is the return value (at return).
	Arg0, Arg1, Ret uint64
	// Str is, for a hint's entry, the class string Arg0 points to.
	Str string
	// OnCPU is the calling thread's CPU time so far, as the scheduler
	// had it accounted (it lags by up to a scheduler tick while the
	// thread runs); 0: unknown. The difference between two of a thread's
	// calls is how much of the time between them it ran.
	OnCPU time.Duration
	// Blocked is how often the calling thread has blocked so far (its
	// voluntary context switches), plus one; 0: unknown. Unlike OnCPU it
	// is exact: two of a thread's calls with the same count had it never
	// sleep between them.
	Blocked uint64
}

func (e *RMCall) Time() uint64   { return e.Exit }
func (e *TaskExit) Time() uint64 { return e.At }
func (e *Call) Time() uint64     { return e.At }

// Escape is the RM escape number (NV_ESC_RM_*), the request's _IOC_NR.
func (e *RMCall) Escape() uint32 { return ioctl.IOCNr(e.Request) }

// Duration is the time spent in the ioctl.
func (e *RMCall) Duration() time.Duration {
	if e.Exit < e.Enter {
		return 0
	}
	return time.Duration(e.Exit - e.Enter)
}

// OK reports whether the call reached RM and RM answered NV_OK.
func (e *RMCall) OK() bool { return e.Ret == 0 && e.StatusKnown && e.Status == ioctl.NV_OK }

// Result names the call's outcome: the errno when the call did not reach
// RM, else RM's status.
func (e *RMCall) Result() string {
	switch {
	case e.Ret < 0:
		if name := unix.ErrnoName(unix.Errno(-e.Ret)); name != "" {
			return name
		}
		return fmt.Sprintf("errno %d", -e.Ret)
	case !e.StatusKnown:
		return "status unknown"
	}
	return e.Status.String()
}

// Decode decodes one ring-buffer record of either program.
func Decode(b []byte) (Event, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrDecode, len(b))
	}
	switch kind := binary.NativeEndian.Uint32(b); kind {
	case kindRMCall:
		return decodeRMCall(b)
	case kindTaskExit:
		var raw rmTaskExitEvent
		if err := decodeRaw(b, &raw); err != nil {
			return nil, err
		}
		return &TaskExit{PID: raw.Pid, Comm: cString(raw.Comm[:]), At: raw.Ns}, nil
	case kindCallEnter, kindCallReturn:
		var raw callsCallEvent
		if err := decodeRaw(b, &raw); err != nil {
			return nil, err
		}
		c := &Call{
			Kind: CallEnter, PID: raw.Pid, TID: raw.Tid, Comm: cString(raw.Comm[:]), At: raw.Ns,
			Role: Role(raw.Cookie >> cookieRoleShift), Index: uint32(raw.Cookie & cookieIndexMask),
			Arg0: raw.Arg0, Arg1: raw.Arg1, Ret: raw.Ret, Str: cString(raw.Str[:]),
			OnCPU: time.Duration(min(raw.OnCpuNs, math.MaxInt64)), Blocked: raw.Blocked,
		}
		if kind == kindCallReturn {
			c.Kind = CallReturn
		}
		return c, nil
	default:
		return nil, fmt.Errorf("%w: kind %d", ErrDecode, kind)
	}
}

// decodeRaw decodes a record into the bpf2go type of its C struct, so the
// layout comes from the C source and nowhere else.
func decodeRaw[T any](b []byte, raw *T) error {
	if !copyStruct(b, raw) {
		return fmt.Errorf("%w: %d bytes for a %d-byte %T", ErrDecode, len(b), binary.Size(raw), *raw)
	}
	return nil
}

func decodeRMCall(b []byte) (*RMCall, error) {
	var raw rmRmEvent
	if err := decodeRaw(b, &raw); err != nil {
		return nil, err
	}
	e := &RMCall{
		PID: raw.Pid, TID: raw.Tid, Comm: cString(raw.Comm[:]), FD: int32(raw.Fd),
		Request: raw.Cmd, Enter: raw.EnterNs, Exit: raw.ExitNs, Ret: raw.Ret,
	}
	size := ioctl.IOCSize(raw.Cmd)
	if ioctl.IOCType(raw.Cmd) != ioctl.NV_IOCTL_MAGIC || size > uint32(len(raw.ArgEnter)) {
		return nil, fmt.Errorf("%w: request %#x is not an RM escape", ErrDecode, raw.Cmd)
	}
	// Inputs come from the entry copy (what RM was asked), outputs from the
	// exit copy (what RM wrote back). Either copy stands in for a failed
	// read of the other: the ioctl does not change its inputs.
	in, out := raw.ArgEnter[:size], raw.ArgExit[:size]
	hasIn, hasOut := raw.Flags&readArgEnter != 0, raw.Flags&readArgExit != 0
	switch {
	case !hasIn && !hasOut:
		return e, nil
	case !hasIn:
		in = out
	case !hasOut:
		out = in
	}
	var err error
	switch escape := ioctl.IOCNr(raw.Cmd); {
	case escape == ioctl.NV_ESC_RM_ALLOC && size == 48:
		var pin, pout ioctl.NVOS64_PARAMETERS
		if err = decodeBlock(in, &pin, out, &pout); err == nil {
			e.Alloc = &Alloc{Client: pin.HRoot, Parent: pin.HObjectParent, Object: pout.HObjectNew,
				Class: pin.HClass, ParamsSize: pin.ParamsSize, Long: true}
			e.Status = ioctl.NvStatus(pout.Status)
		}
	case escape == ioctl.NV_ESC_RM_ALLOC && size == 32:
		var pin, pout ioctl.NVOS21_PARAMETERS
		if err = decodeBlock(in, &pin, out, &pout); err == nil {
			e.Alloc = &Alloc{Client: pin.HRoot, Parent: pin.HObjectParent, Object: pout.HObjectNew,
				Class: pin.HClass, ParamsSize: pin.ParamsSize}
			e.Status = ioctl.NvStatus(pout.Status)
		}
	case escape == ioctl.NV_ESC_RM_FREE && size == 16:
		var pin, pout ioctl.NVOS00_PARAMETERS
		if err = decodeBlock(in, &pin, out, &pout); err == nil {
			e.Free = &Free{Client: pin.HRoot, Parent: pin.HObjectParent, Object: pin.HObjectOld}
			e.Status = ioctl.NvStatus(pout.Status)
		}
	case escape == ioctl.NV_ESC_RM_CONTROL && size == 32:
		var pin, pout ioctl.NVOS54_PARAMETERS
		if err = decodeBlock(in, &pin, out, &pout); err == nil {
			c := &Control{Client: pin.HClient, Object: pin.HObject, Cmd: pin.Cmd, Flags: pin.Flags, ParamsSize: pin.ParamsSize}
			n := min(int(raw.HeadLen), len(raw.HeadEnter))
			if raw.Flags&readHeadEnter != 0 {
				c.In = bytes.Clone(raw.HeadEnter[:n])
			}
			if raw.Flags&readHeadExit != 0 {
				c.Out = bytes.Clone(raw.HeadExit[:n])
			}
			e.Control = c
			e.Status = ioctl.NvStatus(pout.Status)
		}
	default:
		return nil, fmt.Errorf("%w: escape %#x with a %d-byte block", ErrDecode, escape, size)
	}
	if err != nil {
		return nil, err
	}
	e.StatusKnown = hasOut
	return e, nil
}

// decodeBlock decodes the entry and exit copies of one NVOS block.
func decodeBlock[T any](in []byte, pin *T, out []byte, pout *T) error {
	if !copyStruct(in, pin) || !copyStruct(out, pout) {
		return fmt.Errorf("%w: %d/%d bytes for a %T", ErrDecode, len(in), len(out), *pin)
	}
	return nil
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
