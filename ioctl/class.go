package ioctl

// Class IDs (hClass of NV_ESC_RM_ALLOC) that channel-group discovery meets.
// From src/common/sdk/nvidia/inc/class/*.h (cl0000.h, cl0080.h, cl2080.h,
// cla06c.h, cl9067.h, clc36f.h ... clca6f.h, clc3c0.h ... clcec0.h,
// clc3b5.h ... clcab5.h), identical in 535.x through 595.x.
const (
	NV01_ROOT              = 0x00000000
	NV01_ROOT_NON_PRIV     = 0x00000001
	NV01_ROOT_CLIENT       = 0x00000041
	NV01_DEVICE_0          = 0x00000080
	NV20_SUBDEVICE_0       = 0x00002080
	NV01_EVENT             = 0x00000005
	NV01_EVENT_OS_EVENT    = 0x00000079
	NV01_MEMORY_SYSTEM     = 0x0000003E
	NV01_MEMORY_LOCAL_USER = 0x00000040
	NV50_MEMORY_VIRTUAL    = 0x000050A0
	FERMI_VASPACE_A        = 0x000090F1
	GT200_DEBUGGER         = 0x000083DE

	// KEPLER_CHANNEL_GROUP_A is the channel group (TSG) class of every GPU
	// from Kepler to Blackwell.
	KEPLER_CHANNEL_GROUP_A = 0x0000A06C
	// FERMI_CONTEXT_SHARE_A (a subcontext) is allocated under the compute
	// TSG only.
	FERMI_CONTEXT_SHARE_A = 0x00009067

	VOLTA_CHANNEL_GPFIFO_A     = 0x0000C36F
	TURING_CHANNEL_GPFIFO_A    = 0x0000C46F
	AMPERE_CHANNEL_GPFIFO_A    = 0x0000C56F
	HOPPER_CHANNEL_GPFIFO_A    = 0x0000C86F
	BLACKWELL_CHANNEL_GPFIFO_A = 0x0000C96F
	BLACKWELL_CHANNEL_GPFIFO_B = 0x0000CA6F

	VOLTA_COMPUTE_A     = 0x0000C3C0
	TURING_COMPUTE_A    = 0x0000C5C0
	AMPERE_COMPUTE_A    = 0x0000C6C0
	AMPERE_COMPUTE_B    = 0x0000C7C0
	ADA_COMPUTE_A       = 0x0000C9C0
	HOPPER_COMPUTE_A    = 0x0000CBC0
	BLACKWELL_COMPUTE_A = 0x0000CDC0
	BLACKWELL_COMPUTE_B = 0x0000CEC0

	VOLTA_DMA_COPY_A     = 0x0000C3B5
	TURING_DMA_COPY_A    = 0x0000C5B5
	AMPERE_DMA_COPY_A    = 0x0000C6B5
	AMPERE_DMA_COPY_B    = 0x0000C7B5
	HOPPER_DMA_COPY_A    = 0x0000C8B5
	BLACKWELL_DMA_COPY_A = 0x0000C9B5
	BLACKWELL_DMA_COPY_B = 0x0000CAB5
)

// IsChannelGroupClass reports whether class is a TSG class.
func IsChannelGroupClass(class uint32) bool { return class == KEPLER_CHANNEL_GROUP_A }

// IsChannelClass reports whether class is a GPFIFO channel class of
// Volta..Blackwell.
func IsChannelClass(class uint32) bool {
	switch class {
	case VOLTA_CHANNEL_GPFIFO_A, TURING_CHANNEL_GPFIFO_A, AMPERE_CHANNEL_GPFIFO_A,
		HOPPER_CHANNEL_GPFIFO_A, BLACKWELL_CHANNEL_GPFIFO_A, BLACKWELL_CHANNEL_GPFIFO_B:
		return true
	}
	return false
}

// IsComputeClass reports whether class is a compute engine class of
// Volta..Blackwell.
func IsComputeClass(class uint32) bool {
	switch class {
	case VOLTA_COMPUTE_A, TURING_COMPUTE_A, AMPERE_COMPUTE_A, AMPERE_COMPUTE_B,
		ADA_COMPUTE_A, HOPPER_COMPUTE_A, BLACKWELL_COMPUTE_A, BLACKWELL_COMPUTE_B:
		return true
	}
	return false
}

// IsCopyClass reports whether class is a copy engine class of
// Volta..Blackwell.
func IsCopyClass(class uint32) bool {
	switch class {
	case VOLTA_DMA_COPY_A, TURING_DMA_COPY_A, AMPERE_DMA_COPY_A, AMPERE_DMA_COPY_B,
		HOPPER_DMA_COPY_A, BLACKWELL_DMA_COPY_A, BLACKWELL_DMA_COPY_B:
		return true
	}
	return false
}

// NVOC internal class ids. NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE matches
// its classId field against these (refFindChildOfType walks the parent's
// childRefMap, which is keyed by internal class), not against the external
// class numbers above: asking it for NV01_DEVICE_0 (0x80) finds nothing.
// From src/nvidia/generated/g_device_nvoc.h and
// g_kernel_channel_group_api_nvoc.h, identical in 535.x through 595.x.
const (
	NVOC_CLASS_ID_Device                = 0xe0ac20
	NVOC_CLASS_ID_KernelChannelGroupApi = 0x2b5b80
	// From g_subdevice_nvoc.h.
	NVOC_CLASS_ID_Subdevice = 0x4b01b3
)
