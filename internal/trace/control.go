package trace

import (
	"encoding/binary"
	"fmt"

	"github.com/gpreempt/gpreempt/ioctl"
)

// controlNames are the RM controls the tracer names; others print in hex.
var controlNames = map[uint32]string{
	ioctl.NVA06C_CTRL_CMD_NULL:                 "NVA06C_CTRL_CMD_NULL",
	ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:      "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE",
	ioctl.NVA06C_CTRL_CMD_BIND:                 "NVA06C_CTRL_CMD_BIND",
	ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE:        "NVA06C_CTRL_CMD_SET_TIMESLICE",
	ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE:        "NVA06C_CTRL_CMD_GET_TIMESLICE",
	ioctl.NVA06C_CTRL_CMD_PREEMPT:              "NVA06C_CTRL_CMD_PREEMPT",
	ioctl.NVA06C_CTRL_CMD_GET_INFO:             "NVA06C_CTRL_CMD_GET_INFO",
	ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL: "NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL",
	ioctl.NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL: "NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL",

	ioctl.NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE:        "NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE",
	ioctl.NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO:            "NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO",
	ioctl.NV0000_CTRL_CMD_CLIENT_GET_ACCESS_RIGHTS:          "NV0000_CTRL_CMD_CLIENT_GET_ACCESS_RIGHTS",
	ioctl.NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY: "NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY",
	ioctl.NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE:           "NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE",
	ioctl.NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT:               "NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT",
	ioctl.NV0000_CTRL_CMD_CLIENT_OBJECTS_ARE_DUPLICATES:     "NV0000_CTRL_CMD_CLIENT_OBJECTS_ARE_DUPLICATES",
}

// ControlName is NVIDIA's name of an RM control command, or its number in
// hex when the tracer does not know it.
func ControlName(cmd uint32) string {
	if n, ok := controlNames[cmd]; ok {
		return n
	}
	return fmt.Sprintf("%#08x", cmd)
}

// ControlByName finds a control command by its NVIDIA name.
func ControlByName(name string) (uint32, bool) {
	for cmd, n := range controlNames {
		if n == name {
			return cmd, true
		}
	}
	return 0, false
}

// IsChannelGroupControl reports whether cmd is a control of the channel
// group class (KEPLER_CHANNEL_GROUP_A), issued on a TSG handle.
func IsChannelGroupControl(cmd uint32) bool { return cmd>>16 == ioctl.KEPLER_CHANNEL_GROUP_A }

// head decodes a control's parameter head into p, which must be the whole
// parameter block: RM takes only blocks of exactly the right size.
func head[T any](c *Control, b []byte, p *T) bool {
	size := binary.Size(p)
	if size <= 0 || int(c.ParamsSize) != size || len(b) < size {
		return false
	}
	_, err := binary.Decode(b, binary.NativeEndian, p)
	return err == nil
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
