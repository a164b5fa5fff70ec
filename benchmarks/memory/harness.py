#!/usr/bin/env python3
"""Measure the real peak memory of fine-tuning steps, one configuration per fresh process.

The planner's estimates are compared against these rows, so each number here is a plain
counter reading (bytes) taken at a stated moment. See README.md beside this file.

Usage:
  python3 harness.py --configs configs.yaml --out results.jsonl [--only m01,m02]
                     [--catalog PATH] [--timeout 300]
  python3 harness.py --dry-run --out dry.jsonl      # tiny models on CPU: tests the code path
  python3 harness.py --check --configs configs.yaml  # CPU: resolve + build each on "meta"

The parent imports only the standard library and PyYAML; torch, transformers, peft and
bitsandbytes are imported in the child (`--one '<json>'`), so a broken install or a crash in one
configuration becomes an error row and the next configuration still runs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
DEFAULT_CATALOG = HERE.parent.parent / "src" / "sparkops" / "knowledge" / "models.yaml"
ROW_MARKER = "@@HARNESS_ROW@@ "  # the child's result line; anything else on stdout is noise
TAIL_CHARS = 2000
MESSAGE_CHARS = 500

METHODS = ("full", "lora", "qlora")
DTYPES = ("bf16", "fp32")
OPTIMIZERS = ("adamw_torch", "adamw_torch_fused", "adamw_8bit", "paged_adamw_32bit", "sgd")
ATTENTIONS = ("sdpa", "eager")
CONFIG_KEYS = {
    "id", "model", "method", "dtype", "optimizer", "batch", "seq_len", "grad_checkpointing",
    "attention", "lora", "steps", "hf_config", "notes", "autocast", "loop", "grad_accum",
}
LOOPS = ("plain", "trainer")
# harness optimizer name -> HF TrainingArguments.optim
TRAINER_OPTIM = {"adamw_torch": "adamw_torch", "adamw_torch_fused": "adamw_torch_fused", "adamw_8bit": "adamw_bnb_8bit",
                 "paged_adamw_32bit": "paged_adamw_32bit", "sgd": "sgd"}
LORA_KEYS = {"r", "alpha", "targets", "dropout"}

EXIT_OK, EXIT_SOME_FAILED, EXIT_BAD_INPUT = 0, 1, 3

# Tiny models for --dry-run: the code path (build, LoRA, checkpointing, autocast, steps, row)
# on CPU in seconds. Real shapes come from the catalog.
TINY_LLAMA: dict[str, Any] = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256,
    "max_position_embeddings": 256, "tie_word_embeddings": True,
}
DRY_RUN_CONFIGS: list[dict[str, Any]] = [
    {"id": "dry-full", "model": "tiny-llama", "method": "full", "dtype": "bf16",
     "optimizer": "adamw_torch", "batch": 2, "seq_len": 32, "grad_checkpointing": True,
     "attention": "sdpa", "steps": 2, "hf_config": TINY_LLAMA},
    {"id": "dry-lora", "model": "tiny-llama", "method": "lora", "dtype": "fp32",
     "optimizer": "sgd", "batch": 2, "seq_len": 32, "grad_checkpointing": True,
     "attention": "eager", "steps": 2, "hf_config": TINY_LLAMA,
     "lora": {"r": 4, "alpha": 8, "targets": ["q_proj", "v_proj"], "dropout": 0.05}},
    {"id": "dry-trainer", "model": "tiny-llama", "method": "lora", "dtype": "bf16", "loop": "trainer",
     "optimizer": "adamw_torch_fused", "batch": 2, "seq_len": 32, "grad_checkpointing": False, "grad_accum": 2,
     "attention": "sdpa", "steps": 2, "hf_config": TINY_LLAMA,
     "lora": {"r": 4, "alpha": 8, "targets": "all-linear", "dropout": 0.1}},
]


class ConfigError(ValueError):
    """A configuration file or entry that cannot be run as written (exit 3)."""


# --------------------------------------------------------------------------------------------
# Configuration loading and validation (parent side, no torch)
# --------------------------------------------------------------------------------------------


def _need(cond: bool, where: str, msg: str) -> None:
    if not cond:
        raise ConfigError(f"{where}: {msg}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_config(raw: Any, index: int = 0) -> dict[str, Any]:
    """One entry checked and completed with defaults, so a typo fails before any GPU time."""
    where = f"configuration #{index + 1}"
    _need(isinstance(raw, Mapping), where, f"expected a mapping, got {type(raw).__name__}")
    cid = raw.get("id")
    _need(isinstance(cid, str) and bool(cid.strip()), where, "'id' must be a non-empty string")
    where = f"configuration {cid!r}"
    unknown = sorted(set(raw) - CONFIG_KEYS)
    _need(not unknown, where, f"unknown field(s) {unknown}; allowed: {sorted(CONFIG_KEYS)}")
    cfg: dict[str, Any] = {
        "id": cid, "model": raw.get("model"), "method": raw.get("method"),
        "dtype": raw.get("dtype", "bf16"), "optimizer": raw.get("optimizer", "adamw_torch"),
        "batch": raw.get("batch"), "seq_len": raw.get("seq_len"),
        "grad_checkpointing": raw.get("grad_checkpointing", False),
        "attention": raw.get("attention", "sdpa"), "steps": raw.get("steps", 3),
        "loop": raw.get("loop", "plain"), "grad_accum": raw.get("grad_accum", 1),
    }
    _need(isinstance(cfg["model"], str) and bool(cfg["model"]), where, "'model' must be a non-empty string")
    for key, allowed in (("method", METHODS), ("dtype", DTYPES), ("optimizer", OPTIMIZERS),
                         ("attention", ATTENTIONS), ("loop", LOOPS)):
        _need(cfg[key] in allowed, where, f"{key} {cfg[key]!r} is not one of {list(allowed)}")
    _need(cfg["loop"] == "trainer" or cfg["grad_accum"] == 1, where, "grad_accum is measured through loop: trainer only")
    for key in ("batch", "seq_len", "steps", "grad_accum"):
        _need(_is_int(cfg[key]) and cfg[key] >= 1, where, f"{key} must be an integer >= 1, got {cfg[key]!r}")
    _need(isinstance(cfg["grad_checkpointing"], bool), where, "grad_checkpointing must be true or false")
    _need(cfg["method"] != "qlora" or cfg["dtype"] == "bf16", where,
          "qlora computes in bf16 (bnb_4bit_compute_dtype); dtype must be bf16")
    # the Trainer with bf16=True always runs the forward pass under autocast (accelerate's mixed precision)
    cfg["autocast"] = raw.get("autocast", cfg["dtype"] == "fp32" or cfg["loop"] == "trainer")
    _need(cfg["autocast"] or cfg["loop"] == "plain", where, "loop trainer runs with bf16=True: autocast cannot be off")
    _need(isinstance(cfg["autocast"], bool), where, "autocast must be true or false")
    _need(cfg["autocast"] or cfg["dtype"] != "fp32", where,
          "dtype fp32 means fp32 master weights + bf16 autocast; autocast: false is not measured")
    lora = raw.get("lora")
    if cfg["method"] == "full":
        _need(lora is None, where, "'lora' given for method full; remove it or use lora/qlora")
    else:
        cfg["lora"] = _validate_lora(lora, where)
    if "hf_config" in raw:
        hf = raw["hf_config"]
        _need(isinstance(hf, Mapping) and isinstance(hf.get("model_type"), str), where,
              "hf_config must be a mapping with a 'model_type' string")
        cfg["hf_config"] = dict(hf)
    if "notes" in raw:
        cfg["notes"] = str(raw["notes"])
    return cfg


def _validate_lora(lora: Any, where: str) -> dict[str, Any]:
    _need(isinstance(lora, Mapping), where, "lora/qlora needs 'lora: {r: ..., alpha: ..., targets: ...}'")
    unknown = sorted(set(lora) - LORA_KEYS)
    _need(not unknown, where, f"unknown lora field(s) {unknown}; allowed: {sorted(LORA_KEYS)}")
    r = lora.get("r")
    _need(_is_int(r) and r >= 1, where, f"lora.r must be an integer >= 1, got {r!r}")
    alpha = lora.get("alpha", 2 * r)
    _need(isinstance(alpha, (int, float)) and not isinstance(alpha, bool) and alpha > 0, where,
          f"lora.alpha must be a positive number, got {alpha!r}")
    targets = lora.get("targets", "all-linear")
    ok_targets = targets == "all-linear" or (
        isinstance(targets, list) and targets and all(isinstance(t, str) and t for t in targets))
    _need(ok_targets, where, f"lora.targets must be 'all-linear' or a list of module names, got {targets!r}")
    dropout = lora.get("dropout", 0.0)
    _need(isinstance(dropout, (int, float)) and not isinstance(dropout, bool) and 0 <= dropout < 1,
          where, f"lora.dropout must be in [0, 1), got {dropout!r}")
    return {"r": r, "alpha": alpha, "targets": targets, "dropout": float(dropout)}


def load_configs(path: Path) -> list[dict[str, Any]]:
    """All entries of a configs.yaml, validated; ids must be unique."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read configurations: {exc}") from exc
    if not isinstance(data, list) or not data:
        raise ConfigError(f"{path}: expected a non-empty list of configurations")
    cfgs = [validate_config(raw, i) for i, raw in enumerate(data)]
    seen: set[str] = set()
    for c in cfgs:
        if c["id"] in seen:
            raise ConfigError(f"{path}: configuration id {c['id']!r} appears twice")
        seen.add(c["id"])
    return cfgs


