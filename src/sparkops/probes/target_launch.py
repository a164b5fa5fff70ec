"""Start the target interpreter's children at once, before the tool's own heavy imports.

Full mode costs about one ``import torch`` in the user's interpreter; everything else should
hide behind it. The CLI calls :func:`prestart` right after parsing its arguments, while it still
has only the standard library loaded; :mod:`sparkops.probes.target_env` later :func:`take`\\ s the
running child instead of starting a new one. A child nobody takes is killed at exit.
Standard library only (plus :mod:`sparkops.probes._run`), on purpose.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from sparkops.probes import _run, engine

SCRIPT = Path(__file__).with_name("_target_script.py")

# Distributions whose compiled modules decide whether the stack imports on CUDA 13 (canonical
# names). torch last: its build is already known from version.py, the others are what G1 misses.
INTEREST: tuple[str, ...] = (
    "flash-attn", "flash-attn-3", "xformers", "bitsandbytes", "vllm", "sglang", "sgl-kernel",
    "flashinfer-python", "triton", "pytorch-triton", "torchao", "apex", "transformer-engine",
    "transformer-engine-torch", "transformer-engine-cu12", "transformer-engine-cu13", "unsloth",
    "unsloth-zoo", "causal-conv1d", "mamba-ssm", "deepspeed", "liger-kernel", "auto-gptq",
    "gptqmodel", "autoawq", "autoawq-kernels", "exllamav2", "llama-cpp-python", "cupy-cuda12x",
    "cupy-cuda13x", "onnxruntime-gpu", "tensorrt", "tensorrt-llm", "torchvision", "torchaudio",
    "torch",
)

_lock = threading.Lock()
_started: dict[tuple, _run.Pending] = {}


def choose_interpreter(python: str | None, env: Mapping[str, str]) -> tuple[str, str]:
    """(interpreter, why it was chosen). Paths are kept as given: resolving a venv's symlink
    would land in the base interpreter and lose the venv."""
    if python:
        python = os.path.expanduser(python)
        if os.sep not in python:
            return (_run.which(python, env) or python), "--python"
        return python, "--python"
    found = _run.which("python3", env)
    if found:
        return found, "python3 on PATH"
    return sys.executable, "the tool's own interpreter"


def argv_for(exe: str, mode: str) -> tuple[str, ...]:
    """The command line of the quick (static listing) or live (import torch) child."""
    if mode == "quick":
        return (exe, str(SCRIPT), "quick", json.dumps(list(INTEREST)))
    return (exe, str(SCRIPT), "live")


# Inside the image: the first of python3/python on its PATH reads the probe script from stdin, so
# the script needs no mount and the image needs nothing but a shell and a Python.
_FIND_PYTHON = ('for p in python3 python; do command -v "$p" >/dev/null 2>&1 && exec "$p" - "$@"; done; '
                'echo "spark-ops: no python3 or python on the image PATH" >&2; exit 127')


def container_name(mode: str) -> str:
    """A name to ``docker rm -f`` by: killing the docker CLI at a timeout does not stop the container."""
    import secrets  # only a container run needs it: the quick path does not load it

    return f"spark-ops-probe-{os.getpid()}-{mode}-{secrets.token_hex(3)}"


def container_argv(ref: str, mode: str, python: str | None, name: str, engine_name: str = "docker") -> tuple[str, ...]:
    """``docker run`` (or ``podman run``) of the probe script (fed on stdin) in ``ref``: the GPU flags
    the spec's invocation uses, ``--pull never`` (a missing image is said, not pulled for minutes), no
    network. No ``--rm``: podman's Docker API then loses the exit status (a segfault reads as exit
    0); the caller removes the container by ``name`` instead."""
    head = (engine_name, "run", "-i", "--name", name, "--pull", "never", "--network", "none",
            *engine.gpu_flags(engine_name), "--ipc=host")
    args = ("quick", json.dumps(list(INTEREST))) if mode == "quick" else ("live",)
    if python:
        return (*head, "--entrypoint", python, ref, "-", *args)
    return (*head, "--entrypoint", "sh", ref, "-c", _FIND_PYTHON, "sh", *args)


def _key(argv: tuple[str, ...], env: Mapping[str, str]) -> tuple:
    return (argv, tuple(sorted(env.items())))


def prestart(python: str | None, env: Mapping[str, str], depth: str) -> None:
    """Start the quick child (and the live one in full mode) now; never raises."""
    exe, _why = choose_interpreter(python, env)
    if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return  # target_env reports the missing interpreter itself
    modes = ("live", "quick") if depth == "full" else ("quick",)
    with _lock:
        for mode in modes:
            argv = argv_for(exe, mode)
            key = _key(argv, env)
            if key not in _started:
                _started[key] = _run.spawn(argv, env=env)


def take(argv: tuple[str, ...], env: Mapping[str, str]) -> _run.Pending | None:
    """The child started earlier for exactly this command line and environment, if any."""
    with _lock:
        return _started.pop(_key(argv, env), None)


def start(argv: tuple[str, ...], env: Mapping[str, str]) -> _run.Pending:
    """The prestarted child for ``argv``, or a new one."""
    return take(argv, env) or _run.spawn(argv, env=env)


@atexit.register
def _kill_leftovers() -> None:
    with _lock:
        for pending in _started.values():
            pending.kill()
        _started.clear()
