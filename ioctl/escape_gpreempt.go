package ioctl

import (
	"errors"
	"fmt"
	"structs"

	"golang.org/x/sys/unix"
)

// The channel-group escapes of gpreempt's driver patch series (patches/ in
// this repository, docs/PATCHES.md). They are not part of NVIDIA's driver:
// a stock driver refuses both numbers, which is how their presence is
// detected (see ErrNoGpreemptEscapes).

// From patches/<branch>/0001-*.patch:
// src/nvidia/arch/nvalloc/unix/include/nv_escape.h and nv-gpreempt.h. The
// numbers and layouts are the same in the 550, 580 and 595 series.
const (
	NV_ESC_RM_GPREEMPT_QUERY_TSGS = 0x7A
	NV_ESC_RM_GPREEMPT_SET_TSG    = 0x7B

	// NV_GPREEMPT_QUERY_TSGS_MAX is the number of entries in one QUERY page.
	NV_GPREEMPT_QUERY_TSGS_MAX = 32

	NV_GPREEMPT_SET_TSG_TIMESLICE        = 0x00000001
	NV_GPREEMPT_SET_TSG_INTERLEAVE_LEVEL = 0x00000002
)

// NV_GPREEMPT_TSG_INFO is one channel group in a QUERY page.
type NV_GPREEMPT_TSG_INFO struct {
	_ structs.HostLayout
	// Pid owns HClient, numbered in the caller's pid namespace.
	Pid     uint32
	HClient Handle
	HTsg    Handle
	// GpuID is RM's GPU id (NV0000_CTRL_CMD_GPU_GET_ID_INFO).
	GpuID uint32
	// EngineType is an NV2080_ENGINE_TYPE_* value.
	EngineType   uint32
	RunlistID    uint32
	TsgID        uint32
	ChannelCount uint32
	TimesliceUs  uint64
	// InterleaveLevel is an NVA06C_CTRL_INTERLEAVE_LEVEL_* value.
	InterleaveLevel uint32
	// HDevice is the group's parent, an NV01_DEVICE_0.
	HDevice Handle
}

// NV_GPREEMPT_QUERY_TSGS_PARAMS is the parameter block of
// NV_ESC_RM_GPREEMPT_QUERY_TSGS: one page of the groups of Pid (0: of every
// process the caller may act on), in ascending (client, TSG) order, those
// above Cursor first.
type NV_GPREEMPT_QUERY_TSGS_PARAMS struct {
	_          structs.HostLayout
	Pid        uint32
	Flags      uint32
	Cursor     uint64
	NextCursor uint64
	Count      uint32
	BMore      uint32
	Status     uint32
	_          uint32
	Tsgs       [NV_GPREEMPT_QUERY_TSGS_MAX]NV_GPREEMPT_TSG_INFO
}

// NV_GPREEMPT_SET_TSG_PARAMS is the parameter block of
// NV_ESC_RM_GPREEMPT_SET_TSG. The driver sets the timeslice first, then the
// interleave level; DoneFlags says which were applied.
type NV_GPREEMPT_SET_TSG_PARAMS struct {
	_               structs.HostLayout
	Pid             uint32
	HClient         Handle
	HTsg            Handle
	Flags           uint32
	TimesliceUs     uint64
	InterleaveLevel uint32
	DoneFlags       uint32
	Status          uint32
	_               uint32
}

// TSGKey orders channel groups as QUERY pages them: client handle in the
// high 32 bits, TSG handle in the low ones.
func TSGKey(client, tsg Handle) uint64 { return uint64(client)<<32 | uint64(tsg) }

// Key is the group's position in QUERY's order.
func (t NV_GPREEMPT_TSG_INFO) Key() uint64 { return TSGKey(t.HClient, t.HTsg) }

// ErrNoGpreemptEscapes: the driver does not implement gpreempt's escapes
// (a stock driver, or a series built with other parameter sizes). Every
// stock branch answers an unknown escape number with EINVAL and leaves the
// argument untouched: 550.x and 580.x from RmIoctl's default case
// (NV_ERR_GENERIC, turned into -EINVAL by nvidia_ioctl), 595.x from
// nv_validate_ioctls before the argument is even copied in.
var ErrNoGpreemptEscapes = errors.New("driver without gpreempt's channel-group escapes")

// statusUnset is put in Status before an escape: no NV_STATUS has this
// value, so a Status still holding it after an EINVAL proves the driver
// never reached the escape's handler.
const statusUnset = 0xffffffff

// TSGPage is one checked QUERY reply.
type TSGPage struct {
	TSGs       []NV_GPREEMPT_TSG_INFO
	NextCursor uint64
	More       bool
}

