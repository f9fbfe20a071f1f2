package ioctl

import (
	"bytes"
	"errors"
	"os"
	"reflect"
	"syscall"
	"testing"
	"unsafe"
)

// Layout constants of the QUERY block, as the C side writes it.
var (
	queryTSGsSize   = int(unsafe.Sizeof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}))
	tsgInfoSize     = int(unsafe.Sizeof(NV_GPREEMPT_TSG_INFO{}))
	queryTSGsOffset = int(unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.Tsgs))
)

func TestGpreemptABIOffsets(t *testing.T) {
	tests := []struct {
		name      string
		got, want uintptr
	}{
		{"QUERY.cursor", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.Cursor), 8},
		{"QUERY.nextCursor", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.NextCursor), 16},
		{"QUERY.count", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.Count), 24},
		{"QUERY.bMore", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.BMore), 28},
		{"QUERY.status", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.Status), 32},
		{"QUERY.tsgs", unsafe.Offsetof(NV_GPREEMPT_QUERY_TSGS_PARAMS{}.Tsgs), 40},
		{"TSG_INFO.timesliceUs", unsafe.Offsetof(NV_GPREEMPT_TSG_INFO{}.TimesliceUs), 32},
		{"TSG_INFO.interleaveLevel", unsafe.Offsetof(NV_GPREEMPT_TSG_INFO{}.InterleaveLevel), 40},
		{"TSG_INFO.hDevice", unsafe.Offsetof(NV_GPREEMPT_TSG_INFO{}.HDevice), 44},
		{"SET.flags", unsafe.Offsetof(NV_GPREEMPT_SET_TSG_PARAMS{}.Flags), 12},
		{"SET.timesliceUs", unsafe.Offsetof(NV_GPREEMPT_SET_TSG_PARAMS{}.TimesliceUs), 16},
		{"SET.interleaveLevel", unsafe.Offsetof(NV_GPREEMPT_SET_TSG_PARAMS{}.InterleaveLevel), 24},
		{"SET.doneFlags", unsafe.Offsetof(NV_GPREEMPT_SET_TSG_PARAMS{}.DoneFlags), 28},
		{"SET.status", unsafe.Offsetof(NV_GPREEMPT_SET_TSG_PARAMS{}.Status), 32},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("offsetof(%s) = %d, want %d", tt.name, tt.got, tt.want)
		}
	}
	// The request numbers a strace of gpreemptctl shows.
	if got := IOWR(NV_ESC_RM_GPREEMPT_QUERY_TSGS, uint32(queryTSGsSize)); got != 0xc628467a {
		t.Errorf("QUERY request = %#x, want 0xc628467a", got)
	}
	if got := IOWR(NV_ESC_RM_GPREEMPT_SET_TSG, 40); got != 0xc028467b {
		t.Errorf("SET request = %#x, want 0xc028467b", got)
	}
}

// page builds a QUERY reply as the patched driver writes it.
func page(status NvStatus, next uint64, more bool, tsgs ...NV_GPREEMPT_TSG_INFO) []byte {
	p := NV_GPREEMPT_QUERY_TSGS_PARAMS{Status: uint32(status), NextCursor: next, Count: uint32(len(tsgs))}
	if more {
		p.BMore = 1
	}
	copy(p.Tsgs[:], tsgs)
	return bytes.Clone(Bytes(&p))
}

func tsgInfo(client, tsg Handle) NV_GPREEMPT_TSG_INFO {
	return NV_GPREEMPT_TSG_INFO{Pid: 42, HClient: client, HTsg: tsg, GpuID: 0x100, EngineType: NV2080_ENGINE_TYPE_GR0,
		RunlistID: 13, TsgID: 7, ChannelCount: 8, TimesliceUs: 2048, InterleaveLevel: 1, HDevice: 0x5c000002}
}

func fullPage(first Handle) []NV_GPREEMPT_TSG_INFO {
	var out []NV_GPREEMPT_TSG_INFO
	for i := range NV_GPREEMPT_QUERY_TSGS_MAX {
		out = append(out, tsgInfo(0xc1d00021, first+Handle(i)))
	}
	return out
}

