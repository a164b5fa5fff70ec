"""G9 — container-first, not bare pip.

Bare pip lets Triton, xformers and transformers drift away from anything verified on SM121/CUDA 13;
the NGC PyTorch and Unsloth containers pin them. A failed container-marker match is ``unknown``,
never proof of a bare host (cgroup v2 hides runtime names). Hard blockers fail wherever they are
(torchao < 0.16 beside current peft breaks the LoRA attach). The known-good matrix is dated: past
its refresh horizon, or with installed majors newer than verified, the tool says so.
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version

from sparkops.checks import identity
from sparkops.checks.base import CheckContext, Evidence, Finding, Status, canonical_name, ev, installed
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


def _blockers(ctx: CheckContext, dists: dict[str, str], notes: list[str]) -> list[tuple[str, str]]:
    """Hard blockers that apply: (summary, fix)."""
    out: list[tuple[str, str]] = []
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
            target = f'=={pin}' if pin else f'>={hb.below}'
            out.append((f"{pkg} {dists[pkg]} < {hb.below} beside {when} {dists[when]}: {hb.message}",
                        f'`pip install -U "{pkg}{target}"` (after any --no-deps Unsloth line), then re-check.'))
    return out


def check(ctx: CheckContext) -> Finding:
    facts, kb = ctx.facts, ctx.kb
    cont = facts.host.container
    kind = cont.image_kind
    env = facts.host.env
    pyenv = facts.target.env
    evidence: list[Evidence] = [ev("host.container.markers", cont.markers), ev("host.container.image_kind", str(kind)),
                                ev("host.container.image_hint", cont.image_hint), ev("target.env", pyenv)]
    notes: list[str] = []
    warns: list[tuple[str, str | None]] = []
    dists: dict[str, str] = {}
    if known(facts.target.distributions):
        dists = installed(facts)
    else:
        notes.append(f"installed packages not read ({facts.target.distributions}): matrix and blockers not judged")

    blockers = _blockers(ctx, dists, notes)
    off, newer = _matrix(ctx, dists, notes)
    if off:
        evidence.append(ev("off-matrix", off))

    # the matrix's own age
    mx = kb.matrix
    if facts.collected_at is not None:
        age = (facts.collected_at.date() - mx.last_verified).days
        if age > mx.refresh_horizon_days:
            warns.append((f"the known-good matrix (last verified {mx.last_verified}) is {age} days old, past its "
                           f"{mx.refresh_horizon_days}-day refresh horizon", "Supply a newer matrix with "
                           "`--matrix FILE`, or re-verify the stack (load + LoRA-attach smoke test)."))
    else:
        notes.append("collection time unknown: the matrix's age was not judged")
    if newer:
        warns.append((f"installed majors newer than verified: {', '.join(newer)}",
                      "Re-run the load + LoRA-attach smoke test and check the playbooks' issues for a "
                      "version-skew report before a long run."))

    # Triton's bundled ptxas rejects sm_121a
    cap = tuple(kb.t("g9.triton_capability"))
    dev_cap = identity.identify(facts, kb).capability
    triton = next((f"{d} {dists[d]}" for d in map(canonical_name, kb.t("g9.triton_dists")) if d in dists), None)
    if triton and dev_cap == cap and not env.get("TRITON_PTXAS_PATH"):
        warns.append((f"{triton} on SM{cap[0]}{cap[1]} without TRITON_PTXAS_PATH (its bundled ptxas rejects sm_121a)",
                      "`export TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas` before training."))
    # HF transfer variable deprecated on huggingface_hub >= 1.23
    hub = _v(dists.get("huggingface-hub", ""))
    dep = _v(str(kb.t("g9.hf_transfer_deprecated_hub")))
    if env.get("HF_HUB_ENABLE_HF_TRANSFER", "").lower() in TRUTHY and hub and dep and hub >= dep:
        notes.append(f"HF_HUB_ENABLE_HF_TRANSFER is set with huggingface_hub {hub}: deprecated from {dep} "
                     "(FutureWarning; downloads go through Xet anyway) — set HF_XET_HIGH_PERFORMANCE=1 instead")

    # container decision
    image = cont.image_hint or (str(kind) if known(kind) else "")
    bare_env = pyenv.kind in BARE_ENV_KINDS
    if known(kind) and kind in BLESSED:
        base = (Status.passed, f"inside {image or kind}")
        if kind == "unsloth" and "@sha256:" not in cont.image_hint:
            notes.append("Unsloth's dgxspark-latest is a moving tag: run by digest (unsloth/unsloth@sha256:...) "
                         "so the run can be reproduced")
        if off:
            notes.append(f"off-matrix inside the container: {', '.join(off)}")
    elif (known(kind) and kind != "none") or cont.markers:
        base = (Status.info, f"inside a container ({image or 'image unknown'}; markers: {', '.join(cont.markers) or 'none'}), "
                             "not one of the blessed images (NGC PyTorch, Unsloth)")
        if off:
            notes.append(f"off-matrix: {', '.join(off)}")
    elif bare_env and off:
        warns.insert(0, (f"bare {pyenv.kind} environment{' at ' + pyenv.prefix if pyenv.prefix else ''} (no container "
                         f"marker) with off-matrix packages: {', '.join(off)}", None))
        base = (Status.warn, "")
    else:
        where = f"{pyenv.kind} env" if pyenv.kind != "unknown" else "environment kind unknown"
        base = (Status.unknown, f"no container marker matched ({where}) — this does not prove a bare host")
        if off:
            notes.append(f"off-matrix: {', '.join(off)}")

    if blockers:
        summary = blockers[0][0] + (f" (+{len(blockers) - 1} more)" if len(blockers) > 1 else "")
        detail = "; ".join([b for b, _ in blockers[1:]] + [w for w, _ in warns] + ([base[1]] if base[1] else []))
        return ctx.finding(GID, Status.fail, summary, detail=detail, evidence=evidence, notes=notes,
                           fix=blockers[0][1])
    if warns:
        summary = warns[0][0] + (f" (+{len(warns) - 1} more warning{'s' if len(warns) > 2 else ''})"
                                 if len(warns) > 1 else "")
        detail = "; ".join([w for w, _ in warns[1:]] + ([base[1]] if base[1] else []))
        fixes = dict.fromkeys(f or kb.gotcha(GID).fix for _, f in warns)  # each distinct fix once, in order
        return ctx.finding(GID, Status.warn, summary, detail=detail, evidence=evidence, notes=notes,
                           fix=" ".join(fixes))
    return ctx.finding(GID, base[0], base[1], evidence=evidence, notes=notes,
                       detail="Container markers: /.dockerenv, /run/.containerenv, cgroup v1 names, the `container` "
                              "variable, NVIDIA/NGC variables; cgroup v2 can hide all of them."
                       if base[0] is Status.unknown else "")
