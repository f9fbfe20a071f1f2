package ioctl

import "structs"

// From src/common/sdk/nvidia/inc/ctrl/ctrla06c.h (KEPLER_CHANNEL_GROUP_A):
const (
	NVA06C_CTRL_CMD_NULL                 = 0xa06c0000
	NVA06C_CTRL_CMD_GPFIFO_SCHEDULE      = 0xa06c0101
	NVA06C_CTRL_CMD_BIND                 = 0xa06c0102
	NVA06C_CTRL_CMD_SET_TIMESLICE        = 0xa06c0103
	NVA06C_CTRL_CMD_GET_TIMESLICE        = 0xa06c0104
	NVA06C_CTRL_CMD_PREEMPT              = 0xa06c0105
	NVA06C_CTRL_CMD_GET_INFO             = 0xa06c0106
	NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL = 0xa06c0107
	NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL = 0xa06c0108

	NVA06C_CTRL_INTERLEAVE_LEVEL_LOW    = 0
	NVA06C_CTRL_INTERLEAVE_LEVEL_MEDIUM = 1
	NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH   = 2

	// NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US caps PREEMPT's timeoutUs.
	NVA06C_CTRL_CMD_PREEMPT_MAX_MANUAL_TIMEOUT_US = 1000000
)

// NVA06C_CTRL_TIMESLICE_PARAMS is the parameter block of SET_TIMESLICE and
// GET_TIMESLICE. RM rounds a set value down to what the hardware can do but
// GET returns the value that was set.
type NVA06C_CTRL_TIMESLICE_PARAMS struct {
	_           structs.HostLayout
	TimesliceUs uint64
}

// NVA06C_CTRL_PREEMPT_PARAMS is the parameter block of PREEMPT.
type NVA06C_CTRL_PREEMPT_PARAMS struct {
	_              structs.HostLayout
	BWait          uint8
	BManualTimeout uint8
	_              [2]byte
	TimeoutUs      uint32
}

// NVA06C_CTRL_GET_INFO_PARAMS is the parameter block of GET_INFO.
type NVA06C_CTRL_GET_INFO_PARAMS struct {
	_     structs.HostLayout
	TsgID uint32
}

// NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS is the parameter block of
// SET_INTERLEAVE_LEVEL and GET_INTERLEAVE_LEVEL.
type NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS struct {
	_                  structs.HostLayout
	TsgInterleaveLevel uint32
}

// From src/common/sdk/nvidia/inc/ctrl/ctrla06f/ctrla06fgpfifo.h
// (NVA06C_CTRL_GPFIFO_SCHEDULE_PARAMS is a typedef of this):

// NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS is the layout of 535.x through 570.x.
type NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS struct {
	_           structs.HostLayout
	BEnable     uint8
	BSkipSubmit uint8
}

// NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575 is the layout since 575.51: a
// third byte, bSkipEnable. RM checks the size exactly, so the old layout is
// refused by new drivers and vice versa.
type NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575 struct {
	_           structs.HostLayout
	BEnable     uint8
	BSkipSubmit uint8
	BSkipEnable uint8
}

// From src/common/sdk/nvidia/inc/ctrl/ctrl0000/ctrl0000client.h
// (NV01_ROOT_CLIENT controls, issued on the client handle itself):
const (
	NV0000_CTRL_CMD_CLIENT_GET_ADDR_SPACE_TYPE        = 0xd01
	NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO            = 0xd02
	NV0000_CTRL_CMD_CLIENT_GET_ACCESS_RIGHTS          = 0xd03
	NV0000_CTRL_CMD_CLIENT_SET_INHERITED_SHARE_POLICY = 0xd04
	NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE           = 0xd05
	NV0000_CTRL_CMD_CLIENT_SHARE_OBJECT               = 0xd06
	NV0000_CTRL_CMD_CLIENT_OBJECTS_ARE_DUPLICATES     = 0xd07

	NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_INVALID = 0
	NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_PARENT  = 1
	NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO_INDEX_CLASSID = 2
)

// NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS asks what hObject is within the
// client: its parent (index PARENT, result a handle in the low 32 bits of
// Data) or its class (index CLASSID). The export table marks it
// NON_PRIVILEGED, NO_GPUS_LOCK and API_LOCK_READONLY: cheap, and it never
// reaches the GSP.
type NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS struct {
	_       structs.HostLayout
	HObject Handle
	Index   uint32
	// Data is the union { NvHandle hResult; NvU64 iResult; }.
	Data uint64
}

// NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS returns one child of class
// ClassID under HParent (HObject 0 if none).
type NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS struct {
	_       structs.HostLayout
	HParent Handle
	ClassID uint32
	HObject Handle
}

// From src/common/sdk/nvidia/inc/ctrl/ctrl2080/ctrl2080gpu.h
// (NV20_SUBDEVICE_0 controls), identical in 535.x through 595.x:
const NV2080_CTRL_CMD_GPU_GET_ID = 0x20800142

// NV2080_CTRL_GPU_GET_ID_PARAMS returns the gpuId of the subdevice's GPU:
// the id RM uses for it everywhere (NV0000_CTRL_CMD_GPU_GET_ID_INFO, and
// the GpuID gpreempt's QUERY escape reports). The export table marks it
// NON_PRIVILEGED; it is answered by the kernel-side RM, without a GSP
// round trip.
type NV2080_CTRL_GPU_GET_ID_PARAMS struct {
	_     structs.HostLayout
	GpuID uint32
}

// From src/common/sdk/nvidia/inc/nvlimits.h:
const NV_PROC_NAME_MAX_LENGTH = 100

// From src/common/sdk/nvidia/inc/class/cl0000.h:

// NV0000_ALLOC_PARAMETERS are the allocation parameters of an
// NV01_ROOT_CLIENT; RM writes the chosen client handle into HClient.
type NV0000_ALLOC_PARAMETERS struct {
	_           structs.HostLayout
	HClient     Handle
	ProcessID   uint32
	ProcessName [NV_PROC_NAME_MAX_LENGTH]byte
	_           [4]byte
	POsPidInfo  P64
}
