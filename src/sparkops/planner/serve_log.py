"""Read a vLLM start-up log's own lines: what this model took on this machine with this build (collect layer).

Pure: text in, a :class:`VllmLogReading` out; never raises on junk (a line it cannot read is simply not read). Every
value keeps the line it came from in ``lines``. Units: GiB as vLLM prints them (its old "GB" label on "Loading model
weights took" divides by 2**30, so it is GiB too).
"""

from __future__ import annotations

import ast
import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_NUM = r"(-?\d+(?:\.\d+)?)"
_G = r"\s*Gi?B"


class VllmLogReading(BaseModel):
    """What one vLLM start-up log printed; None where it printed no such line."""

    model_config = ConfigDict(extra="forbid")

    version: str | None = None  # "vLLM API server version X" / "Initializing a V1 LLM engine (vX)"
    weights_gib: float | None = None  # "Model loading took X GiB" / "Loading model weights took X GB"
    kv_gib: float | None = None  # "Available KV cache memory: Y GiB" (V0: kv_cache_size= / available_kv_cache_memory)
    kv_tokens: int | None = None  # "GPU KV cache size: N tokens"
    gpu_blocks: int | None = None  # V0 "# GPU blocks: N"
    max_concurrency: float | None = None  # "Maximum concurrency for L tokens per request: Xx"
    max_concurrency_len: int | None = None  # its L
    total_gpu_gib: float | None = None  # total_gpu_memory / "Free memory on device (free/total GiB)"
    free_gib: float | None = None  # "Free memory on device (free/total GiB) on startup"
    gpu_memory_utilization: float | None = None  # the summary's / the start-up check's share
    requested_gib: float | None = None  # requested_memory / "the current vLLM instance can use" / "Desired ... (u, X GiB)"
    non_torch_gib: float | None = None
    activation_peak_gib: float | None = None  # "PyTorch activation peak memory" / "X GiB for peak activation"
    consumed_gib: float | None = None  # "Actual usage is X GiB for consumed memory (weights + non-torch)"
    cudagraph_estimate_gib: float | None = None  # "Estimated CUDA graph memory: X GiB total"
    cudagraph_actual_gib: float | None = None  # "Graph capturing finished in N secs, took X GiB"
    compile_state: str = "unknown"  # cold | warm | eager | unknown (serve.vllm_compile_state, engines.yaml)
    launch_args: dict[str, Any] = Field(default_factory=dict)  # "non-default args: {...}" (a cut dict: what it shows)
    launch_args_cut: bool = False  # the dict was printed (or quoted) cut short ("...")
    # what the start itself says it ran with (the engine config line "Initializing a V1 LLM engine ... with config:
    # model='...', max_seq_len=..., tensor_parallel_size=..., enforce_eager=...", "Using max model len N", the
    # printed args); None where it printed none: checked against the launch line (serve_calibrate.log_line_mismatch)
    model: str | None = None
    max_model_len: int | None = None
    tensor_parallel_size: int | None = None
    enforce_eager: bool | None = None
    pooling: str | None = None  # "Resolved `--convert auto` to `--convert embed`" / "Supported tasks: ['embed']"
    gpu_name: str | None = None  # torch's "Found GPU0 NVIDIA GB10 which is of ..." / "GPU 0: NVIDIA H100 80GB HBM3"
    starts: int = 0  # engine starts the text holds (each begins at its version line / non-default args); read: the last
    lines: dict[str, str] = Field(default_factory=dict)  # field -> the log line it was read from


