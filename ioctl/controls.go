package ioctl

import (
	"encoding/binary"
	"fmt"
)

// controlInfo is what gpreempt knows of one RM control command: its NVIDIA
// name and the size of its parameter block. NV_ESC_RM_CONTROL checks the
// size exactly (NV_ERR_INVALID_PARAM_STRUCT), so the size is part of the ABI.
type controlInfo struct {
	name string
	// params is a zero value of the command's parameter block in the first
	// ABI; params575 replaces it from the 575 ABI on where the layout grew.
	params    any
	params575 any
}

// controls lists every RM control gpreempt issues, traces or fakes. Adding a
// command here is what makes ControlName, ControlByName and ABI.ParamSize
// know it; layout_test.go checks every block listed is an ABI struct.
var controls = map[uint32]controlInfo{
	NVA06C_CTRL_CMD_NULL:                 {name: "NVA06C_CTRL_CMD_NULL"},
	NVA06C_CTRL_CMD_BIND:                 {name: "NVA06C_CTRL_CMD_BIND"},
	NVA06C_CTRL_CMD_GPFIFO_SCHEDULE:      {name: "NVA06C_CTRL_CMD_GPFIFO_SCHEDULE", params: NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS{}, params575: NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575{}},
	NVA06C_CTRL_CMD_SET_TIMESLICE:        {name: "NVA06C_CTRL_CMD_SET_TIMESLICE", params: NVA06C_CTRL_TIMESLICE_PARAMS{}},
	NVA06C_CTRL_CMD_GET_TIMESLICE:        {name: "NVA06C_CTRL_CMD_GET_TIMESLICE", params: NVA06C_CTRL_TIMESLICE_PARAMS{}},
	NVA06C_CTRL_CMD_PREEMPT:              {name: "NVA06C_CTRL_CMD_PREEMPT", params: NVA06C_CTRL_PREEMPT_PARAMS{}},
	NVA06C_CTRL_CMD_GET_INFO:             {name: "NVA06C_CTRL_CMD_GET_INFO", params: NVA06C_CTRL_GET_INFO_PARAMS{}},
	NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL: {name: "NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL", params: NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{}},
	NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL: {name: "NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL", params: NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{}},

	NV2080_CTRL_CMD_GPU_GET_ID: {name: "NV2080_CTRL_CMD_GPU_GET_ID", params: NV2080_CTRL_GPU_GET_ID_PARAMS{}},

	NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE:        {name: "NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE"},
	NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO:            {name: "NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO", params: NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{}},
	NV0000_CTRL_CMD_CLIENT_GET_ACCESS_RIGHTS:          {name: "NV0000_CTRL_CMD_CLIENT_GET_ACCESS_RIGHTS"},
	NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY: {name: "NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY"},
	NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE:           {name: "NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE", params: NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS{}},
	NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT:               {name: "NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT"},
	NV0000_CTRL_CMD_CLIENT_OBJECTS_ARE_DUPLICATES:     {name: "NV0000_CTRL_CMD_CLIENT_OBJECTS_ARE_DUPLICATES"},
}

// ControlName is NVIDIA's name of an RM control command, or its number in
// hex for a command this package does not know.
func ControlName(cmd uint32) string {
	if c, ok := controls[cmd]; ok {
		return c.name
	}
	return fmt.Sprintf("%#08x", cmd)
}

// ControlByName finds a control command by its NVIDIA name.
func ControlByName(name string) (uint32, bool) {
	for cmd, c := range controls {
		if c.name == name {
			return cmd, true
		}
	}
	return 0, false
}

// ControlClass is the class whose objects a control is issued on: the
// high 16 bits of the command (NV0000 commands go to a client, whose class
// is NV01_ROOT).
func ControlClass(cmd uint32) uint32 { return cmd >> 16 }

// IsChannelGroupControl reports whether cmd is a control of the channel
// group class (KEPLER_CHANNEL_GROUP_A), issued on a TSG handle.
func IsChannelGroupControl(cmd uint32) bool { return ControlClass(cmd) == KEPLER_CHANNEL_GROUP_A }

// ParamSize is the exact parameter-block size RM expects for cmd in this
// ABI; false for a command whose parameters this package does not define.
func (a ABI) ParamSize(cmd uint32) (int, bool) {
	c, ok := controls[cmd]
	if !ok || c.params == nil {
		return 0, false
	}
	p := c.params
	if a.ScheduleSkipEnable && c.params575 != nil {
		p = c.params575
	}
	return binary.Size(p), true
}
