package rmfake

import (
	"bytes"
	"errors"
	"syscall"
	"testing"

	"github.com/gpreempt/gpreempt/ioctl"
)

// The fake answers the raw escapes as the drivers do: the tsg tests rely on
// these three rules to exercise the real detection code.
func TestEscapeLikeTheDriver(t *testing.T) {
	d := New()
	p := d.NewProc(1)
	ctl := d.OpenControlAt(p, 3)
	dev, err := d.OpenDeviceAt(p, 4, 3)
	if err != nil {
		t.Fatal(err)
	}
	query := func(f *FD, size int) ([]byte, error) {
		b := bytes.Repeat([]byte{0xa5}, size)
		return b, f.Escape(ioctl.NV_ESC_RM_GPREEMPT_QUERY_TSGS, b)
	}
	full := len(ioctl.Bytes(new(ioctl.NV_GPREEMPT_QUERY_TSGS_PARAMS)))

	// Stock: EINVAL, argument untouched.
	b, err := query(ctl, full)
	if !errors.Is(err, syscall.EINVAL) || !bytes.Equal(b, bytes.Repeat([]byte{0xa5}, full)) {
		t.Errorf("stock driver: %v, argument changed: %v", err, !bytes.Equal(b, bytes.Repeat([]byte{0xa5}, full)))
	}

	d.EnableGpreemptEscapes(EscapeConfig{CallerPrivileged: true})
	// Patched: a size off by one and a /dev/nvidiaN file are refused
	// before the handler runs.
	if _, err := query(ctl, full-1); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("short argument: %v", err)
	}
	if _, err := query(dev, full); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("device file: %v", err)
	}
	// Well-sized: the answer is in the status (reserved fields are 0xa5 here).
	b, err = query(ctl, full)
	if err != nil {
		t.Fatal(err)
	}
	if s := ioctl.NvStatus(uint32(b[32]) | uint32(b[33])<<8 | uint32(b[34])<<16 | uint32(b[35])<<24); s != ioctl.NV_ERR_INVALID_ARGUMENT {
		t.Errorf("non-zero flags: status %v", s)
	}
	if page, err := ioctl.QueryTSGs(ctl, 1, 0); err != nil || len(page.TSGs) != 0 {
		t.Errorf("empty driver: %+v, %v", page, err)
	}
	if n := d.Escapes(ioctl.NV_ESC_RM_GPREEMPT_QUERY_TSGS); n != 5 {
		t.Errorf("counted %d escapes, want 5", n)
	}
}
