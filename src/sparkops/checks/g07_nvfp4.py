"""G7 — NVFP4 slower than FP8 on SM121.

The native ``cvt.e2m1x2`` conversion needs code built for ``sm_121a``; kernels built for plain
``sm_121``/``sm_120`` fall back and run about 32% behind FP8. Capability (12, 1) confirms the
hardware only: without evidence of sm_121a kernels, a workload that plans NVFP4 gets a warning.
"""

from __future__ import annotations

from sparkops.checks import identity
from sparkops.checks.base import CheckContext, ev
from sparkops.core.findings import Evidence, Finding
from sparkops.facts.model import TorchLive
from sparkops.facts.reading import known

GID = "G7"


def engine_kernels(ctx: CheckContext) -> dict[str, list[str]]:
    """GPU targets per kernel package, from the fatbins of its extension modules (empty when none were read)."""
    exts = ctx.facts.target.extensions
    out: dict[str, set[str]] = {}
    if known(exts):
        for ext in exts:  # type: ignore[union-attr]
            if ext.kernels:
                out.setdefault(ext.package, set()).update(ext.kernels)
    return {p: sorted(t) for p, t in out.items()}


def _sm121a_evidence(ctx: CheckContext, markers: list[str]) -> list[str]:
    """Where an sm_121a build target shows: TORCH_CUDA_ARCH_LIST, torch's own arch list, or the code the
    serving engines' kernel libraries actually carry."""
    found: list[str] = []
    for package, targets in engine_kernels(ctx).items():
        if "sm_121a" in targets:
            found.append(f"{package} ships sm_121a kernels")
    arch_env = ctx.facts.host.env.get("TORCH_CUDA_ARCH_LIST", "")
    if any(m.lower() in arch_env.lower().replace(" ", "") for m in markers):
        found.append(f"TORCH_CUDA_ARCH_LIST={arch_env}")
    live = ctx.facts.target.live
    if isinstance(live, TorchLive):
        hits = [a for a in live.arch_list if any(m.lower() in a.lower() for m in markers)]
        if hits:
            found.append(f"torch arch list has {', '.join(hits)}")
    return found


def check(ctx: CheckContext) -> Finding:
    if ctx.platform == "none":
        return ctx.decide(GID, "G7.no-gpu")
    ident = identity.identify(ctx.facts, ctx.kb)
    cap = ident.capability
    if cap is None and ctx.profile is not None and ctx.profile.capability:
        cap = tuple(ctx.profile.capability)  # the name identified the model; its profile knows the capability
    name = ident.gpu_name or "this GPU"
    evidence: list[Evidence] = [ev("capability", list(cap) if cap else None),
                                ev("workload.precision", ctx.workload.precision)]
    if ctx.profile is not None:
        has_fp4 = ctx.profile.nvfp4
    elif cap is not None:
        has_fp4 = cap[0] >= ctx.kb.thresholds.g7.nvfp4_min_capability_major
    else:
        return ctx.decide(GID, "G7.capability-unread", name=name, evidence=evidence)
    cap_txt = f"({cap[0]}, {cap[1]})" if cap else "capability unknown"
    if not has_fp4:
        return ctx.decide(GID, "G7.no-fp4", name=name, cap=cap_txt, evidence=evidence)
    planned = ctx.workload.precision
    if cap != ctx.kb.thresholds.g7.sm121_capability:
        return ctx.decide(GID, "G7.not-sm121", name=name, cap=cap_txt, evidence=evidence)
    found = _sm121a_evidence(ctx, list(ctx.kb.thresholds.g7.sm121a_markers))
    evidence.append(ev("sm_121a evidence", found))
    if planned == "nvfp4":
        if found:
            return ctx.decide(GID, "G7.nvfp4-sm121a", cap=cap_txt, found="; ".join(found), evidence=evidence)
        engines = engine_kernels(ctx)
        evidence.append(ev("target.extensions[kernels]", engines))
        if engines:  # read, and no sm_121a code in them: say what they do carry
            shipped = "; ".join(f"{p}: {', '.join(t)}" for p, t in engines.items())
            return ctx.decide(GID, "G7.engine-without-sm121a", cap=cap_txt, shipped=shipped, evidence=evidence)
        return ctx.decide(GID, "G7.nvfp4-no-sm121a", cap=cap_txt, evidence=evidence,
                          detail="Plain sm_120/sm_121 kernels fall back from the native cvt.e2m1x2 conversion.")
    if planned:
        return ctx.decide(GID, "G7.other-precision", cap=cap_txt, planned=planned, evidence=evidence)
    return ctx.decide(GID, "G7.hardware-only", cap=cap_txt, evidence=evidence,
                      notes=[f"sm_121a evidence seen: {'; '.join(found)}"] if found else [])