func TestDecodeQueryTSGs(t *testing.T) {
	a, b := tsgInfo(0xc1d00021, 0x5c000015), tsgInfo(0xc1d00021, 0x5c00003e)
	c := tsgInfo(0xc1d00022, 0x5c000015)
	full := fullPage(0x5c000100)
	tests := []struct {
		name   string
		reply  []byte
		cursor uint64
		want   int    // entries, when err is ""
		err    string // substring of the error
	}{
		{"empty", page(NV_OK, 0, false), 0, 0, ""},
		{"empty after a cursor", page(NV_OK, 77, false), 77, 0, ""},
		{"three in order", page(NV_OK, c.Key(), false, a, b, c), 0, 3, ""},
		{"full page with more", page(NV_OK, full[len(full)-1].Key(), true, full...), 0, NV_GPREEMPT_QUERY_TSGS_MAX, ""},
		{"status", page(NV_ERR_INVALID_ARGUMENT, 0, false), 0, 0, "NV_ERR_INVALID_ARGUMENT"},
		{"short", page(NV_OK, 0, false)[:100], 0, 0, "bytes"},
		{"out of order", page(NV_OK, b.Key(), false, b, a), 0, 0, "not above"},
		{"duplicate", page(NV_OK, a.Key(), false, a, a), 0, 0, "not above"},
		{"not above the cursor", page(NV_OK, a.Key(), false, a), a.Key(), 0, "not above"},
		{"wrong next cursor", page(NV_OK, a.Key(), false, a, b), 0, 0, "next cursor"},
		{"more after a short page", page(NV_OK, b.Key(), true, a, b), 0, 0, "more to come"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeQueryTSGs(tt.reply, tt.cursor)
			if tt.err != "" {
				if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.err)) {
					t.Fatalf("err = %v, want one containing %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.TSGs) != tt.want {
				t.Fatalf("%d entries, want %d", len(got.TSGs), tt.want)
			}
		})
	}
	got, err := DecodeQueryTSGs(page(NV_OK, c.Key(), false, a, b, c), 0)
	if err != nil || !reflect.DeepEqual(got.TSGs, []NV_GPREEMPT_TSG_INFO{a, b, c}) {
		t.Errorf("round trip = %+v, %v", got.TSGs, err)
	}
	var status *StatusError
	if _, err := DecodeQueryTSGs(page(NV_ERR_INSUFFICIENT_PERMISSIONS, 0, false), 0); !errors.As(err, &status) ||
		!errors.Is(err, NV_ERR_INSUFFICIENT_PERMISSIONS) {
		t.Errorf("a status is not a *StatusError: %v", err)
	}
}

// FuzzDecodeQueryTSGs feeds the decoder bytes as a broken or hostile
// driver could return them: it must never panic, and whatever it accepts
// must keep the promises discovery's paging relies on.
func FuzzDecodeQueryTSGs(f *testing.F) {
	a, b := tsgInfo(0xc1d00021, 0x5c000015), tsgInfo(0xc1d00021, 0x5c00003e)
	full := fullPage(1)
	f.Add(page(NV_OK, 0, false), uint64(0))
	f.Add(page(NV_OK, b.Key(), false, a, b), uint64(0))
	f.Add(page(NV_OK, full[len(full)-1].Key(), true, full...), uint64(0))
	f.Add(page(NV_OK, b.Key(), false, a, b), a.Key())
	f.Add(page(NV_ERR_GENERIC, 0, true), uint64(0))
	f.Add([]byte{1, 2, 3}, uint64(5))
	f.Fuzz(func(t *testing.T, reply []byte, cursor uint64) {
		got, err := DecodeQueryTSGs(reply, cursor)
		if err != nil {
			return
		}
		if len(got.TSGs) > NV_GPREEMPT_QUERY_TSGS_MAX {
			t.Fatalf("%d entries in a page", len(got.TSGs))
		}
		if got.More && len(got.TSGs) != NV_GPREEMPT_QUERY_TSGS_MAX {
			t.Fatal("more after a short page")
		}
		prev := cursor
		for i, e := range got.TSGs {
			if e.Key() <= prev {
				t.Fatalf("entry %d not above %#x", i, prev)
			}
			prev = e.Key()
			// The decoder and the C layout (the struct) must agree.
			raw := reply[queryTSGsOffset+i*tsgInfoSize:][:tsgInfoSize]
			if !bytes.Equal(Bytes(&e), raw) {
				t.Fatalf("entry %d decodes to %+v, which is not its bytes", i, e)
			}
		}
		if got.NextCursor != prev {
			t.Fatalf("next cursor %#x, last key %#x", got.NextCursor, prev)
		}
		if got.More && got.NextCursor <= cursor {
			t.Fatal("a page with more to come did not advance")
		}
	})
}

