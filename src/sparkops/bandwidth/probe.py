"""Measure device memory bandwidth in the target environment: refuse, size, launch, read.

The tool never imports torch: ``_measure_script.py`` runs in a child of the *target* interpreter
(``--python``, else python3 on PATH) or inside an image (``--container``: ``docker run`` with the
script on stdin, as the target probe does), bounded in time through :mod:`sparkops.probes._run`. A
child that hangs, crashes, prints garbage or finds no torch/GPU becomes an :class:`Outcome` that says
so, never an error. The refusal rules (:mod:`sparkops.bandwidth.refusal`) run first, on the facts.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from sparkops.bandwidth import refusal
from sparkops.bandwidth._measure_script import plan_buffer
from sparkops.facts.model import BandwidthFacts, BandwidthMethod, Facts, ProbeRecord, TorchLive
from sparkops.facts.reading import Unavailable, Why, missing
from sparkops.knowledge import Knowledge
from sparkops.knowledge.bandwidth import BandwidthSettings
from sparkops.probes import _run, target_launch
from sparkops.probes.target_env import last_stage, parse_result

SCRIPT = Path(__file__).with_name("_measure_script.py")
_DOCKER_OWN_EXIT = (125, 126, 127)  # docker run itself failed / could not start / no python in the image

Status = Literal["measured", "refused", "failed"]


@dataclass(frozen=True)
class Outcome:
    """How a measurement went: the facts section it leaves, and for a front end, why."""

    status: Status
    section: BandwidthFacts | Unavailable
    python: str = ""
    container_ref: str = ""
    reason: str = ""  # refused / failed: why, in words a user can act on
    kind: str = ""  # failed: no_torch | no_gpu | not_found | timeout | crash | garbage | oom | docker | error
    assessment: refusal.Assessment | None = None
    duration_s: float = 0.0
    payload: dict[str, Any] = field(default_factory=dict)  # the child's result, as printed


# --------------------------------------------------------------------------- configuration
def script_config(settings: BandwidthSettings, free_bytes: int | None, size_bytes: int | None = None,
                  force: bool = False, device_index: int = 0) -> dict[str, Any]:
    """The JSON the child is given: sizing inputs, timing, the refusal minimum (re-checked there
    against cudaMemGetInfo, which the facts may not have)."""
    return {
        "device_index": device_index, "methods": ["copy", "read"], "force": force,
        "min_free_bytes": settings.min_free_bytes, "free_bytes": free_bytes, "explicit_bytes": size_bytes,
        "floor_bytes": settings.floor_bytes, "l2_multiple": settings.l2_multiple,
        "buffer_cap_bytes": settings.buffer_cap_bytes, "total_cap_bytes": settings.total_cap_bytes,
        "free_fraction": settings.free_fraction, "warmup": settings.warmup_iters, "reps": settings.reps,
        "rep_target_ms": settings.rep_target_ms, "max_inner": settings.max_inner,
    }


def parse_size(text: str | None) -> int | None:
    """``--size``: ``auto`` (None) or a positive number of GB (10^9 bytes) per buffer. Raises ValueError."""
    if text is None or text.strip().lower() in ("", "auto"):
        return None
    try:
        gb = float(text.strip().lower().removesuffix("gb").strip())
    except ValueError:
        raise ValueError(f"--size wants AUTO or a number of GB per buffer, not {text!r}") from None
    if not 0 < gb <= 1024:  # nan fails both comparisons
        raise ValueError(f"--size wants a positive number of GB per buffer up to 1024, not {text!r}")
    return int(gb * 1e9)


# --------------------------------------------------------------------------- launching
def argv_for(exe: str, config: Mapping[str, Any]) -> tuple[str, ...]:
    return (exe, str(SCRIPT), json.dumps(dict(config)))


def container_argv(ref: str, python: str | None, name: str, config: Mapping[str, Any]) -> tuple[str, ...]:
    """The target probe's ``docker run`` (GPU flags, ``--pull never``, no network, script on stdin),
    with the measurement's configuration as the script's one argument instead of its mode."""
    base = target_launch.container_argv(ref, "live", python, name)
    if base[-1] != "live":  # the mode is the last argument there; anything else is a changed contract
        raise RuntimeError(f"unexpected container command line from target_launch: {base!r}")
    return (*base[:-1], json.dumps(dict(config)))


def _failed(kind: str, reason: str, why: Why = Why.error, **kw: Any) -> Outcome:
    return Outcome("failed", missing(why, reason), reason=reason, kind=kind, **kw)


def outcome_from_result(res: _run.RunResult, timeout_s: float, python: str, container_ref: str = "",
                        notes: Collection[str] = (), forced: bool = False) -> Outcome:
    """Read the child's outcome: its result line, or how it hung, died or babbled. Never raises."""
    where = last_stage(res.stdout)
    while_ = f" while: {where}" if where else ""
    common: dict[str, Any] = {"python": python, "container_ref": container_ref, "duration_s": round(res.duration_s, 3)}
    payload, problem = parse_result(res.stdout)
    if res.error == "timeout":
        return _failed("timeout", f"the measurement did not finish within {timeout_s:g} s (killed){while_}",
                       Why.timeout, **common)
    if res.error == "signal":
        return _failed("crash", f"the measuring python died on signal {res.signal} ({res.describe()}){while_}",
                       **common)
    if payload is None or payload.get("mode") != "bandwidth":
        tail = (res.stderr or "").strip().splitlines()[-1:] or [""]
        what = problem or "printed a result that is not a bandwidth measurement"
        detail = f"{res.describe()}; {what}" if not res.ok else f"the measuring python {what}"
        return _failed("garbage", detail + (f"; stderr: {tail[0][:300]}" if tail[0] else ""), **common)
    common["payload"] = payload
    if isinstance(payload.get("refused"), str):
        reason = payload["refused"]
        return Outcome("refused", missing(Why.not_collected, f"refused: {reason}"), reason=reason, **common)
    if "error" in payload:
        kind = str(payload.get("kind") or "error")
        why = {"no_torch": Why.not_found, "no_gpu": Why.not_found}.get(kind, Why.error)
        return _failed(kind, str(payload["error"])[:500], why, **common)
    try:
        section = facts_from_payload(payload, python, container_ref, notes, forced)
    except (ValidationError, TypeError, ValueError, KeyError) as exc:
        return _failed("garbage", f"the measuring python printed a result that does not validate: {str(exc)[:300]}",
                       **common)
    return Outcome("measured", section, **common)


