// Package tracetest builds the events a real process produces, for tests of
// the trace consumers (registry, trackers, gpreemptctl trace) without BPF: a
// libcuda context's RM calls replayed from a recorded allocation trace, the
// controls gpreemptctl and libcuda issue, and launch/synchronize calls.
package tracetest

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/gpreempt/gpreempt/internal/rmfake"
	"github.com/gpreempt/gpreempt/internal/trace"
	"github.com/gpreempt/gpreempt/ioctl"
)

// Process is who makes the calls.
type Process struct {
	PID, TID uint32
	Comm     string
	// ClientOffset is added to the trace's client handles: RM hands every
	// process its own clients.
	ClientOffset uint32
}

// Clock hands out increasing CLOCK_MONOTONIC-like timestamps.
type Clock struct{ Now uint64 }

// Call returns the entry and exit times of a call lasting d that starts
// after a gap of 1 us, and advances the clock past it.
func (c *Clock) Call(d time.Duration) (enter, exit uint64) {
	c.Now += uint64(time.Microsecond)
	enter = c.Now
	c.Now += uint64(d)
	return enter, c.Now
}

// Costs of RM calls as measured on the H100 (docs/GPU-RESULTS.md): the
// scheduling controls go to the GSP firmware.
const (
	AllocCost     = 20 * time.Microsecond
	ScheduleCost  = 290 * time.Microsecond
	TimesliceCost = 310 * time.Microsecond
	PreemptCost   = 260 * time.Microsecond
	GetCost       = 4 * time.Microsecond
)

func rmCall(p Process, fd int32, nr, size uint32, enter, exit uint64, status ioctl.NvStatus) *trace.RMCall {
	return &trace.RMCall{PID: p.PID, TID: p.TID, Comm: p.Comm, FD: fd, Request: ioctl.IOWR(nr, size),
		Enter: enter, Exit: exit, Status: status, StatusKnown: true}
}

// Alloc is a successful NVOS64 allocation.
func Alloc(p Process, fd int32, client, parent, object ioctl.Handle, class uint32, clock *Clock) *trace.RMCall {
	enter, exit := clock.Call(AllocCost)
	e := rmCall(p, fd, ioctl.NV_ESC_RM_ALLOC, 48, enter, exit, ioctl.NV_OK)
	e.Alloc = &trace.Alloc{Client: client, Parent: parent, Object: object, Class: class, Long: true}
	return e
}

// Free is an NV_ESC_RM_FREE.
func Free(p Process, fd int32, client, parent, object ioctl.Handle, clock *Clock) *trace.RMCall {
	enter, exit := clock.Call(AllocCost)
	e := rmCall(p, fd, ioctl.NV_ESC_RM_FREE, 16, enter, exit, ioctl.NV_OK)
	e.Free = &trace.Free{Client: client, Parent: parent, Object: object}
	return e
}

// Control is an NV_ESC_RM_CONTROL whose parameter block is params (the
// head a BPF program copies: In always, Out for channel-group controls).
func Control(p Process, fd int32, client, object ioctl.Handle, cmd uint32, params []byte, status ioctl.NvStatus, d time.Duration, clock *Clock) *trace.RMCall {
	enter, exit := clock.Call(d)
	e := rmCall(p, fd, ioctl.NV_ESC_RM_CONTROL, 32, enter, exit, status)
	c := &trace.Control{Client: client, Object: object, Cmd: cmd, ParamsSize: uint32(len(params))}
	if ioctl.IsChannelGroupControl(cmd) {
		head := params[:min(len(params), 8)]
		c.In, c.Out = head, head
	}
	e.Control = c
	return e
}

func bytesOf[T any](p *T) []byte {
	b, err := binary.Append(nil, binary.NativeEndian, p)
	if err != nil {
		panic(err)
	}
	return b
}

// SetTimeslice is NVA06C_CTRL_CMD_SET_TIMESLICE(us) on a group.
func SetTimeslice(p Process, fd int32, client, group ioctl.Handle, us uint64, status ioctl.NvStatus, clock *Clock) *trace.RMCall {
	params := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: us}
	return Control(p, fd, client, group, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, bytesOf(&params), status, TimesliceCost, clock)
}

