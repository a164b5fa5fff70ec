"""Slow first steps started at process start, before the tool's own heavy imports.

The two slowest things a preflight waits on are the user's interpreter (its children are
started by :mod:`sparkops.probes.target_launch`) and NVML's first initialisation, which on a GPU
without persistence mode wakes the device (a few hundred milliseconds, spent in C with the GIL
released). :func:`warm_nvml` starts that init on a daemon thread; the GPU probe's own
init/shutdown pair is then a reference-count step. If the init fails or hangs, nothing is lost:
the probe tries again under its own timeout and reports why. Standard library only, on purpose
(so is :mod:`sparkops.probes.nvml` at load time, the only module that imports ``pynvml``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping

NO_NVML_ENV = "SPARKOPS_NO_NVML"  # set to 1 to skip NVML (tests force the nvidia-smi fallback)

_started = False
_lock = threading.Lock()


def nvml_wanted(env: Mapping[str, str]) -> bool:
    return env.get(NO_NVML_ENV, "").strip().lower() in ("", "0", "false", "no")


def warm_nvml(env: Mapping[str, str]) -> threading.Thread | None:
    """Begin ``nvmlInit`` in the background (once per process); never raises, never waits."""
    global _started
    if not nvml_wanted(env):
        return None
    with _lock:
        if _started:
            return None
        _started = True

    def init() -> None:
        try:
            from sparkops.probes import nvml  # the one NVML owner; standard library only at load

            nvml.warm_init()  # left initialised: NVML counts inits, the probe's pair nests inside
        except Exception:
            pass  # the GPU probe will try again and say why

    thread = threading.Thread(target=init, name="nvml-warm", daemon=True)
    thread.start()
    return thread
