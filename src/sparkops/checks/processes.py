"""What a recorded process is: the one owner of process classification (engine kind, memory cap).

The process probe records raw facts (name, exe, redacted argv, RSS, state, parent); this module
says what they mean, so a replayed snapshot is judged with today's knowledge: the cap flags
(``g6.cap_flags``) and the default caps (``g6.default_caps``) are read from the knowledge base at
judging time, never frozen into the snapshot. G6, G3's start-up decision, the planner's
``--beside`` budget, the bandwidth refusal, the exporter and ``fix g3`` all call it.

A process migrated from a schema-1 snapshot has no argv (that tool kept only a 300-character
command line and its own verdict): its recorded kind and explicit cap are used as recorded,
a default cap is taken from today's knowledge. :func:`classify` is pure and hypothesis-tested.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sparkops.facts.model import HostProcess
from sparkops.facts.reading import known

_PY = re.compile(r"^python(\d+(\.\d+)*)?[mw]?$")
_WRAPPERS = {"nohup", "nice", "ionice", "env", "exec", "time", "stdbuf", "setsid"}
_RUNNERS = {"uv": "run", "poetry": "run", "pdm": "run", "pipx": "run", "conda": "run", "micromamba": "run",
            "hatch": "run", "rye": "run"}
_TRAIN_WORDS = {"sft", "dpo", "grpo", "orpo", "kto", "qlora"}
_TRAINER_PROGS = {"torchrun", "deepspeed", "axolotl", "llamafactory-cli", "tune", "unsloth", "unsloth-cli",
                  "composer", "litgpt"}
_TRL_CMDS = {"sft", "dpo", "grpo", "kto", "orpo", "ppo", "reward", "rloo"}

OTHER = "other"
# When only NVML's process name is known (no process-table entry): name fragment -> server kind.
NAME_KINDS = (("vllm", "vllm"), ("sglang", "sglang"), ("ollama", "ollama"), ("llama-server", "llama.cpp"),
              ("llama.cpp", "llama.cpp"), ("text-generation", "tgi"), ("trtllm", "trtllm"),
              ("tensorrt", "trtllm"), ("comfyui", "comfyui"))


@dataclass(frozen=True)
class ProcessClass:
    """What one process is for the pool: its kind and the share of the pool it may take."""

    kind: str  # vllm, sglang, ollama, llama.cpp, tgi, trtllm, comfyui, trainer, other
    fraction: float | None = None  # a server's cap, e.g. vLLM --gpu-memory-utilization
    cap_source: str = ""  # "cmdline", "default", "parent" (an engine child of a capped server), "" (none)

    @property
    def engine(self) -> bool:
        return self.kind != OTHER


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


def _fraction(kind: str, args: Sequence[str], default_caps: Mapping[str, float],
              cap_flags: Mapping[str, Sequence[str]]) -> tuple[float | None, str]:
    flags = cap_flags.get(kind)
    if flags:
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
    return OTHER, args


def kind_from_name(name: str) -> str:
    """A server kind from a GPU process's name alone (NVML's list), else "other"."""
    low = name.lower()
    return next((k for frag, k in NAME_KINDS if frag in low), OTHER)


def _kb() -> Any:
    from sparkops.knowledge import load

    return load()


def classify(name: str, cmdline: Sequence[str] | str, default_caps: Mapping[str, float] | None = None,
             cap_flags: Mapping[str, Sequence[str]] | None = None) -> tuple[str, float | None, str]:
    """(kind, memory fraction, its source) for one command line. Pure; hypothesis-tested not to raise.
    ``default_caps`` / ``cap_flags`` default to the knowledge base's ``g6.default_caps`` / ``g6.cap_flags``."""
    caps = default_caps if default_caps is not None else _kb().thresholds.g6.default_caps
    flags = cap_flags if cap_flags is not None else _kb().thresholds.g6.cap_flags
    argv = _split(cmdline)
    kind, args = _kind(name or "", argv)
    fraction, source = _fraction(kind, args, caps, flags)
    return kind, fraction, source


def classify_process(p: HostProcess, default_caps: Mapping[str, float],
                     cap_flags: Mapping[str, Sequence[str]]) -> ProcessClass:
    """One recorded process, its parent not considered (see :func:`classify_all`)."""
    legacy = p.v1_class
    if legacy is not None and not known(p.argv):
        # a schema-1 snapshot: the tool that wrote it classified from the full argv, now lost
        if legacy.memory_cap_source == "default" or legacy.memory_fraction is None:
            default = default_caps.get(legacy.kind)
            return ProcessClass(legacy.kind, float(default) if default is not None else None,
                                "default" if default is not None else "")
        return ProcessClass(legacy.kind, legacy.memory_fraction, legacy.memory_cap_source or "cmdline")
    argv: Sequence[str] | str = p.argv if known(p.argv) else p.cmdline  # type: ignore[assignment]
    try:
        kind, fraction, source = classify(p.name, argv, default_caps, cap_flags)
    except Exception:  # a bug on one odd command line must not cost the whole judgment
        kind, fraction, source = OTHER, None, ""
    return ProcessClass(kind, fraction, source)


def classify_all(procs: Iterable[HostProcess], kb: Any = None) -> dict[int, ProcessClass]:
    """pid -> class for every recorded process. An engine child (``VLLM::EngineCore``) has no flags of
    its own: it takes its server parent's explicit cap (source "parent") instead of the default."""
    kb = kb if kb is not None else _kb()
    caps: Mapping[str, float] = kb.thresholds.g6.default_caps
    flags: Mapping[str, Sequence[str]] = kb.thresholds.g6.cap_flags
    table = list(procs)
    out = {p.pid: classify_process(p, caps, flags) for p in table}
    by_pid = {p.pid: p for p in table}
    for p in table:
        c = out[p.pid]
        if c.cap_source != "default":
            continue
        parent, hops = by_pid.get(p.ppid if p.ppid is not None else -1), 0
        while parent is not None and hops < 4:
            pc = out[parent.pid]
            if pc.kind == c.kind and pc.cap_source == "cmdline":
                out[p.pid] = ProcessClass(c.kind, pc.fraction, "parent")
                break
            parent, hops = by_pid.get(parent.ppid if parent.ppid is not None else -1), hops + 1
    return out


def table(facts: Any, kb: Any = None) -> list[tuple[HostProcess, ProcessClass]]:
    """The recorded process table with each process's class ([] when the table was not read)."""
    procs = facts.processes.processes
    if not known(procs):
        return []
    classes = classify_all(procs, kb)
    return [(p, classes[p.pid]) for p in procs]
