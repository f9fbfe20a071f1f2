package prepreempt_test

import (
	"context"
	"log"
	"time"

	"github.com/gpreempt/gpreempt/prepreempt"
)

// A request loop: Hint when a request's preparation starts, Ready right
// after its kernels are launched on the device's primary context (the one
// the CUDA runtime and frameworks use). examples/go-lc-server is the same
// loop as a module of its own.
func Example() {
	ctx := context.Background()
	eng, err := prepreempt.New(ctx, 0, prepreempt.Options{Launcher: prepreempt.LauncherPoller})
	if err != nil {
		log.Fatal(err) // no GPU, or no driver
	}
	defer eng.Close()
	for range 100 {
		req, err := eng.Hint(ctx, "infer", 500*time.Microsecond)
		if err != nil {
			log.Fatal(err)
		}
		// ... decode, batch and copy the request's input, launch its
		// kernels on your stream ...
		if err := req.Ready(); err != nil {
			log.Fatal(err)
		}
	}
	s := eng.Stats()
	log.Printf("%d hints, %d with the context resident before Ready", s.Hints, s.Early)
}
