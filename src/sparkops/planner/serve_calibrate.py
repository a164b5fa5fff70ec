"""Carry one real vLLM start-up log's measured basis to another launch line (``plan --serve --from-log``; judge layer).

Pure: the log's reading, the log's launch spec, the planned spec and the machine in; a
:class:`~sparkops.planner.serve.LogCalibration` (a correction with its reasons, or a refusal with its reason) out. The
rule (benchmarks/results/serve-from-log-protocol.md, written before this code; engines.yaml vllm.log_calibration):

    delta = the log's "Available KV cache memory" - the plan's KV pool for the log's own launch line on this machine

No fitted constant. The KV pool is still computed by serve.plan_serve, which charges -delta as one named term.
"""

from __future__ import annotations

import re

from sparkops.core.releases import release
from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeSpec, engine_value, parse_command
from sparkops.planner.serve_log import VllmLogReading, launch_line
from sparkops.planner.serve_shape import ServeShape


def _refuse(reason: str, reading: VllmLogReading, source: str, launch: str) -> serve.LogCalibration:
    return serve.LogCalibration(applied=False, refused=reason, source=source, log_launch=launch,
                                log_version=reading.version, log_compile_state=reading.compile_state,
                                log_kv_gib=reading.kv_gib, log_tokens=reading.kv_tokens)


def _pinned(spec: ServeSpec) -> bool:
    return bool(spec.kv_cache_memory_bytes or spec.num_gpu_blocks_override)


def _gpu_key(name: str) -> str:
    """A device name without the vendor's brand words, case or punctuation: "NVIDIA GB10" -> "gb10"."""
    return re.sub(r"[^a-z0-9]", "", re.sub(r"\b(nvidia|geforce|tesla)\b", "", name.lower()))


def same_gpu(reading: VllmLogReading, machine: serve.Machine, *, same_machine: bool = False) -> str | None:
    """Why the log is not known to be of this machine's GPU (None: it is). What counts as a match: the device total
    the log prints within engines.yaml vllm.log_calibration.total_tolerance_fraction of this machine's (the pool is
    sized from that total), or the device name the log prints naming this machine's (brand words aside: "NVIDIA GB10"
    is "GB10"; "H100 80GB HBM3" is not "H100 PCIe"). A printed figure that disagrees always refuses. Neither printed
    (or no name / total here to compare with): refused unless the user says the log is of this machine
    (``same_machine``, ``--from-log-same-machine``): a log from another GPU would carry that GPU's terms silently."""
    tol = float(engine_value("vllm", "log_calibration")["total_tolerance_fraction"])
    total_ok = name_ok = False
    if reading.total_gpu_gib and machine.total_gib:
        if abs(reading.total_gpu_gib - machine.total_gib) > tol * machine.total_gib:
            return (f"another GPU: the log's device total is {reading.total_gpu_gib:.2f} GiB, this machine's "
                    f"{machine.total_gib:.2f} GiB")
        total_ok = True
    if reading.gpu_name and machine.gpu_name:
        a, b = _gpu_key(reading.gpu_name), _gpu_key(machine.gpu_name)
        if not a or not b or a != b:
            return f"another GPU: the log's device is {reading.gpu_name!r}, this machine's {machine.gpu_name!r}"
        name_ok = True
    if total_ok or name_ok or same_machine:
        return None
    return ("the log prints neither this GPU's device total nor its name, so it is not known to be of this machine: "
            "pass --from-log-same-machine (MCP: from_log_same_machine) if it is")


def _hub_name(model: str | None) -> str | None:
    """The model's name as the Hub spells it, lower case, where a printed model says it: a Hub id, or a local HF
    cache path (``.../models--Qwen--Qwen2.5-1.5B-Instruct/snapshots/...``); None for another local folder
    (``/models/mistral-7b``: its name need not be the model's, so it is not compared)."""
    if not model:
        return None
    if (m := re.search(r"models--([^/]+?)--([^/]+)", model)) is not None:
        return f"{m.group(1)}/{m.group(2)}".lower()
    if model.startswith(("/", ".", "~")) or model.count("/") > 1:
        return None
    return model.rstrip("/").lower()