def select(cfgs: list[dict[str, Any]], only: str | None) -> list[dict[str, Any]]:
    """The --only subset, in file order; an unknown id is an input error, not a silent skip."""
    if not only:
        return cfgs
    wanted = [w.strip() for w in only.split(",") if w.strip()]
    known = {c["id"] for c in cfgs}
    missing = [w for w in wanted if w not in known]
    if missing:
        raise ConfigError(f"--only names unknown configuration id(s) {missing}; known: {sorted(known)}")
    return [c for c in cfgs if c["id"] in set(wanted)]


def load_catalog(path: Path) -> dict[str, dict[str, Any]]:
    """Catalog entries by id (the package's models.yaml, read directly: no sparkops import)."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"{path}: cannot read the model catalog: {exc}") from exc
    models = data.get("models") if isinstance(data, Mapping) else None
    if not isinstance(models, list):
        raise ConfigError(f"{path}: expected a mapping with a 'models:' list")
    return {m["id"]: m for m in models if isinstance(m, Mapping) and isinstance(m.get("id"), str)}


def lookup_model(catalog: Mapping[str, Mapping[str, Any]], name: str) -> Mapping[str, Any] | None:
    """By id first; aliases and HF ids (case-insensitive) as a convenience."""
    if name in catalog:
        return catalog[name]
    low = name.lower()
    for entry in catalog.values():
        names = [*(entry.get("aliases") or []), *(entry.get("hf_ids") or [])]
        if any(isinstance(n, str) and n.lower() == low for n in names):
            return entry
    return None


def resolve_hf_config(cfg: Mapping[str, Any], catalog: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """The HF config dict for a configuration: inline hf_config wins over the catalog entry."""
    if "hf_config" in cfg:
        return dict(cfg["hf_config"])
    if catalog is None:
        raise LookupError(f"model {cfg['model']!r}: no catalog loaded and no inline hf_config")
    entry = lookup_model(catalog, cfg["model"])
    if entry is None:
        close = sorted(k for k in catalog if cfg["model"].split("-")[0].lower() in k.lower())[:8]
        raise LookupError(f"model {cfg['model']!r} is not in the catalog (ids like it: {close})")
    hf = entry.get("config")
    if not isinstance(hf, Mapping) or not isinstance(hf.get("model_type"), str):
        raise LookupError(f"catalog entry {entry.get('id')!r} has no config with a model_type")
    return dict(hf)


# --------------------------------------------------------------------------------------------
# Parent: one fresh child per configuration, bounded, one row each
# --------------------------------------------------------------------------------------------


def config_fields(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The configuration as it goes into a row (inline hf_config kept: it defines the model)."""
    return {k: cfg[k] for k in cfg if not k.startswith("_")}


