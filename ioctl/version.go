package ioctl

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// DriverVersion is an NVIDIA driver version such as 580.159.04. Patch is
// kept as written (04 and 4 compare equal) — NVIDIA's third component is a
// number, zero-padded for display.
type DriverVersion struct {
	Major, Minor, Patch uint32
}

func (v DriverVersion) String() string {
	if v.Patch == 0 {
		return fmt.Sprintf("%d.%d", v.Major, v.Minor)
	}
	return fmt.Sprintf("%d.%d.%02d", v.Major, v.Minor, v.Patch)
}

// Compare orders versions: -1, 0 or +1.
func (v DriverVersion) Compare(o DriverVersion) int {
	if c := cmp.Compare(v.Major, o.Major); c != 0 {
		return c
	}
	if c := cmp.Compare(v.Minor, o.Minor); c != 0 {
		return c
	}
	return cmp.Compare(v.Patch, o.Patch)
}

// ParseDriverVersion parses "MAJOR.MINOR[.PATCH]" as the driver reports it
// (NV_VERSION_STRING, /proc/driver/nvidia/version, nvidia-smi). Surrounding
// white space and a trailing NUL padding are ignored; anything else is an
// error naming the offending text.
func ParseDriverVersion(s string) (DriverVersion, error) {
	s = strings.TrimSpace(strings.TrimRight(s, "\x00"))
	parts := strings.Split(s, ".")
	if len(parts) < 2 || len(parts) > 3 {
		return DriverVersion{}, fmt.Errorf("driver version %q: want MAJOR.MINOR[.PATCH]", s)
	}
	var nums [3]uint32
	for i, p := range parts {
		if p == "" || len(p) > 9 || strings.TrimLeft(p, "0123456789") != "" {
			return DriverVersion{}, fmt.Errorf("driver version %q: component %q is not a number", s, p)
		}
		n, err := strconv.ParseUint(p, 10, 32)
		if err != nil {
			return DriverVersion{}, fmt.Errorf("driver version %q: %w", s, err)
		}
		nums[i] = uint32(n)
	}
	return DriverVersion{Major: nums[0], Minor: nums[1], Patch: nums[2]}, nil
}

// ABI describes what differs, for gpreempt's purposes, between driver
// versions. Everything gpreempt sends (NVOS21/54/64, the
// KEPLER_CHANNEL_GROUP_A and NV01_ROOT_CLIENT controls) has kept its layout
// from 535.x to 595.x except GPFIFO_SCHEDULE's parameters.
type ABI struct {
	// Name is the first branch this ABI describes, e.g. "535".
	Name string
	// Since is the first driver version with this ABI.
	Since DriverVersion
	// ScheduleSkipEnable: GPFIFO_SCHEDULE takes the 3-byte
	// NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575.
	ScheduleSkipEnable bool
}

// abis is ordered by Since. A newer ABI is built from its parent and
// patched, so each entry says only what changed.
var abis = func() []ABI {
	base := ABI{Name: "535", Since: DriverVersion{535, 0, 0}}
	v575 := base
	v575.Name, v575.Since, v575.ScheduleSkipEnable = "575", DriverVersion{575, 51, 2}, true
	return []ABI{base, v575}
}()

// abiLimit is the first version not known to keep these layouts. Versions
// at or above it (and below 535) are refused unless the caller opts in.
var abiLimit = DriverVersion{600, 0, 0}

// UnsupportedDriverError is LookupABI's refusal of a driver version
// outside the known range. It matches ErrUnsupportedDriver. It names no way
// to override the refusal: that is the caller's to say (gpreemptctl's
// --allow-unsupported-driver, a library's option).
type UnsupportedDriverError struct {
	Version DriverVersion
	// Oldest is the first version known; Limit the first one not known to
	// keep the layouts.
	Oldest, Limit DriverVersion
	// Nearest names the ABI that would be used if the caller opted in.
	Nearest string
}

func (e *UnsupportedDriverError) Error() string {
	return fmt.Sprintf("%v: %s (known: %s up to before %s)", ErrUnsupportedDriver, e.Version, e.Oldest, e.Limit)
}

// Is makes errors.Is(err, ErrUnsupportedDriver) hold.
func (e *UnsupportedDriverError) Is(target error) bool { return target == ErrUnsupportedDriver }

// LookupABI returns the ABI of driver version v. For a version outside the
// known range it returns an *UnsupportedDriverError; with allowUnsupported
// it returns the nearest known ABI instead, and the error is still reported
// so the caller can warn.
func LookupABI(v DriverVersion, allowUnsupported bool) (ABI, error) {
	unsupported := v.Compare(abis[0].Since) < 0 || v.Compare(abiLimit) >= 0
	abi := abis[0]
	for _, a := range abis {
		if v.Compare(a.Since) >= 0 {
			abi = a
		}
	}
	if unsupported {
		err := &UnsupportedDriverError{Version: v, Oldest: abis[0].Since, Limit: abiLimit, Nearest: abi.Name}
		if !allowUnsupported {
			return ABI{}, err
		}
		return abi, err
	}
	return abi, nil
}

// ScheduleParams encodes GPFIFO_SCHEDULE's parameters in this ABI's layout.
func (a ABI) ScheduleParams(enable bool) []byte {
	b := byte(0)
	if enable {
		b = 1
	}
	if a.ScheduleSkipEnable {
		return []byte{b, 0, 0}
	}
	return []byte{b, 0}
}

// KnownABIs returns the ABI table, oldest first, and the first driver
// version not known to keep its layouts (for `gpreemptctl version`).
func KnownABIs() ([]ABI, DriverVersion) { return slices.Clone(abis), abiLimit }