def facts_from_payload(payload: Mapping[str, Any], python: str, container_ref: str = "",
                       notes: Collection[str] = (), forced: bool = False) -> BandwidthFacts:
    """The child's JSON as a validated facts section. Raises ValidationError/TypeError on a bad one."""
    methods = [BandwidthMethod.model_validate({k: m.get(k) for k in BandwidthMethod.model_fields if k in m})
               for m in payload.get("methods") or [] if isinstance(m, dict)]
    if not methods:
        raise ValueError("no method result in the measurement")
    l2 = payload.get("l2_cache_bytes")
    cap = payload.get("capability")
    fields: dict[str, Any] = {
        "python": str(payload.get("executable") or python), "container_ref": container_ref or None,
        "torch_version": str(payload.get("torch_version") or ""), "device_index": payload.get("device_index", 0),
        "device_name": str(payload.get("device_name") or ""),
        "capability": tuple(cap) if isinstance(cap, list) else None,
        "l2_cache_bytes": l2 if isinstance(l2, int) else missing(Why.not_supported, "torch reports no L2 size"),
        "mem_free_bytes": payload.get("mem_free_bytes", missing(Why.not_collected)),
        "buffer_bytes": payload.get("buffer_bytes"), "buffers": payload.get("buffers"),
        "sizing": str(payload.get("sizing") or ""), "methods": methods,
        "peak_allocated_bytes": payload.get("peak_allocated_bytes"),
        "peak_reserved_bytes": payload.get("peak_reserved_bytes", missing(Why.not_collected)),
        "allocated_after_bytes": payload.get("allocated_after_bytes"),
        "reserved_after_bytes": payload.get("reserved_after_bytes", missing(Why.not_collected)),
        "gpu_time_s": payload.get("gpu_time_s"), "wall_s": payload.get("wall_s"),
        "import_s": payload.get("import_s"), "forced": forced, "notes": list(notes),
    }
    return BandwidthFacts.model_validate(fields)


def _pid_alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.pid_exists(pid)
    except Exception:  # cannot tell: count it (refusing is the safe side)
        return True


def _live_says_no(facts: Facts) -> tuple[str, str] | None:
    """(kind, reason) when the facts' live torch probe already showed the child cannot measure."""
    live = facts.target.live
    if not isinstance(live, TorchLive):
        return None
    where = f" in {facts.target.python}" if facts.target.python else ""
    if not live.import_ok:
        return "no_torch", f"torch does not import{where}: {live.error or 'import failed'}"[:500]
    if live.cuda_available is False:
        return "no_gpu", f"torch {live.version}{where} sees no CUDA device"
    return None


