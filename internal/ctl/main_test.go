package ctl_test

import (
	"context"
	"os"
	"testing"

	"github.com/gpreempt/gpreempt/internal/ctl"
)

// asGpreemptctl, set in the environment, makes the test binary run as
// gpreemptctl itself, so that a shell script under test can call it.
const asGpreemptctl = "GPREEMPTCTL_TEST_AS_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(asGpreemptctl) == "1" {
		os.Exit(ctl.Run(context.Background(), ctl.DefaultEnv(), os.Args))
	}
	os.Exit(m.Run())
}
