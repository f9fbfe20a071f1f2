#!/usr/bin/env python3
"""Latency-critical LLM decode worker for gpreempt-bench.

Each request decodes --new-tokens tokens greedily, with the KV cache, after a
--prompt-token prompt, on a transformers causal LM built from a config with
random weights (nothing is downloaded), in fp16. Latency is from the
request's start to the return of its last token on the host, in
CLOCK_MONOTONIC nanoseconds; each sample also carries the time to first
token (TTFT) and the mean time per output token after it (TPOT).

Forms:
  eager (default)  model.generate() (--loop generate), or a lean loop of
                   forward calls with one host sync a token (--loop lean):
                   hundreds of kernel launches a token from Python, so the
                   LC is launch-bound.
  --graph          a static KV cache and one CUDA graph per decode step
                   (the prefill runs eager), as serving stacks do.

--metrics-port N serves the requests' latency on 127.0.0.1:N/metrics as vLLM
names and buckets it (end-to-end latency, time to first token, inter-token
latency histograms, in the Prometheus text format), so that gpreemptd can
scrape it as it would a vLLM server (its latency preset vllm). It serves
app_request_latency_seconds too: the same requests in buckets 5% apart (1 ms
to ~60 s), as an app that chose its own buckets would, for objectives finer
than vLLM's buckets can judge.

--gate wraps each whole request in the request gate of libgpreempt
(python/gpreempt): the request holds the GPU from BE work until its last
token.

Protocol (shared with `gpreempt-bench lc`): prints "READY pid=<pid>" after
the CUDA context exists and --warmup requests ran; with --wait-go it then
waits for a line on stdin. With --alone it then prints "ALONE <ns>:<ns>,...",
each request's latency and its CPU loop's time around it (as a measured
request's), and waits for another before its lead-in. It writes a JSON result
with the schema of internal/bench.LCResult to --out ("-": stdout).

    python3 lc_decode.py --family gpt2 --period 800ms --requests 30 --out lc.json
"""

import argparse
import gc
import http.server
import os
import sys
import threading
import time

from lc_infer import add_push_flags, import_gpreempt, parse_duration, run_lead_in, write_json

SCHEMA = 1
# Additions a CPU-speed loop makes (~2 ms of CPython; scripts/probe/lc-speed.sh runs the same loop).
CPU_METER_LOOP = 50000

# Shapes by family: GPT-2 medium's, and a small Llama (grouped-query
# attention, RoPE, SwiGLU): two architecture families, two sizes.
FAMILIES = {
    "gpt2": dict(n_layer=24, n_embd=1024, n_head=16, vocab_size=50257, n_positions=1024),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
    "llama": dict(num_hidden_layers=16, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                  num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
    # The ~330M Llama shape of the H200 runs of 2026-11-29 (GPU-FACTS.md).
    "llama-330m": dict(num_hidden_layers=24, hidden_size=1024, intermediate_size=2816, num_attention_heads=16,
                       num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048),
}


def build(args, torch, dev):
    import transformers

    cfg = dict(FAMILIES[args.family])
    # Weights are made on the GPU: a random init of 350M parameters on the
    # CPU costs seconds per process and changes no kernel.
    with torch.device(dev):
        if args.family.startswith("gpt2"):
            model = transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg))
        else:
            model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg))
    return model.to(dtype=torch.float16).eval(), transformers.__version__


# The CPU time of the thread that stamped the last token (time.thread_time_ns):
# a request's CPU time spans the same stretch as its latency.
_stamp_cpu = [0]


def stamp():
    """A token's host time (CLOCK_MONOTONIC), noting this thread's CPU time."""
    _stamp_cpu[0] = time.thread_time_ns()
    return time.monotonic_ns()


class Stamps:
    """A generate() streamer that only notes when each step's tokens reached
    the host (put() gets them as a CPU tensor: after that step's sync)."""

    def __init__(self):
        self.t = []

    def put(self, value):
        self.t.append(stamp())

    def end(self):
        pass


