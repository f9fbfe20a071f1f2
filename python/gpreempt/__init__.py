"""Pre-preemption for latency-critical CUDA requests, from Python.

A thin ctypes wrapper over libgpreempt.so (include/gpreempt.h). Use it with
PyTorch like this::

    import gpreempt, torch
    with gpreempt.Engine(device=torch.cuda.current_device()) as gp:
        for raw in requests:
            with gp.request("infer", expected_prep_us=500) as req:
                x = preprocess(raw)                 # CPU-side preparation
                x = x.to("cuda", non_blocking=True)
                y = model(x)                        # LC kernels queued
                req.ready()                         # release the spinner now
            torch.cuda.current_stream().synchronize()

The engine joins the device's primary context, the one PyTorch uses, so the
spinner keeps PyTorch's own channel groups resident. Leaving a request's
``with`` block without ready() cancels the request; leaving the engine's
shuts the engine down.

libgpreempt.so is looked for, in order: the ``lib`` argument, $GPREEMPT_LIB,
beside this module (a wheel built after ``make build`` carries it), the
repository's bin/ (running from a checkout), and the loader's path.
"""

import ctypes
import json
import os
import socket
import sys
import threading
import time
from http import client as _httpclient

__all__ = ["Engine", "GpreemptError", "Reporter", "SKIP_LC_CLASS", "LAUNCHER_POLLER", "library_version"]

# gpreemptd's socket when neither the caller nor $GPREEMPTD_SOCKET names one.
DEFAULT_SOCKET = "/run/gpreempt/gpreemptd.sock"

# The release version, as in the repository's internal/version/VERSION.
__version__ = "0.1.0"

SKIP_LC_CLASS = 1
LAUNCHER_POLLER = 2
GATE_ON = 4
GATE_AUTO = 8
_GATE_MODES = ("off", "on", "auto")  # gpreempt_set_gate's 0, 1, 2


class GpreemptError(RuntimeError):
    pass


_HERE = os.path.dirname(os.path.abspath(__file__))


def _candidates(path=None):
    if path:
        return [path]
    return [
        os.environ.get("GPREEMPT_LIB"),
        os.path.join(_HERE, "libgpreempt.so"),
        os.path.join(_HERE, "..", "..", "bin", "libgpreempt.so"),
        "libgpreempt.so",
    ]


def _load(path=None):
    candidates = _candidates(path)
    errors = []
    for c in candidates:
        if not c:
            continue
        if os.sep in c and not os.path.exists(c):
            errors.append(f"{c}: no such file")
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError as e:
            errors.append(f"{c}: {e}")
            continue
        lib.gpreempt_init.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_uint32]
        lib.gpreempt_init.restype = ctypes.c_int
        lib.gpreempt_hint.argtypes = [ctypes.c_char_p, ctypes.c_uint64]
        lib.gpreempt_hint.restype = ctypes.c_uint64
        lib.gpreempt_ready.argtypes = [ctypes.c_uint64]
        lib.gpreempt_ready.restype = ctypes.c_int
        lib.gpreempt_cancel.argtypes = [ctypes.c_uint64]
        lib.gpreempt_cancel.restype = ctypes.c_int
        lib.gpreempt_begin.argtypes = [ctypes.c_char_p]
        lib.gpreempt_begin.restype = ctypes.c_uint64
        lib.gpreempt_end.argtypes = [ctypes.c_uint64]
        lib.gpreempt_end.restype = ctypes.c_int
        lib.gpreempt_set_gate.argtypes = [ctypes.c_int]
        lib.gpreempt_set_gate.restype = ctypes.c_int
        lib.gpreempt_stats_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.gpreempt_stats_json.restype = ctypes.c_int
        lib.gpreempt_window_json.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.gpreempt_window_json.restype = ctypes.c_int
        lib.gpreempt_set_prepreempt.argtypes = [ctypes.c_int]
        lib.gpreempt_set_prepreempt.restype = ctypes.c_int
        lib.gpreempt_version.argtypes = []
        lib.gpreempt_version.restype = ctypes.c_char_p
        lib.gpreempt_last_error.argtypes = []
        lib.gpreempt_last_error.restype = ctypes.c_char_p
        lib.gpreempt_shutdown.argtypes = []
        lib.gpreempt_shutdown.restype = ctypes.c_int
        return lib
    raise GpreemptError("libgpreempt.so not found (set GPREEMPT_LIB): " + "; ".join(errors))


def library_version(lib=None):
    """The loaded libgpreempt.so's version, with its revision:
    "0.1.0 (revision 194bf34c..., modified)"."""
    return _load(lib).gpreempt_version().decode()


