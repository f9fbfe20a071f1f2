package ioctl

import "structs"

// From kernel-open/common/inc/nv-ioctl-numbers.h:
const (
	NV_IOCTL_MAGIC = 'F'
	NV_IOCTL_BASE  = 200

	NV_ESC_CARD_INFO           = NV_IOCTL_BASE + 0
	NV_ESC_REGISTER_FD         = NV_IOCTL_BASE + 1
	NV_ESC_ALLOC_OS_EVENT      = NV_IOCTL_BASE + 6
	NV_ESC_FREE_OS_EVENT       = NV_IOCTL_BASE + 7
	NV_ESC_STATUS_CODE         = NV_IOCTL_BASE + 9
	NV_ESC_CHECK_VERSION_STR   = NV_IOCTL_BASE + 10
	NV_ESC_IOCTL_XFER_CMD      = NV_IOCTL_BASE + 11
	NV_ESC_ATTACH_GPUS_TO_FD   = NV_IOCTL_BASE + 12
	NV_ESC_QUERY_DEVICE_INTR   = NV_IOCTL_BASE + 13
	NV_ESC_SYS_PARAMS          = NV_IOCTL_BASE + 14
	NV_ESC_EXPORT_TO_DMABUF_FD = NV_IOCTL_BASE + 17
	NV_ESC_WAIT_OPEN_COMPLETE  = NV_IOCTL_BASE + 18
)

// From src/nvidia/arch/nvalloc/unix/include/nv_escape.h:
const (
	NV_ESC_RM_ALLOC_MEMORY               = 0x27
	NV_ESC_RM_ALLOC_OBJECT               = 0x28
	NV_ESC_RM_FREE                       = 0x29
	NV_ESC_RM_CONTROL                    = 0x2A
	NV_ESC_RM_ALLOC                      = 0x2B
	NV_ESC_RM_CONFIG_GET                 = 0x32
	NV_ESC_RM_CONFIG_SET                 = 0x33
	NV_ESC_RM_DUP_OBJECT                 = 0x34
	NV_ESC_RM_SHARE                      = 0x35
	NV_ESC_RM_CONFIG_GET_EX              = 0x37
	NV_ESC_RM_CONFIG_SET_EX              = 0x38
	NV_ESC_RM_I2C_ACCESS                 = 0x39
	NV_ESC_RM_IDLE_CHANNELS              = 0x41
	NV_ESC_RM_VID_HEAP_CONTROL           = 0x4A
	NV_ESC_RM_ACCESS_REGISTRY            = 0x4D
	NV_ESC_RM_MAP_MEMORY                 = 0x4E
	NV_ESC_RM_UNMAP_MEMORY               = 0x4F
	NV_ESC_RM_GET_EVENT_DATA             = 0x52
	NV_ESC_RM_ALLOC_CONTEXT_DMA2         = 0x54
	NV_ESC_RM_ADD_VBLANK_CALLBACK        = 0x56
	NV_ESC_RM_MAP_MEMORY_DMA             = 0x57
	NV_ESC_RM_UNMAP_MEMORY_DMA           = 0x58
	NV_ESC_RM_BIND_CONTEXT_DMA           = 0x59
	NV_ESC_RM_EXPORT_OBJECT_TO_FD        = 0x5C
	NV_ESC_RM_IMPORT_OBJECT_FROM_FD      = 0x5D
	NV_ESC_RM_UPDATE_DEVICE_MAPPING_INFO = 0x5E
	NV_ESC_RM_LOCKLESS_DIAGNOSTIC        = 0x5F
)

// IOWR builds the request number of an RM escape the way the driver's users
// do (_IOWR(NV_IOCTL_MAGIC, nr, size)). The driver itself decodes only the
// number and the size, and rejects a size that does not match the escape's
// parameter block exactly.
func IOWR(nr, size uint32) uint32 {
	const (
		iocWrite = 1
		iocRead  = 2
	)
	return (iocRead|iocWrite)<<30 | (size&0x3fff)<<16 | NV_IOCTL_MAGIC<<8 | (nr & 0xff)
}

// IOCNr and IOCSize take an ioctl request number apart (_IOC_NR, _IOC_SIZE).
func IOCNr(req uint32) uint32   { return req & 0xff }
func IOCSize(req uint32) uint32 { return (req >> 16) & 0x3fff }
func IOCType(req uint32) uint32 { return (req >> 8) & 0xff }

// From src/common/sdk/nvidia/inc/nvos.h:

// NVOS00_PARAMETERS is the parameter block of NV_ESC_RM_FREE.
type NVOS00_PARAMETERS struct {
	_             structs.HostLayout
	HRoot         Handle
	HObjectParent Handle
	HObjectOld    Handle
	Status        uint32
}

// NVOS21_PARAMETERS is the short form of NV_ESC_RM_ALLOC.
type NVOS21_PARAMETERS struct {
	_             structs.HostLayout
	HRoot         Handle
	HObjectParent Handle
	HObjectNew    Handle
	HClass        uint32
	PAllocParms   P64
	ParamsSize    uint32
	Status        uint32
}

// NVOS54_PARAMETERS is the parameter block of NV_ESC_RM_CONTROL.
type NVOS54_PARAMETERS struct {
	_          structs.HostLayout
	HClient    Handle
	HObject    Handle
	Cmd        uint32
	Flags      uint32
	Params     P64
	ParamsSize uint32
	Status     uint32
}

// NVOS64_PARAMETERS is the long form of NV_ESC_RM_ALLOC, the one libcuda
// uses: it adds requested access rights and FINN serialisation flags.
type NVOS64_PARAMETERS struct {
	_                structs.HostLayout
	HRoot            Handle
	HObjectParent    Handle
	HObjectNew       Handle
	HClass           uint32
	PAllocParms      P64
	PRightsRequested P64
	ParamsSize       uint32
	Flags            uint32
	Status           uint32
	_                uint32
}

// From kernel-open/common/inc/nv-ioctl.h:
const (
	NV_RM_API_VERSION_STRING_LENGTH = 64

	NV_RM_API_VERSION_CMD_STRICT  = 0
	NV_RM_API_VERSION_CMD_RELAXED = '1'
	NV_RM_API_VERSION_CMD_QUERY   = '2'

	NV_RM_API_VERSION_REPLY_UNRECOGNIZED = 0
	NV_RM_API_VERSION_REPLY_RECOGNIZED   = 1
)

// NV_IOCTL_RM_API_VERSION is nv_ioctl_rm_api_version_t, the parameter block
// of NV_ESC_CHECK_VERSION_STR. With Cmd = NV_RM_API_VERSION_CMD_QUERY the
// driver writes its own version string into VersionString.
type NV_IOCTL_RM_API_VERSION struct {
	_             structs.HostLayout
	Cmd           uint32
	Reply         uint32
	VersionString [NV_RM_API_VERSION_STRING_LENGTH]byte
}
