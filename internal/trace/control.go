package trace

import (
	"encoding/binary"

	"github.com/gpreempt/gpreempt/ioctl"
)

// head decodes a control's parameter block into p with ioctl's decoder.
// The tracer copies a fixed head of the block, so b may be longer than the
// block; the call's own size must be p's exactly, since RM takes only
// blocks of exactly the right size.
func head[T any](c *Control, b []byte, p *T) bool {
	size := binary.Size(p)
	if size <= 0 || int(c.ParamsSize) != size || len(b) < size {
		return false
	}
	return ioctl.DecodeParams(b[:size], p) == nil
}

// setOrGet decodes p from a SET control's input or the matching GET
// control's output; false for any other command or a short head.
func setOrGet[P any](c *Control, set, get uint32, p *P) bool {
	switch c.Cmd {
	case set:
		return head(c, c.In, p)
	case get:
		return head(c, c.Out, p)
	}
	return false
}

// TimesliceUs is the timeslice a SET_TIMESLICE asked for or a
// GET_TIMESLICE returned, in microseconds.
func (c *Control) TimesliceUs() (uint64, bool) {
	var p ioctl.NVA06C_CTRL_TIMESLICE_PARAMS
	ok := setOrGet(c, ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, &p)
	return p.TimesliceUs, ok
}

// InterleaveLevel is the level a SET_INTERLEAVE_LEVEL asked for or a
// GET_INTERLEAVE_LEVEL returned (NVA06C_CTRL_INTERLEAVE_LEVEL_*).
func (c *Control) InterleaveLevel() (uint32, bool) {
	var p ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS
	ok := setOrGet(c, ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, &p)
	return p.TsgInterleaveLevel, ok
}

// ScheduleEnable is GPFIFO_SCHEDULE's bEnable: true puts the group on the
// runlist, false takes it off. Both the pre-575 two-byte block and the
// three-byte one are accepted.
func (c *Control) ScheduleEnable() (bool, bool) {
	if c.Cmd != ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE {
		return false, false
	}
	var p575 ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575
	if head(c, c.In, &p575) {
		return p575.BEnable != 0, true
	}
	var p ioctl.NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS
	if head(c, c.In, &p) {
		return p.BEnable != 0, true
	}
	return false, false
}

// Preempt is PREEMPT's parameter block as the caller passed it.
func (c *Control) Preempt() (ioctl.NVA06C_CTRL_PREEMPT_PARAMS, bool) {
	var p ioctl.NVA06C_CTRL_PREEMPT_PARAMS
	if c.Cmd != ioctl.NVA06C_CTRL_CMD_PREEMPT {
		return p, false
	}
	ok := head(c, c.In, &p)
	return p, ok
}
