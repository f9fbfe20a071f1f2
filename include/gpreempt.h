/*
 * gpreempt.h — pre-preemption for latency-critical CUDA requests.
 *
 * Link with libgpreempt.so (go build -buildmode=c-shared ./cmd/libgpreempt).
 * One engine per process, on the primary context of one device (the context
 * PyTorch and the CUDA runtime use). Typical request:
 *
 *     uint64_t h = gpreempt_hint("infer", 500);   // preparation starts
 *     ... prepare inputs, copy them, launch the LC kernels on your stream ...
 *     gpreempt_ready(h);                          // right after the launches
 *
 * The engine launches a one-thread spinner (and an empty kernel behind it)
 * about one switch time before the predicted end of preparation, so the
 * context is already resident on the GPU when the LC kernels arrive;
 * gpreempt_ready releases it. A spinner never holds the GPU longer than
 * max_hold_us, even if gpreempt_ready is never called, and spinners
 * together hold it at most a quarter of the time (a budget of 250 ms,
 * refilled at 250 ms per second; each spinner reserves max_hold_us until
 * it is released): hints beyond that run without a spinner (counted as
 * "throttled" in the stats), so a flood of hints cannot keep other
 * processes' work off the GPU.
 *
 * Functions return 0 (or a handle / a length) on success and -1 (or 0 for
 * gpreempt_hint) on failure; gpreempt_last_error() then says why, in the
 * thread that called the failing function. All are thread-safe.
 */
#ifndef GPREEMPT_H
#define GPREEMPT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Do not put this process's channel groups in the LC class at init. */
#define GPREEMPT_SKIP_LC_CLASS 1u
/* Launch spinners from one thread that polls the scheduled launches while
 * hints keep coming (and parks 20 ms after the last one), instead of waking
 * a thread per hint: launches are on time to ~1 us instead of ~5 us (p99,
 * measured on the H100 VM), at the price of a busy core while LC traffic
 * flows. */
#define GPREEMPT_LAUNCHER_POLLER 2u
/* The request gate's mode at init (default off): every request
 * gpreempt_begin announces holds the GPU from BE work until gpreempt_end
 * (ON), or those of classes whose requests are long enough for launch gaps
 * to cost switches (AUTO). Not both. */
#define GPREEMPT_GATE_ON 4u
#define GPREEMPT_GATE_AUTO 8u

/* Create the engine on device's primary context, which it retains until
 * gpreempt_shutdown. max_hold_us: 0 for 5000, at most 250000
 * (the hold budget: spinners hold at most a quarter of each second). */
int gpreempt_init(int device, uint64_t max_hold_us, uint32_t flags);

/* A request of class `cls` starts preparing; expected_prep_us (at most
 * 10000000, 10 s) is used until the class has history. Returns a handle, 0
 * on error. */
uint64_t gpreempt_hint(char *cls, uint64_t expected_prep_us);

/* The request's LC work is enqueued: release its spinner. */
int gpreempt_ready(uint64_t handle);

/* The request is dropped: release its spinner. */
int gpreempt_cancel(uint64_t handle);

/* The request gate. A request of class `cls` starts now and lasts until
 * gpreempt_end: its launches and the host work between them (wrap a whole
 * generate() call, say). With the gate on, it holds the GPU from BE work
 * for that span (a spinner and a pending kernel on a stream of its own, so
 * the process's own streams keep running), at most 2 s and within half of
 * the GPU's time over 20 s; otherwise it is only counted and timed.
 * Synchronize the request's own stream or event inside it: a device-wide
 * synchronize (cuCtxSynchronize, cudaDeviceSynchronize) waits for the
 * gate's stream too, until the hold expires.
 * Returns a handle, 0 on error. */
uint64_t gpreempt_begin(char *cls);

/* The request's work is complete (after its synchronize): release the
 * gate. Also ends a gpreempt_hint request (as gpreempt_ready, if that was
 * not called). */
int gpreempt_end(uint64_t handle);

/* The gate's mode from now on: 0 off, 1 on, 2 auto. -1 on error. */
int gpreempt_set_gate(int mode);

/* Engine statistics as JSON into buf (NUL-terminated if it fits); returns
 * the JSON's length, -1 on error. The JSON holds the counters, log2
 * histograms and the last samples (up to 16384 of each kind, in ns), so it
 * can be ~1 MB: call with buf NULL for the length, and again with a buffer
 * of that length plus some (the stats grow in between) until it fits. */
int gpreempt_stats_json(char *buf, size_t len);

/* What the engine did since the last call (since gpreempt_init, for the
 * first), as NUL-terminated JSON into buf, of at least
 * GPREEMPT_WINDOW_JSON_MAX bytes, and the next window starts; returns the
 * JSON's length, or -1 on error (a smaller buffer: nothing taken).
 * It is what an app that pushes its own latency windows to gpreemptd
 * sends of the engine, each push:
 *   {"spinning":true,"skipped_no_benefit":0,"expired":0,"holds":12,
 *    "hold_us":{"p50":..,"p90":..,"p99":..,"p999":..,"max":..,"mean":..}}
 * spinning: gpreemptd allows spinners and some request class benefits
 * (the push's engine.prepreempt); holds: spinners that finished in the
 * window, hold_us the quantiles of their GPU hold (absent with none; the
 * push's spinner_hold_us); the counters run from gpreempt_init. One
 * caller per engine: a window taken is gone. */
#define GPREEMPT_WINDOW_JSON_MAX 512
int gpreempt_window_json(char *buf, size_t len);

/* Turn spinners on (1) or off (0) for every request: what gpreemptd's
 * reply to a statistics push says ("prepreempt"), which an app that pushes
 * its own latency windows passes on (with gpreempt_window_json). 0, or -1
 * when not initialised. */
int gpreempt_set_prepreempt(int on);

/* libgpreempt's version, as gpreemptctl version prints it:
 * "0.1.0 (revision 194bf34c..., modified)". Valid for the life of the
 * process; needs no gpreempt_init. */
char *gpreempt_version(void);

/* The message of the last error in the calling thread (valid until that
 * thread's next failing call). */
char *gpreempt_last_error(void);

/* Release outstanding spinners, free the engine and release the primary
 * context. If a spinner is still running after max_hold_us and 100 ms (a
 * GPU that stopped making progress), its memory is left allocated and -1
 * is returned. */
int gpreempt_shutdown(void);

#ifdef __cplusplus
}
#endif
#endif