# (field, pattern, group->value); the first line that matches a field wins, except where noted in read_vllm_log
_FLOAT_LINES: list[tuple[str, re.Pattern[str]]] = [
    ("weights_gib", re.compile(r"(?:Model loading took|Loading model weights took)\s+" + _NUM + _G)),
    ("weights_gib", re.compile(r"model weights take\s+" + _NUM + _G)),
    ("kv_gib", re.compile(r"Available KV cache memory:\s*" + _NUM + _G)),
    ("kv_gib", re.compile(r"\bkv_cache_size=" + _NUM + _G)),
    ("kv_gib", re.compile(r"available_kv_cache_memory\s+" + _NUM + _G)),
    ("kv_gib", re.compile(r"Current kv cache memory in use is\s*" + _NUM + _G)),
    ("kv_gib", re.compile(r"the rest of the memory reserved for KV Cache is\s*" + _NUM + _G)),
    ("total_gpu_gib", re.compile(r"total_gpu_memory[=\s]+" + _NUM + _G)),
    ("gpu_memory_utilization", re.compile(r"gpu_memory_utilization[=\s:]+(\d?\.\d+|1(?:\.0+)?)\b")),
    ("requested_gib", re.compile(r"requested_memory[=\s:]+" + _NUM + _G)),
    ("requested_gib", re.compile(r"the current vLLM instance can use\s+" + _NUM + _G)),
    ("non_torch_gib", re.compile(r"non_torch_memory(?:=|\s+takes\s+|\s+)" + _NUM + _G)),
    ("non_torch_gib", re.compile(_NUM + _G + r" for non-torch memory")),
    ("activation_peak_gib", re.compile(r"PyTorch activation peak memory(?:\s+takes)?\s+" + _NUM + _G)),
    ("activation_peak_gib", re.compile(_NUM + _G + r" for peak activation")),
    ("consumed_gib", re.compile(_NUM + _G + r" for consumed memory")),
    ("cudagraph_estimate_gib", re.compile(_NUM + _G + r" for CUDAGraph memory")),
    ("cudagraph_estimate_gib", re.compile(r"Estimated CUDA graph memory:\s*" + _NUM + _G)),
    ("cudagraph_actual_gib", re.compile(r"Graph capturing finished in .*?took\s+" + _NUM + _G)),
]
_TOKENS = re.compile(r"GPU KV cache size:\s*([\d,]+)\s*tokens")
_BLOCKS = re.compile(r"#?\s*GPU blocks:\s*(\d+)")
_CONC = re.compile(r"Maximum concurrency for\s+([\d,]+)\s+tokens per request:\s*" + _NUM + r"\s*x")
_FREE = re.compile(r"Free memory on device[^(]*\(\s*" + _NUM + r"\s*/\s*" + _NUM + r"\s*GiB\)")
_DESIRED = re.compile(r"(?:Desired|desired) GPU memory utilization (?:is )?\(\s*" + _NUM + r"\s*,\s*" + _NUM + _G)
_VERSIONS = [re.compile(r"vLLM API server version\s+v?(\d+\.\d+[\w.+-]*)"),
             re.compile(r"Initializing a V\d LLM engine \(v(\d+\.\d+[\w.+-]*)\)"),
             re.compile(r"\bvLLM\s+v?(\d+\.\d+\.\d+[\w.+-]*)"),
             re.compile(r"^\s*version\s+v?(\d+\.\d+\.\d+[\w.+-]*)")]
_ARGS = re.compile(r"non-default args:\s*(\{.*)")
# a start's first lines: the API server's version line, its printed args, the engine's config line
_START = re.compile(r"vLLM API server version|non-default args:|Initializing a V\d LLM engine")
_CONFIG = re.compile(r"Initializing a V\d LLM engine.*?with config:(.*)")
_CFG_MODEL = re.compile(r"(?<![\w_])model='([^']+)'")
_CFG_INT = {"max_model_len": re.compile(r"\bmax_seq_len=(\d+)"),
            "tensor_parallel_size": re.compile(r"\btensor_parallel_size=(\d+)")}
_CFG_EAGER = re.compile(r"\benforce_eager=(True|False)")
_MAX_LEN = re.compile(r"Using max model len\s+(\d+)")
_CONVERT = re.compile(r"Resolved `--convert auto` to `--convert (embed|classify|reward)`")
_TASKS = re.compile(r"Supported tasks:\s*\[([^\]]*)\]")
# the device's name where a start-up prints it: torch's capability warning (vllm-project/vllm#31588: "Found GPU0 NVIDIA
# GB10 which is of cuda capability 12.1."; #39878: "Found GPU1 Tesla V100-SXM2-32GB which is of compute capability"),
# nvidia-smi -L / collect_env ("GPU 0: NVIDIA H100 80GB HBM3")
_GPU_NAMES = [re.compile(r"Found GPU\d+\s+(.+?)\s+which is of (?:cuda |compute )?capability"),
              re.compile(r"^\W*GPU \d+:\s+((?:NVIDIA|Tesla|Quadro|AMD)[\w .+-]*?)"
                         r"\s*(?=\(UUID|;|`|,|\s(?:total|free)=|$)")]
# one 'key': value pair of a printed Python dict (strings, numbers, booleans, None, flat lists / dicts)
_PAIR = re.compile(r"'(\w+)':\s*('(?:[^'\\]|\\.)*'|\"[^\"]*\"|True|False|None|-?\d+(?:\.\d+)?(?:e-?\d+)?"
                   r"|\{[^{}]*\}|\[[^\[\]]*\])")