def _explicit_pooling(spec: ServeSpec) -> bool:
    return bool(spec.runner or spec.convert or spec.task)


def log_pooling(reading: VllmLogReading, log_spec: ServeSpec) -> str | None:
    """The log's start's pooling adapter (None: a generate start): what the log printed, else its line's flags."""
    if reading.pooling is not None:
        return None if reading.pooling == "none" else reading.pooling
    return serve.vllm_pooling(log_spec)


# pool-sizing arguments vLLM prints in its 'non-default args' (named as the ServeSpec fields they set): a --from-log-line
# that leaves one unset takes the log's value, one that names another value is refused (round 20ba)
LOG_ARG_FIELDS = ("language_model_only", "limit_mm_per_prompt", "kv_cache_dtype", "enable_prefix_caching",
                  "max_num_seqs", "max_num_batched_tokens", "quantization")


def printed_values(reading: VllmLogReading) -> dict[str, object]:
    """The pool-sizing values the log's printed 'non-default args' name (LOG_ARG_FIELDS), read by the launch-line
    parser as a ``vllm serve`` line would be; a field it does not print is absent."""
    args = {k: v for k, v in reading.launch_args.items() if k in LOG_ARG_FIELDS and v is not None}
    line = launch_line({"model": "printed", **args}) if args else None
    if line is None:
        return {}
    try:
        printed = parse_command(line, engine="vllm")
    except Exception:  # noqa: BLE001 - a printed value the parser refuses is not compared
        return {}
    return {k: getattr(printed, k) for k in args}


def _unset(field: str, value: object) -> bool:
    """A line that names nothing for the field: None, or the flag's off state where only naming it sets it."""
    return value is None or (field == "language_model_only" and value is False) or value == {}


def line_mismatch(reading: VllmLogReading, log_spec: ServeSpec) -> str | None:
    """Where what the log's start printed disagrees with the launch line given for it (``--from-log-line``): the
    model, tensor-parallel size, enforce-eager, max_model_len, the share of memory, the pooling runner, and the
    pool-sizing arguments its 'non-default args' print (LOG_ARG_FIELDS). None: they
    agree (a field the log does not print is not compared; one the line leaves unset takes the log's: see
    ``with_log_values``)."""
    def bad(field: str, log_v: object, line_v: object) -> str:
        return (f"the log and its launch line disagree on {field}: the log's start ran with {log_v}, the line says "
                f"{line_v} (is --from-log-line this log's line?)")

    a, b = _hub_name(reading.model), _hub_name(log_spec.model)
    if a and b and a.rsplit("/", 1)[-1] != b.rsplit("/", 1)[-1]:
        return bad("the model", repr(reading.model), repr(log_spec.model))
    if reading.tensor_parallel_size is not None and reading.tensor_parallel_size != log_spec.tensor_parallel:
        return bad("tensor_parallel_size", reading.tensor_parallel_size, log_spec.tensor_parallel)
    if reading.enforce_eager is not None and reading.enforce_eager != log_spec.enforce_eager:
        return bad("enforce_eager", reading.enforce_eager, log_spec.enforce_eager)
    if reading.max_model_len and log_spec.max_model_len and reading.max_model_len != log_spec.max_model_len:
        return bad("max_model_len", reading.max_model_len, log_spec.max_model_len)
    if reading.gpu_memory_utilization is not None and log_spec.gpu_memory_utilization is not None and \
            abs(reading.gpu_memory_utilization - log_spec.gpu_memory_utilization) > 1e-6:
        return bad("gpu_memory_utilization", reading.gpu_memory_utilization, log_spec.gpu_memory_utilization)
    if reading.pooling is not None and _explicit_pooling(log_spec) and \
            log_pooling(reading, log_spec) != serve.vllm_pooling(log_spec):
        return bad("the runner", log_pooling(reading, log_spec) or "generate",
                   serve.vllm_pooling(log_spec) or "generate")
    for field, log_v in printed_values(reading).items():
        line_v = getattr(log_spec, field)
        if not _unset(field, line_v) and line_v != log_v:
            return bad(field, log_v, line_v)
    return None


