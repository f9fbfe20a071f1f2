package trace

import (
	"encoding/binary"
	"fmt"

	"github.com/gpreempt/gpreempt/ioctl"
)

// Encode renders an event as the BPF programs would have sent it, so that
// Decode(Encode(e)) is e. Recorded or synthetic traces (tests, replays) go
// through the same decoder as live ones. A request.Residency has no record form.
func Encode(ev Event) ([]byte, error) {
	switch e := ev.(type) {
	case *RMCall:
		return encodeRMCall(e)
	case *TaskExit:
		raw := rmTaskExitEvent{Kind: kindTaskExit, Pid: e.PID, Ns: e.At}
		copy(raw.Comm[:], e.Comm)
		return binary.Append(nil, binary.NativeEndian, &raw)
	case *Call:
		raw := callsCallEvent{Kind: kindCallEnter, Pid: e.PID, Tid: e.TID, Ns: e.At, OnCpuNs: uint64(max(e.OnCPU, 0)), Blocked: e.Blocked,
			Cookie: cookie(e.Role, int(e.Index)), Arg0: e.Arg0, Arg1: e.Arg1, Ret: e.Ret}
		if e.Kind == CallReturn {
			raw.Kind = kindCallReturn
		}
		copy(raw.Comm[:], e.Comm)
		copy(raw.Str[:], e.Str)
		return binary.Append(nil, binary.NativeEndian, &raw)
	}
	return nil, fmt.Errorf("encode %T: no record form", ev)
}

func encodeRMCall(e *RMCall) ([]byte, error) {
	raw := rmRmEvent{Kind: kindRMCall, Pid: e.PID, Tid: e.TID, Fd: uint32(e.FD), Cmd: e.Request,
		EnterNs: e.Enter, ExitNs: e.Exit, Ret: e.Ret}
	copy(raw.Comm[:], e.Comm)
	var block any
	switch {
	case e.Alloc != nil && e.Alloc.Long:
		a := e.Alloc
		block = &ioctl.NVOS64_PARAMETERS{HRoot: a.Client, HObjectParent: a.Parent, HObjectNew: a.Object,
			HClass: a.Class, ParamsSize: a.ParamsSize, Status: uint32(e.Status)}
	case e.Alloc != nil:
		a := e.Alloc
		block = &ioctl.NVOS21_PARAMETERS{HRoot: a.Client, HObjectParent: a.Parent, HObjectNew: a.Object,
			HClass: a.Class, ParamsSize: a.ParamsSize, Status: uint32(e.Status)}
	case e.Free != nil:
		block = &ioctl.NVOS00_PARAMETERS{HRoot: e.Free.Client, HObjectParent: e.Free.Parent,
			HObjectOld: e.Free.Object, Status: uint32(e.Status)}
	case e.Control != nil:
		c := e.Control
		block = &ioctl.NVOS54_PARAMETERS{HClient: c.Client, HObject: c.Object, Cmd: c.Cmd, Flags: c.Flags,
			ParamsSize: c.ParamsSize, Status: uint32(e.Status)}
		if len(c.In) > len(raw.HeadEnter) || len(c.Out) > len(raw.HeadExit) {
			return nil, fmt.Errorf("encode control %#x: parameter heads longer than %d bytes", c.Cmd, len(raw.HeadEnter))
		}
		raw.HeadLen = uint32(max(len(c.In), len(c.Out)))
		if c.In != nil {
			raw.Flags |= readHeadEnter
			copy(raw.HeadEnter[:], c.In)
		}
		if c.Out != nil {
			raw.Flags |= readHeadExit
			copy(raw.HeadExit[:], c.Out)
		}
	}
	if block != nil {
		b, err := binary.Append(nil, binary.NativeEndian, block)
		if err != nil {
			return nil, err
		}
		if int(ioctl.IOCSize(e.Request)) != len(b) {
			return nil, fmt.Errorf("encode: request %#x does not carry a %d-byte block", e.Request, len(b))
		}
		copy(raw.ArgEnter[:], b)
		raw.Flags |= readArgEnter
		if e.StatusKnown {
			copy(raw.ArgExit[:], b)
			raw.Flags |= readArgExit
		}
	}
	return binary.Append(nil, binary.NativeEndian, &raw)
}
