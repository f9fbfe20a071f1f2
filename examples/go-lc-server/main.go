// Command go-lc-server is a minimal latency-critical request loop using
// gpreempt's Go hint API from a module of its own: every period a request
// arrives, is hinted when its CPU-side preparation starts, and is marked
// Ready when its GPU work would be enqueued. At the end it prints the
// engine's statistics.
//
// It launches no LC kernels of its own: in a real server the request's
// kernels are launched (by the CUDA runtime, a framework, or cgo) on the
// same device's primary context between the preparation and Ready. What
// runs here on the GPU is the engine's own spinner, launched about one
// switch time before each preparation is predicted to end and released at
// Ready; Stats reports how long it held the GPU and how long it took to
// become resident.
//
//	go run . -device 0 -requests 200 -period 5ms -prep 500us
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"time"

	"github.com/gpreempt/gpreempt/prepreempt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "go-lc-server:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) (err error) {
	device := flag.Int("device", 0, "CUDA device ordinal")
	requests := flag.Int("requests", 200, "requests to serve")
	period := flag.Duration("period", 5*time.Millisecond, "time between request arrivals")
	prep := flag.Duration("prep", 500*time.Microsecond, "CPU-side preparation of each request")
	launcher := flag.String("launcher", "goroutine", "spinner launcher: goroutine or poller")
	asJSON := flag.Bool("json", false, "print the full statistics as JSON")
	flag.Parse()
	l, err := prepreempt.ParseLauncher(*launcher)
	if err != nil {
		return err
	}
	if *prep >= *period {
		return fmt.Errorf("-prep %v must be shorter than -period %v", *prep, *period)
	}

	// SkipLCClass: leave this process's channel groups at their timeslice
	// (gpreemptctl class lc, run by an administrator, sets it); without it
	// New applies the LC class itself.
	eng, err := prepreempt.New(ctx, *device, prepreempt.Options{Launcher: l, SkipLCClass: true})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, eng.Close()) }()

	var work uint64
	tick := time.NewTicker(*period)
	defer tick.Stop()
	for range *requests {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		req, err := eng.Hint(ctx, "infer", *prep)
		if err != nil {
			return err
		}
		work += prepare(*prep)
		// Here a real server launches the request's kernels.
		if err := req.Ready(); err != nil {
			return fmt.Errorf("ready: %w", err)
		}
	}
	// Let the engine reap the last spinner before reading its stamps.
	time.Sleep(10 * time.Millisecond)
	st := eng.Stats()
	if *asJSON {
		b, err := json.MarshalIndent(st, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Printf("%s\n", b)
		return err
	}
	fmt.Printf("backend %s: %d hints: %d early (spinner resident before Ready), %d late, %d cancelled, %d expired, %d dropped, %d throttled\n",
		st.Backend, st.Hints, st.Early, st.Late, st.Cancelled, st.Expired, st.Dropped, st.Throttled)
	fmt.Printf("spinner held the GPU p50 %v, p99 %v; switch-in p50 %v; launch lead now %v\n",
		quantile(st.HeldSamples, 0.5), quantile(st.HeldSamples, 0.99),
		quantile(st.SwitchInSamples, 0.5), time.Duration(st.SwitchEstimateNs))
	fmt.Printf("(preparation checksum %x)\n", work)
	return nil
}

// prepare stands for a request's CPU-side preparation (decoding, batching,
// tokenising): real work for about d.
func prepare(d time.Duration) uint64 {
	h := uint64(14695981039346656037)
	for end := time.Now().Add(d); time.Now().Before(end); {
		for i := range 256 {
			h = (h ^ uint64(i)) * 1099511628211
		}
	}
	return h
}

func quantile(ns []int64, q float64) time.Duration {
	if len(ns) == 0 {
		return 0
	}
	s := slices.Clone(ns)
	slices.Sort(s)
	return time.Duration(s[int(q*float64(len(s)-1))])
}
