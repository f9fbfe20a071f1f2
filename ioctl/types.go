package ioctl

import (
	"fmt"
	"strconv"
)

// Handle is an RM object handle (NvHandle). Client handles are chosen by RM
// (RS_CLIENT_HANDLE_BASE + index); object handles are usually chosen by the
// caller (libcuda uses 0x5c0000xx).
type Handle uint32

func (h Handle) String() string { return fmt.Sprintf("%#08x", uint32(h)) }

// P64 is a user-space pointer as RM carries it (NvP64): always 64 bits,
// 8-byte aligned, whatever the caller's word size.
type P64 uint64

// From src/nvidia/inc/libraries/resserv/resserv.h:
const (
	// RS_CLIENT_HANDLE_BASE is the first client handle RM hands out to
	// user-space clients; the index below it grows by one per allocation.
	RS_CLIENT_HANDLE_BASE Handle = 0xC1D00000
	// RS_CLIENT_INTERNAL_HANDLE_BASE starts RM's own internal clients.
	RS_CLIENT_INTERNAL_HANDLE_BASE Handle = 0xC1E00000
	// RS_CLIENT_HANDLE_MAX bounds the index (power of two); the counter
	// wraps to 0 past RS_CLIENT_HANDLE_MAX-1.
	RS_CLIENT_HANDLE_MAX = 0x100000
)

// MarshalText prints handles in hex in JSON, as NVIDIA's tools and logs do.
func (h Handle) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText accepts hex (0x5c000015) or decimal.
func (h *Handle) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 0, 32)
	if err != nil {
		return fmt.Errorf("handle %q: %w", b, err)
	}
	*h = Handle(v)
	return nil
}