def error_row(cfg: Mapping[str, Any], kind: str, message: str, **extra: Any) -> dict[str, Any]:
    """A row for a configuration that produced no measurement of its own."""
    err = {"error": kind, "message": message[:MESSAGE_CHARS], "phase": "parent", **extra}
    return {**config_fields(cfg), "measured": None, "env": None, "error": err}


def _tail(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    return data[-TAIL_CHARS:].decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def child_env(base: Mapping[str, str]) -> dict[str, str]:
    """Offline and unbuffered: nothing is downloaded, and a crash still leaves its output."""
    env = dict(base)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"})
    return env


def run_child(cfg: Mapping[str, Any], payload: Mapping[str, Any], timeout_s: float,
              child_argv: Sequence[str]) -> dict[str, Any]:
    """Run one configuration in its own process group; every outcome comes back as a row."""
    with tempfile.TemporaryDirectory(prefix="harness-io-") as tmp:
        out_p, err_p = Path(tmp) / "stdout", Path(tmp) / "stderr"
        argv = [*child_argv, "--one", json.dumps(payload)]
        t0 = time.monotonic()
        with out_p.open("wb") as out_f, err_p.open("wb") as err_f:
            try:
                proc = subprocess.Popen(argv, stdout=out_f, stderr=err_f, stdin=subprocess.DEVNULL,
                                        start_new_session=True, env=child_env(os.environ))
            except OSError as exc:
                return error_row(cfg, "ChildNotStarted", f"{argv[0]}: {exc}")
            try:
                rc = proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(proc)
                return error_row(cfg, "Timeout", f"no result within {timeout_s:g} s; killed",
                                 stderr_tail=_tail(err_p), wall_s=round(time.monotonic() - t0, 3))
        wall = round(time.monotonic() - t0, 3)
        stdout = out_p.read_bytes().decode("utf-8", "replace")
        row = parse_child_output(stdout)
        if row is None:
            kind = "NoResultLine" if rc == 0 else "ChildCrashed"
            how = f"exit status {rc}" if rc >= 0 else f"killed by signal {-rc}"
            return error_row(cfg, kind, f"child gave no result row ({how})", returncode=rc,
                             stdout_tail=stdout[-TAIL_CHARS:], stderr_tail=_tail(err_p), wall_s=wall)
        row = {**config_fields(cfg), "measured": None, "env": None, "error": None, **row}
        row["child_returncode"] = rc
        row["child_wall_s"] = wall
        return row


def parse_child_output(stdout: str) -> dict[str, Any] | None:
    """The last marked line that parses as a JSON object, else None (garbage is not a row)."""
    for line in reversed(stdout.splitlines()):
        if not line.startswith(ROW_MARKER):
            continue
        try:
            row = json.loads(line[len(ROW_MARKER):])
        except ValueError:
            continue
        if isinstance(row, dict):
            return row
    return None


def summary_line(row: Mapping[str, Any]) -> str:
    """One human line per configuration for stderr."""
    gib = 1 << 30

    def g(v: Any) -> str:
        return f"{v / gib:.2f}" if isinstance(v, (int, float)) else "-"

    head = (f"{row.get('id')} {row.get('model')} {row.get('method')} {row.get('dtype')} "
            f"b{row.get('batch')} s{row.get('seq_len')} gc={'on' if row.get('grad_checkpointing') else 'off'} "
            f"{row.get('attention')}")
    err = row.get("error")
    if err:
        return f"{head}: ERROR {err.get('error')} ({err.get('phase')}): {str(err.get('message'))[:160]}"
    m = row.get("measured") or {}
    return (f"{head}: peak alloc {g(m.get('peak_allocated_bytes'))} GiB, reserved "
            f"{g(m.get('peak_reserved_bytes'))} GiB, nvml {g(m.get('nvml_process_used_bytes'))} GiB, "
            f"weights {g(m.get('weights_allocated_bytes'))} GiB, {m.get('step_wall_s_mean', '-')} s/step")


def run_all(cfgs: Sequence[Mapping[str, Any]], out: Path, *, catalog: Mapping[str, Mapping[str, Any]] | None,
            timeout_s: float, device: str = "cuda", child_argv: Sequence[str] | None = None,
            log: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Each configuration in turn; each row appended to `out` and flushed as soon as it exists."""
    argv = list(child_argv) if child_argv else [sys.executable, str(Path(__file__).resolve())]
    emit = log or (lambda s: print(s, file=sys.stderr, flush=True))
    rows: list[dict[str, Any]] = []
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a", encoding="utf-8") as fh:
        for cfg in cfgs:
            try:
                hf = resolve_hf_config(cfg, catalog)
            except LookupError as exc:
                row = error_row(cfg, "UnknownModel", str(exc))
            else:
                payload = {**config_fields(cfg), "_hf_config": hf, "_device": device}
                row = run_child(cfg, payload, timeout_s, argv)
            fh.write(json.dumps(row, sort_keys=False) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
            emit(summary_line(row))
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Child: build, train `steps` steps, read the counters (imports torch here only)
# --------------------------------------------------------------------------------------------


class Probe:
    """CUDA allocator counters, or None everywhere on CPU (a dry run has no such counters)."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch = torch
        self.cuda = device.type == "cuda"

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()

    def reset_peak(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
            self.torch.cuda.reset_peak_memory_stats()

    def allocated(self) -> int | None:
        return int(self.torch.cuda.memory_allocated()) if self.cuda else None

    def reserved(self) -> int | None:
        return int(self.torch.cuda.memory_reserved()) if self.cuda else None

    def peaks(self) -> dict[str, int | None]:
        if not self.cuda:
            return {"peak_allocated_bytes": None, "peak_reserved_bytes": None}
        self.torch.cuda.synchronize()
        return {"peak_allocated_bytes": int(self.torch.cuda.max_memory_allocated()),
                "peak_reserved_bytes": int(self.torch.cuda.max_memory_reserved())}


@contextlib.contextmanager
def phase(probe: Probe, state: dict[str, Any], name: str, record: dict[str, Any]) -> Iterator[None]:
    """Peak counters of one phase: reset before, read after; the name is kept for error rows."""
    state["phase"] = name
    probe.reset_peak()
    before = probe.allocated()
    t0 = time.perf_counter()
    yield
    probe.sync()
    record[name] = {**probe.peaks(), "allocated_before_bytes": before,
                    "allocated_after_bytes": probe.allocated(),
                    "wall_s": round(time.perf_counter() - t0, 4)}


def versions(torch: Any, device: Any) -> dict[str, Any]:
    """What ran: interpreter, libraries, GPU and driver (None where not readable)."""
    from importlib import metadata

    def ver(dist: str) -> str | None:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return None

    env: dict[str, Any] = {
        "python": platform.python_version(), "machine": platform.machine(),
        "torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None),
        "transformers": ver("transformers"), "peft": ver("peft"), "accelerate": ver("accelerate"),
        "bitsandbytes": ver("bitsandbytes"),
        "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or os.environ.get("PYTORCH_ALLOC_CONF"),
        "device": device.type, "gpu_name": None, "gpu_total_bytes": None, "driver": None,
    }
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        env["gpu_name"], env["gpu_total_bytes"] = props.name, int(props.total_memory)
        env["gpu_capability"] = list(torch.cuda.get_device_capability(device))
        with contextlib.suppress(Exception):
            import pynvml

            pynvml.nvmlInit()
            d = pynvml.nvmlSystemGetDriverVersion()
            env["driver"] = d.decode() if isinstance(d, bytes) else d
    return env


def nvml_reading(torch: Any, device: Any) -> dict[str, Any]:
    """NVML's view of this process (used = reserved + context + non-torch allocations)."""
    res: dict[str, Any] = {"nvml_process_used_bytes": None, "nvml_match": None,
                           "nvml_device_used_bytes": None, "nvml_error": None}
    if device.type != "cuda":
        res["nvml_error"] = "no CUDA device"
        return res
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = None
        uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
        if uuid is not None:
            for cand in (str(uuid), f"GPU-{uuid}"):
                with contextlib.suppress(Exception):
                    handle = pynvml.nvmlDeviceGetHandleByUUID(cand)
                    break
        if handle is None:
            handle = pynvml.nvmlDeviceGetHandleByIndex(device.index or 0)
        with contextlib.suppress(Exception):
            res["nvml_device_used_bytes"] = int(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
        procs = list(pynvml.nvmlDeviceGetComputeRunningProcesses(handle))
        mine = [p for p in procs if p.pid == os.getpid()]
        if mine:
            res["nvml_match"] = "pid"
        elif len(procs) == 1:  # in a container NVML reports host PIDs; one process is us
            mine, res["nvml_match"] = procs, "only_process"
        used = getattr(mine[0], "usedGpuMemory", None) if mine else None
        if isinstance(used, int):
            res["nvml_process_used_bytes"] = used
        elif not mine:
            res["nvml_error"] = f"this process not among {len(procs)} listed"
        else:
            res["nvml_error"] = "usedGpuMemory not available"
    except Exception as exc:  # NVML missing or not supported: the reading is null, with why
        res["nvml_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return res


def param_stats(model: Any) -> dict[str, Any]:
    """Parameter counts and storage; bnb Params4bit numel is the packed uint8 count."""
    total = trainable = storage = 0
    by_dtype: dict[str, int] = {}
    trainable_dtypes: set[str] = set()
    for p in model.parameters():
        n = p.numel()
        b = n * p.element_size()
        total += n
        storage += b
        by_dtype[str(p.dtype)] = by_dtype.get(str(p.dtype), 0) + b
        if p.requires_grad:
            trainable += n
            trainable_dtypes.add(str(p.dtype))
    buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    n4, logical4 = 0, 0
    for mod in model.modules():
        cls = type(mod)  # peft's LoRA wrapper is also called Linear4bit: count bnb's only
        if cls.__name__ == "Linear4bit" and cls.__module__.startswith("bitsandbytes"):
            n4 += 1
            logical4 += int(mod.in_features) * int(mod.out_features)
    return {"total_params": total, "trainable_params": trainable, "param_bytes": storage,
            "param_bytes_by_dtype": by_dtype, "buffer_bytes": buffers,
            "trainable_dtypes": sorted(trainable_dtypes), "linear4bit_modules": n4,
            "linear4bit_logical_params": logical4}


def _dtype_kw(transformers: Any) -> str:
    """transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`."""
    try:
        major, minor = (int(x) for x in transformers.__version__.split(".")[:2])
    except ValueError:
        return "dtype"
    return "dtype" if (major, minor) >= (4, 56) else "torch_dtype"


def make_optimizer(torch: Any, name: str, params: list[Any]) -> Any:
    """The optimizers HF Trainer's `optim=` names map to (lr is irrelevant to memory)."""
    if name == "adamw_torch":
        return torch.optim.AdamW(params, lr=1e-5)
    if name == "adamw_torch_fused":
        return torch.optim.AdamW(params, lr=1e-5, fused=True)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-5, momentum=0.9)
    import bitsandbytes as bnb

    if name == "adamw_8bit":
        return bnb.optim.AdamW8bit(params, lr=1e-5)
    if name == "paged_adamw_32bit":
        return bnb.optim.PagedAdamW32bit(params, lr=1e-5)
    raise ValueError(f"unknown optimizer {name!r}")


def _checkpoint_dir(nbytes: int) -> str:
    """/dev/shm when it has room (RAM, fast), else the temp dir."""
    import shutil

    for cand in ("/dev/shm", tempfile.gettempdir()):
        with contextlib.suppress(OSError):
            if shutil.disk_usage(cand).free > nbytes * 1.2 + (1 << 30):
                return cand
    return tempfile.gettempdir()


def build_model(cfg: Mapping[str, Any], device: Any, m: dict[str, Any], probe: Probe,
                state: dict[str, Any]) -> Any:
    """Random-init model ready to train (weights, adapters, checkpointing), counters recorded."""
    import torch
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM

    hf = dict(cfg["_hf_config"])
    model_type = hf.pop("model_type")
    hf_cfg = AutoConfig.for_model(model_type, **hf)
    hf_cfg.use_cache = False
    dkw = _dtype_kw(transformers)
    attn = cfg["attention"]
    method, gc_on = cfg["method"], cfg["grad_checkpointing"]
    param_dtype = torch.float32 if cfg["dtype"] == "fp32" else torch.bfloat16

    state["phase"] = "load"
    probe.reset_peak()
    t0 = time.perf_counter()
    if method != "qlora":
        with device:
            model = AutoModelForCausalLM.from_config(hf_cfg, **{dkw: param_dtype}, attn_implementation=attn)
    else:
        model = _load_qlora(cfg, hf_cfg, device, m, probe, dkw)
    probe.sync()
    m["load_wall_s"] = round(time.perf_counter() - t0, 3)
    pk = probe.peaks()
    m["load_peak_allocated_bytes"], m["load_peak_reserved_bytes"] = pk["peak_allocated_bytes"], pk["peak_reserved_bytes"]
    m["weights_allocated_bytes"] = probe.allocated()
    m["attn_implementation"] = getattr(model.config, "_attn_implementation", None)

    state["phase"] = "setup"
    model.config.use_cache = False
    if method == "qlora":
        import peft

        model = peft.prepare_model_for_kbit_training(
            model, use_gradient_checkpointing=gc_on,
            gradient_checkpointing_kwargs={"use_reentrant": False})
    elif gc_on:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if method == "lora":
            model.enable_input_require_grads()
    if method in ("lora", "qlora"):
        import peft

        lc = cfg["lora"]
        lcfg = peft.LoraConfig(r=lc["r"], lora_alpha=lc["alpha"], target_modules=lc["targets"],
                               lora_dropout=lc["dropout"], task_type="CAUSAL_LM")
        model = peft.get_peft_model(model, lcfg)
    model.train()
    m["gradient_checkpointing_active"] = bool(getattr(model, "is_gradient_checkpointing", False)) or bool(
        getattr(getattr(model, "base_model", None), "is_gradient_checkpointing", False))
    m["setup_allocated_bytes"] = probe.allocated()
    m.update(param_stats(model))
    return model


def _load_qlora(cfg: Mapping[str, Any], hf_cfg: Any, device: Any, m: dict[str, Any], probe: Probe,
                dkw: str) -> Any:
    """The normal user path: a bf16 checkpoint on disk, loaded with bnb NF4 + double quant.

    The random checkpoint is built on the GPU (fast init) and saved as safetensors, then freed;
    peak counters are reset before from_pretrained, so the load peak is the real load's.
    """
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, BitsAndBytesConfig

    t0 = time.perf_counter()
    with device:
        base = AutoModelForCausalLM.from_config(hf_cfg, **{dkw: torch.bfloat16},
                                                attn_implementation=cfg["attention"])
    nbytes = sum(p.numel() * p.element_size() for p in base.parameters())
    tmp = tempfile.mkdtemp(prefix="harness-ckpt-", dir=_checkpoint_dir(nbytes))
    try:
        base.save_pretrained(tmp, safe_serialization=True)
        del base
        import gc

        gc.collect()
        if probe.cuda:
            torch.cuda.empty_cache()
        m["checkpoint_bytes"] = sum(f.stat().st_size for f in Path(tmp).iterdir() if f.is_file())
        m["checkpoint_dir"] = str(Path(tmp).parent)
        m["checkpoint_prep_wall_s"] = round(time.perf_counter() - t0, 3)
        m["allocated_before_load_bytes"] = probe.allocated()
        probe.reset_peak()
        bnb_cfg = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                                     bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)
        dmap = {"": device.index or 0} if probe.cuda else {"": "cpu"}
        return AutoModelForCausalLM.from_pretrained(tmp, quantization_config=bnb_cfg, device_map=dmap,
                                                    attn_implementation=cfg["attention"],
                                                    **{dkw: torch.bfloat16})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def trainer_steps(cfg: Mapping[str, Any], model: Any, device: Any, m: dict[str, Any], probe: Probe,
                  state: dict[str, Any]) -> None:
    """`loop: trainer`: transformers.Trainer itself (bf16=True, its optimizer and param groups, gradient
    clipping at 1.0, num_items_in_batch, gradient accumulation) on random token batches; the peak is over
    the whole train() call, since the Trainer's phases cannot be tiled from outside."""
    import torch
    from transformers import Trainer, TrainingArguments

    torch.manual_seed(1)
    get_text = getattr(model.config, "get_text_config", None)
    text_cfg = get_text() if callable(get_text) else model.config
    vocab = int(getattr(text_cfg, "vocab_size", 0) or model.config.vocab_size)
    n = cfg["batch"] * cfg["steps"] * cfg["grad_accum"]
    data = []
    for _ in range(n):
        ids = torch.randint(0, vocab, (cfg["seq_len"],))
        data.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids.clone()})
    out_dir = tempfile.mkdtemp(prefix="harness-trainer-")
    args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=cfg["batch"], gradient_accumulation_steps=cfg["grad_accum"],
        max_steps=cfg["steps"], learning_rate=1e-5, bf16=True, optim=TRAINER_OPTIM[cfg["optimizer"]],
        report_to="none", save_strategy="no", logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
        remove_unused_columns=False, use_cpu=device.type == "cpu", seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=data)
    m["trainer_optim"] = str(args.optim)
    state["phase"] = "train"
    probe.reset_peak()
    before = probe.allocated()
    t0 = time.perf_counter()
    try:
        trainer.train()
    finally:
        import shutil

        shutil.rmtree(out_dir, ignore_errors=True)
    probe.sync()
    wall = round(time.perf_counter() - t0, 4)
    pk = probe.peaks()
    m["steps"] = [{"step": "all", "wall_s": wall,
                   "phases": {"train": {**pk, "allocated_before_bytes": before, "allocated_after_bytes": probe.allocated(),
                                        "wall_s": wall}}}]
    m["step_wall_s"] = [wall]
    m["step_wall_s_mean"] = round(wall / cfg["steps"], 4)
    state["phase"] = "finish"


