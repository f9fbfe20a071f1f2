// Package pytorch embeds the PyTorch worker scripts, so that gpreempt-bench
// can run its pytorch scenarios from the binary alone, without a checkout.
//
// lc_infer.py is the latency-critical worker (periodic inference requests),
// be_train.py the best-effort one (a training loop). Both follow the
// gpreempt-bench worker protocol: print "READY pid=<pid>" on stdout once
// their CUDA context exists and they have run, then write a JSON result in
// the schema of internal/bench's LCResult / BEResult.
package pytorch

import "embed"

// FS holds lc_infer.py and be_train.py.
//
//go:embed lc_infer.py be_train.py
var FS embed.FS
