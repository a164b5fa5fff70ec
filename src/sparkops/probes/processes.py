"""Neighbours in the one memory pool (G6): model servers, trainers, D-state holders, big processes.

The psutil scan is bounded by time, skips processes that vanish or deny access, and keeps only
the interesting ones. Command lines are redacted before truncation (a cut token would slip past
the patterns). :func:`classify` is pure and tested on real-looking command lines.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sparkops.facts.model import HostProcess, ProcessFacts
from sparkops.facts.reading import Why, missing
from sparkops.facts.redact import redact_argv, redact_text
from sparkops.knowledge import load as load_kb

SECTION = "processes"

CMDLINE_MAX = 300
_PY = re.compile(r"^python(\d+(\.\d+)*)?[mw]?$")
_WRAPPERS = {"nohup", "nice", "ionice", "env", "exec", "time", "stdbuf", "setsid"}
_RUNNERS = {"uv": "run", "poetry": "run", "pdm": "run", "pipx": "run", "conda": "run", "micromamba": "run",
            "hatch": "run", "rye": "run"}
_TRAIN_WORDS = {"sft", "dpo", "grpo", "orpo", "kto", "qlora"}
_TRAINER_PROGS = {"torchrun", "deepspeed", "axolotl", "llamafactory-cli", "tune", "unsloth", "unsloth-cli",
                  "composer", "litgpt"}
_TRL_CMDS = {"sft", "dpo", "grpo", "kto", "orpo", "ppo", "reward", "rloo"}

# flag names (normalised: "-" -> "_") that carry a server's share of the pool
_FRACTION_FLAGS = {
    "vllm": ("gpu_memory_utilization",),
    "sglang": ("mem_fraction_static",),
    "tgi": ("cuda_memory_fraction",),
    "trtllm": ("kv_cache_free_gpu_memory_fraction", "free_gpu_memory_fraction"),
}


def _base(arg: str) -> str:
    return os.path.basename(arg.rstrip("/")) if arg else ""


def _split(cmdline: Sequence[str] | str) -> list[str]:
    if isinstance(cmdline, str):
        return cmdline.split()
    out: list[str] = []
    for a in cmdline:
        if isinstance(a, str) and a:
            out.append(a)
    # setproctitle may leave the whole title in argv[0] ("vllm serve x --port 8000")
    if len(out) == 1 and " " in out[0]:
        out = out[0].split()
    return out


def _program(argv: list[str]) -> tuple[str, list[str], bool]:
    """(program, its arguments, is_module): what actually runs behind python/uv/nohup wrappers."""
    a = list(argv)
    for _ in range(8):  # wrappers nest at most a few deep
        if not a:
            return "", [], False
        b = _base(a[0])
        if b in _WRAPPERS:
            a = a[1:]
            while a and (a[0].startswith("-") or (b == "env" and "=" in a[0])):
                a = a[1:]
            continue
        if b in _RUNNERS and len(a) > 1 and a[1] == _RUNNERS[b]:
            a = a[2:]
            while a and a[0].startswith("-"):
                a = a[2:] if a[0] in ("-n", "--name", "-p", "--prefix", "--with", "--python") else a[1:]
            continue
        if b == "uvx" or (b == "pipx" and len(a) > 1 and a[1] == "run"):
            a = a[1:] if b == "uvx" else a[2:]
            while a and a[0].startswith("-"):
                a = a[1:]
            continue
        if _PY.match(b):
            i = 1
            while i < len(a):
                x = a[i]
                if x == "-m" and i + 1 < len(a):
                    return a[i + 1], a[i + 2:], True
                if x.startswith("-m") and len(x) > 2:
                    return x[2:], a[i + 1:], True
                if x == "-c":
                    return "python -c", a[i + 1:], False
                if x in ("-X", "-W", "-Q"):
                    i += 2
                    continue
                if x.startswith("-"):
                    i += 1
                    continue
                return x, a[i + 1:], False
            return b, [], False
        return a[0], a[1:], False
    return (a[0] if a else ""), a[1:], False


def _is_train_script(stem: str) -> bool:
    """train.py, train_lora.py, pretrain.py, sft_qwen.py: yes; constrained.py: no."""
    words = [w for w in re.split(r"[_\-.]+", stem.lower()) if w]
    if "finetun" in "".join(words):
        return True
    return any(w.startswith("train") or w.endswith("train") or w in _TRAIN_WORDS for w in words)


def _flag_value(args: Sequence[str], names: Iterable[str]) -> str | None:
    """The value of ``--name X`` / ``--name=X`` (dashes and underscores equivalent)."""
    wanted = set(names)
    for i, arg in enumerate(args):
        if not arg.startswith("--"):
            continue
        name, eq, value = arg[2:].partition("=")
        if name.replace("-", "_") in wanted:
            if eq:
                return value
            if i + 1 < len(args):
                return args[i + 1]
    return None


def _fraction(kind: str, args: Sequence[str], default_caps: Mapping[str, float]) -> tuple[float | None, str]:
    flags = _FRACTION_FLAGS.get(kind)
    if not flags:
        return None, ""
    raw = _flag_value(args, flags)
    if raw is not None:
        try:
            value = float(raw)
        except ValueError:
            value = float("nan")
        if 0.0 < value <= 1.0:
            return value, "cmdline"
    default = default_caps.get(kind)
    return (float(default), "default") if default is not None else (None, "")


def _kind(name: str, argv: list[str]) -> tuple[str, list[str]]:
    """The process kind and the arguments its cap flags live in."""
    title = argv[0] if argv else ""
    for label, prefixes in (("vllm", ("VLLM::", "vllm::")), ("sglang", ("sglang::", "SGLang::"))):
        if name.startswith(prefixes) or title.startswith(prefixes):
            return label, argv
    prog, args, is_module = _program(argv)
    b = _base(prog).lower()
    stem = b[:-3] if b.endswith(".py") else b
    first = args[0] if args else ""
    full = " ".join(argv).lower()

    if is_module:
        mod = prog.lower()
        if mod.startswith("vllm.entrypoints") or mod == "vllm":
            return "vllm", args
        if mod.startswith("sglang"):
            return "sglang", args
        if mod.startswith("llama_cpp.server"):
            return "llama.cpp", args
        if mod.startswith("text_generation_server"):
            return "tgi", args
        if mod.startswith("tensorrt_llm"):
            return "trtllm", args
        if mod in ("torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
                   "deepspeed", "deepspeed.launcher.runner") or mod.startswith(("axolotl", "unsloth", "trl.",
                                                                                  "llamafactory", "torchtune")):
            return "trainer", args
        if mod.startswith("comfy"):
            return "comfyui", args
    if stem == "vllm" and first in ("serve", "run-batch", "bench") or stem == "vllm-serve":
        return "vllm", args
    if stem == "trl" and first == "vllm-serve":
        return "vllm", args
    if stem in ("sglang", "sglang-launch-server") or stem == "launch_server" and "sglang" in full:
        return "sglang", args
    if stem in ("ollama",) or name == "ollama":
        return "ollama", args
    if stem in ("llama-server", "llama-cli", "llama-mtmd-cli") or name in ("llama-server", "llama-cli"):
        return "llama.cpp", args
    if stem.startswith("text-generation-") or name.startswith("text-generation"):
        return "tgi", args
    if stem in ("trtllm-serve", "trtllm-llmapi-launch") or name.startswith("trtllm-serve"):
        return "trtllm", args
    if stem == "comfy" and first == "launch" or "comfyui" in prog.lower() or (
            stem == "main" and any("comfyui" in a.lower() for a in argv[:3])):
        return "comfyui", args
    if stem in _TRAINER_PROGS or (stem == "accelerate" and first == "launch") or (
            stem == "trl" and first in _TRL_CMDS):
        return "trainer", args
    if prog.endswith(".py") and (_is_train_script(stem) or "unsloth" in prog.lower()):
        return "trainer", args
    return "other", args


def classify(name: str, cmdline: Sequence[str] | str,
             default_caps: Mapping[str, float] | None = None) -> tuple[str, float | None, str]:
    """(kind, memory fraction, its source) for one process. Pure; hypothesis-tested not to raise."""
    caps = default_caps if default_caps is not None else load_kb().thresholds.g6.default_caps
    argv = _split(cmdline)
    kind, args = _kind(name or "", argv)
    fraction, source = _fraction(kind, args, caps)
    return kind, fraction, source


def scan(infos: Iterable[Mapping[str, Any]], own_pid: int, heavy_bytes: int,
         default_caps: Mapping[str, float], deadline: float | None = None) -> ProcessFacts:
    """Pick the interesting processes out of psutil-style info dicts (pure apart from the clock)."""
    kept: list[HostProcess] = []
    scanned = denied = 0
    truncated = False
    for info in infos:
        if deadline is not None and time.monotonic() > deadline:
            truncated = True
            break
        pid = info.get("pid")
        if not isinstance(pid, int) or pid == own_pid:
            continue
        scanned += 1
        name = info.get("name") or ""
        argv = info.get("cmdline")
        if argv is None:
            denied += 1
            argv = []
        mem = info.get("memory_info")
        rss = int(getattr(mem, "rss", 0) or 0)
        state = info.get("status") or ""
        try:
            kind, fraction, source = classify(name, argv, default_caps)
        except Exception:  # a bug on one odd cmdline must not cost the whole scan
            kind, fraction, source = "other", None, ""
        if kind == "other" and state != "disk-sleep" and rss <= heavy_bytes:
            continue
        # argument by argument first (a secret with spaces is masked whole), then the joined text
        text = redact_text(" ".join(redact_argv([a for a in argv if isinstance(a, str)])) or name)
        ppid = info.get("ppid")
        kept.append(HostProcess(pid=pid, name=str(name)[:100], kind=kind, cmdline=text[:CMDLINE_MAX],
                                rss_bytes=rss, state=str(state), memory_fraction=fraction,
                                memory_cap_source=source, ppid=ppid if isinstance(ppid, int) else None))
    _inherit_caps(kept)
    return ProcessFacts(processes=kept, scanned=scanned, denied=denied, truncated=truncated)


def _inherit_caps(procs: list[HostProcess]) -> None:
    """An engine child (``VLLM::EngineCore``) has no flags of its own: take its server parent's cap."""
    by_pid = {p.pid: p for p in procs}
    for p in procs:
        if p.memory_cap_source != "default":
            continue
        parent, hops = by_pid.get(p.ppid or -1), 0
        while parent is not None and hops < 4:
            if parent.kind == p.kind and parent.memory_cap_source == "cmdline":
                p.memory_fraction, p.memory_cap_source = parent.memory_fraction, "parent"
                break
            parent, hops = by_pid.get(parent.ppid or -1), hops + 1