// Schedule is NVA06C_CTRL_CMD_GPFIFO_SCHEDULE in the 575+ layout.
func Schedule(p Process, fd int32, client, group ioctl.Handle, enable bool, clock *Clock) *trace.RMCall {
	var params ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575
	if enable {
		params.BEnable = 1
	}
	return Control(p, fd, client, group, ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, bytesOf(&params), ioctl.NV_OK, ScheduleCost, clock)
}

// Preempt is NVA06C_CTRL_CMD_PREEMPT (wait for completion).
func Preempt(p Process, fd int32, client, group ioctl.Handle, d time.Duration, clock *Clock) *trace.RMCall {
	params := ioctl.NVA06C_CTRL_PREEMPT_PARAMS{BWait: 1}
	return Control(p, fd, client, group, ioctl.NVA06C_CTRL_CMD_PREEMPT, bytesOf(&params), ioctl.NV_OK, d, clock)
}

// SetInterleave is NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL.
func SetInterleave(p Process, fd int32, client, group ioctl.Handle, level uint32, clock *Clock) *trace.RMCall {
	params := ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{TsgInterleaveLevel: level}
	return Control(p, fd, client, group, ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, bytesOf(&params), ioctl.NV_OK, ScheduleCost, clock)
}

// LibcudaContext is what libcuda (CUDA 13.0, H100, 580.159.04) does to
// create a context, from its recorded allocation trace
// (testdata/h100-580.159.04-alloc-sequence.txt): every allocation, then
// GPFIFO_SCHEDULE(enable) on every TSG and SET_TIMESLICE(2048) on the
// compute one (the TSG holding a FERMI_CONTEXT_SHARE_A), as measured.
// Events come in trace order; the clock advances.
func LibcudaContext(allocs []rmfake.TraceAlloc, p Process, clock *Clock) []trace.Event {
	var out []trace.Event
	client := func(h ioctl.Handle) ioctl.Handle {
		if h >= ioctl.RS_CLIENT_HANDLE_BASE && h < ioctl.RS_CLIENT_HANDLE_BASE+ioctl.RS_CLIENT_HANDLE_MAX {
			return h + ioctl.Handle(p.ClientOffset)
		}
		return h
	}
	type group struct {
		client, handle ioctl.Handle
		fd             int32
	}
	var groups []group
	compute := map[ioctl.Handle]bool{}
	for _, a := range allocs {
		out = append(out, Alloc(p, int32(a.FD), client(a.Client), client(a.Parent), client(a.Handle), a.Class, clock))
		switch {
		case ioctl.IsChannelGroupClass(a.Class):
			groups = append(groups, group{client(a.Client), a.Handle, int32(a.FD)})
		case a.Class == ioctl.FERMI_CONTEXT_SHARE_A:
			compute[a.Parent] = true
		}
	}
	for _, g := range groups {
		out = append(out, Schedule(p, g.fd, g.client, g.handle, true, clock))
		if compute[g.handle] {
			out = append(out, SetTimeslice(p, g.fd, g.client, g.handle, 2048, ioctl.NV_OK, clock))
		}
	}
	return out
}

// Call is a traced function's entry (ret false) or return.
func Call(p Process, role trace.Role, symbol string, index uint32, ret bool, arg0 uint64, clock *Clock, d time.Duration) *trace.Call {
	clock.Now += uint64(d)
	c := &trace.Call{Kind: trace.CallEnter, PID: p.PID, TID: p.TID, Comm: p.Comm, At: clock.Now,
		Role: role, Index: index, Symbol: symbol, Arg0: arg0}
	if ret {
		c.Kind, c.Arg0 = trace.CallReturn, 0
	}
	return c
}

// WithCPU sets the calling thread's CPU time so far on c (Call.OnCPU, as
// the uprobe programs read it; 0: unknown) and returns c.
func WithCPU(c *trace.Call, cpu time.Duration) *trace.Call {
	c.OnCPU = cpu
	return c
}