def with_log_values(reading: VllmLogReading, log_spec: ServeSpec) -> ServeSpec:
    """The log's launch line with what its start printed filled in where the line names nothing (the share, the
    context, the model, the pool-sizing arguments of LOG_ARG_FIELDS): the log's values are what that start ran
    with."""
    upd: dict[str, object] = {}
    if log_spec.gpu_memory_utilization is None and reading.gpu_memory_utilization is not None:
        upd["gpu_memory_utilization"] = reading.gpu_memory_utilization
    if log_spec.max_model_len is None and reading.max_model_len:
        upd["max_model_len"] = reading.max_model_len
    if log_spec.model is None and reading.model:
        upd["model"] = reading.model
    for field, log_v in printed_values(reading).items():  # the pool-sizing arguments the line leaves unset
        if _unset(field, getattr(log_spec, field)):
            upd[field] = log_v
    return log_spec.model_copy(update=upd) if upd else log_spec


def refusal(reading: VllmLogReading, log_spec: ServeSpec, spec: ServeSpec, machine: serve.Machine,
            log_shape: ServeShape | None, shape: ServeShape | None, *, same_machine: bool = False) -> str | None:
    """Why the log's measured basis must not be carried to ``spec`` (None: it may). The conditions of
    engines.yaml vllm.log_calibration.refuse_when, in that order."""
    if log_spec.engine != "vllm" or spec.engine != "vllm":
        return f"the log is of {log_spec.engine} and the plan of {spec.engine}: only vLLM's profiled pool is calibrated"
    if reading.kv_gib is None:
        return "the log prints no 'Available KV cache memory' line (a start that did not reach the KV pool)"
    a, b = release(log_spec.engine_version), release(spec.engine_version)
    if log_spec.engine_version and spec.engine_version and (
            a != b if a is not None and b is not None else log_spec.engine_version.strip() != spec.engine_version.strip()):
        return (f"a different vLLM version: the log's {log_spec.engine_version} vs the plan's {spec.engine_version} "
                "(another build profiles other terms)")
    if log_shape is None or shape is None or log_shape.id != shape.id:
        return (f"a different model: the log's {log_spec.model!r} vs the plan's {spec.model!r} (what the log measured "
                "is this model's)")
    if (why := line_mismatch(reading, log_spec)) is not None:
        return why
    if (why := same_gpu(reading, machine, same_machine=same_machine)) is not None:
        return why
    lp = log_pooling(reading, log_spec)
    pp = serve.vllm_pooling(spec) if _explicit_pooling(spec) or _explicit_pooling(log_spec) else lp
    if lp != pp:
        return (f"a pooling start on one side and a generate start on the other (the log's runner "
                f"{lp or 'generate'}, the plan's {pp or 'generate'}): the profile runs the pooler or the sampler, not "
                "both")
    if log_spec.tensor_parallel != spec.tensor_parallel:
        return (f"a different tensor-parallel size (the log's {log_spec.tensor_parallel}, the plan's "
                f"{spec.tensor_parallel}): the per-rank terms the log measured change")
    if log_spec.pipeline_parallel != spec.pipeline_parallel or spec.pipeline_parallel > 1:
        return ("pipeline parallel: every stage sizes its own pool and one logged pool does not say which stage it is"
                if log_spec.pipeline_parallel == spec.pipeline_parallel else
                f"a different pipeline-parallel size (the log's {log_spec.pipeline_parallel}, the plan's "
                f"{spec.pipeline_parallel})")
    if log_spec.enforce_eager != spec.enforce_eager:
        return ("enforce-eager on one line and CUDA graphs on the other: the graph and compile terms the log measured "
                "exist on one side only")
    if _pinned(log_spec) or _pinned(spec):
        return "a pinned KV pool (--kv-cache-memory / --num-gpu-blocks-override): no profiled budget to calibrate"
    if serve.vllm_extensible_kv_cache(log_spec) or serve.vllm_extensible_kv_cache(spec):
        return ("vLLM 0.34's extensible KV cache: the pool is measured after warmup from the memory free then, not "
                "profiled, so a past start's residual does not carry")
    return None