def collect(opts) -> ProcessFacts:
    """The process section for the runner (live psutil scan)."""
    import psutil

    kb = opts.knowledge()
    heavy = int(kb.thresholds.g6.heavy_neighbour_gb * 1024**3)
    deadline = time.monotonic() + kb.thresholds.probes.subprocess_timeout_s
    attrs = ["pid", "ppid", "name", "cmdline", "status", "memory_info"]
    try:
        infos = (p.info for p in psutil.process_iter(attrs, ad_value=None))
        facts = scan(infos, os.getpid(), heavy, kb.thresholds.g6.default_caps, deadline)
    except (psutil.Error, OSError) as exc:
        return unavailable(Why.error, f"process scan failed: {exc}")
    return recheck_disk_sleep(facts, kb.thresholds.g6.dstate_recheck_s, _status_of, heavy)


def _status_of(pid: int) -> str | None:
    import psutil

    try:
        return psutil.Process(pid).status()
    except (psutil.Error, OSError):
        return None


def recheck_disk_sleep(facts: ProcessFacts, wait_s: float, status_of, heavy_bytes: int,  # noqa: ANN001
                       sleep=time.sleep) -> ProcessFacts:  # noqa: ANN001
    """A process caught in D state may just be waiting on a disk read. Look again after ``wait_s``:
    only one still in D is recorded as stuck; one that only made the list for its D state and has
    left it is dropped."""
    procs = facts.processes
    if not isinstance(procs, list) or not any(p.state == "disk-sleep" for p in procs):
        return facts
    sleep(wait_s)
    kept: list[HostProcess] = []
    for p in procs:
        if p.state == "disk-sleep":
            now = status_of(p.pid)
            if now != "disk-sleep":
                if p.kind == "other" and p.rss_bytes <= heavy_bytes:
                    continue
                p = p.model_copy(update={"state": now or "gone"})
        kept.append(p)
    return facts.model_copy(update={"processes": kept})


def unavailable(why: Why, detail: str) -> ProcessFacts:
    return ProcessFacts(processes=missing(why, detail))
