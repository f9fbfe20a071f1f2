package ioctl

import "fmt"

// NvStatus is NV_STATUS, the NvU32 result the RM writes into the Status field
// of an NVOSxx_PARAMETERS block. It is a second failure channel beside the
// ioctl's errno: the syscall can succeed while the RM call it carried failed.
//
// NvStatus implements error so that a bare status can be matched with
// errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT); callers normally receive it
// inside a *StatusError from Err, which adds the operation that failed.
type NvStatus uint32

// The constants and the statusCodes580 table below are generated from the
// header, not typed by hand, and must be regenerated the same way:
//
//	H=src/common/sdk/nvidia/inc/nvstatuscodes.h
//	git show 580.142:$H | sed -nE '/^NV_STATUS_CODE/,/^#endif/{
//	  s@^NV_STATUS_CODE\((\w+), +(0x\w+), .*\)( +// *(.*))?$@\t\1 NvStatus = \2 // \4@
//	  s@ // $@@; s@^(// .*)@\t\1@; /^#/d; p}'               # const block
//	git show 580.142:$H | sed -nE \
//	  's@^NV_STATUS_CODE\((\w+), +(0x\w+), +(".*")\).*@\t{\1, "\1", \3},@p' # table
//
// followed by gofmt. TestStatusTableMatchesHeader checks the result against
// the header itself when given its path (see nvstatus_test.go).

