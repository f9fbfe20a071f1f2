package reconcile_test

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// rmIoctl issues RM escape nr on fd with *p as its parameter block, as
// libcuda does. On /dev/null the kernel answers ENOTTY, after the syscall
// tracepoints fired and the programs read *p (as internal/trace's tests).
func rmIoctl[T any](fd int, nr uint32, p *T) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(ioctl.IOWR(nr, uint32(unsafe.Sizeof(*p)))), uintptr(unsafe.Pointer(p)))
	return errno
}

// rmControl issues NV_ESC_RM_CONTROL with params behind NVOS54.
func rmControl[T any](fd int, p *ioctl.NVOS54_PARAMETERS, params *T) unix.Errno {
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(params)
	p.Params = ioctl.P64(uintptr(unsafe.Pointer(params)))
	p.ParamsSize = uint32(unsafe.Sizeof(*params))
	return rmIoctl(fd, ioctl.NV_ESC_RM_CONTROL, p)
}