class Request:
    def __init__(self, engine, handle, whole=False):
        self._engine, self._handle, self._whole = engine, handle, whole

    def ready(self):
        """Call right after the request's LC work has been enqueued."""
        if self._handle:
            h, self._handle = self._handle, 0
            self._engine._check(self._engine._lib.gpreempt_ready(h), "ready")

    def cancel(self):
        if self._handle:
            h, self._handle = self._handle, 0
            self._engine._check(self._engine._lib.gpreempt_cancel(h), "cancel")

    def end(self):
        """Call when the request's work is complete (after its synchronize):
        releases a gated request's hold; ends a hinted one (as ready(), if
        that was not called)."""
        if self._handle:
            h, self._handle = self._handle, 0
            self._engine._check(self._engine._lib.gpreempt_end(h), "end")

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        # A block left by an exception drops the request; one that ran to
        # its end ends it (a hinted request that never called ready() is
        # then ready, a gated one releases the GPU).
        if exc_type is not None:
            self.cancel()
        elif self._whole:
            self.end()
        else:
            self.cancel()
        return False


_WINDOW_JSON_MAX = 512  # GPREEMPT_WINDOW_JSON_MAX
MAX_HOLD_US = 250_000  # the hold budget: a quarter of each second
MAX_EXPECTED_PREP_US = 10_000_000


class Engine:
    """The process's pre-preemption engine; one per process.

    Use it as a context manager, or call close() when done.
    """

    def __init__(self, device=0, max_hold_us=5000, skip_lc_class=False, launcher="goroutine", lib=None, gate="off"):
        if launcher not in ("goroutine", "poller"):
            raise ValueError(f"launcher {launcher!r}: want 'goroutine' or 'poller'")
        if gate not in _GATE_MODES:
            raise ValueError(f"gate {gate!r}: want one of {', '.join(_GATE_MODES)}")
        if not 0 <= max_hold_us <= MAX_HOLD_US:
            raise ValueError(f"max_hold_us {max_hold_us}: want 0 (default) to {MAX_HOLD_US}")
        self._open = False
        self._lib = _load(lib)
        flags = SKIP_LC_CLASS if skip_lc_class else 0
        if launcher == "poller":
            flags |= LAUNCHER_POLLER
        flags |= {"off": 0, "on": GATE_ON, "auto": GATE_AUTO}[gate]
        self._check(self._lib.gpreempt_init(device, max_hold_us, flags), "init")
        self._open = True
        self._gate = gate

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _check(self, rc, what):
        if rc != 0:
            raise GpreemptError(f"gpreempt {what}: {self._lib.gpreempt_last_error().decode()}")

    def request(self, cls="default", expected_prep_us=None):
        """Announce a request of class cls.

        Without expected_prep_us, the request is the whole span of the block
        it is used in (or until end()): with the gate on, it holds the GPU
        from BE work for that span::

            with gp.request("decode"):
                out = model.generate(**inputs)   # and its synchronize

        Inside a held request, synchronize the request's stream
        (torch.cuda.current_stream().synchronize(), an event, .item()), not
        the device: torch.cuda.synchronize() waits for every stream, the
        gate's too, and returns only when the hold expires (2 s).

        With expected_prep_us, it is a pre-preemption hint: its preparation
        starts now, and ready() after its launches releases the spinner."""
        if expected_prep_us is None:
            h = self._lib.gpreempt_begin(cls.encode())
            if h == 0:
                raise GpreemptError("gpreempt begin: " + self._lib.gpreempt_last_error().decode())
            return Request(self, h, whole=True)
        if not 0 <= expected_prep_us <= MAX_EXPECTED_PREP_US:
            raise ValueError(f"expected_prep_us {expected_prep_us}: want 0 to {MAX_EXPECTED_PREP_US}")
        h = self._lib.gpreempt_hint(cls.encode(), int(expected_prep_us))
        if h == 0:
            raise GpreemptError("gpreempt hint: " + self._lib.gpreempt_last_error().decode())
        return Request(self, h)

    def stats(self):
        size = 0
        while True:
            buf = ctypes.create_string_buffer(size) if size else None
            n = self._lib.gpreempt_stats_json(buf, size)
            if n < 0:
                self._check(n, "stats")
            if n < size:
                return json.loads(buf.value)
            size = n + 4096  # the stats may grow before the next call

    def set_gate(self, mode):
        """The request gate's mode from now on: "off", "on" or "auto"."""
        if mode not in _GATE_MODES:
            raise ValueError(f"gate {mode!r}: want one of {', '.join(_GATE_MODES)}")
        self._check(self._lib.gpreempt_set_gate(_GATE_MODES.index(mode)), "set_gate")
        self._gate = mode

    def set_prepreempt(self, on):
        """Turns spinners on or off for every request: what gpreemptd's
        reply to a statistics push says ("prepreempt")."""
        self._check(self._lib.gpreempt_set_prepreempt(1 if on else 0), "set_prepreempt")

    def window(self):
        """What the engine did since the last call (since it started, for
        the first), and the next window starts: "spinning" (gpreemptd
        allows spinners and some request class benefits),
        "skipped_no_benefit" and "expired" (counted from the start),
        "holds" (spinners that finished in the window) and, when some did,
        "hold_us" (quantiles of their GPU hold). A few hundred bytes, where
        stats() carries up to ~1 MB. One caller per engine."""
        buf = ctypes.create_string_buffer(_WINDOW_JSON_MAX)
        n = self._lib.gpreempt_window_json(buf, _WINDOW_JSON_MAX)
        if n < 0:
            self._check(n, "window")
        return json.loads(buf.value)

    def push_fields(self):
        """The fields a statistics push to gpreemptd (POST /v1/stats)
        carries of the engine, over the window since the last call (see
        window()): "engine", "expired_holds" and "spinner_hold_us"."""
        w = self.window()
        f = {"engine": {"prepreempt": bool(w["spinning"]), "skipped_no_benefit": w["skipped_no_benefit"],
                        "gate": self._gate},
             "expired_holds": w["expired"]}
        if w.get("hold_us"):
            f["spinner_hold_us"] = w["hold_us"]
        return f

    def close(self):
        """Release outstanding spinners and shut the engine down; once."""
        if self._open:
            self._open = False
            self._check(self._lib.gpreempt_shutdown(), "shutdown")


