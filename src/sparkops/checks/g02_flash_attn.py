"""G2 — flash-attn: skip the pip build; watch Unsloth's auto-detect.

There is no aarch64/sm_121 flash-attn wheel for bare pip, NGC containers bundle a working one, and
Unsloth's loader switches to flash-attention-2 whenever flash-attn is importable, even when
``attn_implementation="sdpa"`` was asked for. SDPA is the right path on this machine.
"""

from __future__ import annotations

from sparkops.checks.base import CheckContext, Finding, Status, ev, installed
from sparkops.facts.model import TorchLive
from sparkops.facts.reading import known

GID = "G2"

UNSLOTH_FIX = (
    "Before `from_pretrained`, turn Unsloth's auto-detect off: "
    "`import unsloth.models._utils as u; u.HAS_FLASH_ATTENTION = False` "
    "(or `pip uninstall flash-attn` outside a container). Plain TRL/PEFT honours attn_implementation=\"sdpa\"."
)
BROKEN_FIX = "`pip uninstall flash-attn` (transformers may still try to use it); use attn_implementation=\"sdpa\"."


def check(ctx: CheckContext) -> Finding:
    target = ctx.facts.target
    if not known(target.distributions):
        return ctx.finding(GID, Status.skip, f"installed packages were not read: {target.distributions}",
                           detail="flash-attn and Unsloth presence come from the target environment's package list.")
    dists = installed(ctx.facts)
    fa = dists.get("flash-attn")
    unsloth = dists.get("unsloth")
    live = target.live if isinstance(target.live, TorchLive) else None
    kind = ctx.facts.host.container.image_kind
    in_container = known(kind) and kind != "none"
    where = ctx.facts.host.container.image_hint or (f"{kind} container" if in_container else "this environment")
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
        return ctx.finding(GID, Status.passed, f"flash-attn not installed: SDPA is the path{sdp}",
                           evidence=evidence, notes=note)
    imported = live.flash_attn_import if live is not None else None
    if imported is False:
        err = live.flash_attn_error if live is not None and live.flash_attn_error else "an import error"
        return ctx.finding(GID, Status.warn, f"flash-attn {fa} is installed but fails to import: {err}",
                           detail="transformers and Unsloth probe for flash-attn and may pick it anyway; "
                                  "a broken install is worse than none.",
                           evidence=evidence, fix=BROKEN_FIX)
    tested = "imports" if imported else "installed (import not tested in this run)"
    if unsloth:
        return ctx.finding(GID, Status.warn,
                           f"flash-attn {fa} {tested} beside Unsloth {unsloth}: Unsloth's loader uses "
                           "flash-attention-2 even when attn_implementation=\"sdpa\" is requested",
                           evidence=evidence, fix=UNSLOTH_FIX)
    if imported and in_container:
        return ctx.finding(GID, Status.passed, f"flash-attn {fa} imports in {where} (bundled build); "
                           f"no Unsloth, so attn_implementation is honoured{sdp}", evidence=evidence)
    if imported:
        return ctx.finding(GID, Status.info, f"flash-attn {fa} imports in a non-container environment "
                           f"(a local build); no Unsloth, so attn_implementation is honoured{sdp}",
                           detail="SDPA is as fast or faster on this hardware; keep flash-attn only if "
                                  "something needs it.", evidence=evidence)
    return ctx.finding(GID, Status.info, f"flash-attn {fa} installed in {where}; its import was not tested "
                       "(quick run); no Unsloth, so attn_implementation is honoured", evidence=evidence)
