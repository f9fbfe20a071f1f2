package ioctl

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

func ptrOf[T any](p *T) unsafe.Pointer { return unsafe.Pointer(p) }

func sizeOf[T any](p *T) uintptr { return unsafe.Sizeof(*p) }

// ioctl issues one RM escape. The driver decodes the number and size from
// the request and copies exactly size bytes in and out. EINTR is retried:
// RM escapes are not partially applied when interrupted before entry.
func (f *FD) ioctl(nr uint32, arg unsafe.Pointer, size uintptr) error {
	req := IOWR(nr, uint32(size))
	for {
		_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(f.fd), uintptr(req), uintptr(arg))
		if errno == 0 {
			return nil
		}
		if errno == unix.EINTR {
			continue
		}
		return errno
	}
}

// pinned runs fn with params pinned for its duration and their address as
// a P64 (0 when empty): the kernel reads them through a pointer the Go
// runtime cannot see.
func pinned(params []byte, fn func(P64) error) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	var ptr P64
	if len(params) > 0 {
		pin.Pin(&params[0])
		ptr = P64(uintptr(unsafe.Pointer(&params[0])))
	}
	err := fn(ptr)
	runtime.KeepAlive(params)
	return err
}

// rmControl issues NV_ESC_RM_CONTROL with p pointing at params.
func (f *FD) rmControl(p *NVOS54_PARAMETERS, params []byte) error {
	return pinned(params, func(ptr P64) error {
		p.Params = ptr
		return f.ioctl(NV_ESC_RM_CONTROL, unsafe.Pointer(p), unsafe.Sizeof(*p))
	})
}

// rmAlloc issues NV_ESC_RM_ALLOC (NVOS64) with p pointing at params.
func (f *FD) rmAlloc(p *NVOS64_PARAMETERS, params []byte) error {
	return pinned(params, func(ptr P64) error {
		p.PAllocParms, p.ParamsSize = ptr, uint32(len(params))
		return f.ioctl(NV_ESC_RM_ALLOC, unsafe.Pointer(p), unsafe.Sizeof(*p))
	})
}

// Bytes views an ABI struct as its bytes, for Controller.ControlBytes. The
// slice aliases *p: writes by the driver land in the struct.
func Bytes[T any](p *T) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(p)), unsafe.Sizeof(*p))
}

// Control issues cmd with *p as its parameter block on any Controller.
func Control[T any](c Controller, client, object Handle, cmd uint32, p *T) error {
	return c.ControlBytes(client, object, cmd, Bytes(p))
}

// The system calls the rest of the package wraps: errors come back as
// plain errnos for the callers to classify.

func openFile(path string) (int, error) {
	return unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
}

func closeFile(fd int) error { return unix.Close(fd) }

func fstatRdev(fd int) (mode uint32, rdev uint64, err error) {
	var st unix.Stat_t
	err = unix.Fstat(fd, &st)
	return st.Mode, st.Rdev, err
}

func statRdev(path string) (mode uint32, rdev uint64, err error) {
	var st unix.Stat_t
	err = unix.Stat(path, &st)
	return st.Mode, st.Rdev, err
}

func statDeviceFile(path string) (DeviceFile, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return DeviceFile{}, err
	}
	return DeviceFile{Mode: st.Mode, Rdev: st.Rdev, Dev: st.Dev, Ino: st.Ino}, nil
}

func pidfdOpen(pid int) (int, error) { return unix.PidfdOpen(pid, 0) }

func pidfdGetfd(pidfd, targetFD int) (int, error) { return unix.PidfdGetfd(pidfd, targetFD, 0) }

func pidfdSignal0(pidfd int) error { return unix.PidfdSendSignal(pidfd, 0, nil, 0) }
