"""Runs INSIDE the user's training interpreter: a bounded bf16 matmul load; prints marked JSON lines.

    python _load_script.py '<config JSON>'

The tool never imports torch. ``spark-ops thermal soak`` runs this file in a child of the *target*
interpreter and samples the GPU alongside. Only torch and the standard library; runnable on old
Pythons (3.7+). Config: ``seconds`` (load duration), ``n`` (square matrix size; 0 = pick from free
memory), ``max_bytes`` (the three matrices together stay below this), ``chunk_s`` (how often the
stop flag is looked at and a heartbeat printed).

Output, one line each, prefixed with ``MARKER``: ``{"event": "start", ...}`` after warm-up,
``{"event": "beat", "t": epoch, "tflops": ...}`` about once per ``chunk_s``, ``{"event": "end",
"reason": "deadline" | "signal", ...}`` after the matrices are freed. SIGTERM and SIGINT stop the
loop at the next chunk; the memory is released before the end line, so the GPU is free when the
parent sees it.
"""

import json
import os
import signal
import sys
import time

MARKER = "@@sparkops-soak@@"
_stop = {"why": None}


def _drop_own_dir_from_path():
    script = globals().get("__file__")
    if not script or not os.path.isfile(script):
        return
    here = os.path.dirname(os.path.abspath(script))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]


def _emit(obj):
    sys.stdout.write(MARKER + json.dumps(obj) + "\n")
    sys.stdout.flush()


def _on_signal(signum, _frame):
    _stop["why"] = "signal"


def pick_n(free_bytes, max_bytes, wanted=0):
    """The matrix size: ``wanted`` when given, else the largest of 4096..16384 (multiples of 1024)
    whose three bf16 matrices fit in ``max_bytes`` and a quarter of the free memory. Pure."""
    if wanted:
        return int(wanted)
    cap = max_bytes if free_bytes is None else min(max_bytes, free_bytes // 4)
    n = 16384
    while n > 1024 and 3 * n * n * 2 > cap:
        n -= 1024
    return n


def main(cfg):
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure is reported, not raised
        _emit({"event": "error", "kind": "no_torch", "detail": repr(exc)[:300]})
        return 3
    if not torch.cuda.is_available():
        _emit({"event": "error", "kind": "no_gpu", "detail": "torch.cuda.is_available() is False"})
        return 3
    free, total = torch.cuda.mem_get_info()
    n = pick_n(free, int(cfg.get("max_bytes", 2 * 1024**3)), int(cfg.get("n", 0)))
    seconds = float(cfg["seconds"])
    chunk_s = float(cfg.get("chunk_s", 1.0))
    a = b = c = None
    iters_total = 0
    t0 = time.time()
    try:
        a = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(n, n, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(n, n, dtype=torch.bfloat16, device="cuda")
        for _ in range(3):
            torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        t = time.time()
        torch.matmul(a, b, out=c)
        torch.cuda.synchronize()
        one = max(time.time() - t, 1e-5)
        inner = max(1, int(chunk_s / one))
        _emit({"event": "start", "t": time.time(), "n": n, "inner": inner, "device": torch.cuda.get_device_name(0),
               "free_bytes": int(free), "total_bytes": int(total), "torch": torch.__version__})
        t0 = time.time()
        deadline = t0 + seconds
        while _stop["why"] is None and time.time() < deadline:
            t = time.time()
            for _ in range(inner):
                torch.matmul(a, b, out=c)
            torch.cuda.synchronize()
            dt = max(time.time() - t, 1e-9)
            iters_total += inner
            _emit({"event": "beat", "t": time.time(), "tflops": round(2.0 * n**3 * inner / dt / 1e12, 2)})
    finally:
        del a, b, c
        try:
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
        except Exception:  # noqa: BLE001, S110 - freeing is best effort; the process exit frees the rest
            pass
    _emit({"event": "end", "reason": _stop["why"] or "deadline", "t": time.time(), "iters": iters_total,
           "load_s": round(time.time() - t0, 3)})
    return 0


if __name__ == "__main__":
    _drop_own_dir_from_path()
    sys.exit(main(json.loads(sys.argv[1])))