# vLLM's histograms and bucket boundaries (vllm/v1/metrics): what its
# server exports at /metrics, so that this LC is scraped as a vLLM server is.
VLLM_HISTOGRAMS = (
    ("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
     (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
      960.0, 1920.0, 7680.0)),
    ("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
     (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
      80.0, 160.0, 640.0, 2560.0)),
    ("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
     (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)),
)


# The app's own request histogram: buckets 5% apart, from 1 ms to ~60 s.
FINE_HISTOGRAM = ("app_request_latency_seconds", "Request latency in seconds, in buckets 5% apart.",
                  tuple(round(0.001 * 1.05 ** i, 9) for i in range(226)))


def _float(v):
    """A value as the Prometheus text format writes it."""
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


class VLLMMetrics:
    """The requests' latency as vLLM's Prometheus histograms, with the
    standard library alone: observe() each request, text() the exposition."""

    def __init__(self, model_name):
        self.labels = 'engine="0",model_name="%s"' % model_name.replace("\\", "\\\\").replace('"', '\\"')
        self.lock = threading.Lock()
        self.histograms = VLLM_HISTOGRAMS + (FINE_HISTOGRAM,)
        self.hist = {name: ([0] * (len(bounds) + 1), [0.0]) for name, _, bounds in self.histograms}

    def _observe(self, name, seconds):
        counts, total = self.hist[name]
        bounds = next(b for n, _, b in self.histograms if n == name)
        i = next((i for i, b in enumerate(bounds) if seconds <= b), len(bounds))
        counts[i] += 1
        total[0] += seconds

    def observe(self, latency_ns, ttft_ns, tpot_ns):
        """One request: its latency, time to first token, each later token's interval."""
        with self.lock:
            self._observe("vllm:e2e_request_latency_seconds", latency_ns / 1e9)
            self._observe(FINE_HISTOGRAM[0], latency_ns / 1e9)
            self._observe("vllm:time_to_first_token_seconds", ttft_ns / 1e9)
            for t in tpot_ns:
                self._observe("vllm:inter_token_latency_seconds", t / 1e9)

    def text(self):
        out = []
        with self.lock:
            for name, help_text, bounds in self.histograms:
                counts, total = self.hist[name]
                out.append("# HELP %s %s" % (name, help_text))
                out.append("# TYPE %s histogram" % name)
                cum = 0
                for b, c in zip(tuple(bounds) + (float("inf"),), counts):
                    cum += c
                    out.append('%s_bucket{%s,le="%s"} %s' % (name, self.labels, _float(b), _float(cum)))
                out.append("%s_count{%s} %s" % (name, self.labels, _float(cum)))
                out.append("%s_sum{%s} %s" % (name, self.labels, _float(total[0])))
        return "\n".join(out) + "\n"

    def serve(self, port, host="127.0.0.1"):
        """Serves text() at /metrics on host:port from a daemon thread;
        returns the port (port 0: one the kernel picks)."""
        metrics = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.split("?")[0] != "/metrics":
                    self.send_error(404)
                    return
                body = metrics.text().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass  # stderr is the worker's own

        srv = http.server.ThreadingHTTPServer((host, port), Handler)
        srv.daemon_threads = True
        threading.Thread(target=srv.serve_forever, name="metrics", daemon=True).start()
        return srv.server_address[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=sorted(FAMILIES), default="gpt2")
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens")
    ap.add_argument("--new-tokens", type=int, default=16, help="tokens decoded per request")
    ap.add_argument("--batch", type=int, default=1, help="sequences decoded together per request (eager only)")
    ap.add_argument("--graph", action="store_true", help="decode steps replay a CUDA graph over a static KV cache")
    ap.add_argument("--loop", choices=("generate", "lean"), default="generate", help="eager form")
    ap.add_argument("--period", type=parse_duration, default="800ms", help="time between request arrivals")
    ap.add_argument("--requests", type=int, default=30, help="measured requests")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--alone", type=int, default=0,
                    help="after the go line, requests at --period until this many ran wholly inside BE's idle halves"
                         " (--alone-duty), before the lead-in: their latencies and CPU loops go out on an ALONE line, and a second go"
                         " line is awaited (gpreempt-bench sets an objective from this process's LC alone)")
    ap.add_argument("--alone-duty", type=parse_duration, default=0,
                    help="BE's duty period: BE idles the second half of each (CLOCK_MONOTONIC)")
    ap.add_argument("--alone-guard", type=parse_duration, default="100ms",
                    help="how far into an idle half a request must start to count (BE's queue drains, its clock recovers)")
    ap.add_argument("--alone-max", type=int, default=0, help="requests --alone runs at most (0: 20 for each one wanted)")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--wait-go", action="store_true")
    ap.add_argument("--out", default="-")
    ap.add_argument("--gate", action="store_true", help="hold the GPU from BE for each whole request (libgpreempt's gate)")
    ap.add_argument("--hint-launcher", choices=("goroutine", "poller"), default="goroutine")
    add_push_flags(ap, "each window's request latency, TTFT and TPOT quantiles")
    ap.add_argument("--metrics-port", type=int, default=0,
                    help="serve vLLM-named latency histograms on 127.0.0.1:PORT/metrics (0: off)")
    a = ap.parse_args()
    if a.requests <= 0 or a.period <= 0 or a.new_tokens < 2 or a.prompt < 1 or a.batch < 1:
        ap.error("--requests, --period, --prompt, --batch must be positive and --new-tokens at least 2")
    if a.graph and a.batch != 1:
        ap.error("--graph decodes one sequence: --batch 1")
    if not 0 <= a.metrics_port <= 65535:
        ap.error("--metrics-port must be 0-65535")
    if a.alone < 0 or a.alone_max < 0 or a.alone and (a.alone_duty <= 2 * a.alone_guard or a.alone_guard < 0 or not a.wait_go):
        ap.error("--alone N and --alone-max M (N, M >= 0) need --wait-go and an --alone-duty over twice --alone-guard")

    import torch

    dev = torch.device("cuda", a.device)
    torch.cuda.set_device(dev)
    torch.manual_seed(a.seed)
    model, tf_version = build(a, torch, dev)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (a.batch, a.prompt), device=dev)
    mask = torch.ones_like(prompt)

    def eager_generate():
        st = Stamps()
        with torch.inference_mode():
            model.generate(prompt, attention_mask=mask, max_new_tokens=a.new_tokens, min_new_tokens=a.new_tokens,
                           do_sample=False, use_cache=True, pad_token_id=0, streamer=st)
        # put() is called with the prompt first, then once per new token.
        return st.t[1:]

    def eager_lean():
        t = []
        with torch.inference_mode():
            out = model(prompt, use_cache=True)
            tok = out.logits[:, -1:].argmax(-1)
            (tok if a.batch == 1 else tok[0, 0]).item()
            t.append(stamp())
            past = out.past_key_values
            for _ in range(a.new_tokens - 1):
                out = model(tok, past_key_values=past, use_cache=True)
                past = out.past_key_values
                tok = out.logits[:, -1:].argmax(-1)
                (tok if a.batch == 1 else tok[0, 0]).item()  # one sync a token, any batch
                t.append(stamp())
        return t

    run = eager_generate if a.loop == "generate" else eager_lean
    if a.graph:
        run = graph_decoder(a, torch, dev, model, prompt)

    gp = None
    if a.gate:
        gp = import_gpreempt().Engine(device=a.device, gate="on", launcher=a.hint_launcher)  # GPREEMPT_LIB names libgpreempt.so
    # Made before READY: a missing package fails the worker at its start.
    pusher = import_gpreempt().Reporter(a.push_latency, a.push_period / 1e9, gp) if a.push_latency else None
    # Served before READY: a port in use fails the worker at its start.
    metrics = VLLMMetrics(a.family) if a.metrics_port else None
    if metrics:
        metrics.serve(a.metrics_port)

    request_cpu = [0]  # the last request's CPU time, t0 to its last token

    def cpu_meter():
        # A fixed loop of pure Python, in this thread's CPU time (no GIL wait in it): its CPU's
        # speed now. On the GPU machine a CPU's speed moved ~1.8x for seconds at a time, and an
        # eager LC's latency with it.
        t, x = time.thread_time_ns(), 0
        for i in range(CPU_METER_LOOP):
            x += i
        return time.thread_time_ns() - t

    def request():
        t0, c0 = time.monotonic_ns(), time.thread_time_ns()
        if gp is not None:
            with gp.request("decode"):
                tokens = run()
        else:
            tokens = run()
        request_cpu[0] = _stamp_cpu[0] - c0
        return t0, tokens

    for _ in range(max(a.warmup, 1)):
        request()
    print(f"READY pid={os.getpid()}", flush=True)
    if a.wait_go and not sys.stdin.readline():
        sys.exit("lc_decode.py: stdin closed before the go line")

    samples, late = [], 0
    gc.collect()
    gc.disable()
    if pusher:
        pusher.start()

    def timed(t0, tokens):
        # Request latency, time to first token, each output token's time after it.
        return tokens[-1] - t0, tokens[0] - t0, [b - a for a, b in zip(tokens, tokens[1:])]

    def unkept(t0, tokens):
        # A request before the measurement: pushed and served as any, not kept.
        lat, ttft, tpot = timed(t0, tokens)
        if pusher:
            pusher.record_llm(lat, ttft, tpot)
        if metrics:
            metrics.observe(lat, ttft, tpot)
        return lat

    pace = Pacer(cpu_meter)
    if a.alone:
        alone_run(a, request, unkept, pace)
    lead_in = run_lead_in(a.period, a.lead_in, lambda: unkept(*request()))
    start = time.monotonic_ns()
    for i in range(a.requests):
        arrival = start + i * a.period
        if pace.wait(arrival) > a.period:
            late += 1
        lat, ttft, tpot = timed(*request())
        meter = pace.meter()
        samples.append({
            "arrival_mono_ns": arrival,
            "prep_ns": 0,
            "launch_call_ns": 0,
            "latency_ns": lat,
            "gpu_ns": 0,
            "ttft_ns": ttft,
            "tpot_ns": sum(tpot) // len(tpot),  # the request's mean
            # This thread's CPU time in the request: a slow request whose
            # thread was off its CPU was slowed by the host, not by Python.
            "cpu_ns": request_cpu[0],
            "cpu_meter_ns": meter,
        })
        if pusher:
            pusher.record_llm(lat, ttft, tpot)
        if metrics:
            metrics.observe(lat, ttft, tpot)
    end = time.monotonic_ns()
    if pusher:
        pusher.stop()
    gc.enable()
    result = {
        "schema": SCHEMA,
        "worker": "lc_decode.py",
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(dev),
        "gpu_stamps": False,
        "config": {"family": a.family, "prompt": a.prompt, "new_tokens": a.new_tokens, "batch": a.batch, "graph": a.graph,
                   "loop": a.loop, "period_ns": a.period, "gate": gp is not None, "torch": torch.__version__,
                   "transformers": tf_version, "lead_in_ns": a.lead_in, "lead_in_requests": lead_in,
                   "metrics_port": a.metrics_port},
        "requested": a.requests,
        "warmup": a.warmup,
        "measure_start_mono_ns": start,
        "measure_end_mono_ns": end,
        "late": late,
        "samples": samples,
    }
    if gp is not None:
        result["prepreempt"] = gp.stats()
        gp.close()
    write_json(a.out, result)