def _num(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def parse_launch_args(text: str) -> tuple[dict[str, Any], bool]:
    """The ``non-default args: {...}`` dict vLLM prints (``utils.py`` / ``api_utils.py``): the whole dict where it is
    one Python literal, else every ``'key': value`` pair it shows (a dict cut short with ``...``); and whether it was
    cut. Never raises."""
    body = text.strip()
    try:
        val = ast.literal_eval(body)
        if isinstance(val, dict):
            return {str(k): v for k, v in val.items()}, False
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    out: dict[str, Any] = {}
    for m in _PAIR.finditer(body):
        try:
            out[m.group(1)] = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return out, True


def read_vllm_log(text: str, *, engine_version: str | None = None, enforce_eager: bool = False) -> VllmLogReading:
    """Every line of a vLLM start-up log this module knows, read once, from its LAST start only (a restart in the same
    file, or two models' starts, never mix: ``starts`` says how many the text held). The first line wins for a field, except the KV
    pool, tokens and concurrency, where the LAST line of the best-ranked wording wins (a restart in the same log prints
    them again; "Available KV cache memory" outranks another rank's "Current kv cache memory in use").
    ``engine_version`` / ``enforce_eager``: what the launch line says where the log prints no version line or launch
    args; only the compile-state rule reads them."""
    if not isinstance(text, str):
        return VllmLogReading()
    starts, text = _last_start(text)
    vals: dict[str, Any] = {}
    lines: dict[str, str] = {}
    last_wins = {"kv_gib", "kv_tokens", "max_concurrency", "max_concurrency_len", "gpu_blocks"}

    rank: dict[str, int] = {}  # a field's pattern order: an earlier pattern's line is never replaced by a later one's

    def put(field: str, value: Any, line: str, order: int = 0) -> None:
        if value is None or (field in vals and (field not in last_wins or order > rank.get(field, 0))):
            return
        vals[field], rank[field] = value, order
        lines[field] = line.strip()[:400]

    for line in text.splitlines():
        if len(line) > 20000:  # a pasted blob, not a log line
            line = line[:20000]
        for order, (field, pat) in enumerate(_FLOAT_LINES):
            if (m := pat.search(line)) is not None:
                put(field, _num(m.group(1)), line, order)
        if (m := _TOKENS.search(line)) is not None:
            put("kv_tokens", int(m.group(1).replace(",", "")) if m.group(1).replace(",", "").isdigit() else None, line)
        if (m := _BLOCKS.search(line)) is not None:
            put("gpu_blocks", int(m.group(1)), line)
        if (m := _CONC.search(line)) is not None:
            length = m.group(1).replace(",", "")
            if length.isdigit():
                put("max_concurrency_len", int(length), line)
                put("max_concurrency", _num(m.group(2)), line)
        if (m := _FREE.search(line)) is not None:
            put("free_gib", _num(m.group(1)), line)
            put("total_gpu_gib", _num(m.group(2)), line)
        if (m := _DESIRED.search(line)) is not None:
            put("gpu_memory_utilization", _num(m.group(1)), line)
            put("requested_gib", _num(m.group(2)), line)
        for pat in _VERSIONS:
            if (m := pat.search(line)) is not None:
                put("version", m.group(1).rstrip(".,)"), line)
                break
        if "launch_args" not in vals and (m := _ARGS.search(line)) is not None:
            args, cut = parse_launch_args(m.group(1))
            if args:
                vals["launch_args"], vals["launch_args_cut"] = args, cut or "..." in m.group(1)
                lines["launch_args"] = line.strip()[:400]
        _read_config(line, put)
    args = vals.get("launch_args") or {}
    for key, field, kind in (("model", "model", str), ("max_model_len", "max_model_len", int),
                             ("tensor_parallel_size", "tensor_parallel_size", int),
                             ("enforce_eager", "enforce_eager", bool),
                             ("gpu_memory_utilization", "gpu_memory_utilization", float)):
        if field not in vals and isinstance(args.get(key), kind) and not (kind is int and isinstance(args[key], bool)):
            put(field, args[key], lines["launch_args"])
    if "model" not in vals and isinstance(args.get("model_tag"), str):
        put("model", args["model_tag"], lines["launch_args"])
    vals["starts"] = starts
    util = vals.get("gpu_memory_utilization")
    if util is not None and not 0 < util <= 1:
        vals.pop("gpu_memory_utilization")
        lines.pop("gpu_memory_utilization", None)
    state = _compile_state(text, vals.get("version") or engine_version,
                           enforce_eager or bool(vals.get("enforce_eager")))
    if state is not None:
        vals["compile_state"], lines["compile_state"] = state
    return VllmLogReading(**vals, lines=lines)


def _last_start(text: str) -> tuple[int, str]:
    """How many engine starts ``text`` holds and the last one's text. A start begins at its first start line (the
    version line, the printed args, the engine's config line): a start line of a kind the current start already
    printed, or any start line after the start read a measured line (weights, KV), opens the next start."""
    starts, begin, seen, body = 0, 0, set(), False
    lines = text.splitlines(keepends=True)
    pos = 0
    for line in lines:
        m = _START.search(line[:20000])
        if m is not None:
            kind = m.group(0)[:12]
            if starts == 0:  # what came before the first start line is that start's (an import's warnings)
                starts = 1
            elif kind in seen or body:
                starts, begin, seen, body = starts + 1, pos, set(), False
            seen.add(kind)
        elif any(w in line for w in ("Model loading took", "Loading model weights took", "KV cache", "kv_cache_size",
                                     "GPU blocks:")):
            body = True
        pos += len(line)
    return max(starts, 1), text[begin:]


def _read_config(line: str, put: Any) -> None:
    """The config fields one line prints (the engine config line, 'Using max model len', the pooling lines, the
    device name)."""
    if (m := _CONFIG.search(line)) is not None:
        cfg = m.group(1)
        if (mm := _CFG_MODEL.search(cfg)) is not None:
            put("model", mm.group(1), line)
        for field, pat in _CFG_INT.items():
            if (mm := pat.search(cfg)) is not None:
                put(field, int(mm.group(1)), line)
        if (mm := _CFG_EAGER.search(cfg)) is not None:
            put("enforce_eager", mm.group(1) == "True", line)
    if (m := _MAX_LEN.search(line)) is not None:
        put("max_model_len", int(m.group(1)), line)
    if (m := _CONVERT.search(line)) is not None:
        put("pooling", {"reward": "embed"}.get(m.group(1), m.group(1)), line)
    if (m := _TASKS.search(line)) is not None:
        tasks = re.findall(r"'(\w+)'", m.group(1))
        if "generate" in tasks:
            put("pooling", "none", line)
        elif tasks:
            put("pooling", "classify" if "classify" in tasks or "score" in tasks else "embed", line)
    for pat in _GPU_NAMES:
        if (m := pat.search(line)) is not None and m.group(1).strip():
            put("gpu_name", m.group(1).strip(), line)
            break


def _compile_state(text: str, version: str | None, eager: bool) -> tuple[str, str] | None:
    """The torch.compile cache the log shows, by the rule ``serve.vllm_compile_state`` owns (engines.yaml
    vllm.compile_state); None where it decides nothing."""
    from sparkops.planner.serve import vllm_compile_state  # the one owner of that rule

    try:
        c = vllm_compile_state(text, version, enforce_eager=eager)
    except Exception:  # noqa: BLE001 - a reader never raises on junk
        return None
    return (c.state, c.line) if c.state != "unknown" else None


_ARG_FLAGS = {"model_tag": None, "model": None, "host": None, "port": None, "served_model_name": None,
              "trust_remote_code": None, "disable_log_stats": None, "api_key": None, "download_dir": None}


def launch_line(args: dict[str, Any]) -> str | None:
    """The printed ``non-default args`` as a ``vllm serve`` command line the launch-line parser reads (None without a
    model). Booleans become ``--flag`` / ``--no-flag``; dicts JSON; lists the first item."""
    import json
    import shlex

    model = args.get("model_tag") or args.get("model")
    if not isinstance(model, str) or not model:
        return None
    parts = ["vllm", "serve", model]
    for k, v in args.items():
        if k in _ARG_FLAGS or v is None:
            continue
        flag = "--" + k.replace("_", "-")
        if v is True:
            parts.append(flag)
        elif v is False:
            parts.append("--no-" + k.replace("_", "-"))
        elif isinstance(v, dict):
            parts += [flag, json.dumps(v)]
        elif isinstance(v, (list, tuple)):
            if v:
                parts += [flag, str(v[0])]
        else:
            parts += [flag, str(v)]
    return shlex.join(parts)