// From src/common/sdk/nvidia/inc/nvstatuscodes.h (580.142):
const (
	NV_OK          NvStatus = 0x00000000
	NV_ERR_GENERIC NvStatus = 0x0000FFFF

	NV_ERR_BROKEN_FB                       NvStatus = 0x00000001
	NV_ERR_BUFFER_TOO_SMALL                NvStatus = 0x00000002
	NV_ERR_BUSY_RETRY                      NvStatus = 0x00000003
	NV_ERR_CALLBACK_NOT_SCHEDULED          NvStatus = 0x00000004
	NV_ERR_CARD_NOT_PRESENT                NvStatus = 0x00000005
	NV_ERR_CYCLE_DETECTED                  NvStatus = 0x00000006
	NV_ERR_DMA_IN_USE                      NvStatus = 0x00000007
	NV_ERR_DMA_MEM_NOT_LOCKED              NvStatus = 0x00000008
	NV_ERR_DMA_MEM_NOT_UNLOCKED            NvStatus = 0x00000009
	NV_ERR_DUAL_LINK_INUSE                 NvStatus = 0x0000000A
	NV_ERR_ECC_ERROR                       NvStatus = 0x0000000B
	NV_ERR_FIFO_BAD_ACCESS                 NvStatus = 0x0000000C
	NV_ERR_FREQ_NOT_SUPPORTED              NvStatus = 0x0000000D
	NV_ERR_GPU_DMA_NOT_INITIALIZED         NvStatus = 0x0000000E
	NV_ERR_GPU_IS_LOST                     NvStatus = 0x0000000F
	NV_ERR_GPU_IN_FULLCHIP_RESET           NvStatus = 0x00000010
	NV_ERR_GPU_NOT_FULL_POWER              NvStatus = 0x00000011
	NV_ERR_GPU_UUID_NOT_FOUND              NvStatus = 0x00000012
	NV_ERR_HOT_SWITCH                      NvStatus = 0x00000013
	NV_ERR_I2C_ERROR                       NvStatus = 0x00000014
	NV_ERR_I2C_SPEED_TOO_HIGH              NvStatus = 0x00000015
	NV_ERR_ILLEGAL_ACTION                  NvStatus = 0x00000016
	NV_ERR_IN_USE                          NvStatus = 0x00000017
	NV_ERR_INFLATE_COMPRESSED_DATA_FAILED  NvStatus = 0x00000018
	NV_ERR_INSERT_DUPLICATE_NAME           NvStatus = 0x00000019
	NV_ERR_INSUFFICIENT_RESOURCES          NvStatus = 0x0000001A
	NV_ERR_INSUFFICIENT_PERMISSIONS        NvStatus = 0x0000001B
	NV_ERR_INSUFFICIENT_POWER              NvStatus = 0x0000001C
	NV_ERR_INVALID_ACCESS_TYPE             NvStatus = 0x0000001D
	NV_ERR_INVALID_ADDRESS                 NvStatus = 0x0000001E
	NV_ERR_INVALID_ARGUMENT                NvStatus = 0x0000001F
	NV_ERR_INVALID_BASE                    NvStatus = 0x00000020
	NV_ERR_INVALID_CHANNEL                 NvStatus = 0x00000021
	NV_ERR_INVALID_CLASS                   NvStatus = 0x00000022
	NV_ERR_INVALID_CLIENT                  NvStatus = 0x00000023
	NV_ERR_INVALID_COMMAND                 NvStatus = 0x00000024
	NV_ERR_INVALID_DATA                    NvStatus = 0x00000025
	NV_ERR_INVALID_DEVICE                  NvStatus = 0x00000026
	NV_ERR_INVALID_DMA_SPECIFIER           NvStatus = 0x00000027
	NV_ERR_INVALID_EVENT                   NvStatus = 0x00000028
	NV_ERR_INVALID_FLAGS                   NvStatus = 0x00000029
	NV_ERR_INVALID_FUNCTION                NvStatus = 0x0000002A
	NV_ERR_INVALID_HEAP                    NvStatus = 0x0000002B
	NV_ERR_INVALID_INDEX                   NvStatus = 0x0000002C
	NV_ERR_INVALID_IRQ_LEVEL               NvStatus = 0x0000002D
	NV_ERR_INVALID_LIMIT                   NvStatus = 0x0000002E
	NV_ERR_INVALID_LOCK_STATE              NvStatus = 0x0000002F
	NV_ERR_INVALID_METHOD                  NvStatus = 0x00000030
	NV_ERR_INVALID_OBJECT                  NvStatus = 0x00000031
	NV_ERR_INVALID_OBJECT_BUFFER           NvStatus = 0x00000032
	NV_ERR_INVALID_OBJECT_HANDLE           NvStatus = 0x00000033
	NV_ERR_INVALID_OBJECT_NEW              NvStatus = 0x00000034
	NV_ERR_INVALID_OBJECT_OLD              NvStatus = 0x00000035
	NV_ERR_INVALID_OBJECT_PARENT           NvStatus = 0x00000036
	NV_ERR_INVALID_OFFSET                  NvStatus = 0x00000037
	NV_ERR_INVALID_OPERATION               NvStatus = 0x00000038
	NV_ERR_INVALID_OWNER                   NvStatus = 0x00000039
	NV_ERR_INVALID_PARAM_STRUCT            NvStatus = 0x0000003A
	NV_ERR_INVALID_PARAMETER               NvStatus = 0x0000003B
	NV_ERR_INVALID_PATH                    NvStatus = 0x0000003C
	NV_ERR_INVALID_POINTER                 NvStatus = 0x0000003D
	NV_ERR_INVALID_REGISTRY_KEY            NvStatus = 0x0000003E
	NV_ERR_INVALID_REQUEST                 NvStatus = 0x0000003F
	NV_ERR_INVALID_STATE                   NvStatus = 0x00000040
	NV_ERR_INVALID_STRING_LENGTH           NvStatus = 0x00000041
	NV_ERR_INVALID_READ                    NvStatus = 0x00000042
	NV_ERR_INVALID_WRITE                   NvStatus = 0x00000043
	NV_ERR_INVALID_XLATE                   NvStatus = 0x00000044
	NV_ERR_IRQ_NOT_FIRING                  NvStatus = 0x00000045
	NV_ERR_IRQ_EDGE_TRIGGERED              NvStatus = 0x00000046
	NV_ERR_MEMORY_TRAINING_FAILED          NvStatus = 0x00000047
	NV_ERR_MISMATCHED_SLAVE                NvStatus = 0x00000048
	NV_ERR_MISMATCHED_TARGET               NvStatus = 0x00000049
	NV_ERR_MISSING_TABLE_ENTRY             NvStatus = 0x0000004A
	NV_ERR_MODULE_LOAD_FAILED              NvStatus = 0x0000004B
	NV_ERR_MORE_DATA_AVAILABLE             NvStatus = 0x0000004C
	NV_ERR_MORE_PROCESSING_REQUIRED        NvStatus = 0x0000004D
	NV_ERR_MULTIPLE_MEMORY_TYPES           NvStatus = 0x0000004E
	NV_ERR_NO_FREE_FIFOS                   NvStatus = 0x0000004F
	NV_ERR_NO_INTR_PENDING                 NvStatus = 0x00000050
	NV_ERR_NO_MEMORY                       NvStatus = 0x00000051
	NV_ERR_NO_SUCH_DOMAIN                  NvStatus = 0x00000052
	NV_ERR_NO_VALID_PATH                   NvStatus = 0x00000053
	NV_ERR_NOT_COMPATIBLE                  NvStatus = 0x00000054
	NV_ERR_NOT_READY                       NvStatus = 0x00000055
	NV_ERR_NOT_SUPPORTED                   NvStatus = 0x00000056
	NV_ERR_OBJECT_NOT_FOUND                NvStatus = 0x00000057
	NV_ERR_OBJECT_TYPE_MISMATCH            NvStatus = 0x00000058
	NV_ERR_OPERATING_SYSTEM                NvStatus = 0x00000059
	NV_ERR_OTHER_DEVICE_FOUND              NvStatus = 0x0000005A
	NV_ERR_OUT_OF_RANGE                    NvStatus = 0x0000005B
	NV_ERR_OVERLAPPING_UVM_COMMIT          NvStatus = 0x0000005C
	NV_ERR_PAGE_TABLE_NOT_AVAIL            NvStatus = 0x0000005D
	NV_ERR_PID_NOT_FOUND                   NvStatus = 0x0000005E
	NV_ERR_PROTECTION_FAULT                NvStatus = 0x0000005F
	NV_ERR_RC_ERROR                        NvStatus = 0x00000060
	NV_ERR_REJECTED_VBIOS                  NvStatus = 0x00000061
	NV_ERR_RESET_REQUIRED                  NvStatus = 0x00000062
	NV_ERR_STATE_IN_USE                    NvStatus = 0x00000063
	NV_ERR_SIGNAL_PENDING                  NvStatus = 0x00000064
	NV_ERR_TIMEOUT                         NvStatus = 0x00000065
	NV_ERR_TIMEOUT_RETRY                   NvStatus = 0x00000066
	NV_ERR_TOO_MANY_PRIMARIES              NvStatus = 0x00000067
	NV_ERR_UVM_ADDRESS_IN_USE              NvStatus = 0x00000068
	NV_ERR_MAX_SESSION_LIMIT_REACHED       NvStatus = 0x00000069
	NV_ERR_LIB_RM_VERSION_MISMATCH         NvStatus = 0x0000006A // Contained within the RMAPI library
	NV_ERR_PRIV_SEC_VIOLATION              NvStatus = 0x0000006B
	NV_ERR_GPU_IN_DEBUG_MODE               NvStatus = 0x0000006C
	NV_ERR_FEATURE_NOT_ENABLED             NvStatus = 0x0000006D
	NV_ERR_RESOURCE_LOST                   NvStatus = 0x0000006E
	NV_ERR_PMU_NOT_READY                   NvStatus = 0x0000006F
	NV_ERR_FLCN_ERROR                      NvStatus = 0x00000070
	NV_ERR_FATAL_ERROR                     NvStatus = 0x00000071
	NV_ERR_MEMORY_ERROR                    NvStatus = 0x00000072
	NV_ERR_INVALID_LICENSE                 NvStatus = 0x00000073
	NV_ERR_NVLINK_INIT_ERROR               NvStatus = 0x00000074
	NV_ERR_NVLINK_MINION_ERROR             NvStatus = 0x00000075
	NV_ERR_NVLINK_CLOCK_ERROR              NvStatus = 0x00000076
	NV_ERR_NVLINK_TRAINING_ERROR           NvStatus = 0x00000077
	NV_ERR_NVLINK_CONFIGURATION_ERROR      NvStatus = 0x00000078
	NV_ERR_RISCV_ERROR                     NvStatus = 0x00000079
	NV_ERR_FABRIC_MANAGER_NOT_PRESENT      NvStatus = 0x0000007A
	NV_ERR_ALREADY_SIGNALLED               NvStatus = 0x0000007B
	NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE   NvStatus = 0x0000007C
	NV_ERR_KEY_ROTATION_IN_PROGRESS        NvStatus = 0x0000007D
	NV_ERR_TEST_ONLY_CODE_NOT_ENABLED      NvStatus = 0x0000007E
	NV_ERR_SECURE_BOOT_FAILED              NvStatus = 0x0000007F
	NV_ERR_INSUFFICIENT_ZBC_ENTRY          NvStatus = 0x00000080
	NV_ERR_NVLINK_FABRIC_NOT_READY         NvStatus = 0x00000081
	NV_ERR_NVLINK_FABRIC_FAILURE           NvStatus = 0x00000082
	NV_ERR_GPU_MEMORY_ONLINING_FAILURE     NvStatus = 0x00000083
	NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE NvStatus = 0x00000084
	NV_ERR_THRESHOLD_CROSSED               NvStatus = 0x00000085
	NV_ERR_RESOURCE_RETIREMENT_ERROR       NvStatus = 0x00000086
	NV_ERR_FABRIC_STATE_OUT_OF_SYNC        NvStatus = 0x00000087
	NV_ERR_BUFFER_FULL                     NvStatus = 0x00000088
	NV_ERR_BUFFER_EMPTY                    NvStatus = 0x00000089
	NV_ERR_MC_FLA_OFFSET_TABLE_FULL        NvStatus = 0x0000008A
	NV_ERR_DMA_XFER_FAILED                 NvStatus = 0x0000008B

	// Warnings:
	NV_WARN_HOT_SWITCH               NvStatus = 0x00010001
	NV_WARN_INCORRECT_PERFMON_DATA   NvStatus = 0x00010002
	NV_WARN_MISMATCHED_SLAVE         NvStatus = 0x00010003
	NV_WARN_MISMATCHED_TARGET        NvStatus = 0x00010004
	NV_WARN_MORE_PROCESSING_REQUIRED NvStatus = 0x00010005
	NV_WARN_NOTHING_TO_DO            NvStatus = 0x00010006
	NV_WARN_NULL_OBJECT              NvStatus = 0x00010007
	NV_WARN_OUT_OF_RANGE             NvStatus = 0x00010008
	NV_WARN_THRESHOLD_CROSSED        NvStatus = 0x00010009
)