// DecodeQueryTSGs decodes a QUERY parameter block as the driver returned
// it for a request that started at cursor, and checks what the escape
// promises: the exact size, NV_OK, at most a page of entries, each above
// cursor and in strictly ascending order, NextCursor the last entry's key
// (or cursor when the page is empty), and More only with a full page.
// A reply that breaks any of these is an error naming the rule: the bytes
// come from the kernel, and a misbuilt series must not make discovery loop
// or report garbage.
func DecodeQueryTSGs(b []byte, cursor uint64) (TSGPage, error) {
	var p NV_GPREEMPT_QUERY_TSGS_PARAMS
	if err := DecodeParams(b, &p); err != nil {
		return TSGPage{}, fmt.Errorf("gpreempt query reply: %w", err)
	}
	if s := NvStatus(p.Status); s != NV_OK {
		return TSGPage{}, s.Err("gpreempt query")
	}
	switch {
	case p.Count > NV_GPREEMPT_QUERY_TSGS_MAX:
		return TSGPage{}, fmt.Errorf("gpreempt query reply: count %d above the page size %d", p.Count, NV_GPREEMPT_QUERY_TSGS_MAX)
	case p.BMore > 1:
		return TSGPage{}, fmt.Errorf("gpreempt query reply: bMore %d is not a boolean", p.BMore)
	case p.BMore == 1 && p.Count != NV_GPREEMPT_QUERY_TSGS_MAX:
		return TSGPage{}, fmt.Errorf("gpreempt query reply: more to come after a page of %d", p.Count)
	}
	page := TSGPage{NextCursor: p.NextCursor, More: p.BMore == 1}
	prev := cursor
	for i, t := range p.Tsgs[:p.Count] {
		if t.Key() <= prev {
			return TSGPage{}, fmt.Errorf("gpreempt query reply: entry %d (%v/%v) is not above %#x", i, t.HClient, t.HTsg, prev)
		}
		prev = t.Key()
		page.TSGs = append(page.TSGs, t)
	}
	if page.NextCursor != prev {
		return TSGPage{}, fmt.Errorf("gpreempt query reply: next cursor %#x, want %#x", page.NextCursor, prev)
	}
	return page, nil
}

// Escaper issues one raw RM escape with arg as its parameter block, the
// way the driver sees it: the request carries the escape number and
// len(arg), the driver copies arg in and back out. *FD implements it;
// internal/rmfake implements it for both a stock and a patched driver.
type Escaper interface {
	Escape(nr uint32, arg []byte) error
}

// Escape issues escape nr on f with arg as its parameter block.
func (f *FD) Escape(nr uint32, arg []byte) error {
	if len(arg) == 0 {
		return f.ioctl(nr, nil, 0)
	}
	return f.ioctl(nr, ptrOf(&arg[0]), uintptr(len(arg)))
}

// QueryTSGs issues NV_ESC_RM_GPREEMPT_QUERY_TSGS for one page of pid's
// groups (pid 0: every process the caller may act on) above cursor, and
// checks the reply (DecodeQueryTSGs). A driver without the escape gives
// ErrNoGpreemptEscapes.
func QueryTSGs(e Escaper, pid uint32, cursor uint64) (TSGPage, error) {
	p := NV_GPREEMPT_QUERY_TSGS_PARAMS{Pid: pid, Cursor: cursor, Status: statusUnset}
	b := Bytes(&p)
	if err := gpreemptEscape(e, NV_ESC_RM_GPREEMPT_QUERY_TSGS, b, &p.Status); err != nil {
		return TSGPage{}, fmt.Errorf("gpreempt query pid %d: %w", pid, err)
	}
	return DecodeQueryTSGs(b, cursor)
}

// SetTSG issues NV_ESC_RM_GPREEMPT_SET_TSG. The driver writes p.DoneFlags
// and p.Status; a status other than NV_OK is returned as a *StatusError.
func SetTSG(e Escaper, p *NV_GPREEMPT_SET_TSG_PARAMS) error {
	p.Status, p.DoneFlags = statusUnset, 0
	op := fmt.Sprintf("gpreempt set pid %d %v/%v", p.Pid, p.HClient, p.HTsg)
	if err := gpreemptEscape(e, NV_ESC_RM_GPREEMPT_SET_TSG, Bytes(p), &p.Status); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return NvStatus(p.Status).Err(op)
}

// gpreemptEscape issues one of the escapes and tells a driver that lacks
// it from other failures: EINVAL (every stock branch) or ENOTTY (a file
// that is not the NVIDIA control node) with the status still unset.
func gpreemptEscape(e Escaper, nr uint32, arg []byte, status *uint32) error {
	err := e.Escape(nr, arg)
	switch {
	case err == nil && *status == statusUnset:
		return fmt.Errorf("escape %#x returned without a status", nr)
	case err == nil:
		return nil
	case (errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOTTY)) && *status == statusUnset:
		return fmt.Errorf("%w (escape %#x: %w)", ErrNoGpreemptEscapes, nr, err)
	}
	return fmt.Errorf("escape %#x: %w", nr, err)
}

// From src/common/sdk/nvidia/inc/class/cl2080_notification.h (the engine
// types QUERY reports). COPY10..COPY19 are 580.x's; 550.x reserves those
// values and never reports them, so one test serves every branch.
const (
	NV2080_ENGINE_TYPE_NULL     = 0x00000000
	NV2080_ENGINE_TYPE_GRAPHICS = 0x00000001
	NV2080_ENGINE_TYPE_GR0      = NV2080_ENGINE_TYPE_GRAPHICS
	NV2080_ENGINE_TYPE_COPY0    = 0x00000009
	NV2080_ENGINE_TYPE_COPY9    = 0x00000012
	NV2080_ENGINE_TYPE_COPY10   = 0x00000034
	NV2080_ENGINE_TYPE_COPY19   = 0x0000003d
	NV2080_ENGINE_TYPE_GR_SIZE  = 8
)

// NV2080EngineTypeIsGR is NV2080_ENGINE_TYPE_IS_GR: a graphics/compute
// engine, where libcuda's compute channel group runs.
func NV2080EngineTypeIsGR(t uint32) bool {
	return t >= NV2080_ENGINE_TYPE_GR0 && t < NV2080_ENGINE_TYPE_GR0+NV2080_ENGINE_TYPE_GR_SIZE
}

// NV2080EngineTypeIsCopy is NV2080_ENGINE_TYPE_IS_COPY: a copy engine.
func NV2080EngineTypeIsCopy(t uint32) bool {
	return (t >= NV2080_ENGINE_TYPE_COPY0 && t <= NV2080_ENGINE_TYPE_COPY9) ||
		(t >= NV2080_ENGINE_TYPE_COPY10 && t <= NV2080_ENGINE_TYPE_COPY19)
}
