"""Carry one real vLLM start-up log's measured basis to another launch line (``plan --serve --from-log``; judge layer).

Pure: the log's reading, the log's launch spec, the planned spec and the machine in; a
:class:`~sparkops.planner.serve.LogCalibration` (a correction with its reasons, or a refusal with its reason) out. The
rule (benchmarks/results/serve-from-log-protocol.md, written before this code; engines.yaml vllm.log_calibration):

    delta = the log's "Available KV cache memory" - the plan's KV pool for the log's own launch line on this machine

No fitted constant. The KV pool is still computed by serve.plan_serve, which charges -delta as one named term.
"""

from __future__ import annotations

from sparkops.core.releases import release
from sparkops.planner import serve
from sparkops.planner.serve_engines import ServeSpec, engine_value
from sparkops.planner.serve_log import VllmLogReading
from sparkops.planner.serve_shape import ServeShape


def _refuse(reason: str, reading: VllmLogReading, source: str, launch: str) -> serve.LogCalibration:
    return serve.LogCalibration(applied=False, refused=reason, source=source, log_launch=launch,
                                log_version=reading.version, log_compile_state=reading.compile_state,
                                log_kv_gib=reading.kv_gib, log_tokens=reading.kv_tokens)


def _pinned(spec: ServeSpec) -> bool:
    return bool(spec.kv_cache_memory_bytes or spec.num_gpu_blocks_override)


def refusal(reading: VllmLogReading, log_spec: ServeSpec, spec: ServeSpec, machine: serve.Machine,
            log_shape: ServeShape | None, shape: ServeShape | None) -> str | None:
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
    tol = float(engine_value("vllm", "log_calibration")["total_tolerance_fraction"])
    if reading.total_gpu_gib and machine.total_gib and abs(reading.total_gpu_gib - machine.total_gib) > \
            tol * machine.total_gib:
        return (f"another GPU: the log's device total is {reading.total_gpu_gib:.2f} GiB, this machine's "
                f"{machine.total_gib:.2f} GiB")
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
              log_launch: str = "") -> serve.LogCalibration:
    """The correction from ``reading`` (the log of ``log_spec`` on ``machine``) for ``spec`` on the same machine:
    delta = the log's KV pool - the plan's pool for ``log_spec`` here; or a refusal with its reason. The log's plan
    takes ``spec``'s compile_state, so the planner's own fitted terms, where they hold, are charged on both lines and
    cancel in delta."""
    why = refusal(reading, log_spec, spec, machine, log_shape, shape)
    if why is not None:
        return _refuse(why, reading, source, log_launch)
    assert log_shape is not None and reading.kv_gib is not None
    own = log_spec.model_copy(update={"compile_state": spec.compile_state,
                                      "engine_version": log_spec.engine_version or spec.engine_version})
    planned = serve.plan_serve(log_shape, own, machine).kv.available_gib
    if planned is None:
        return _refuse("the plan gives the log's own launch line no KV pool", reading, source, log_launch)
    delta = round(reading.kv_gib - planned, 3)
    carried = [str(t) for t in engine_value("vllm", "log_calibration")["carried"]]
    notes = [f"delta = the log's {reading.kv_gib:.2f} GiB - the plan's {planned:.2f} GiB for the log's own line = "
             f"{delta:+.2f} GiB per rank"]
    if not (log_spec.engine_version or spec.engine_version):
        notes.append("neither the log nor the launch line names the vLLM version: the same build is assumed")
    if reading.compile_state == "cold":
        notes.append("the log's start compiled cold: a restart that finds that compile cache warm can keep more KV "
                     "than this calibrated plan (the compile-cache term is the log's cold one)")
    return serve.LogCalibration(applied=True, source=source, log_launch=log_launch, log_version=reading.version,
                                log_compile_state=reading.compile_state, log_kv_gib=reading.kv_gib,
                                log_tokens=reading.kv_tokens, log_plan_kv_gib=round(planned, 3), delta_gib=delta,
                                carried=carried, notes=notes)