// From src/common/sdk/nvidia/inc/nvstatuscodes.h (595.45.04), the only codes
// that differ from 580.142: 595 inserted NV_ERR_OPERATION_ABORTED at 0x8B and
// moved NV_ERR_DMA_XFER_FAILED (added at 0x8B in 580.94.10) up to 0x8C. The
// value 0x8B therefore means different things on the two branches; use
// Resolve when the driver version is known.
const (
	// NV_ERR_OPERATION_ABORTED exists since 595; on 580 its value is
	// NV_ERR_DMA_XFER_FAILED, so errors.Is cannot tell the two apart.
	NV_ERR_OPERATION_ABORTED NvStatus = 0x0000008B
	// NV_ERR_DMA_XFER_FAILED_V595 is NV_ERR_DMA_XFER_FAILED since 595.
	NV_ERR_DMA_XFER_FAILED_V595 NvStatus = 0x0000008C
)

// statusCode is one NV_STATUS_CODE(name, code, string) line of the header.
type statusCode struct {
	status  NvStatus
	name    string
	message string
}

// statusCodes580 is nvstatuscodes.h of 580.142, in header order.
var statusCodes580 = [...]statusCode{
	{NV_OK, "NV_OK", "Success"},
	{NV_ERR_GENERIC, "NV_ERR_GENERIC", "Failure: Generic Error"},
	{NV_ERR_BROKEN_FB, "NV_ERR_BROKEN_FB", "Frame-Buffer broken"},
	{NV_ERR_BUFFER_TOO_SMALL, "NV_ERR_BUFFER_TOO_SMALL", "Buffer passed in is too small"},
	{NV_ERR_BUSY_RETRY, "NV_ERR_BUSY_RETRY", "System is busy, retry later"},
	{NV_ERR_CALLBACK_NOT_SCHEDULED, "NV_ERR_CALLBACK_NOT_SCHEDULED", "The requested callback API not scheduled"},
	{NV_ERR_CARD_NOT_PRESENT, "NV_ERR_CARD_NOT_PRESENT", "Card not detected"},
	{NV_ERR_CYCLE_DETECTED, "NV_ERR_CYCLE_DETECTED", "Call cycle detected"},
	{NV_ERR_DMA_IN_USE, "NV_ERR_DMA_IN_USE", "Requested DMA is in use"},
	{NV_ERR_DMA_MEM_NOT_LOCKED, "NV_ERR_DMA_MEM_NOT_LOCKED", "Requested DMA memory is not locked"},
	{NV_ERR_DMA_MEM_NOT_UNLOCKED, "NV_ERR_DMA_MEM_NOT_UNLOCKED", "Requested DMA memory is not unlocked"},
	{NV_ERR_DUAL_LINK_INUSE, "NV_ERR_DUAL_LINK_INUSE", "Dual-Link is in use"},
	{NV_ERR_ECC_ERROR, "NV_ERR_ECC_ERROR", "Generic ECC error"},
	{NV_ERR_FIFO_BAD_ACCESS, "NV_ERR_FIFO_BAD_ACCESS", "FIFO: Invalid access"},
	{NV_ERR_FREQ_NOT_SUPPORTED, "NV_ERR_FREQ_NOT_SUPPORTED", "Requested frequency is not supported"},
	{NV_ERR_GPU_DMA_NOT_INITIALIZED, "NV_ERR_GPU_DMA_NOT_INITIALIZED", "Requested DMA not initialized"},
	{NV_ERR_GPU_IS_LOST, "NV_ERR_GPU_IS_LOST", "GPU lost from the bus"},
	{NV_ERR_GPU_IN_FULLCHIP_RESET, "NV_ERR_GPU_IN_FULLCHIP_RESET", "GPU currently in full-chip reset"},
	{NV_ERR_GPU_NOT_FULL_POWER, "NV_ERR_GPU_NOT_FULL_POWER", "GPU not in full power"},
	{NV_ERR_GPU_UUID_NOT_FOUND, "NV_ERR_GPU_UUID_NOT_FOUND", "GPU UUID not found"},
	{NV_ERR_HOT_SWITCH, "NV_ERR_HOT_SWITCH", "System in hot switch"},
	{NV_ERR_I2C_ERROR, "NV_ERR_I2C_ERROR", "I2C Error"},
	{NV_ERR_I2C_SPEED_TOO_HIGH, "NV_ERR_I2C_SPEED_TOO_HIGH", "I2C Error: Speed too high"},
	{NV_ERR_ILLEGAL_ACTION, "NV_ERR_ILLEGAL_ACTION", "Current action is not allowed"},
	{NV_ERR_IN_USE, "NV_ERR_IN_USE", "Generic busy error"},
	{NV_ERR_INFLATE_COMPRESSED_DATA_FAILED, "NV_ERR_INFLATE_COMPRESSED_DATA_FAILED", "Failed to inflate compressed data"},
	{NV_ERR_INSERT_DUPLICATE_NAME, "NV_ERR_INSERT_DUPLICATE_NAME", "Found a duplicate entry in the requested btree"},
	{NV_ERR_INSUFFICIENT_RESOURCES, "NV_ERR_INSUFFICIENT_RESOURCES", "Ran out of a critical resource, other than memory"},
	{NV_ERR_INSUFFICIENT_PERMISSIONS, "NV_ERR_INSUFFICIENT_PERMISSIONS", "The requester does not have sufficient permissions"},
	{NV_ERR_INSUFFICIENT_POWER, "NV_ERR_INSUFFICIENT_POWER", "Generic Error: Low power"},
	{NV_ERR_INVALID_ACCESS_TYPE, "NV_ERR_INVALID_ACCESS_TYPE", "This type of access is not allowed"},
	{NV_ERR_INVALID_ADDRESS, "NV_ERR_INVALID_ADDRESS", "Address not valid"},
	{NV_ERR_INVALID_ARGUMENT, "NV_ERR_INVALID_ARGUMENT", "Invalid argument to call"},
	{NV_ERR_INVALID_BASE, "NV_ERR_INVALID_BASE", "Invalid base"},
	{NV_ERR_INVALID_CHANNEL, "NV_ERR_INVALID_CHANNEL", "Given channel-id not valid"},
	{NV_ERR_INVALID_CLASS, "NV_ERR_INVALID_CLASS", "Given class-id not valid"},
	{NV_ERR_INVALID_CLIENT, "NV_ERR_INVALID_CLIENT", "Given client not valid"},
	{NV_ERR_INVALID_COMMAND, "NV_ERR_INVALID_COMMAND", "Command passed is not valid"},
	{NV_ERR_INVALID_DATA, "NV_ERR_INVALID_DATA", "Invalid data passed"},
	{NV_ERR_INVALID_DEVICE, "NV_ERR_INVALID_DEVICE", "Current device is not valid"},
	{NV_ERR_INVALID_DMA_SPECIFIER, "NV_ERR_INVALID_DMA_SPECIFIER", "The requested DMA specifier is not valid"},
	{NV_ERR_INVALID_EVENT, "NV_ERR_INVALID_EVENT", "Invalid event occurred"},
	{NV_ERR_INVALID_FLAGS, "NV_ERR_INVALID_FLAGS", "Invalid flags passed"},
	{NV_ERR_INVALID_FUNCTION, "NV_ERR_INVALID_FUNCTION", "Called function is not valid"},
	{NV_ERR_INVALID_HEAP, "NV_ERR_INVALID_HEAP", "Heap corrupted"},
	{NV_ERR_INVALID_INDEX, "NV_ERR_INVALID_INDEX", "Index invalid"},
	{NV_ERR_INVALID_IRQ_LEVEL, "NV_ERR_INVALID_IRQ_LEVEL", "Requested IRQ level is not valid"},
	{NV_ERR_INVALID_LIMIT, "NV_ERR_INVALID_LIMIT", "Generic Error: Invalid limit"},
	{NV_ERR_INVALID_LOCK_STATE, "NV_ERR_INVALID_LOCK_STATE", "Requested lock state not valid"},
	{NV_ERR_INVALID_METHOD, "NV_ERR_INVALID_METHOD", "Requested method not valid"},
	{NV_ERR_INVALID_OBJECT, "NV_ERR_INVALID_OBJECT", "Object not valid"},
	{NV_ERR_INVALID_OBJECT_BUFFER, "NV_ERR_INVALID_OBJECT_BUFFER", "Object buffer passed is not valid"},
	{NV_ERR_INVALID_OBJECT_HANDLE, "NV_ERR_INVALID_OBJECT_HANDLE", "Object handle is not valid"},
	{NV_ERR_INVALID_OBJECT_NEW, "NV_ERR_INVALID_OBJECT_NEW", "New object is not valid"},
	{NV_ERR_INVALID_OBJECT_OLD, "NV_ERR_INVALID_OBJECT_OLD", "Old object is not valid"},
	{NV_ERR_INVALID_OBJECT_PARENT, "NV_ERR_INVALID_OBJECT_PARENT", "Object parent is not valid"},
	{NV_ERR_INVALID_OFFSET, "NV_ERR_INVALID_OFFSET", "The offset passed is not valid"},
	{NV_ERR_INVALID_OPERATION, "NV_ERR_INVALID_OPERATION", "Requested operation is not valid"},
	{NV_ERR_INVALID_OWNER, "NV_ERR_INVALID_OWNER", "Owner not valid"},
	{NV_ERR_INVALID_PARAM_STRUCT, "NV_ERR_INVALID_PARAM_STRUCT", "Invalid structure parameter"},
	{NV_ERR_INVALID_PARAMETER, "NV_ERR_INVALID_PARAMETER", "At least one of the parameters passed is not valid"},
	{NV_ERR_INVALID_PATH, "NV_ERR_INVALID_PATH", "The requested path is not valid"},
	{NV_ERR_INVALID_POINTER, "NV_ERR_INVALID_POINTER", "Pointer not valid"},
	{NV_ERR_INVALID_REGISTRY_KEY, "NV_ERR_INVALID_REGISTRY_KEY", "Found an invalid registry key"},
	{NV_ERR_INVALID_REQUEST, "NV_ERR_INVALID_REQUEST", "Generic Error: Invalid request"},
	{NV_ERR_INVALID_STATE, "NV_ERR_INVALID_STATE", "Generic Error: Invalid state"},
	{NV_ERR_INVALID_STRING_LENGTH, "NV_ERR_INVALID_STRING_LENGTH", "The string length is not valid"},
	{NV_ERR_INVALID_READ, "NV_ERR_INVALID_READ", "The requested read operation is not valid"},
	{NV_ERR_INVALID_WRITE, "NV_ERR_INVALID_WRITE", "The requested write operation is not valid"},
	{NV_ERR_INVALID_XLATE, "NV_ERR_INVALID_XLATE", "The requested translate operation is not valid"},
	{NV_ERR_IRQ_NOT_FIRING, "NV_ERR_IRQ_NOT_FIRING", "Requested IRQ is not firing"},
	{NV_ERR_IRQ_EDGE_TRIGGERED, "NV_ERR_IRQ_EDGE_TRIGGERED", "IRQ is edge triggered"},
	{NV_ERR_MEMORY_TRAINING_FAILED, "NV_ERR_MEMORY_TRAINING_FAILED", "Failed memory training sequence"},
	{NV_ERR_MISMATCHED_SLAVE, "NV_ERR_MISMATCHED_SLAVE", "Slave mismatch"},
	{NV_ERR_MISMATCHED_TARGET, "NV_ERR_MISMATCHED_TARGET", "Target mismatch"},
	{NV_ERR_MISSING_TABLE_ENTRY, "NV_ERR_MISSING_TABLE_ENTRY", "Requested entry missing not found in the table"},
	{NV_ERR_MODULE_LOAD_FAILED, "NV_ERR_MODULE_LOAD_FAILED", "Failed to load the requested module"},
	{NV_ERR_MORE_DATA_AVAILABLE, "NV_ERR_MORE_DATA_AVAILABLE", "There is more data available"},
	{NV_ERR_MORE_PROCESSING_REQUIRED, "NV_ERR_MORE_PROCESSING_REQUIRED", "More processing required for the given call"},
	{NV_ERR_MULTIPLE_MEMORY_TYPES, "NV_ERR_MULTIPLE_MEMORY_TYPES", "Multiple memory types found"},
	{NV_ERR_NO_FREE_FIFOS, "NV_ERR_NO_FREE_FIFOS", "No more free FIFOs found"},
	{NV_ERR_NO_INTR_PENDING, "NV_ERR_NO_INTR_PENDING", "No interrupt pending"},
	{NV_ERR_NO_MEMORY, "NV_ERR_NO_MEMORY", "Out of memory"},
	{NV_ERR_NO_SUCH_DOMAIN, "NV_ERR_NO_SUCH_DOMAIN", "Requested domain does not exist"},
	{NV_ERR_NO_VALID_PATH, "NV_ERR_NO_VALID_PATH", "Caller did not specify a valid path"},
	{NV_ERR_NOT_COMPATIBLE, "NV_ERR_NOT_COMPATIBLE", "Generic Error: Incompatible types"},
	{NV_ERR_NOT_READY, "NV_ERR_NOT_READY", "Generic Error: Not ready"},
	{NV_ERR_NOT_SUPPORTED, "NV_ERR_NOT_SUPPORTED", "Call not supported"},
	{NV_ERR_OBJECT_NOT_FOUND, "NV_ERR_OBJECT_NOT_FOUND", "Requested object not found"},
	{NV_ERR_OBJECT_TYPE_MISMATCH, "NV_ERR_OBJECT_TYPE_MISMATCH", "Specified objects do not match"},
	{NV_ERR_OPERATING_SYSTEM, "NV_ERR_OPERATING_SYSTEM", "Generic operating system error"},
	{NV_ERR_OTHER_DEVICE_FOUND, "NV_ERR_OTHER_DEVICE_FOUND", "Found other device instead of the requested one"},
	{NV_ERR_OUT_OF_RANGE, "NV_ERR_OUT_OF_RANGE", "The specified value is out of bounds"},
	{NV_ERR_OVERLAPPING_UVM_COMMIT, "NV_ERR_OVERLAPPING_UVM_COMMIT", "Overlapping unified virtual memory commit"},
	{NV_ERR_PAGE_TABLE_NOT_AVAIL, "NV_ERR_PAGE_TABLE_NOT_AVAIL", "Requested page table not available"},
	{NV_ERR_PID_NOT_FOUND, "NV_ERR_PID_NOT_FOUND", "Process-Id not found"},
	{NV_ERR_PROTECTION_FAULT, "NV_ERR_PROTECTION_FAULT", "Protection fault"},
	{NV_ERR_RC_ERROR, "NV_ERR_RC_ERROR", "Generic RC error"},
	{NV_ERR_REJECTED_VBIOS, "NV_ERR_REJECTED_VBIOS", "Given Video BIOS rejected/invalid"},
	{NV_ERR_RESET_REQUIRED, "NV_ERR_RESET_REQUIRED", "Reset required"},
	{NV_ERR_STATE_IN_USE, "NV_ERR_STATE_IN_USE", "State in use"},
	{NV_ERR_SIGNAL_PENDING, "NV_ERR_SIGNAL_PENDING", "Signal pending"},
	{NV_ERR_TIMEOUT, "NV_ERR_TIMEOUT", "Call timed out"},
	{NV_ERR_TIMEOUT_RETRY, "NV_ERR_TIMEOUT_RETRY", "Call timed out, please retry later"},
	{NV_ERR_TOO_MANY_PRIMARIES, "NV_ERR_TOO_MANY_PRIMARIES", "Too many primaries"},
	{NV_ERR_UVM_ADDRESS_IN_USE, "NV_ERR_UVM_ADDRESS_IN_USE", "Unified virtual memory requested address already in use"},
	{NV_ERR_MAX_SESSION_LIMIT_REACHED, "NV_ERR_MAX_SESSION_LIMIT_REACHED", "Maximum number of sessions reached"},
	{NV_ERR_LIB_RM_VERSION_MISMATCH, "NV_ERR_LIB_RM_VERSION_MISMATCH", "Library version doesn't match driver version"},
	{NV_ERR_PRIV_SEC_VIOLATION, "NV_ERR_PRIV_SEC_VIOLATION", "Priv security violation"},
	{NV_ERR_GPU_IN_DEBUG_MODE, "NV_ERR_GPU_IN_DEBUG_MODE", "GPU currently in debug mode"},
	{NV_ERR_FEATURE_NOT_ENABLED, "NV_ERR_FEATURE_NOT_ENABLED", "Requested Feature functionality is not enabled"},
	{NV_ERR_RESOURCE_LOST, "NV_ERR_RESOURCE_LOST", "Requested resource has been destroyed"},
	{NV_ERR_PMU_NOT_READY, "NV_ERR_PMU_NOT_READY", "PMU is not ready or has not yet been initialized"},
	{NV_ERR_FLCN_ERROR, "NV_ERR_FLCN_ERROR", "Generic falcon assert or halt"},
	{NV_ERR_FATAL_ERROR, "NV_ERR_FATAL_ERROR", "Fatal/unrecoverable error"},
	{NV_ERR_MEMORY_ERROR, "NV_ERR_MEMORY_ERROR", "Generic memory error"},
	{NV_ERR_INVALID_LICENSE, "NV_ERR_INVALID_LICENSE", "License provided is rejected or invalid"},
	{NV_ERR_NVLINK_INIT_ERROR, "NV_ERR_NVLINK_INIT_ERROR", "Nvlink Init Error"},
	{NV_ERR_NVLINK_MINION_ERROR, "NV_ERR_NVLINK_MINION_ERROR", "Nvlink Minion Error"},
	{NV_ERR_NVLINK_CLOCK_ERROR, "NV_ERR_NVLINK_CLOCK_ERROR", "Nvlink Clock Error"},
	{NV_ERR_NVLINK_TRAINING_ERROR, "NV_ERR_NVLINK_TRAINING_ERROR", "Nvlink Training Error"},
	{NV_ERR_NVLINK_CONFIGURATION_ERROR, "NV_ERR_NVLINK_CONFIGURATION_ERROR", "Nvlink Configuration Error"},
	{NV_ERR_RISCV_ERROR, "NV_ERR_RISCV_ERROR", "Generic RISC-V assert or halt"},
	{NV_ERR_FABRIC_MANAGER_NOT_PRESENT, "NV_ERR_FABRIC_MANAGER_NOT_PRESENT", "Fabric Manager is not loaded"},
	{NV_ERR_ALREADY_SIGNALLED, "NV_ERR_ALREADY_SIGNALLED", "Semaphore Surface value already >= requested wait value"},
	{NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE, "NV_ERR_QUEUE_TASK_SLOT_NOT_AVAILABLE", "PMU RPC error due to no queue slot available for this event"},
	{NV_ERR_KEY_ROTATION_IN_PROGRESS, "NV_ERR_KEY_ROTATION_IN_PROGRESS", "Operation not allowed as key rotation is in progress"},
	{NV_ERR_TEST_ONLY_CODE_NOT_ENABLED, "NV_ERR_TEST_ONLY_CODE_NOT_ENABLED", "Test-only code path not enabled"},
	{NV_ERR_SECURE_BOOT_FAILED, "NV_ERR_SECURE_BOOT_FAILED", "GFW secure boot failed"},
	{NV_ERR_INSUFFICIENT_ZBC_ENTRY, "NV_ERR_INSUFFICIENT_ZBC_ENTRY", "No more ZBC entry for the client"},
	{NV_ERR_NVLINK_FABRIC_NOT_READY, "NV_ERR_NVLINK_FABRIC_NOT_READY", "Nvlink Fabric Status or Fabric Probe is not yet complete, caller needs to retry"},
	{NV_ERR_NVLINK_FABRIC_FAILURE, "NV_ERR_NVLINK_FABRIC_FAILURE", "Nvlink Fabric Probe failed"},
	{NV_ERR_GPU_MEMORY_ONLINING_FAILURE, "NV_ERR_GPU_MEMORY_ONLINING_FAILURE", "GPU Memory Onlining failed"},
	{NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE, "NV_ERR_REDUCTION_MANAGER_NOT_AVAILABLE", "Reduction Manager is not available"},
	{NV_ERR_THRESHOLD_CROSSED, "NV_ERR_THRESHOLD_CROSSED", "A fatal threshold has been crossed"},
	{NV_ERR_RESOURCE_RETIREMENT_ERROR, "NV_ERR_RESOURCE_RETIREMENT_ERROR", "An error occurred while trying to retire a resource"},
	{NV_ERR_FABRIC_STATE_OUT_OF_SYNC, "NV_ERR_FABRIC_STATE_OUT_OF_SYNC", "NVLink fabric state cached by the driver is out of sync"},
	{NV_ERR_BUFFER_FULL, "NV_ERR_BUFFER_FULL", "Buffer is full"},
	{NV_ERR_BUFFER_EMPTY, "NV_ERR_BUFFER_EMPTY", "Buffer is empty"},
	{NV_ERR_MC_FLA_OFFSET_TABLE_FULL, "NV_ERR_MC_FLA_OFFSET_TABLE_FULL", "Multicast FLA offset table has no available slots"},
	{NV_ERR_DMA_XFER_FAILED, "NV_ERR_DMA_XFER_FAILED", "DMA transfer failed"},
	{NV_WARN_HOT_SWITCH, "NV_WARN_HOT_SWITCH", "WARNING Hot switch"},
	{NV_WARN_INCORRECT_PERFMON_DATA, "NV_WARN_INCORRECT_PERFMON_DATA", "WARNING Incorrect performance monitor data"},
	{NV_WARN_MISMATCHED_SLAVE, "NV_WARN_MISMATCHED_SLAVE", "WARNING Slave mismatch"},
	{NV_WARN_MISMATCHED_TARGET, "NV_WARN_MISMATCHED_TARGET", "WARNING Target mismatch"},
	{NV_WARN_MORE_PROCESSING_REQUIRED, "NV_WARN_MORE_PROCESSING_REQUIRED", "WARNING More processing required for the call"},
	{NV_WARN_NOTHING_TO_DO, "NV_WARN_NOTHING_TO_DO", "WARNING Nothing to do"},
	{NV_WARN_NULL_OBJECT, "NV_WARN_NULL_OBJECT", "WARNING NULL object found"},
	{NV_WARN_OUT_OF_RANGE, "NV_WARN_OUT_OF_RANGE", "WARNING value out of range"},
	{NV_WARN_THRESHOLD_CROSSED, "NV_WARN_THRESHOLD_CROSSED", "WARNING Threshold has been crossed"},
}

