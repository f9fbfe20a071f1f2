package ioctl

import (
	"encoding/binary"
	"fmt"
	"unsafe"
)

// DecodeParams decodes a parameter block b into p, the Go form of that
// block. It is the one decoder of parameter bytes that come from outside
// (a traced call, a driver's reply, a fake driver's input): RM takes only
// blocks of exactly the right size, so any other length is an error naming
// both. Blocks are in the host's layout and byte order, as the driver
// copies them, and ABI structs have that layout (structs.HostLayout, no
// implicit padding: layout_test.go), so decoding is a copy. A type that is
// not such a struct (a pointer, an int, a field the driver cannot have
// written) is refused.
func DecodeParams[T any](b []byte, p *T) error {
	if err := checkParams(len(b), p); err != nil {
		return fmt.Errorf("decode %w", err)
	}
	copy(Bytes(p), b)
	return nil
}

// EncodeParams writes p into the parameter block b, which must have
// exactly p's size: how a driver (or internal/rmfake) answers in the
// caller's buffer. Padding is written as p holds it.
func EncodeParams[T any](b []byte, p *T) error {
	if err := checkParams(len(b), p); err != nil {
		return fmt.Errorf("encode %w", err)
	}
	copy(b, Bytes(p))
	return nil
}

// checkParams refuses a type whose memory is not its fixed-size encoding
// (binary.Size counts only fixed-size fields and is cached per type) and a
// block of another length.
func checkParams[T any](n int, p *T) error {
	size := binary.Size(p)
	if size < 0 || uintptr(size) != unsafe.Sizeof(*p) {
		return fmt.Errorf("%T: not an ABI struct (fixed-width fields, explicit padding)", *p)
	}
	if n != size {
		return fmt.Errorf("%T: %d bytes, want %d", *p, n, size)
	}
	return nil
}
