package trace

import "unsafe"

// copyStruct fills *p from the first sizeof(*p) bytes of b and reports
// whether b was long enough. The records and parameter blocks it is used on
// are host-layout structs of fixed-width fields with explicit padding (the
// bpf2go types, package ioctl's NVOS blocks), written by the kernel in host
// byte order, so their bytes are their value. It is ~50 times faster than
// encoding/binary's reflection, which matters at a burst of RM calls.
func copyStruct[T any](b []byte, p *T) bool {
	n := int(unsafe.Sizeof(*p))
	if len(b) < n {
		return false
	}
	copy(unsafe.Slice((*byte)(unsafe.Pointer(p)), n), b)
	return true
}