// statusCodesV595 are the entries of 595.45.04 that replace or extend
// statusCodes580; see the V595 constants.
var statusCodesV595 = [...]statusCode{
	{NV_ERR_OPERATION_ABORTED, "NV_ERR_OPERATION_ABORTED", "Operation has aborted"},
	{NV_ERR_DMA_XFER_FAILED_V595, "NV_ERR_DMA_XFER_FAILED", "DMA transfer failed"},
}

// Lookup tables by driver branch, built once: String runs on every failed
// ioctl that gets logged, so it should not scan 150 entries.
var (
	statusTable580 = newStatusTable(statusCodes580[:], nil)
	statusTable595 = newStatusTable(statusCodes580[:], statusCodesV595[:])
)

// newStatusTable indexes base by value, then lets patch override it, the way
// a newer driver's header reuses an older one's values.
func newStatusTable(base, patch []statusCode) map[NvStatus]statusCode {
	table := make(map[NvStatus]statusCode, len(base)+len(patch))
	for _, tables := range [][]statusCode{base, patch} {
		for _, c := range tables {
			table[c.status] = c
		}
	}
	return table
}

// statusTableFor picks the table of the branch a driver major version
// belongs to. Drivers newer than the newest known branch get that branch's
// table: NVIDIA appends codes far more often than it renumbers them.
func statusTableFor(driverMajor uint32) map[NvStatus]statusCode {
	if driverMajor >= 595 {
		return statusTable595
	}
	return statusTable580
}

