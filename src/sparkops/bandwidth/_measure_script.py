"""Runs INSIDE the user's training interpreter: measures device memory bandwidth; prints one marked JSON line.

    python _measure_script.py '<config JSON>'      (or, inside a container, fed on stdin: python - '<config JSON>')

The tool never imports torch. It runs this file in a child of the *target* interpreter, bounded in
time, and reads the line that starts with ``RESULT_MARKER`` (the same marker as the target probe's).
Only torch and the standard library; keep it runnable on old Pythons (3.7+): no annotations, no
new syntax. :func:`plan_buffer` is pure and imported by the tool too, so the sizing rule exists once.

What it does, in order: checks the device's free memory (refuses below the configured minimum
unless forced), sizes the buffers from the L2 cache (``l2_multiple`` x L2, never below the floor,
never above the caps), allocates and touches them, then for each method runs warm-up iterations and
``reps`` timed repetitions (CUDA events; each repetition long enough that launch gaps do not count),
and frees everything it took before it reports. Two methods:

- ``copy``: a preallocated ``dst.copy_(src)``, counting bytes read plus bytes written;
- ``read``: ``torch.sum(src)`` into a preallocated scalar, counting bytes read (read-dominated).
"""

import json
import math
import os
import sys
import time

RESULT_MARKER = "@@sparkops-result@@"
STAGE_MARKER = "@@sparkops-stage@@"
MIB = 1 << 20
GIB = 1 << 30
ALIGN_BYTES = 2 * MIB  # buffers are whole 2 MiB pages: the allocator's large-block granularity
ELEMENT_BYTES = 4  # fp32
SCRIPT_VERSION = 1


def _drop_own_dir_from_path():
    """``python path/to/_measure_script.py`` puts this folder first on sys.path; it holds modules
    named like common ones (``settings``, ``command``, ``probe``) that must not shadow the user's.
    Fed on stdin (``python -``, inside a container) there is no such folder: nothing to drop."""
    script = globals().get("__file__")
    if not script or not os.path.isfile(script):
        return
    here = os.path.dirname(os.path.abspath(script))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != here]


def emit(payload):
    """The one result line; a leading newline so a half-written line from torch cannot glue on."""
    sys.stdout.write("\n" + RESULT_MARKER + json.dumps(payload, default=str) + "\n")
    sys.stdout.flush()


def stage(name):
    sys.stdout.write("\n" + STAGE_MARKER + name + "\n")
    sys.stdout.flush()


def _err(exc):
    return (type(exc).__name__ + ": " + str(exc))[:2000]


def _mib(n):
    return f"{n / MIB:.0f} MiB"


