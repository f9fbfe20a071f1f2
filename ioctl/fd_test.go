package ioctl

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestOpenControlWithoutDriver(t *testing.T) {
	if _, err := os.Stat(ControlDevicePath); err == nil {
		t.Skip("this machine has the NVIDIA driver")
	}
	if _, err := OpenControl(); !errors.Is(err, ErrNoDriver) {
		t.Fatalf("OpenControl = %v, want ErrNoDriver", err)
	}
}

// TestAttachAndErrnoPath duplicates one of our own descriptors through
// pidfd_getfd (as for another process's /dev/nvidiactl) and checks that an
// ioctl failing in the kernel comes back as an errno, not an NvStatus.
func TestAttachAndErrnoPath(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "notnv")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dup, err := Attach(os.Getpid(), int(f.Fd()))
	if errors.Is(err, unix.ENOSYS) {
		t.Skipf("kernel has no pidfd_getfd: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	if dup.Fd() == int(f.Fd()) {
		t.Fatal("Attach returned the same descriptor number, not a duplicate")
	}
	if ok, err := dup.IsControlDevice(); err != nil || ok {
		t.Fatalf("IsControlDevice on a regular file = %v, %v", ok, err)
	}
	err = dup.ControlBytes(1, 2, NVA06C_CTRL_CMD_GET_TIMESLICE, make([]byte, 8))
	var errno unix.Errno
	if !errors.As(err, &errno) || errno != unix.ENOTTY {
		t.Fatalf("control on a regular file = %v, want ENOTTY", err)
	}
	var status *StatusError
	if errors.As(err, &status) {
		t.Fatalf("an errno failure was reported as an RM status: %v", err)
	}
	if _, err := dup.DriverVersion(); !errors.As(err, &errno) {
		t.Fatalf("DriverVersion on a regular file = %v, want an errno", err)
	}
}

func TestAttachErrors(t *testing.T) {
	if _, err := Attach(1<<22+12345, 0); !errors.Is(err, ErrNoSuchProcess) {
		t.Errorf("Attach to a pid that cannot exist = %v, want ErrNoSuchProcess", err)
	}
	if _, err := Attach(os.Getpid(), 1<<20); err == nil || errors.Is(err, ErrPermission) {
		t.Errorf("Attach to a closed descriptor = %v, want a bad-descriptor error", err)
	}
}

func TestIsControlDeviceRdev(t *testing.T) {
	tests := []struct {
		mode uint32
		rdev uint64
		want bool
	}{
		{unix.S_IFCHR, unix.Mkdev(195, 255), true},
		{unix.S_IFCHR, unix.Mkdev(195, 0), false}, // /dev/nvidia0
		{unix.S_IFCHR, unix.Mkdev(1, 3), false},   // /dev/null
		{unix.S_IFREG, unix.Mkdev(195, 255), false},
	}
	for _, tt := range tests {
		if got := IsControlDeviceRdev(tt.mode, tt.rdev); got != tt.want {
			t.Errorf("IsControlDeviceRdev(%#o, %d:%d) = %v", tt.mode, unix.Major(tt.rdev), unix.Minor(tt.rdev), got)
		}
	}
}
