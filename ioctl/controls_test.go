package ioctl

import (
	"bytes"
	"reflect"
	"testing"
)

func TestParamSize(t *testing.T) {
	old, err := LookupABI(DriverVersion{570, 86, 15}, false)
	if err != nil {
		t.Fatal(err)
	}
	v575, err := LookupABI(DriverVersion{580, 159, 4}, false)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		cmd       uint32
		abi       ABI
		size      int
		wantKnown bool
	}{
		{NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, old, 16, true},
		{NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE, v575, 12, true},
		{NVA06C_CTRL_CMD_SET_TIMESLICE, old, 8, true},
		{NVA06C_CTRL_CMD_GET_TIMESLICE, v575, 8, true},
		{NVA06C_CTRL_CMD_PREEMPT, v575, 8, true},
		{NVA06C_CTRL_CMD_GET_INFO, old, 4, true},
		{NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, old, 4, true},
		{NVA06C_CTRL_CMD_GET_INTERLEAVE_LEVEL, v575, 4, true},
		// The one layout that changed: a third byte since 575.51.
		{NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, old, 2, true},
		{NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, v575, 3, true},
		// Named but without parameters defined here.
		{NVA06C_CTRL_CMD_BIND, v575, 0, false},
		{NV2080_CTRL_CMD_GPU_GET_ID, v575, 4, true},
		{0x20800a01, v575, 0, false},
	}
	for _, tt := range tests {
		size, known := tt.abi.ParamSize(tt.cmd)
		if size != tt.size || known != tt.wantKnown {
			t.Errorf("ABI %s ParamSize(%s) = %d, %v; want %d, %v", tt.abi.Name, ControlName(tt.cmd), size, known, tt.size, tt.wantKnown)
		}
	}
	// ScheduleParams and the table agree in every ABI.
	for _, abi := range []ABI{old, v575} {
		size, _ := abi.ParamSize(NVA06C_CTRL_CMD_GPFIFO_SCHEDULE)
		if got := len(abi.ScheduleParams(true)); got != size {
			t.Errorf("ABI %s: ScheduleParams is %d bytes, the table says %d", abi.Name, got, size)
		}
	}
}

// Every parameter block in the control table is an ABI struct pinned in
// layout_test.go, so its size there is checked against C.
func TestControlTableUsesABIStructs(t *testing.T) {
	pinned := map[reflect.Type]bool{}
	for _, s := range abiStructs {
		pinned[reflect.TypeOf(s.v)] = true
	}
	for cmd, c := range controls {
		for _, p := range []any{c.params, c.params575} {
			if p != nil && !pinned[reflect.TypeOf(p)] {
				t.Errorf("%s: %T is not in abiStructs", c.name, p)
			}
		}
		if got, ok := ControlByName(c.name); !ok || got != cmd {
			t.Errorf("ControlByName(%s) = %#x, %v; want %#x", c.name, got, ok, cmd)
		}
	}
}

func TestControlNames(t *testing.T) {
	tests := []struct {
		cmd  uint32
		name string
		tsg  bool
	}{
		{NVA06C_CTRL_CMD_SET_TIMESLICE, "NVA06C_CTRL_CMD_SET_TIMESLICE", true},
		{NVA06C_CTRL_CMD_GET_INFO, "NVA06C_CTRL_CMD_GET_INFO", true},
		{NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO, "NV0000_CTRL_CMD_CLIENT_GET_HANDLE_INFO", false},
		{0x20800a01, "0x20800a01", false},
	}
	for _, tt := range tests {
		if got := ControlName(tt.cmd); got != tt.name {
			t.Errorf("ControlName(%#x) = %q, want %q", tt.cmd, got, tt.name)
		}
		if got := IsChannelGroupControl(tt.cmd); got != tt.tsg {
			t.Errorf("IsChannelGroupControl(%s) = %v", tt.name, got)
		}
	}
	if _, ok := ControlByName("NVA06C_CTRL_CMD_NO_SUCH"); ok {
		t.Error("ControlByName found a command that does not exist")
	}
}