# --------------------------------------------------------------------------- sizing (pure)
def plan_buffer(l2_bytes, free_bytes, n_buffers, floor_bytes, l2_multiple, buffer_cap_bytes, total_cap_bytes,
                free_fraction, explicit_bytes=None, force=False):
    """Bytes per buffer, and how they were chosen. Pure; never raises on numbers.

    Auto: ``l2_multiple`` x L2 (far past every cache), raised to ``floor_bytes``, cut to the caps:
    ``buffer_cap_bytes`` per buffer, ``total_cap_bytes`` over all buffers, and ``free_fraction`` of the
    free memory over all buffers (when the free memory is known). When the caps leave less than the
    floor the answer is no buffer: memory is short, and a smaller buffer would measure the cache.
    Explicit (``--size``): that size, within ``free_fraction`` of free memory unless ``force``.
    Returns ``{"buffer_bytes": int or None, "basis": str, "cap_bytes": int or None}``.
    """
    n = max(1, int(n_buffers))
    free_cap = None
    if free_bytes is not None and free_bytes >= 0:
        free_cap = int(free_fraction * free_bytes) // n
    if explicit_bytes is not None:
        size = _align_down(explicit_bytes)
        if size <= 0:
            return {"buffer_bytes": None, "cap_bytes": free_cap,
                    "basis": f"the requested size {_mib(explicit_bytes)} is below one {_mib(ALIGN_BYTES)} page"}
        if free_cap is not None and size > free_cap and not force:
            return {"buffer_bytes": None, "cap_bytes": free_cap,
                    "basis": f"the requested {_mib(size)} per buffer (x{n}) exceeds {free_fraction:.0%} of the "
                             f"{free_bytes / GIB:.1f} GiB free (at most {_mib(free_cap)} per buffer); --force to "
                             "measure anyway"}
        basis = f"requested size {_mib(size)}"
        if l2_bytes and size < l2_multiple * l2_bytes:
            basis += f" (below {l2_multiple} x the {_mib(l2_bytes)} L2: the figure may include cache hits)"
        return {"buffer_bytes": size, "cap_bytes": free_cap, "basis": basis}
    cap = min(int(buffer_cap_bytes), int(total_cap_bytes) // n)
    if free_cap is not None:
        cap = min(cap, free_cap)
    cap = _align_down(cap)
    if l2_bytes and l2_bytes > 0:
        want = int(l2_multiple * l2_bytes)
        why = f"{l2_multiple} x L2 ({_mib(l2_bytes)}) = {_mib(want)}"
    else:
        want = cap
        why = "L2 size unknown: the cap"
    if cap < floor_bytes:
        short = free_cap is not None and free_cap < min(buffer_cap_bytes, total_cap_bytes // n)
        limit = f"{free_fraction:.0%} of {free_bytes / GIB:.1f} GiB free" if short else "the caps"
        return {"buffer_bytes": None, "cap_bytes": cap,
                "basis": f"memory is short: {limit} allow at most {_mib(cap)} per buffer (x{n}), below the "
                         f"{_mib(floor_bytes)} floor that keeps the measurement out of the caches"}
    size = _align_down(min(max(want, floor_bytes), cap))
    if size < floor_bytes:  # the floor itself is not page-aligned: take the page above it, still within cap
        size = min(cap, _align_up(floor_bytes))
    if want < floor_bytes:
        why += f", raised to the {_mib(floor_bytes)} floor"
    elif want > cap:
        why += f", cut to the {_mib(cap)} cap"
    return {"buffer_bytes": size, "cap_bytes": cap, "basis": why}


def _align_down(n):
    try:
        n = int(n)
    except (TypeError, ValueError, OverflowError):
        return 0
    return max(0, n - n % ALIGN_BYTES)


def _align_up(n):
    n = int(n)
    return n + (-n) % ALIGN_BYTES


# --------------------------------------------------------------------------- statistics (pure)
def percentile(sorted_values, q):
    """Linear-interpolated percentile ``q`` in [0, 1] of an already sorted, non-empty list."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * min(1.0, max(0.0, q))
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def summarize(gbs):
    """Median, quartiles and extremes of the per-repetition GB/s figures."""
    s = sorted(gbs)
    return {"gbs_median": round(percentile(s, 0.5), 2), "gbs_q1": round(percentile(s, 0.25), 2),
            "gbs_q3": round(percentile(s, 0.75), 2), "gbs_min": round(s[0], 2), "gbs_max": round(s[-1], 2)}


# --------------------------------------------------------------------------- measurement
def _time_method(torch, fn, bytes_per_iteration, warmup, reps, rep_target_ms, max_inner):
    """Warm up, pick how many iterations one timed repetition holds, then time ``reps`` of them."""
    for _ in range(max(1, warmup)):
        fn()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    end.synchronize()
    one_ms = max(start.elapsed_time(end), 1e-3)
    inner = int(min(max_inner, max(1, math.ceil(rep_target_ms / one_ms))))
    gbs = []
    for _ in range(max(1, reps)):
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        if ms > 0:
            gbs.append(bytes_per_iteration * inner / (ms / 1000.0) / 1e9)
    if not gbs:
        raise RuntimeError("every timed repetition read 0 ms")
    out = summarize(gbs)
    out.update({"bytes_per_iteration": int(bytes_per_iteration), "iterations_per_rep": inner, "reps": len(gbs)})
    return out


def measure(cfg):
    """The whole measurement; returns the payload to emit (never raises past torch's import)."""
    out = {"mode": "bandwidth", "script_version": SCRIPT_VERSION,
           "python_version": ".".join(str(p) for p in sys.version_info[:3]), "executable": sys.executable}
    stage("import torch")
    t0 = time.monotonic()
    try:
        import torch
    except BaseException as exc:  # SystemExit/KeyboardInterrupt from a broken torch too
        out.update({"error": "import torch failed: " + _err(exc),
                    "kind": "no_torch" if isinstance(exc, ImportError) else "error"})
        return out
    out["import_s"] = round(time.monotonic() - t0, 3)
    out["torch_version"] = str(getattr(torch, "__version__", ""))
    out["torch_cuda"] = getattr(getattr(torch, "version", None), "cuda", None)
    stage("cuda init")
    try:
        available = bool(torch.cuda.is_available())
    except Exception as exc:
        out.update({"error": "torch.cuda.is_available() raised: " + _err(exc), "kind": "no_gpu"})
        return out
    if not available:
        out.update({"error": f"torch {out['torch_version']} sees no CUDA device (CUDA build {out['torch_cuda']})",
                    "kind": "no_gpu"})
        return out
    idx = int(cfg.get("device_index", 0))
    try:
        if idx >= torch.cuda.device_count():
            out.update({"error": f"no CUDA device {idx} (torch sees {torch.cuda.device_count()})",
                        "kind": "no_gpu"})
            return out
        torch.cuda.set_device(idx)
        props = torch.cuda.get_device_properties(idx)
        free, total = (int(x) for x in torch.cuda.mem_get_info(idx))
    except Exception as exc:
        out.update({"error": "CUDA initialisation failed: " + _err(exc), "kind": "no_gpu"})
        return out
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    out.update({"device_index": idx, "device_name": str(props.name), "capability": [props.major, props.minor],
                "sm_count": int(getattr(props, "multi_processor_count", 0) or 0), "l2_cache_bytes": l2 or None,
                "mem_free_bytes": free, "mem_total_bytes": total})
    force = bool(cfg.get("force"))
    min_free = int(cfg.get("min_free_bytes", 0))
    if free < min_free and not force:
        out["refused"] = (f"memory is short: CUDA reports {free / GIB:.1f} GiB free of {total / GIB:.1f} GiB, below "
                          f"the {min_free / GIB:.1f} GiB minimum; --force to measure anyway")
        return out
    facts_free = cfg.get("free_bytes")
    free_for_sizing = free if facts_free is None else min(free, int(facts_free))
    methods = [m for m in cfg.get("methods", ["copy", "read"]) if m in ("copy", "read")] or ["copy", "read"]
    n_buffers = 2 if "copy" in methods else 1
    plan = plan_buffer(l2, free_for_sizing, n_buffers, int(cfg["floor_bytes"]), int(cfg["l2_multiple"]),
                       int(cfg["buffer_cap_bytes"]), int(cfg["total_cap_bytes"]), float(cfg["free_fraction"]),
                       cfg.get("explicit_bytes"), force)
    out["sizing"] = plan["basis"]
    if plan["buffer_bytes"] is None:
        out["refused"] = plan["basis"]
        return out
    size = int(plan["buffer_bytes"])
    out.update({"buffer_bytes": size, "buffers": n_buffers})
    return _run_methods(torch, cfg, out, idx, size, methods)


def _run_methods(torch, cfg, out, idx, size, methods):
    warmup, reps = int(cfg.get("warmup", 3)), int(cfg.get("reps", 15))
    target_ms, max_inner = float(cfg.get("rep_target_ms", 5.0)), int(cfg.get("max_inner", 64))
    numel = size // ELEMENT_BYTES
    src = dst = acc = None
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats(idx)
    out["allocated_before_bytes"] = int(torch.cuda.memory_allocated(idx))
    g_start = torch.cuda.Event(enable_timing=True)
    g_end = torch.cuda.Event(enable_timing=True)
    w0 = time.monotonic()
    results = []
    try:
        g_start.record()
        stage("allocate")
        src = torch.empty(numel, dtype=torch.float32, device="cuda")
        src.fill_(1.0)  # touch every page: the first touch must not be inside a timed repetition
        acc = torch.zeros((), dtype=torch.float32, device="cuda")
        if "copy" in methods:
            dst = torch.empty_like(src)
            dst.fill_(0.0)
            stage("copy")
            r = _time_method(torch, lambda: dst.copy_(src), 2 * size, warmup, reps, target_ms, max_inner)
            r.update({"method": "copy", "operation": "dst.copy_(src), fp32, preallocated",
                      "counts": "bytes read + bytes written"})
            results.append(r)
        if "read" in methods:
            stage("read")
            r = _time_method(torch, lambda: torch.sum(src, dim=0, out=acc), size, warmup, reps, target_ms, max_inner)
            r.update({"method": "read", "operation": "torch.sum(src) into a preallocated scalar, fp32",
                      "counts": "bytes read"})
            results.append(r)
        g_end.record()
        g_end.synchronize()
        out["gpu_time_s"] = round(g_start.elapsed_time(g_end) / 1000.0, 4)
    except Exception as exc:
        oom = "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"
        head = f"out of memory allocating {out.get('buffers', 1)} x {_mib(size)}: " if oom else "measurement failed: "
        out.update({"error": head + _err(exc), "kind": "oom" if oom else "error"})
    finally:
        stage("free")
        src = dst = acc = None  # noqa: F841 - drop the last references before emptying the cache
        try:
            torch.cuda.synchronize()
            out["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated(idx))
            out["peak_reserved_bytes"] = int(torch.cuda.max_memory_reserved(idx))
            torch.cuda.empty_cache()
            out["allocated_after_bytes"] = int(torch.cuda.memory_allocated(idx))
            out["reserved_after_bytes"] = int(torch.cuda.memory_reserved(idx))
        except Exception as exc:
            out.setdefault("error", "freeing failed: " + _err(exc))
            out.setdefault("kind", "error")
    out["wall_s"] = round(time.monotonic() - w0, 4)
    out["methods"] = results
    return out


def main(argv):
    _drop_own_dir_from_path()
    try:
        cfg = json.loads(argv[1]) if len(argv) > 1 else {}
        if not isinstance(cfg, dict):
            raise ValueError("the configuration is not a JSON object")
    except ValueError as exc:
        emit({"mode": "bandwidth", "error": "bad configuration: " + _err(exc), "kind": "error"})
        return 0
    try:
        emit(measure(cfg))
    except BaseException as exc:  # a failure of this script is reported, not a traceback
        emit({"mode": "bandwidth", "error": "measure script failed: " + _err(exc), "kind": "error"})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