def train_steps(cfg: Mapping[str, Any], model: Any, device: Any, m: dict[str, Any], probe: Probe,
                state: dict[str, Any]) -> None:
    """Forward, backward, optimizer step as HF Trainer does them; phase peaks per step."""
    import torch

    if cfg.get("loop") == "trainer":
        trainer_steps(cfg, model, device, m, probe, state)
        return

    torch.manual_seed(1)
    get_text = getattr(model.config, "get_text_config", None)
    text_cfg = get_text() if callable(get_text) else model.config
    vocab = int(getattr(text_cfg, "vocab_size", 0) or model.config.vocab_size)
    ids = torch.randint(0, vocab, (cfg["batch"], cfg["seq_len"]), device=device)
    mask = torch.ones_like(ids)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(torch, cfg["optimizer"], params)
    autocast = cfg["autocast"]
    steps: list[dict[str, Any]] = []
    m["steps"] = steps
    for i in range(cfg["steps"]):
        rec: dict[str, Any] = {"step": i + 1}
        steps.append(rec)
        phases: dict[str, Any] = {}
        rec["phases"] = phases
        t0 = time.perf_counter()
        with phase(probe, state, "forward", phases):
            ctx = torch.autocast(device.type, dtype=torch.bfloat16) if autocast else contextlib.nullcontext()
            with ctx:
                out = model(input_ids=ids, attention_mask=mask, labels=ids)
            loss = out.loss
            del out  # Trainer keeps only the loss: the logits are not held through backward
        with phase(probe, state, "backward", phases):
            loss.backward()
        with phase(probe, state, "optimizer", phases):
            opt.step()
            opt.zero_grad(set_to_none=True)
        rec["wall_s"] = round(time.perf_counter() - t0, 4)
        rec["loss"] = float(loss.detach().float().item())
        del loss
        if i == 0:
            m["allocated_after_first_step_bytes"] = probe.allocated()
    state["phase"] = "finish"
    walls = [s["wall_s"] for s in steps]
    m["step_wall_s"] = walls
    m["step_wall_s_mean"] = round(sum(walls[1:] or walls) / len(walls[1:] or walls), 4)