# --- telling gpreemptd what requests take (its SLO mode) -------------------


def _quantile(sorted_vals, q):
    """The q-quantile of sorted values: the rank q(n-1), rounded (as the Go
    prepreempt.Reporter takes it)."""
    return sorted_vals[min(len(sorted_vals) - 1, max(0, int(q * (len(sorted_vals) - 1) + 0.5)))]


_QUANTILES = ((0.50, "p50"), (0.90, "p90"), (0.99, "p99"), (0.999, "p999"))


MAX_WINDOW_SAMPLES = 256


def _thin_us(sorted_ns):
    """At most MAX_WINDOW_SAMPLES of sorted_ns, evenly spaced by rank, in
    microseconds (gpreemptd's client.ThinSamples)."""
    n = min(len(sorted_ns), MAX_WINDOW_SAMPLES)
    return [sorted_ns[i * len(sorted_ns) // n] / 1e3 for i in range(n)]


def window_body(latencies_ns, duration_ns, total, ttft_ns=(), tpot_ns=()):
    """The POST /v1/stats body for one window: the JSON of gpreemptd's
    client.Stats with pid 0 (the daemon takes the caller's pid from the
    socket) and the window's latency quantiles in microseconds. An LLM
    server's times to first token (one a request) and per output token (one
    a token after each request's first) go as ttft_p50 .. tpot_p99, which
    objectives such as tpot_p50<=12ms bound, and "tokens" counts the latter:
    a tpot_ objective's samples."""
    lat = sorted(latencies_ns)
    w = {"duration_ms": max(duration_ns, 1) / 1e6, "requests": len(lat), "latency_us": {}}
    body = {"pid": 0, "requests": total, "expired_holds": 0, "window": w}
    if lat:
        own = {key: _quantile(lat, q) / 1e3 for q, key in _QUANTILES}
        own.update(max=lat[-1] / 1e3, mean=sum(lat) / len(lat) / 1e3)
        body["request_latency_us"], w["latency_us"] = own, dict(own)
        w["samples_us"] = {"request": _thin_us(lat)}
        for name, vals in (("ttft", sorted(ttft_ns)), ("tpot", sorted(tpot_ns))):
            if vals:
                for q, key in _QUANTILES:
                    w["latency_us"][f"{name}_{key}"] = _quantile(vals, q) / 1e3
                w["samples_us"][name] = _thin_us(vals)
        if tpot_ns:
            w["tokens"] = len(tpot_ns)
    return body


class _UnixHTTPConnection(_httpclient.HTTPConnection):
    def __init__(self, path, timeout=5.0):
        super().__init__("gpreemptd", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


def push_window(path, body):
    """POSTs body to gpreemptd's /v1/stats at the unix socket path; returns
    the reply's JSON (client.StatsReply)."""
    conn = _UnixHTTPConnection(path)
    try:
        conn.request("POST", "/v1/stats", body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        if resp.status >= 300:
            raise OSError("gpreemptd: %d: %s" % (resp.status, text.decode(errors="replace").strip()))
        return json.loads(text) if text.strip() else {}
    finally:
        conn.close()


def next_push(period_s, reply, took_s=0.0):
    """Seconds after a push until the next one: just ahead of gpreemptd's
    next read of the windows (the reply's next_window_ms), where it reads
    once a period, so that each window begins as its decision takes effect
    (docs/SLO.md "Aligned windows"); else a period from the push's start
    (took_s is its round trip), so that the cadence does not drift. Aligned,
    never under half a period. The same as the Go prepreempt.Reporter's."""
    nxt, win = reply.get("next_window_ms") or 0, reply.get("window_ms") or 0
    if not reply.get("slo") or nxt <= 0 or abs(win / 1e3 - period_s) > period_s / 20:
        return max(period_s - took_s, 0.0)
    d = nxt / 1e3 - min(period_s / 40, 0.020)  # the push's way there, a thread's wakeup
    while d < period_s / 2:
        d += period_s
    return d


class Reporter:
    """Tells gpreemptd what the app's requests take: its SLO mode steers by
    each LC process's request latency as the app defines a request (arrival
    to result), which neither the driver nor the hint engine sees. Call
    record() once per request (an LLM server: record_llm()); start() pushes
    the window's quantiles once a period from a thread of its own. With an
    engine, its state goes with each push and the daemon's word on
    pre-preemption comes back to it. Recorded times are in nanoseconds, as
    time.monotonic_ns() gives them; the period in seconds::

        rep = gpreempt.Reporter()          # $GPREEMPTD_SOCKET, else the default
        rep.start()
        t0 = time.monotonic_ns(); serve(req); rep.record(time.monotonic_ns() - t0)
        rep.stop()
    """

    def __init__(self, socket_path=None, period_s=1.0, engine=None):
        self.path = socket_path or os.environ.get("GPREEMPTD_SOCKET") or DEFAULT_SOCKET
        self.period_s, self.engine = period_s, engine
        self._lock = threading.Lock()
        self._lat, self._ttft, self._tpot, self._total = [], [], [], 0
        self._since = time.monotonic_ns()
        self._stop = threading.Event()
        self._failed = False
        self._wait = period_s
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._since = time.monotonic_ns()
        self._thread.start()

    def record(self, latency_ns):
        """Adds one request's latency to the window."""
        with self._lock:
            self._lat.append(latency_ns)
            self._total += 1

    def record_llm(self, latency_ns, ttft_ns, per_token_ns):
        """Adds one LLM request: its latency, its time to first token, and
        each later output token's time since the one before."""
        with self._lock:
            self._lat.append(latency_ns)
            self._ttft.append(ttft_ns)
            self._tpot.extend(per_token_ns)
            self._total += 1

    def push(self):
        """Sends the window since the last push; a failure is reported on
        stderr once, and the window is dropped either way."""
        now = time.monotonic_ns()
        with self._lock:  # the samples taken, sorted outside it (record() waits on it)
            lat, ttft, tpot, since = self._lat, self._ttft, self._tpot, self._since
            self._lat, self._ttft, self._tpot, self._since = [], [], [], now
            total = self._total
        body = window_body(lat, now - since, total, ttft, tpot)
        try:
            if self.engine is not None:
                body.update(self.engine.push_fields())
            reply = push_window(self.path, body)
            self._wait = next_push(self.period_s, reply, (time.monotonic_ns() - now) / 1e9)
            if self.engine is not None and "prepreempt" in reply:
                self.engine.set_prepreempt(reply["prepreempt"])
            if self.engine is not None and reply.get("gate") in _GATE_MODES:
                self.engine.set_gate(reply["gate"])  # SLO mode's arm, as the Go Reporter passes it
            if self._failed:
                print("latency pushed to gpreemptd again", file=sys.stderr)
            self._failed = False
        except (OSError, ValueError, GpreemptError) as e:
            self._wait = next_push(self.period_s, {}, (time.monotonic_ns() - now) / 1e9)
            if not self._failed:
                print("latency not pushed to gpreemptd: %s" % e, file=sys.stderr)
            self._failed = True

    def _run(self):
        while not self._stop.wait(self._wait):
            self.push()

    def stop(self):
        """Stops the thread and pushes what the last window recorded."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self._lat:
            self.push()
