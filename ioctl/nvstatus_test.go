package ioctl

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"testing"
)

// The header check is opt-in because the headers live outside this module.
// To run it against a checkout of open-gpu-kernel-modules:
//
//	H=src/common/sdk/nvidia/inc/nvstatuscodes.h
//	go test ./ioctl -run TestStatusTableMatchesHeader -args \
//	  -nvstatuscodes.580=<(git -C $REPO show 580.142:$H) \
//	  -nvstatuscodes.595=<(git -C $REPO show 595.45.04:$H)
var (
	header580 = flag.String("nvstatuscodes.580", "", "path of nvstatuscodes.h from driver 580.142, checked against the table")
	header595 = flag.String("nvstatuscodes.595", "", "path of nvstatuscodes.h from driver 595.45.04, checked against the table")
)

func TestStatusCodes(t *testing.T) {
	tests := []struct {
		status  NvStatus
		value   uint32
		name    string
		message string
	}{
		{NV_OK, 0x00000000, "NV_OK", "Success"},
		{NV_ERR_GENERIC, 0x0000FFFF, "NV_ERR_GENERIC", "Failure: Generic Error"},
		{NV_ERR_INSUFFICIENT_PERMISSIONS, 0x0000001B, "NV_ERR_INSUFFICIENT_PERMISSIONS", "The requester does not have sufficient permissions"},
		{NV_ERR_INVALID_CLIENT, 0x00000023, "NV_ERR_INVALID_CLIENT", "Given client not valid"},
		{NV_ERR_INVALID_OBJECT_HANDLE, 0x00000033, "NV_ERR_INVALID_OBJECT_HANDLE", "Object handle is not valid"},
		{NV_ERR_NOT_SUPPORTED, 0x00000056, "NV_ERR_NOT_SUPPORTED", "Call not supported"},
		{NV_ERR_LIB_RM_VERSION_MISMATCH, 0x0000006A, "NV_ERR_LIB_RM_VERSION_MISMATCH", "Library version doesn't match driver version"},
		{NV_ERR_DMA_XFER_FAILED, 0x0000008B, "NV_ERR_DMA_XFER_FAILED", "DMA transfer failed"},
		{NV_WARN_HOT_SWITCH, 0x00010001, "NV_WARN_HOT_SWITCH", "WARNING Hot switch"},
		{NV_WARN_THRESHOLD_CROSSED, 0x00010009, "NV_WARN_THRESHOLD_CROSSED", "WARNING Threshold has been crossed"},
		// 0x8B reads as 580's code; 0x8C exists only in 595 and is named
		// after it rather than printed as a number.
		{NV_ERR_OPERATION_ABORTED, 0x0000008B, "NV_ERR_DMA_XFER_FAILED", "DMA transfer failed"},
		{NV_ERR_DMA_XFER_FAILED_V595, 0x0000008C, "NV_ERR_DMA_XFER_FAILED", "DMA transfer failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if uint32(tt.status) != tt.value {
				t.Errorf("value = %#x, want %#x", uint32(tt.status), tt.value)
			}
			if got := tt.status.String(); got != tt.name {
				t.Errorf("String() = %q, want %q", got, tt.name)
			}
			if got := tt.status.Message(); got != tt.message {
				t.Errorf("Message() = %q, want %q", got, tt.message)
			}
			if got, want := tt.status.Error(), tt.name+" ("+tt.message+")"; got != want {
				t.Errorf("Error() = %q, want %q", got, want)
			}
		})
	}
}

func TestStatusTablesUnique(t *testing.T) {
	tests := []struct {
		branch string
		table  map[NvStatus]statusCode
		want   int
	}{
		{"580", statusTable580, 150},
		{"595", statusTable595, 151},
	}
	for _, tt := range tests {
		t.Run(tt.branch, func(t *testing.T) {
			if len(tt.table) != tt.want {
				t.Errorf("table has %d codes, want %d", len(tt.table), tt.want)
			}
			names := make(map[string]NvStatus)
			for _, c := range tt.table {
				if prev, dup := names[c.name]; dup {
					t.Errorf("%s is both %#x and %#x", c.name, uint32(prev), uint32(c.status))
				}
				names[c.name] = c.status
				if c.message == "" {
					t.Errorf("%s has no message", c.name)
				}
			}
		})
	}

	// Within one header no value may repeat: a repeat would silently shadow
	// an entry when the tables are indexed.
	for branch, codes := range map[string][]statusCode{"580": statusCodes580[:], "595 patch": statusCodesV595[:]} {
		values := make(map[NvStatus]string)
		for _, c := range codes {
			if prev, dup := values[c.status]; dup {
				t.Errorf("%s: %#x is both %s and %s", branch, uint32(c.status), prev, c.name)
			}
			values[c.status] = c.name
		}
	}
}

