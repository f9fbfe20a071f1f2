package trace

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/gpreempt/gpreempt/ioctl"
)

// sampleEvents covers every record form the programs send.
func sampleEvents() []Event {
	ts := ioctl.NVA06C_CTRL_TIMESLICE_PARAMS{TimesliceUs: 2048}
	tsBytes, _ := binary.Append(nil, binary.NativeEndian, &ts)
	return []Event{
		&RMCall{PID: 4242, TID: 4243, Comm: "python3", FD: 8, Request: ioctl.IOWR(ioctl.NV_ESC_RM_ALLOC, 48),
			Enter: 100, Exit: 120, Status: ioctl.NV_OK, StatusKnown: true,
			Alloc: &Alloc{Client: 0xc1d00022, Parent: 0x5c000002, Object: 0x5c000015, Class: ioctl.KEPLER_CHANNEL_GROUP_A, ParamsSize: 40, Long: true}},
		&RMCall{PID: 1, TID: 1, Comm: "a", FD: 3, Request: ioctl.IOWR(ioctl.NV_ESC_RM_ALLOC, 32),
			Enter: 1, Exit: 2, Ret: -25, Status: ioctl.NV_ERR_INVALID_CLIENT, StatusKnown: true,
			Alloc: &Alloc{Client: 0xc1d00022, Parent: 0x5c000015, Object: 0x5c00001c, Class: ioctl.HOPPER_CHANNEL_GPFIFO_A}},
		&RMCall{PID: 4242, TID: 4242, Comm: "python3", FD: 8, Request: ioctl.IOWR(ioctl.NV_ESC_RM_FREE, 16),
			Enter: 5, Exit: 9, Status: ioctl.NV_OK, StatusKnown: true,
			Free: &Free{Client: 0xc1d00022, Parent: 0x5c000002, Object: 0x5c000015}},
		&RMCall{PID: 999, TID: 999, Comm: "gpreemptctl", FD: 5, Request: ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 32),
			Enter: 1000, Exit: 1310, Status: ioctl.NV_OK, StatusKnown: true,
			Control: &Control{Client: 0xc1d00022, Object: 0x5c000015, Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ParamsSize: 8, In: tsBytes, Out: tsBytes}},
		// The exit copy could not be read: inputs only, status unknown.
		&RMCall{PID: 7, TID: 8, Comm: "x", FD: 9, Request: ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 32), Enter: 1, Exit: 1,
			Control: &Control{Client: 1, Object: 2, Cmd: 0xd02, ParamsSize: 16}},
		// Neither copy could be read (bad pointer).
		&RMCall{PID: 7, TID: 8, Comm: "x", FD: 9, Request: ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 32), Enter: 1, Exit: 3, Ret: -14},
		&TaskExit{PID: 4242, Comm: "python3", At: 77},
		&Call{Kind: CallEnter, PID: 5, TID: 6, Comm: "lc-server", At: 10, Role: RoleLaunch, Index: 3, Arg0: 0x1234, Arg1: 1},
		&Call{Kind: CallReturn, PID: 5, TID: 6, Comm: "lc-server", At: 20, Role: RoleSync, Index: 4, Ret: 700, OnCPU: 3 * time.Millisecond},
		&Call{Kind: CallEnter, PID: 5, TID: 6, Comm: "lc-server", At: 30, Role: RoleHint, Index: 5, Arg0: 0x7fff0000, Arg1: 500, Str: "infer"},
	}
}

func TestEncodeDecode(t *testing.T) {
	for i, want := range sampleEvents() {
		b, err := Encode(want)
		if err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		got, err := Decode(b)
		if err != nil {
			t.Fatalf("event %d: decode: %v", i, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("event %d:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

func TestRecordSizes(t *testing.T) {
	// The C structs' sizes, which the BPF programs reserve.
	if n := binary.Size(rmRmEvent{}); n != 192 {
		t.Errorf("rm_event is %d bytes", n)
	}
	if n := binary.Size(rmTaskExitEvent{}); n != 32 {
		t.Errorf("task_exit_event is %d bytes", n)
	}
	if n := binary.Size(callsCallEvent{}); n != 104 {
		t.Errorf("call_event is %d bytes", n)
	}
}

// TestRoles pins the role numbers the uprobe program knows (enum role in
// bpf/calls.c) to package trace's.
func TestRoles(t *testing.T) {
	if RoleHint != Role(callsRoleROLE_HINT) {
		t.Errorf("RoleHint = %d, calls.c's ROLE_HINT = %d", RoleHint, callsRoleROLE_HINT)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := Encode(sampleEvents()[0])
	if err != nil {
		t.Fatal(err)
	}
	patch := func(off int, v uint32) []byte {
		b := append([]byte(nil), good...)
		binary.NativeEndian.PutUint32(b[off:], v)
		return b
	}
	tests := map[string][]byte{
		"empty":             nil,
		"short kind":        {1, 0},
		"unknown kind":      patch(0, 9),
		"truncated":         good[:100],
		"not type F":        patch(16, ioctl.IOWR(ioctl.NV_ESC_RM_ALLOC, 48)&^0xff00|'T'<<8),
		"escape not traced": patch(16, ioctl.IOWR(ioctl.NV_ESC_RM_MAP_MEMORY, 48)),
		"alloc of 40 bytes": patch(16, ioctl.IOWR(ioctl.NV_ESC_RM_ALLOC, 40)),
		"size over 48":      patch(16, ioctl.IOWR(ioctl.NV_ESC_RM_CONTROL, 64)),
		"short call":        make([]byte, 20),
	}
	binary.NativeEndian.PutUint32(tests["short call"], kindCallEnter)
	for name, b := range tests {
		if _, err := Decode(b); !errors.Is(err, ErrDecode) {
			t.Errorf("%s: Decode = %v, want ErrDecode", name, err)
		}
	}
}

// FuzzDecode feeds arbitrary records to the decoder: it must not panic,
// and whatever it accepts must encode back to a record that decodes the
// same.
func FuzzDecode(f *testing.F) {
	for _, ev := range sampleEvents() {
		b, err := Encode(ev)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrDecode) {
				t.Fatalf("Decode error %v is not ErrDecode", err)
			}
			return
		}
		if e, ok := ev.(*RMCall); ok {
			_ = e.Duration()
			_ = e.OK()
			if c := e.Control; c != nil {
				c.TimesliceUs()
				c.InterleaveLevel()
				c.ScheduleEnable()
				c.Preempt()
			}
		}
		again, err := Encode(ev)
		if err != nil {
			t.Fatalf("Encode of a decoded %T: %v", ev, err)
		}
		ev2, err := Decode(again)
		if err != nil {
			t.Fatalf("re-decode: %v", err)
		}
		if !reflect.DeepEqual(ev, ev2) {
			t.Fatalf("round trip:\n %#v\n %#v", ev, ev2)
		}
	})
}
