package trace

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gpreempt/gpreempt/ioctl"
)

// rmIoctl issues RM escape nr on fd with *p as its parameter block, the way
// libcuda does (_IOWR('F', nr, sizeof *p)), and returns the errno. On a file
// that is not NVIDIA's the kernel answers ENOTTY, but only after the
// syscall tracepoints have fired and the programs have read *p.
func rmIoctl[T any](fd int, nr uint32, p *T) unix.Errno {
	return ioctlPtr(fd, ioctl.IOWR(nr, uint32(unsafe.Sizeof(*p))), p)
}

// ioctlPtr issues any request with p as its argument. The pointer is
// converted in the Syscall expression itself, which keeps *p alive and in
// place for the call.
func ioctlPtr[T any](fd int, req uint32, p *T) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(unsafe.Pointer(p)))
	return errno
}

// ioctlBadPointer issues req with an argument no process can read.
func ioctlBadPointer(fd int, req uint32) unix.Errno {
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), 8)
	return errno
}

// control issues NV_ESC_RM_CONTROL with params behind NVOS54.params, pinned
// for the call as package ioctl does.
func control[T any](fd int, p *ioctl.NVOS54_PARAMETERS, params *T) unix.Errno {
	var pin runtime.Pinner
	defer pin.Unpin()
	pin.Pin(params)
	p.Params = ioctl.P64(uintptr(unsafe.Pointer(params)))
	p.ParamsSize = uint32(unsafe.Sizeof(*params))
	return rmIoctl(fd, ioctl.NV_ESC_RM_CONTROL, p)
}