func TestDecodeParams(t *testing.T) {
	// Blocks as the driver copies them: host byte order, padding included.
	want := NVA06C_CTRL_PREEMPT_PARAMS{BWait: 1, BManualTimeout: 1, TimeoutUs: 1000}
	var got NVA06C_CTRL_PREEMPT_PARAMS
	if err := DecodeParams(Bytes(&want), &got); err != nil || got != want {
		t.Errorf("DecodeParams(PREEMPT) = %+v, %v", got, err)
	}
	tests := []struct {
		name string
		b    []byte
	}{
		{"short", make([]byte, 7)},
		{"long", make([]byte, 9)},
		{"empty", nil},
	}
	for _, tt := range tests {
		var p NVA06C_CTRL_TIMESLICE_PARAMS
		if err := DecodeParams(tt.b, &p); err == nil {
			t.Errorf("%s: a %d-byte timeslice block was decoded", tt.name, len(tt.b))
		}
		if err := EncodeParams(tt.b, &p); err == nil {
			t.Errorf("%s: a timeslice block was encoded into %d bytes", tt.name, len(tt.b))
		}
	}
	// Encode is decode's inverse, padding included.
	b := bytes.Repeat([]byte{0xff}, 8)
	if err := EncodeParams(b, &want); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, Bytes(&want)) {
		t.Errorf("EncodeParams = % x, the struct's bytes are % x", b, Bytes(&want))
	}
	// Types whose memory is not their encoding are refused.
	var n int
	if err := DecodeParams(make([]byte, 8), &n); err == nil {
		t.Error("an int was decoded: its size is the platform's")
	}
	var ptr struct{ P *uint64 }
	if err := DecodeParams(make([]byte, 8), &ptr); err == nil {
		t.Error("a pointer was decoded from outside bytes")
	}
	var implicit struct {
		A uint8
		B uint32
	}
	if err := DecodeParams(make([]byte, 8), &implicit); err == nil {
		t.Error("a struct with implicit padding was decoded")
	}
}

// FuzzDecodeParams feeds arbitrary bytes to the decoder for every control
// block: nothing may panic, and a block that decodes re-encodes to the same
// bytes.
func FuzzDecodeParams(f *testing.F) {
	f.Add([]byte{0, 8, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0})
	f.Add(make([]byte, 16))
	f.Fuzz(func(t *testing.T, b []byte) {
		decode := func(p any, dec func() error, enc func([]byte) error) {
			if dec() != nil {
				return
			}
			out := make([]byte, len(b))
			if err := enc(out); err != nil {
				t.Fatalf("%T decoded from %d bytes but does not encode back: %v", p, len(b), err)
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("%T: % x decodes and encodes to % x", p, b, out)
			}
		}
		var ts NVA06C_CTRL_TIMESLICE_PARAMS
		decode(ts, func() error { return DecodeParams(b, &ts) }, func(o []byte) error { return EncodeParams(o, &ts) })
		var pre NVA06C_CTRL_PREEMPT_PARAMS
		decode(pre, func() error { return DecodeParams(b, &pre) }, func(o []byte) error { return EncodeParams(o, &pre) })
		var s2 NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS
		decode(s2, func() error { return DecodeParams(b, &s2) }, func(o []byte) error { return EncodeParams(o, &s2) })
		var s3 NVA06F_CTRL_GPFIFO_SCHEDULE_PARAMS_V575
		decode(s3, func() error { return DecodeParams(b, &s3) }, func(o []byte) error { return EncodeParams(o, &s3) })
		var hi NV0000_CTRL_CLIENT_GET_HANDLE_INFO_PARAMS
		decode(hi, func() error { return DecodeParams(b, &hi) }, func(o []byte) error { return EncodeParams(o, &hi) })
		var ch NV0000_CTRL_CMD_CLIENT_GET_CHILD_HANDLE_PARAMS
		decode(ch, func() error { return DecodeParams(b, &ch) }, func(o []byte) error { return EncodeParams(o, &ch) })
		var set NV_GPREEMPT_SET_TSG_PARAMS
		decode(set, func() error { return DecodeParams(b, &set) }, func(o []byte) error { return EncodeParams(o, &set) })
	})
}