def measure(facts: Facts, kb: Knowledge, *, python: str | None = None,
            env: Mapping[str, str] | None = None, size_bytes: int | None = None, force: bool = False,
            container_ref: str = "", settings: BandwidthSettings | None = None,
            alive: Callable[[int], bool] | None = None, own_pids: Collection[int] | None = None) -> Outcome:
    """Apply the refusal rules to ``facts``, then measure in the target interpreter (or image)."""
    settings = settings or kb.thresholds.bandwidth
    env = dict(os.environ) if env is None else env
    own = {os.getpid()} if own_pids is None else set(own_pids)
    assessment = refusal.assess(facts, kb, settings, alive or _pid_alive, own)
    if container_ref:
        exe, label = python or "", f"{python or 'python3'} in container {container_ref}"
    else:
        exe, _why = target_launch.choose_interpreter(python, env)
        label = exe
    base: dict[str, Any] = {"python": label, "container_ref": container_ref, "assessment": assessment}
    if assessment.refused(force):
        reason = f"{assessment.summary()}; --force to measure anyway"
        return Outcome("refused", missing(Why.not_collected, f"refused: {reason}"), reason=reason, **base)
    no = _live_says_no(facts) if not container_ref else None
    if no is not None:
        return _failed(no[0], no[1], Why.not_found, **base)
    if not container_ref and not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
        return _failed("not_found", f"target interpreter {exe} does not exist or is not executable",
                       Why.not_found, **base)
    if assessment.free_bytes is not None:  # memory too short for the floor: no use starting torch
        plan = plan_buffer(None, assessment.free_bytes, 2, settings.floor_bytes, settings.l2_multiple,
                           settings.buffer_cap_bytes, settings.total_cap_bytes, settings.free_fraction, size_bytes, force)
        if plan["buffer_bytes"] is None:
            reason = f"{plan['basis']} ({assessment.free_source})"
            return Outcome("refused", missing(Why.not_collected, f"refused: {reason}"), reason=reason, **base)
    overrode = [f"--force overrode: {r}" for r in assessment.reasons] if force else []
    notes = overrode + ([f"the facts show {assessment.no_gpu}: the measuring child checks for a CUDA device "
                         "itself"] if assessment.no_gpu else [])
    config = script_config(settings, assessment.free_bytes, size_bytes, force)
    if container_ref:
        return _in_container(container_ref, python, env, config, settings.container_timeout_s, label, notes,
                             bool(overrode), assessment)
    res = _run.run(argv_for(exe, config), timeout=settings.timeout_s, env=env)
    out = outcome_from_result(res, settings.timeout_s, label, notes=notes, forced=bool(overrode))
    return _with_assessment(out, assessment)


def _with_assessment(out: Outcome, assessment: refusal.Assessment) -> Outcome:
    from dataclasses import replace

    return replace(out, assessment=assessment)


def _in_container(ref: str, python: str | None, env: Mapping[str, str], config: Mapping[str, Any], timeout_s: float,
                  label: str, notes: list[str], forced: bool, assessment: refusal.Assessment) -> Outcome:
    from sparkops.probes import target_env

    try:
        script = SCRIPT.read_text(encoding="utf-8")
    except OSError as exc:
        return _failed("error", f"cannot read the measure script {SCRIPT}: {exc}", python=label, container_ref=ref)
    name = target_launch.container_name("bandwidth")
    res = _run.run(container_argv(ref, python, name, config), timeout=timeout_s, env=env, stdin_text=script)
    # no --rm (podman's Docker API loses the exit status with it), and killing the docker CLI leaves
    # its container running: removed by name in every case
    _run.run(("docker", "rm", "-f", name), timeout=20.0, env=env)
    if res.error == "not_found" or (res.returncode in _DOCKER_OWN_EXIT and parse_result(res.stdout)[0] is None):
        why, detail = target_env.docker_problem(res, ref, f"docker run {ref}")
        return _with_assessment(_failed("docker", f"container {ref}: {detail}", why, python=label, container_ref=ref,
                                        duration_s=round(res.duration_s, 3)), assessment)
    return _with_assessment(outcome_from_result(res, timeout_s, label, ref, notes, forced), assessment)


# --------------------------------------------------------------------------- preflight --measure
def attach(facts: Facts, opts: Any, kb: Knowledge | None = None) -> Facts:
    """``facts`` with its ``bandwidth`` section measured now (after the other probes, so the refusal
    rules see their facts and nothing of ours competes) and a ``bandwidth`` probe record."""
    t0 = time.monotonic()
    try:
        out = measure(facts, kb or opts.knowledge(), python=opts.python, env=opts.env, container_ref=opts.container_ref)
    except Exception as exc:  # a bug here must not take the preflight down
        out = _failed("error", f"bandwidth probe failed: {type(exc).__name__}: {exc}"[:500])
    source = "container" if opts.container_ref else "target python"
    record = ProbeRecord(name="bandwidth", ok=out.status == "measured", duration_s=round(time.monotonic() - t0, 3),
                         reason="" if out.status == "measured" else f"{out.status}: {out.reason}"[:300], source=source)
    return facts.model_copy(update={"bandwidth": out.section, "probes": {**facts.probes, "bandwidth": record}})
