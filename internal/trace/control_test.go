package trace

import (
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
)

func TestControlValues(t *testing.T) {
	le64 := func(v uint64) []byte {
		return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24), byte(v >> 32), byte(v >> 40), byte(v >> 48), byte(v >> 56)}
	}
	// Heads are copied from the host's memory: these literals assume a
	// little-endian host, like the BPF objects.
	set := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ParamsSize: 8, In: le64(2048), Out: le64(2048)}
	if v, ok := set.TimesliceUs(); !ok || v != 2048 {
		t.Errorf("SET_TIMESLICE = %d, %v", v, ok)
	}
	get := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_GET_TIMESLICE, ParamsSize: 8, In: le64(0), Out: le64(1024)}
	if v, ok := get.TimesliceUs(); !ok || v != 1024 {
		t.Errorf("GET_TIMESLICE = %d, %v (must read the exit copy)", v, ok)
	}
	if _, ok := (&Control{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ParamsSize: 16, In: le64(5)}).TimesliceUs(); ok {
		t.Error("a 16-byte SET_TIMESLICE block was decoded: RM refuses it")
	}
	if _, ok := (&Control{Cmd: ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE, ParamsSize: 8}).TimesliceUs(); ok {
		t.Error("SET_TIMESLICE without a head was decoded")
	}
	if _, ok := (&Control{Cmd: ioctl.NVA06C_CTRL_CMD_PREEMPT, ParamsSize: 8, In: le64(1)}).TimesliceUs(); ok {
		t.Error("PREEMPT decoded as a timeslice")
	}

	lvl := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_SET_INTERLEAVE_LEVEL, ParamsSize: 4, In: []byte{2, 0, 0, 0}}
	if v, ok := lvl.InterleaveLevel(); !ok || v != ioctl.NVA06C_CTRL_INTERLEAVE_LEVEL_HIGH {
		t.Errorf("SET_INTERLEAVE_LEVEL = %d, %v", v, ok)
	}
	for _, size := range []uint32{2, 3} {
		on := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, ParamsSize: size, In: []byte{1, 0, 0}[:size]}
		if v, ok := on.ScheduleEnable(); !ok || !v {
			t.Errorf("GPFIFO_SCHEDULE(%d bytes) enable = %v, %v", size, v, ok)
		}
		off := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE, ParamsSize: size, In: []byte{0, 0, 0}[:size]}
		if v, ok := off.ScheduleEnable(); !ok || v {
			t.Errorf("GPFIFO_SCHEDULE(%d bytes) disable = %v, %v", size, v, ok)
		}
	}
	pre := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_PREEMPT, ParamsSize: 8, In: []byte{1, 1, 0, 0, 0xe8, 0x03, 0, 0}}
	if p, ok := pre.Preempt(); !ok || p.BWait != 1 || p.BManualTimeout != 1 || p.TimeoutUs != 1000 {
		t.Errorf("PREEMPT = %+v, %v", p, ok)
	}
}

// FuzzControlValues decodes arbitrary parameter heads for every
// channel-group command: nothing may panic.
func FuzzControlValues(f *testing.F) {
	f.Add(uint32(ioctl.NVA06C_CTRL_CMD_SET_TIMESLICE), uint32(8), []byte{0, 8, 0, 0, 0, 0, 0, 0}, []byte{})
	f.Add(uint32(ioctl.NVA06C_CTRL_CMD_GPFIFO_SCHEDULE), uint32(3), []byte{1, 0, 0}, []byte{1})
	f.Fuzz(func(t *testing.T, cmd, size uint32, in, out []byte) {
		c := &Control{Cmd: ioctl.NVA06C_CTRL_CMD_NULL | cmd&0xffff, ParamsSize: size, In: in, Out: out}
		c.TimesliceUs()
		c.InterleaveLevel()
		c.ScheduleEnable()
		c.Preempt()
		_ = ioctl.ControlName(cmd)
	})
}