func TestStatusResolve(t *testing.T) {
	tests := []struct {
		status      NvStatus
		driverMajor uint32
		name        string
		ok          bool
	}{
		{0x8B, 580, "NV_ERR_DMA_XFER_FAILED", true},
		{0x8B, 595, "NV_ERR_OPERATION_ABORTED", true},
		{0x8B, 610, "NV_ERR_OPERATION_ABORTED", true},
		{0x8C, 580, "", false},
		{0x8C, 595, "NV_ERR_DMA_XFER_FAILED", true},
		{NV_ERR_INVALID_CLIENT, 535, "NV_ERR_INVALID_CLIENT", true},
		{NV_ERR_INVALID_CLIENT, 595, "NV_ERR_INVALID_CLIENT", true},
		{0xdeadbeef, 595, "", false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%#x@%d", uint32(tt.status), tt.driverMajor), func(t *testing.T) {
			name, message, ok := tt.status.Resolve(tt.driverMajor)
			if name != tt.name || ok != tt.ok {
				t.Errorf("Resolve(%d) = %q, %v; want %q, %v", tt.driverMajor, name, ok, tt.name, tt.ok)
			}
			if ok == (message == "") {
				t.Errorf("Resolve(%d) message = %q with ok = %v", tt.driverMajor, message, ok)
			}
		})
	}
}

func TestStatusUnknown(t *testing.T) {
	tests := []struct {
		status NvStatus
		want   string
	}{
		{0x0000008D, "NV_STATUS(0x0000008d)"},
		{0x0001000A, "NV_STATUS(0x0001000a)"},
		{0xDEADBEEF, "NV_STATUS(0xdeadbeef)"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.status.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
			if got := tt.status.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			if got := tt.status.Message(); got != "" {
				t.Errorf("Message() = %q, want empty", got)
			}
		})
	}
}

func TestStatusErr(t *testing.T) {
	tests := []struct {
		name   string
		status NvStatus
		op     string
		want   string // "" means a nil error
	}{
		{"ok", NV_OK, "control 0xa06c0103", ""},
		{"with op", NV_ERR_INVALID_CLIENT, "control 0xa06c0103", "control 0xa06c0103: NV_ERR_INVALID_CLIENT (Given client not valid)"},
		{"without op", NV_ERR_NOT_SUPPORTED, "", "NV_ERR_NOT_SUPPORTED (Call not supported)"},
		{"warning", NV_WARN_NOTHING_TO_DO, "free", "free: NV_WARN_NOTHING_TO_DO (WARNING Nothing to do)"},
		{"unknown", 0x1234, "alloc class 0xc86f", "alloc class 0xc86f: NV_STATUS(0x00001234)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.status.Err(tt.op)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Err(%q) = %v, want nil", tt.op, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Err(%q) = nil, want %q", tt.op, tt.want)
			}
			if got := err.Error(); got != tt.want {
				t.Errorf("Error() = %q, want %q", got, tt.want)
			}
			var se *StatusError
			if !errors.As(err, &se) || se.Status != tt.status || se.Op != tt.op {
				t.Errorf("Err(%q) = %#v, want *StatusError{%v, %q}", tt.op, err, tt.status, tt.op)
			}
		})
	}
}

