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

__all__ = ["Engine", "GpreemptError", "SKIP_LC_CLASS", "LAUNCHER_POLLER", "library_version"]

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