// lookup resolves s against 580.142, the ABI the constants describe, and
// falls back to 595 for codes 580 never returns (0x8C), since naming those
// is more useful than printing a number.
func (s NvStatus) lookup() (statusCode, bool) {
	if c, ok := statusTable580[s]; ok {
		return c, true
	}
	c, ok := statusTable595[s]
	return c, ok
}

// Resolve returns the name and message s has on a driver with the given major
// version (580, 595, ...), and false if that driver does not define s. Only
// 0x8B and 0x8C differ between the branches known here.
func (s NvStatus) Resolve(driverMajor uint32) (name, message string, ok bool) {
	c, ok := statusTableFor(driverMajor)[s]
	return c.name, c.message, ok
}

// String returns NVIDIA's name for s, such as "NV_ERR_INVALID_CLIENT", or
// "NV_STATUS(0x%08x)" for a code no known header defines.
func (s NvStatus) String() string {
	if c, ok := s.lookup(); ok {
		return c.name
	}
	return fmt.Sprintf("NV_STATUS(0x%08x)", uint32(s))
}

// Message returns the header's description of s, such as "Given client not
// valid", or "" for an unknown code.
func (s NvStatus) Message() string {
	c, _ := s.lookup()
	return c.message
}

// Error returns the name followed by the message in parentheses, so that a
// log line is readable without the header at hand.
func (s NvStatus) Error() string {
	if c, ok := s.lookup(); ok {
		return c.name + " (" + c.message + ")"
	}
	return s.String()
}

// Err returns nil for NV_OK and otherwise a *StatusError recording op, the
// RM call that returned s (for example "control 0xa06c0103").
func (s NvStatus) Err(op string) error {
	if s == NV_OK {
		return nil
	}
	return &StatusError{Status: s, Op: op}
}

// StatusError is an RM call that reached the driver and came back with a
// status other than NV_OK. It is kept apart from errno failures, which mean
// the call did not reach the RM at all.
type StatusError struct {
	Status NvStatus
	Op     string
}

func (e *StatusError) Error() string {
	if e.Op == "" {
		return e.Status.Error()
	}
	return e.Op + ": " + e.Status.Error()
}

// Is reports whether target is the NvStatus this error carries, so that
// errors.Is(err, ioctl.NV_ERR_INVALID_CLIENT) sees through the Op.
func (e *StatusError) Is(target error) bool {
	s, ok := target.(NvStatus)
	return ok && s == e.Status
}

// Unwrap exposes the status to errors.As(err, &status) for callers that
// switch on it.
func (e *StatusError) Unwrap() error {
	return e.Status
}
