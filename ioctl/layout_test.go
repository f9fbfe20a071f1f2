package ioctl

import (
	"reflect"
	"structs"
	"testing"
	"unsafe"
)

// abiStructs lists every ABI struct with its C sizeof. A new struct must be
// added here; TestABIStructRules fails for any exported struct in the
// package that is missing.
var abiStructs = []struct {
	v    any
	size uintptr
}{
	{NVOS00_PARAMETERS{}, 16},
	{NVOS21_PARAMETERS{}, 32},
	{NVOS54_PARAMETERS{}, 32},
	{NVOS64_PARAMETERS{}, 48},
	{NV_IOCTL_RM_API_VERSION{}, 72},
	{NVA06C_CTRL_TIMESLICE_PARAMS{}, 8},
	{NVA06C_CTRL_PREEMPT_PARAMS{}, 8},
	{NVA06C_CTRL_GET_INFO_PARAMS{}, 4},
	{NVA06C_CTRL_INTERLEAVE_LEVEL_PARAMS{}, 4},
	{NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS{}, 2},
	{NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575{}, 3},
	{NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{}, 16},
	{NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS{}, 12},
	{NV0000_ALLOC_PARAMETERS{}, 120},
	{NV2080_CTRL_GPU_GET_ID_PARAMS{}, 4},
	// gpreempt's driver escapes (escape_gpreempt.go; ct_asserts in the
	// patch's escape_gpreempt.c).
	{NV_GPREEMPT_TSG_INFO{}, 48},
	{NV_GPREEMPT_QUERY_TSGS_PARAMS{}, 40 + 48*NV_GPREEMPT_QUERY_TSGS_MAX},
	{NV_GPREEMPT_SET_TSG_PARAMS{}, 40},
}

func TestABIStructSizes(t *testing.T) {
	for _, s := range abiStructs {
		typ := reflect.TypeOf(s.v)
		t.Run(typ.Name(), func(t *testing.T) {
			if got := typ.Size(); got != s.size {
				t.Errorf("sizeof(%s) = %d, C sizeof = %d", typ.Name(), got, s.size)
			}
		})
	}
}

// TestABIStructRules walks every ABI struct: it must start with
// structs.HostLayout, hold only fixed-width fields, and have no implicit
// padding (the sum of the field sizes equals the struct size).
func TestABIStructRules(t *testing.T) {
	hostLayout := reflect.TypeOf(structs.HostLayout{})
	for _, s := range abiStructs {
		typ := reflect.TypeOf(s.v)
		t.Run(typ.Name(), func(t *testing.T) {
			if typ.NumField() == 0 || typ.Field(0).Type != hostLayout {
				t.Fatalf("%s: first field must be structs.HostLayout", typ.Name())
			}
			var sum uintptr
			for i := range typ.NumField() {
				f := typ.Field(i)
				if !fixedWidth(f.Type) {
					t.Errorf("%s.%s: %s is not a fixed-width type", typ.Name(), f.Name, f.Type)
				}
				if f.Offset != sum {
					t.Errorf("%s.%s: at offset %d, previous fields end at %d: implicit padding", typ.Name(), f.Name, f.Offset, sum)
				}
				sum = f.Offset + f.Type.Size()
			}
			if sum != typ.Size() {
				t.Errorf("%s: fields end at %d, struct size %d: implicit tail padding", typ.Name(), sum, typ.Size())
			}
		})
	}
}

func fixedWidth(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
		reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	case reflect.Array:
		return fixedWidth(t.Elem())
	case reflect.Struct:
		if t == reflect.TypeOf(structs.HostLayout{}) {
			return true
		}
		for i := range t.NumField() {
			if !fixedWidth(t.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}

func TestABIOffsets(t *testing.T) {
	// The offsets RM's ct_asserts and the eBPF decoders rely on.
	tests := []struct {
		name string
		got  uintptr
		want uintptr
	}{
		{"NVOS54.params", unsafe.Offsetof(NVOS54_PARAMETERS{}.Params), 16},
		{"NVOS54.paramsSize", unsafe.Offsetof(NVOS54_PARAMETERS{}.ParamsSize), 24},
		{"NVOS54.status", unsafe.Offsetof(NVOS54_PARAMETERS{}.Status), 28},
		{"NVOS21.pAllocParms", unsafe.Offsetof(NVOS21_PARAMETERS{}.PAllocParms), 16},
		{"NVOS21.status", unsafe.Offsetof(NVOS21_PARAMETERS{}.Status), 28},
		{"NVOS64.pAllocParms", unsafe.Offsetof(NVOS64_PARAMETERS{}.PAllocParms), 16},
		{"NVOS64.pRightsRequested", unsafe.Offsetof(NVOS64_PARAMETERS{}.PRightsRequested), 24},
		{"NVOS64.paramsSize", unsafe.Offsetof(NVOS64_PARAMETERS{}.ParamsSize), 32},
		{"NVOS64.flags", unsafe.Offsetof(NVOS64_PARAMETERS{}.Flags), 36},
		{"NVOS64.status", unsafe.Offsetof(NVOS64_PARAMETERS{}.Status), 40},
		{"NV0000_ALLOC.pOsPidInfo", unsafe.Offsetof(NV0000_ALLOC_PARAMETERS{}.POsPidInfo), 112},
		{"PREEMPT.timeoutUs", unsafe.Offsetof(NVA06C_CTRL_PREEMPT_PARAMS{}.TimeoutUs), 4},
		{"GET_HANDLE_INFO.data", unsafe.Offsetof(NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS{}.Data), 8},
		// NVOS21 and NVOS64 share their first fields (escape.c ct_asserts).
		{"NVOS21/64.hClass", unsafe.Offsetof(NVOS21_PARAMETERS{}.HClass), unsafe.Offsetof(NVOS64_PARAMETERS{}.HClass)},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("offsetof(%s) = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
}

func TestIOWR(t *testing.T) {
	tests := []struct {
		nr, size uint32
		want     uint32
	}{
		// Values seen in strace of libcuda: _IOWR('F', 0x2a, 32) etc.
		{NV_ESC_RM_CONTROL, 32, 0xc020462a},
		{NV_ESC_RM_ALLOC, 48, 0xc030462b},
		{NV_ESC_RM_FREE, 16, 0xc0104629},
		{NV_ESC_CHECK_VERSION_STR, 72, 0xc04846d2},
	}
	for _, tt := range tests {
		got := IOWR(tt.nr, tt.size)
		if got != tt.want {
			t.Errorf("IOWR(%#x, %d) = %#x, want %#x", tt.nr, tt.size, got, tt.want)
		}
		if IOCNr(got) != tt.nr || IOCSize(got) != tt.size || IOCType(got) != NV_IOCTL_MAGIC {
			t.Errorf("IOWR(%#x, %d): round trip gives nr %#x size %d type %#x", tt.nr, tt.size, IOCNr(got), IOCSize(got), IOCType(got))
		}
	}
}

func TestBytesAliases(t *testing.T) {
	var p NVA06C_CTRL_TIMESLICE_PARAMS
	b := Bytes(&p)
	if len(b) != 8 {
		t.Fatalf("len = %d", len(b))
	}
	b[0], b[1] = 0x00, 0x08 // 2048, little endian
	if p.TimesliceUs != 2048 {
		t.Errorf("TimesliceUs = %d after writing the bytes, want 2048", p.TimesliceUs)
	}
}
