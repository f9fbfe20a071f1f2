// Package pytorch embeds the PyTorch worker scripts, so that gpreempt-bench
// can run its pytorch scenarios from the binary alone, without a checkout.
//
// lc_infer.py is the latency-critical worker (periodic inference requests),
// be_train.py the best-effort one (a training loop); lc_decode.py is an LLM
// decode LC (eager or a CUDA graph a step), be_gemm.py a GEMM-loop BE. Both follow the
// gpreempt-bench worker protocol: print "READY pid=<pid>" on stdout once
// their CUDA context exists and they have run, then write a JSON result in
// the schema of internal/bench's LCResult / BEResult.
package pytorch

import "embed"

// FS holds lc_infer.py and be_train.py.
//
//go:embed lc_infer.py be_train.py lc_decode.py be_gemm.py
var FS embed.FS

// Names lists the worker scripts in FS.
var Names = []string{"lc_infer.py", "be_train.py", "lc_decode.py", "be_gemm.py"}