def in_idle_half(start, end, half, guard):
    """Whether a request from start to end (CLOCK_MONOTONIC ns) ran in one of BE's idle halves
    (the second of each duty period, halves of half ns from 0), guard or more into it: the
    bench's rule for a request alone."""
    k = start // half
    return k % 2 == 1 and start - k * half >= guard and end < (k + 1) * half


class Pacer:
    """Waits for each request's arrival, timing the CPU loop just before it where there is room,
    and gives the request's loop time: the mean of that and the loop's just after it (its CPU's
    speed around the request; an eager LC's latency follows its vCPU's, which no GPU setting
    moves). The alone requests and the measured ones are timed alike."""

    def __init__(self, loop):
        self.loop, self.wall, self.before = loop, 5_000_000, 0  # wall: the loop's wall time, last measured

    def wait(self, arrival):
        """Sleeps until arrival (CLOCK_MONOTONIC ns); returns how late the LC was for it."""
        now, self.before = time.monotonic_ns(), 0
        if now + 2 * self.wall < arrival:  # just before it arrives; an LC behind its arrivals times none
            time.sleep((arrival - 2 * self.wall - now) / 1e9)
            t = time.monotonic_ns()
            self.before = self.loop()
            self.wall, now = time.monotonic_ns() - t, time.monotonic_ns()
        if now < arrival:
            time.sleep((arrival - now) / 1e9)
        return now - arrival

    def meter(self):
        """The loop timed now, after a request, with the one before it."""
        after = self.loop()
        return (self.before + after) // 2 if self.before else after


