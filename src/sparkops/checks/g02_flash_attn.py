"""G2 — flash-attn: skip the pip build; watch Unsloth's auto-detect.

There is no aarch64/sm_121 flash-attn wheel for bare pip, NGC containers bundle a working one, and
Unsloth's loader switches to flash-attention-2 whenever flash-attn is importable, even when
``attn_implementation="sdpa"`` was asked for. SDPA is the right path on this machine.
"""

from __future__ import annotations

from sparkops.checks import container
from sparkops.checks.base import CheckContext, ev, installed
from sparkops.core.findings import Finding
from sparkops.facts.model import TorchLive
from sparkops.facts.reading import known

GID = "G2"

def check(ctx: CheckContext) -> Finding:
    target = ctx.facts.target
    if not known(target.distributions):
        return ctx.decide(GID, "G2.unread", why=str(target.distributions),
                          detail="flash-attn and Unsloth presence come from the target environment's package list.")
    dists = installed(ctx.facts)
    fa = dists.get("flash-attn")
    unsloth = dists.get("unsloth")
    live = target.live if isinstance(target.live, TorchLive) else None
    cont = container.classify(ctx.facts.host.container)
    kind = cont.image_kind
    in_container = known(kind) and kind != "none"
    where = cont.image_hint or (f"{kind} container" if in_container else "this environment")
    evidence = [ev("target.distributions[flash-attn]", fa), ev("target.distributions[unsloth]", unsloth),
                ev("host.container.image_kind", str(kind))]
    sdp = ""
    if live is not None:
        evidence.append(ev("target.live.flash_attn_import", live.flash_attn_import))
        if live.flash_sdp_enabled is not None:
            evidence.append(ev("target.live.flash_sdp_enabled", live.flash_sdp_enabled))
            sdp = f" (torch flash SDP {'enabled' if live.flash_sdp_enabled else 'disabled'})"

    if fa is None:
        note = [f"Unsloth {unsloth} will use SDPA: flash-attn is absent"] if unsloth else []
        return ctx.decide(GID, "G2.absent", sdp=sdp, evidence=evidence, notes=note)
    imported = live.flash_attn_import if live is not None else None
    if imported is False:
        err = live.flash_attn_error if live is not None and live.flash_attn_error else "an import error"
        return ctx.decide(GID, "G2.broken", fa=fa, error=err,
                          detail="transformers and Unsloth probe for flash-attn and may pick it anyway; "
                                 "a broken install is worse than none.", evidence=evidence)
    tested = "imports" if imported else "installed (import not tested in this run)"
    if unsloth:
        return ctx.decide(GID, "G2.unsloth-autodetect", fa=fa, tested=tested, unsloth=unsloth, evidence=evidence)
    if imported and in_container:
        return ctx.decide(GID, "G2.bundled", fa=fa, where=where, sdp=sdp, evidence=evidence)
    if imported:
        return ctx.decide(GID, "G2.local-build", fa=fa, sdp=sdp, evidence=evidence,
                          detail="SDPA is as fast or faster on this hardware; keep flash-attn only if something needs it.")
    return ctx.decide(GID, "G2.untested", fa=fa, where=where, evidence=evidence)
