package pause

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"sync/atomic"
	"testing"
)

var testUsers atomic.Int32

// newTestUser adds a system user without a home for the test and removes
// it at cleanup. It needs root and useradd.
func newTestUser(t *testing.T) (uid, gid uint32) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("adding a user needs root")
	}
	if _, err := exec.LookPath("useradd"); err != nil {
		t.Skipf("adding a user needs useradd: %v", err)
	}
	name := fmt.Sprintf("gpt%dx%d", os.Getpid(), testUsers.Add(1))
	if out, err := exec.Command("useradd", "--system", "--no-create-home", "--user-group", "--shell", "/usr/sbin/nologin", name).CombinedOutput(); err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("userdel", name).CombinedOutput(); err != nil {
			t.Errorf("userdel %s: %v: %s", name, err, out)
		}
	})
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := strconv.ParseUint(u.Uid, 10, 32)
	g, _ := strconv.ParseUint(u.Gid, 10, 32)
	return uint32(id), uint32(g)
}