def alone_run(a, request, unkept, pace):
    """Runs requests at a.period until a.alone of them started a.alone_guard or more into one of
    BE's idle halves and ended within it, prints their latencies (ns) on an ALONE line, each with
    its CPU loop's time (pace.meter(), as the measured requests'), and waits for a second go
    line. Exits after a.alone_max requests if too few fit."""
    half, alone, n, t = a.alone_duty // 2, [], 0, time.monotonic_ns()
    most = a.alone_max or 20 * a.alone
    while len(alone) < a.alone:
        if n >= most:
            sys.exit(f"lc_decode.py: {len(alone)} of {n} requests ran inside BE's idle halves; --alone wants {a.alone}")
        pace.wait(t + n * a.period)
        n += 1
        t0, tokens = request()
        meter = pace.meter()
        lat = unkept(t0, tokens)
        if in_idle_half(t0, tokens[-1], half, a.alone_guard):
            alone.append(f"{lat}:{meter}")
    print("ALONE " + ",".join(alone), flush=True)
    if not sys.stdin.readline():
        sys.exit("lc_decode.py: stdin closed before the second go line")


def graph_decoder(a, torch, dev, model, prompt):
    """Returns a request function whose decode steps replay one CUDA graph
    over a static KV cache; the prefill runs eager."""
    from transformers import StaticCache

    L = a.prompt + a.new_tokens + 8
    try:
        cache = StaticCache(config=model.config, max_cache_len=L)
    except TypeError:
        cache = StaticCache(config=model.config, max_batch_size=1, max_cache_len=L, device=dev, dtype=torch.float16)
    tok_in = torch.zeros((1, 1), dtype=torch.long, device=dev)
    pos = torch.zeros((1,), dtype=torch.long, device=dev)
    nxt = torch.zeros((1, 1), dtype=torch.long, device=dev)
    prompt_pos = torch.arange(a.prompt, device=dev)

    def prefill():
        cache.reset()
        out = model(input_ids=prompt, past_key_values=cache, cache_position=prompt_pos, use_cache=True)
        tok_in.copy_(out.logits[:, -1:].argmax(-1))

    def step():
        out = model(input_ids=tok_in, past_key_values=cache, cache_position=pos, use_cache=True)
        nxt.copy_(out.logits[:, -1:].argmax(-1))

    with torch.inference_mode():
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            prefill()
            for i in range(3):
                pos.fill_(a.prompt + i)
                step()
                tok_in.copy_(nxt)
        torch.cuda.current_stream(dev).wait_stream(side)
        torch.cuda.synchronize(dev)
        graph = torch.cuda.CUDAGraph()
        prefill()
        pos.fill_(a.prompt)
        with torch.cuda.graph(graph):
            step()

    def run():
        t = []
        with torch.inference_mode():
            prefill()
            tok_in.item()
            t.append(stamp())
            for i in range(a.new_tokens - 1):
                pos.fill_(a.prompt + i)
                graph.replay()
                tok_in.copy_(nxt)
                tok_in.item()
                t.append(stamp())
        return t

    return run


if __name__ == "__main__":
    main()