func TestStatusErrorMatching(t *testing.T) {
	const op = "control 0xa06c0103"
	tests := []struct {
		name   string
		err    error
		target NvStatus
		want   bool
	}{
		{"status error", NV_ERR_INVALID_CLIENT.Err(op), NV_ERR_INVALID_CLIENT, true},
		{"wrapped status error", fmt.Errorf("set timeslice: %w", NV_ERR_INVALID_CLIENT.Err(op)), NV_ERR_INVALID_CLIENT, true},
		{"twice wrapped", fmt.Errorf("tsg: %w", fmt.Errorf("set timeslice: %w", NV_ERR_INSUFFICIENT_PERMISSIONS.Err(op))), NV_ERR_INSUFFICIENT_PERMISSIONS, true},
		{"bare status", fmt.Errorf("free: %w", NV_ERR_INVALID_OBJECT_HANDLE), NV_ERR_INVALID_OBJECT_HANDLE, true},
		{"other status", fmt.Errorf("set timeslice: %w", NV_ERR_INVALID_CLIENT.Err(op)), NV_ERR_INVALID_OBJECT_HANDLE, false},
		{"not wrapped", fmt.Errorf("set timeslice: %v", NV_ERR_INVALID_CLIENT.Err(op)), NV_ERR_INVALID_CLIENT, false},
		{"unrelated", errors.New("NV_ERR_INVALID_CLIENT"), NV_ERR_INVALID_CLIENT, false},
		// Documented ambiguity: 0x8B is one value for both names.
		{"shared value", NV_ERR_DMA_XFER_FAILED.Err(op), NV_ERR_OPERATION_ABORTED, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Errorf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
			var status NvStatus
			if got := errors.As(tt.err, &status) && status == tt.target; got != tt.want {
				t.Errorf("errors.As(%v) found %v, want match with %v = %v", tt.err, status, tt.target, tt.want)
			}
		})
	}

	// The Op must survive wrapping, since it is what says which call failed.
	err := fmt.Errorf("set timeslice: %w", NV_ERR_INVALID_CLIENT.Err(op))
	var se *StatusError
	if !errors.As(err, &se) {
		t.Fatalf("errors.As(%v, *StatusError) = false", err)
	}
	if se.Op != op || se.Status != NV_ERR_INVALID_CLIENT {
		t.Errorf("errors.As = %+v, want Op %q, Status %v", se, op, NV_ERR_INVALID_CLIENT)
	}
	if got, want := err.Error(), "set timeslice: control 0xa06c0103: NV_ERR_INVALID_CLIENT (Given client not valid)"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

// headerLine matches one NV_STATUS_CODE(name, code, "string") entry.
var headerLine = regexp.MustCompile(`(?m)^NV_STATUS_CODE\((\w+),\s*(0x[0-9A-Fa-f]+),\s*"([^"]*)"\)`)

// TestStatusTableMatchesHeader is the check on the generated table: every
// header entry must resolve to the same name and message, and the table must
// hold nothing the header lacks.
func TestStatusTableMatchesHeader(t *testing.T) {
	tests := []struct {
		branch      string
		path        string
		driverMajor uint32
	}{
		{"580.142", *header580, 580},
		{"595.45.04", *header595, 595},
	}
	for _, tt := range tests {
		t.Run(tt.branch, func(t *testing.T) {
			if tt.path == "" {
				t.Skip("no header given; see the comment on the nvstatuscodes flags")
			}
			src, err := os.ReadFile(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			entries := headerLine.FindAllSubmatch(src, -1)
			if len(entries) == 0 {
				t.Fatalf("%s: no NV_STATUS_CODE entries", tt.path)
			}
			for _, e := range entries {
				name, message := string(e[1]), string(e[3])
				value, err := strconv.ParseUint(string(e[2]), 0, 32)
				if err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				gotName, gotMessage, ok := NvStatus(value).Resolve(tt.driverMajor)
				if !ok || gotName != name || gotMessage != message {
					t.Errorf("%#x resolves to %q %q (%v), header says %q %q", value, gotName, gotMessage, ok, name, message)
				}
			}
			if got := len(statusTableFor(tt.driverMajor)); got != len(entries) {
				t.Errorf("table has %d codes, header %d", got, len(entries))
			}
		})
	}
}

// FuzzNvStatus feeds arbitrary Status words, as a misbehaving or newer driver
// could return, through the formatting paths.
func FuzzNvStatus(f *testing.F) {
	for _, s := range []NvStatus{NV_OK, NV_ERR_GENERIC, NV_ERR_DMA_XFER_FAILED_V595, NV_WARN_THRESHOLD_CROSSED, 0xFFFFFFFF} {
		f.Add(uint32(s))
	}
	f.Fuzz(func(t *testing.T, v uint32) {
		s := NvStatus(v)
		name := s.String()
		if name == "" {
			t.Fatalf("%#x: empty String()", v)
		}
		if _, known := s.lookup(); !known && name != fmt.Sprintf("NV_STATUS(0x%08x)", v) {
			t.Fatalf("%#x: unknown code named %q", v, name)
		}
		err := s.Err("op")
		if (err == nil) != (s == NV_OK) {
			t.Fatalf("%#x: Err = %v", v, err)
		}
		if err != nil && !errors.Is(err, s) {
			t.Fatalf("%#x: errors.Is(Err, status) = false", v)
		}
	})
}
