package attach

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

// TestAttachGuardBoundsAHang: library work that never ends (an open on a
// FUSE file its owner never answers) costs its caller the deadline once;
// while it runs on, the process is refused at once; and an attach that
// ends after its deadline is undone.
func TestAttachGuardBoundsAHang(t *testing.T) {
	var g Guard
	release := make(chan struct{})
	undone := make(chan struct{})
	err := g.Run(7, time.Now(), func() error { <-release; return nil }, func() { close(undone) })
	if !errors.Is(err, errAttachTimeout) {
		t.Fatalf("run = %v; want errAttachTimeout", err)
	}
	if err := g.Run(7, time.Now().Add(time.Hour), func() error { t.Error("ran twice"); return nil }, nil); !errors.Is(err, errAttachHung) {
		t.Fatalf("while the first runs: %v; want errAttachHung", err)
	}
	close(release)
	<-undone // what the late attach did is undone
	for g.Running(7) {
		runtime.Gosched()
	}
	if err := g.Run(7, time.Now().Add(time.Hour), func() error { return nil }, nil); err != nil {
		t.Errorf("after it ended: %v", err)
	}
}