// stockEscaper answers every escape as a stock driver answers one it does
// not know: EINVAL, the argument untouched.
type stockEscaper struct{ calls int }

func (s *stockEscaper) Escape(nr uint32, arg []byte) error { s.calls++; return syscall.EINVAL }

// brokenEscaper succeeds without writing a status.
type brokenEscaper struct{}

func (brokenEscaper) Escape(uint32, []byte) error { return nil }

// errnoEscaper fails with errno after the driver wrote a status, as the
// patched driver cannot but an interrupted copy-out could.
type errnoEscaper struct{ errno syscall.Errno }

func (e errnoEscaper) Escape(_ uint32, arg []byte) error {
	for i := 32; i < 36; i++ {
		arg[i] = 0
	}
	return e.errno
}

func TestGpreemptEscapeErrors(t *testing.T) {
	stock := &stockEscaper{}
	if _, err := QueryTSGs(stock, 1, 0); !errors.Is(err, ErrNoGpreemptEscapes) || !errors.Is(err, syscall.EINVAL) {
		t.Errorf("stock driver: %v, want ErrNoGpreemptEscapes wrapping EINVAL", err)
	}
	set := NV_GPREEMPT_SET_TSG_PARAMS{Pid: 1, HClient: 2, HTsg: 3, Flags: NV_GPREEMPT_SET_TSG_TIMESLICE, TimesliceUs: 100}
	if err := SetTSG(stock, &set); !errors.Is(err, ErrNoGpreemptEscapes) {
		t.Errorf("stock driver SET: %v", err)
	}
	if _, err := QueryTSGs(brokenEscaper{}, 1, 0); err == nil || errors.Is(err, ErrNoGpreemptEscapes) {
		t.Errorf("no status written: %v", err)
	}
	if _, err := QueryTSGs(errnoEscaper{syscall.EFAULT}, 1, 0); !errors.Is(err, syscall.EFAULT) || errors.Is(err, ErrNoGpreemptEscapes) {
		t.Errorf("EFAULT: %v", err)
	}
	// EINVAL with a status written is the patched driver refusing, not a
	// missing escape.
	if _, err := QueryTSGs(errnoEscaper{syscall.EINVAL}, 1, 0); errors.Is(err, ErrNoGpreemptEscapes) {
		t.Errorf("EINVAL after a status: %v", err)
	}
}

// TestEscapeOnNonNvidiaFile issues the real ioctl on /dev/null: the kernel
// answers ENOTTY, and the escape is reported absent, not failed.
func TestEscapeOnNonNvidiaFile(t *testing.T) {
	null, err := os.OpenFile("/dev/null", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no /dev/null: %v", err)
	}
	defer null.Close()
	f := &FD{fd: int(null.Fd()), name: "/dev/null"}
	if _, err := QueryTSGs(f, uint32(os.Getpid()), 0); !errors.Is(err, ErrNoGpreemptEscapes) || !errors.Is(err, syscall.ENOTTY) {
		t.Errorf("QueryTSGs on /dev/null: %v", err)
	}
}

func TestEngineTypes(t *testing.T) {
	for _, tt := range []struct {
		t          uint32
		gr, isCopy bool
	}{
		{NV2080_ENGINE_TYPE_NULL, false, false},
		{NV2080_ENGINE_TYPE_GR0, true, false},
		{NV2080_ENGINE_TYPE_GR0 + 7, true, false},
		{NV2080_ENGINE_TYPE_GR0 + 8, false, true}, // GR0+8 is COPY0
		{NV2080_ENGINE_TYPE_COPY0, false, true},
		{NV2080_ENGINE_TYPE_COPY9, false, true},
		{NV2080_ENGINE_TYPE_COPY9 + 1, false, false},
		{NV2080_ENGINE_TYPE_COPY10, false, true},
		{NV2080_ENGINE_TYPE_COPY19, false, true},
	} {
		if NV2080EngineTypeIsGR(tt.t) != tt.gr || NV2080EngineTypeIsCopy(tt.t) != tt.isCopy {
			t.Errorf("engine type %#x: gr=%v copy=%v, want %v %v", tt.t, NV2080EngineTypeIsGR(tt.t), NV2080EngineTypeIsCopy(tt.t), tt.gr, tt.isCopy)
		}
	}
}