def calibrate(reading: VllmLogReading, log_spec: ServeSpec, spec: ServeSpec, machine: serve.Machine, *,
              log_shape: ServeShape | None, shape: ServeShape | None, source: str = "",
              log_launch: str = "", same_machine: bool = False) -> serve.LogCalibration:
    """The correction from ``reading`` (the log of ``log_spec`` on ``machine``) for ``spec`` on the same machine:
    delta = the log's KV pool - the plan's pool for ``log_spec`` here; or a refusal with its reason. The log's plan
    takes ``spec``'s compile_state, so the planner's own fitted terms, where they hold, are charged on both lines and
    cancel in delta."""
    why = refusal(reading, log_spec, spec, machine, log_shape, shape, same_machine=same_machine)
    if why is not None:
        return _refuse(why, reading, source, log_launch)
    assert log_shape is not None and reading.kv_gib is not None
    own = log_spec.model_copy(update={"compile_state": spec.compile_state,
                                      "engine_version": log_spec.engine_version or spec.engine_version})
    own_kv = serve.plan_serve(log_shape, own, machine).kv
    planned = own_kv.available_gib
    if planned is None:
        return _refuse("the plan gives the log's own launch line no KV pool", reading, source, log_launch)
    delta = round(reading.kv_gib - planned, 3)
    carried = [str(t) for t in engine_value("vllm", "log_calibration")["carried"]]
    if log_pooling(reading, log_spec):  # a pooling start runs the pooler, no sampler
        carried = [t for t in carried if t != "sampler"]
    if log_spec.enforce_eager:  # an eager start captures no CUDA graphs
        carried = [t for t in carried if t != "cudagraph"]
    notes = [f"delta = the log's {reading.kv_gib:.2f} GiB - the plan's {planned:.2f} GiB for the log's own line = "
             f"{delta:+.2f} GiB per rank"]
    if not (log_spec.engine_version or spec.engine_version):
        notes.append("neither the log nor the launch line names the vLLM version: the same build is assumed")
    if reading.starts > 1:
        notes.append(f"the log holds {reading.starts} starts: only the last one is read")
    if reading.kv_tokens and own_kv.tokens and reading.kv_gib > 0 and planned > 0:
        # tokens per GiB of pool: the page arithmetic alone, whatever the pools' sizes
        ratio = (reading.kv_tokens / reading.kv_gib) / (own_kv.tokens / planned)
        if abs(ratio - 1) > 0.10:
            notes.append(f"the log's pool holds {reading.kv_tokens:,} tokens in {reading.kv_gib:.2f} GiB, the plan's "
                         f"page arithmetic {own_kv.tokens:,} in {planned:.2f} GiB ({ratio - 1:+.0%} tokens per GiB): "
                         "the KV pages differ from the plan's (a hybrid or sliding-window model?), so the plan's "
                         "token count is less sure than its GiB")
    if reading.compile_state == "cold":
        notes.append("the log's start compiled cold: a restart that finds that compile cache warm can keep more KV "
                     "than this calibrated plan (the compile-cache term is the log's cold one)")
    return serve.LogCalibration(applied=True, source=source, log_launch=log_launch, log_version=reading.version,
                                log_compile_state=reading.compile_state, log_kv_gib=reading.kv_gib,
                                log_tokens=reading.kv_tokens, log_plan_kv_gib=round(planned, 3), delta_gib=delta,
                                carried=carried, notes=notes)