// WithBlocked sets how often the calling thread has blocked so far on c
// (Call.Blocked: voluntary context switches plus one; 0: unknown) and
// returns c.
func WithBlocked(c *trace.Call, blocked uint64) *trace.Call {
	c.Blocked = blocked
	return c
}

// Request is one LC request: launches kernel launches, then
// cuStreamSynchronize returning latency after the first launch.
func Request(p Process, launches int, latency time.Duration, clock *Clock) []trace.Event {
	var out []trace.Event
	start := clock.Now + uint64(10*time.Microsecond)
	for i := range launches {
		gap := 10 * time.Microsecond
		if i > 0 {
			gap = 3 * time.Microsecond
		}
		out = append(out, Call(p, trace.RoleLaunch, "cuLaunchKernel", 0, false, 0, clock, gap))
	}
	out = append(out, Call(p, trace.RoleSync, "cuStreamSynchronize", 2, false, 0, clock, 2*time.Microsecond))
	clock.Now = start + uint64(latency)
	out = append(out, Call(p, trace.RoleSync, "cuStreamSynchronize", 2, true, 0, clock, 0))
	return out
}

// Hint is gpreempt_hint(class, expectedPrepUs) entered after d and
// returning handle 1 us later.
func Hint(p Process, class string, expectedPrepUs, handle uint64, clock *Clock, d time.Duration) []trace.Event {
	enter := Call(p, trace.RoleHint, "gpreempt_hint", 5, false, 0, clock, d)
	enter.Arg1, enter.Str = expectedPrepUs, class
	ret := Call(p, trace.RoleHint, "gpreempt_hint", 5, true, 0, clock, time.Microsecond)
	ret.Ret = handle
	return []trace.Event{enter, ret}
}

// Ready is gpreempt_ready(handle), entered after d.
func Ready(p Process, handle uint64, clock *Clock, d time.Duration) *trace.Call {
	return Call(p, trace.RoleReady, "gpreempt_ready", 6, false, handle, clock, d)
}

// Cancel is gpreempt_cancel(handle), entered after d.
func Cancel(p Process, handle uint64, clock *Clock, d time.Duration) *trace.Call {
	return Call(p, trace.RoleCancel, "gpreempt_cancel", 7, false, handle, clock, d)
}

// Spaced hands apply n requests of p of latency lat, one a period (when
// period is 0, the request and a quiet gap past the request delimiter's
// 25 ms ceiling): a request ends once its process has been quiet for its
// gap.
func Spaced(apply func(trace.Event), p Process, n int, lat, period time.Duration, clock *Clock) {
	for range n {
		start := clock.Now
		for _, ev := range Request(p, 3, lat, clock) {
			apply(ev)
		}
		if period == 0 {
			period = lat + 30*time.Millisecond
		}
		clock.Now = max(clock.Now, start+uint64(period))
	}
}

// Launches stands in for trace.LaunchCounter: the test sets the counts,
// the failures and what cannot be read.
type Launches struct {
	N          map[int]uint64
	Attached   map[int]bool
	Fail       map[int]error
	Unreadable map[int]bool
	// Attaches counts the calls of Attach.
	Attaches int
}

func NewLaunches() *Launches {
	return &Launches{N: map[int]uint64{}, Attached: map[int]bool{}, Fail: map[int]error{}, Unreadable: map[int]bool{}}
}

// Attach counts pid from 0, unless Fail holds an error for it or lib is
// not /lib/libcuda.so.1.
func (f *Launches) Attach(pid int, lib string) error {
	f.Attaches++
	if err := f.Fail[pid]; err != nil {
		return err
	}
	if lib != "/lib/libcuda.so.1" {
		return errors.New("wrong library " + lib)
	}
	f.Attached[pid], f.N[pid] = true, 0
	return nil
}

func (f *Launches) Count(pid int) (uint64, bool) {
	if !f.Attached[pid] || f.Unreadable[pid] {
		return 0, false
	}
	return f.N[pid], true
}

func (f *Launches) Detach(pid int) { delete(f.Attached, pid) }