def summarize_peaks(m: dict[str, Any]) -> None:
    """Overall training peaks = max of the phase peaks (the phases tile the steps)."""
    best: dict[str, tuple[int, str]] = {}
    for rec in m.get("steps", []):
        for name, ph in rec.get("phases", {}).items():
            for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
                v = ph.get(key)
                if isinstance(v, int) and (key not in best or v > best[key][0]):
                    best[key] = (v, f"step{rec['step']}.{name}")
    for key in ("peak_allocated_bytes", "peak_reserved_bytes"):
        m[key] = best[key][0] if key in best else None
    m["peak_phase"] = best["peak_allocated_bytes"][1] if "peak_allocated_bytes" in best else None


def measure(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One configuration end to end; an exception becomes the row's error, with the partial data."""
    m: dict[str, Any] = {}
    env: dict[str, Any] | None = None
    state: dict[str, Any] = {"phase": "import"}
    error: dict[str, Any] | None = None
    probe: Probe | None = None
    try:
        import random

        import torch

        device = torch.device(cfg.get("_device", "cuda"))
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", 0)
        probe = Probe(torch, device)
        m["device"] = device.type
        random.seed(0)
        torch.manual_seed(0)
        if device.type == "cuda":
            torch.cuda.set_device(device)
            torch.cuda.init()
        env = versions(torch, device)
        model = build_model(cfg, device, m, probe, state)
        train_steps(cfg, model, device, m, probe, state)
        summarize_peaks(m)
        state["phase"] = "nvml"
        m["reserved_at_nvml_bytes"] = probe.reserved()
        m["allocated_at_nvml_bytes"] = probe.allocated()
        m.update(nvml_reading(torch, device))
        if probe.cuda:
            stats = torch.cuda.memory_stats()
            m["alloc_retries"] = int(stats.get("num_alloc_retries", 0))
            m["ooms"] = int(stats.get("num_ooms", 0))
    except Exception as exc:  # every failure (OOM included) is data for the row
        error = {"error": type(exc).__name__, "message": str(exc)[:MESSAGE_CHARS], "phase": state["phase"]}
        if probe is not None:
            with contextlib.suppress(Exception):
                error.update({f"at_error_{k}": v for k, v in probe.peaks().items()})
        summarize_peaks(m)
    return {**config_fields(cfg),
            "measured": m, "env": env, "error": error}


def child_main(payload: str) -> int:
    """`--one`: measure one configuration and print one marked JSON line on the real stdout."""
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # library prints must not mix with the result line
    try:
        cfg = json.loads(payload)
        row = measure(cfg)
    except Exception as exc:
        row = {"measured": None, "env": None,
               "error": {"error": type(exc).__name__, "message": str(exc)[:MESSAGE_CHARS], "phase": "child"}}
    real_stdout.write(ROW_MARKER + json.dumps(row) + "\n")
    real_stdout.flush()
    return 0


# --------------------------------------------------------------------------------------------
# --check: resolve and build each configuration on the meta device (CPU, no memory, no GPU)
# --------------------------------------------------------------------------------------------


def check_one(cfg: Mapping[str, Any], catalog: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Does transformers know the model type, and how many parameters does it build to?"""
    try:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM

        hf = resolve_hf_config(cfg, catalog)
        model_type = hf.pop("model_type")
        hf_cfg = AutoConfig.for_model(model_type, **hf)
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(hf_cfg)
        n = sum(p.numel() for p in model.parameters())
        return {"id": cfg["id"], "ok": True, "total_params": n, "bf16_weight_gb": round(2 * n / 1e9, 2),
                "class": type(model).__name__}
    except Exception as exc:
        return {"id": cfg["id"], "ok": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}


# --------------------------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--configs", type=Path, default=HERE / "configs.yaml")
    p.add_argument("--out", type=Path, help="JSONL file; rows are appended")
    p.add_argument("--only", help="comma-separated configuration ids")
    p.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per configuration")
    p.add_argument("--dry-run", action="store_true", help="tiny built-in models on CPU")
    p.add_argument("--check", action="store_true", help="resolve and build on meta; no training")
    p.add_argument("--one", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Parent entry point; exit 0 all rows measured, 1 some rows are errors, 3 bad input."""
    args = parse_args(argv)
    if args.one is not None:
        return child_main(args.one)
    try:
        if args.dry_run:
            cfgs = select([validate_config(c, i) for i, c in enumerate(DRY_RUN_CONFIGS)], args.only)
        else:
            cfgs = select(load_configs(args.configs), args.only)
        needs_catalog = any("hf_config" not in c for c in cfgs)
        catalog = load_catalog(args.catalog) if needs_catalog else None
        if not args.check and args.out is None:
            raise ConfigError("--out is required (a JSONL file to append rows to)")
    except ConfigError as exc:
        print(f"harness: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.check:
        results = [check_one(c, catalog) for c in cfgs]
        for r in results:
            print(json.dumps(r))
        return EXIT_OK if all(r["ok"] for r in results) else EXIT_SOME_FAILED
    rows = run_all(cfgs, args.out, catalog=catalog, timeout_s=args.timeout,
                   device="cpu" if args.dry_run else "cuda")
    return EXIT_OK if all(r.get("error") is None for r in rows) else EXIT_SOME_FAILED


if __name__ == "__main__":
    sys.exit(main())
