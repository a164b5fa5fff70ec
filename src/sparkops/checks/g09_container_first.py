"""G9 — container-first, not bare pip.

Bare pip lets Triton, xformers and transformers drift away from anything verified on SM121/CUDA 13;
the NGC PyTorch and Unsloth containers pin them. A failed container-marker match is ``unknown``,
never proof of a bare host (cgroup v2 hides runtime names). Hard blockers fail wherever they are
(torchao < 0.16 beside current peft breaks the LoRA attach). The known-good matrix is dated: past
its refresh horizon, or with installed majors newer than verified, the tool says so.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from sparkops.checks import container, identity
from sparkops.checks.base import (
    CheckContext,
    Evidence,
    Finding,
    Reason,
    canonical_name,
    ev,
    installed,
    reason,
)
from sparkops.facts.reading import known

GID = "G9"
BLESSED = ("ngc-pytorch", "unsloth")
BARE_ENV_KINDS = ("venv", "uv", "conda")
TRUTHY = ("1", "true", "yes", "on")


def _v(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _matrix(ctx: CheckContext, dists: dict[str, str], notes: list[str]) -> tuple[list[str], list[str]]:
    """Installed packages off the known-good matrix, and those whose major is newer than verified."""
    off: list[str] = []
    newer: list[str] = []
    for pin in ctx.kb.matrix.known_good:
        name = canonical_name(pin.name)
        if name not in dists:
            continue
        have, want = _v(dists[name]), _v(pin.version)
        if have is None or want is None:
            notes.append(f"{name} {dists[name]}: version not comparable with the matrix's {pin.version}")
            continue
        if Version(have.public) != want:
            off.append(f"{name} {dists[name]} (matrix {pin.version})")
            if have.major > want.major:
                newer.append(f"{name} {dists[name]} (verified {pin.version})")
    return off, newer


def matrix_rows(kb, dists: dict[str, str]) -> list[dict[str, str]]:  # noqa: ANN001 - Knowledge
    """Each known-good package against what is installed: match, off-matrix, newer-major, not-installed,
    unparseable (``spark-ops stack``)."""
    rows = []
    for pin in kb.matrix.known_good:
        name = canonical_name(pin.name)
        have = dists.get(name)
        if have is None:
            status = "not-installed"
        else:
            hv, wv = _v(have), _v(pin.version)
            if hv is None or wv is None:
                status = "unparseable"
            elif Version(hv.public) == wv:
                status = "match"
            elif hv.major > wv.major:
                status = "newer-major"
            else:
                status = "off-matrix"
        rows.append({"package": name, "installed": have or "", "verified": pin.version, "status": status,
                     "note": pin.note})
    return rows


def _blockers(ctx: CheckContext, dists: dict[str, str], notes: list[str]) -> list[Reason]:
    """Hard blockers that apply."""
    out: list[Reason] = []
    for hb in ctx.kb.matrix.hard_blockers:
        pkg, when = canonical_name(hb.package), canonical_name(hb.when_installed)
        if pkg not in dists or when not in dists:
            continue
        have, below = _v(dists[pkg]), _v(hb.below)
        if have is None or below is None:
            notes.append(f"hard blocker {pkg} < {hb.below} not judged: version {dists[pkg]} not parseable")
            continue
        if Version(have.public) < below:
            pin = next((p.version for p in ctx.kb.matrix.known_good if canonical_name(p.name) == pkg), None)
            out.append(reason("G9.hard-blocker", pkg=pkg, have=dists[pkg], below=hb.below, when=when,
                              when_have=dists[when], message=hb.message, target=f"=={pin}" if pin else f">={hb.below}"))
    return out


def check(ctx: CheckContext) -> Finding:
    facts, kb = ctx.facts, ctx.kb
    cont = container.classify(facts.host.container)
    kind = cont.image_kind
    env = facts.host.env
    pyenv = facts.target.env
    evidence: list[Evidence] = [ev("host.container.markers", cont.markers), ev("host.container.image_kind", str(kind)),
                                ev("host.container.image_hint", cont.image_hint), ev("target.env", pyenv)]
    notes: list[str] = []
    warns: list[Reason] = []
    dists: dict[str, str] = {}
    if known(facts.target.distributions):
        dists = installed(facts)
    else:
        notes.append(f"installed packages not read ({facts.target.distributions}): matrix and blockers not judged")

    blockers = _blockers(ctx, dists, notes)
    off, newer = _matrix(ctx, dists, notes)
    if off:
        evidence.append(ev("off-matrix", off))

    # the matrix's own age: past its horizon it is a dated note; with off-matrix packages, a warning
    mx = kb.matrix
    stale = ""
    if facts.collected_at is not None:
        age = (facts.collected_at.date() - mx.last_verified).days
        if age > mx.refresh_horizon_days:
            stale = (f"the known-good matrix (last verified {mx.last_verified}) is {age} days old, past its "
                     f"{mx.refresh_horizon_days}-day refresh horizon")
    else:
        notes.append("collection time unknown: the matrix's age was not judged")
    if newer:
        warns.append(reason("G9.newer-majors", newer=", ".join(newer)))

    # Triton's bundled ptxas rejects sm_121a
    cap = tuple(kb.thresholds.g9.triton_capability)
    dev_cap = identity.identify(facts, kb).capability
    triton = next((f"{d} {dists[d]}" for d in map(canonical_name, kb.thresholds.g9.triton_dists) if d in dists), None)
    if triton and dev_cap == cap and not env.get("TRITON_PTXAS_PATH"):
        warns.append(reason("G9.triton-ptxas", triton=triton, sm=f"{cap[0]}{cap[1]}"))
    # HF transfer variable deprecated on huggingface_hub >= 1.23
    hub = _v(dists.get("huggingface-hub", ""))
    dep = _v(str(kb.thresholds.g9.hf_transfer_deprecated_hub))
    if env.get("HF_HUB_ENABLE_HF_TRANSFER", "").lower() in TRUTHY and hub and dep and hub >= dep:
        notes.append(f"HF_HUB_ENABLE_HF_TRANSFER is set with huggingface_hub {hub}: deprecated from {dep} "
                     "(FutureWarning; downloads go through Xet anyway) — set HF_XET_HIGH_PERFORMANCE=1 instead")

    # container decision
    image = cont.image_hint or (str(kind) if known(kind) else "")
    bare_env = pyenv.kind in BARE_ENV_KINDS
    host_keys = sorted(k for k in kb.thresholds.g9.host_os_release_keys if k in facts.host.os_release)
    off_txt = f" with off-matrix packages: {', '.join(off)}" if off else ""
    at = f" at {pyenv.prefix}" if pyenv.prefix else ""
    if known(kind) and kind in BLESSED:
        unsloth_pip = kind == "ngc-pytorch" and "unsloth" in dists
        base = reason("G9.blessed-container", image=image or str(kind),
                      extra=" with Unsloth pip-installed on top (not the Unsloth container)" if unsloth_pip else "")
        if kind == "unsloth" and "@sha256:" not in cont.image_hint:
            notes.append("Unsloth's dgxspark-latest is a moving tag: run by digest (unsloth/unsloth@sha256:...) "
                         "so the run can be reproduced")
        if off:
            notes.append(f"off-matrix inside the container: {', '.join(off)}")
    elif (known(kind) and kind != "none") or cont.markers:
        base = reason("G9.other-container", image=image or "image unknown", markers=", ".join(cont.markers) or "none")
        if off:
            notes.append(f"off-matrix: {', '.join(off)}")
    elif bare_env and host_keys:
        base = reason("G9.bare-pip", env_kind=pyenv.kind, at=at, evidence=", ".join(host_keys), off=off_txt)
    elif bare_env and off:
        base = reason("G9.bare-pip-off-matrix", env_kind=pyenv.kind, at=at, off=", ".join(off))
    else:
        where = f"{pyenv.kind} env" if pyenv.kind != "unknown" else "environment kind unknown"
        base = reason("G9.no-marker", where=where)
        if off:
            notes.append(f"off-matrix: {', '.join(off)}")
    if stale and off:
        warns.append(reason("G9.stale-matrix-off-matrix", stale=stale, off=", ".join(off)))
    elif stale:
        notes.append(stale + ": its pins may lag current releases (supply a newer one with `--matrix FILE`)")

    if blockers:
        return ctx.conclude(GID, blockers + warns, reading=ctx.line(base), evidence=evidence, notes=notes)
    base_status = ctx.kb.subcode(base.code).status
    if base_status == "warn":
        return ctx.conclude(GID, [base, *warns], evidence=evidence, notes=notes)
    if warns:
        return ctx.conclude(GID, warns, reading=ctx.line(base), evidence=evidence, notes=notes)
    detail = ("Container markers: /.dockerenv, /run/.containerenv, cgroup v1 names, the `container` variable, "
              "NVIDIA/NGC variables; cgroup v2 can hide all of them." if base.code == "G9.no-marker" else "")
    return ctx.conclude(GID, [base], evidence=evidence, notes=notes, detail=detail)
