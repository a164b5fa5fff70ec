"""G1 — CUDA 12/13 ABI mismatch.

pip never checks the CUDA ABI, so a wheel built for CUDA 12 installs cleanly on a CUDA-13 Spark and
fails at import (or segfaults at the first ``.cuda()``). ``torch.version.cuda`` is the
authoritative signal; NGC builds carry no ``cu`` tag and that is fine. Extensions are judged by the
CUDA libraries they link (ELF ``DT_NEEDED``) against what ldconfig and the installed ``nvidia-*``
wheels provide. A live import that raises or dies on a signal is proof of breakage; one that
times out is only a sign (``unknown``).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Sequence

from sparkops.checks import container, gpu_visibility
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
from sparkops.facts.model import ExtensionNeeds, TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why, known

GID = "G1"

def _major(cuda: str | None) -> int | None:
    """``"13.0"`` -> 13; anything unparseable -> None."""
    m = re.match(r"\s*(\d+)", cuda or "")
    return int(m.group(1)) if m else None


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _arch(entry: str) -> tuple[str, int, int] | None:
    """``"sm_120"`` -> ("sm", 12, 0); ``"compute_90"`` -> ("compute", 9, 0); ``"sm_121a"`` -> ("sm", 12, 1)."""
    m = re.fullmatch(r"(sm|compute)_(\d+)(\d)[a-z]?", entry.strip().lower())
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def _covering(arch_list: list[str], cap: tuple[int, int]) -> tuple[str, str] | None:
    """The best arch-list entry that runs on ``cap`` and how: same-major SASS at or below the
    device minor ("sass"), or older PTX the driver JIT-compiles ("ptx"). None when nothing runs."""
    best: tuple[int, str, str] | None = None
    for entry in arch_list:
        a = _arch(entry)
        if a is None:
            continue
        kind, major, minor = a
        if kind == "sm" and major == cap[0] and minor <= cap[1]:
            score, how = 1000 + major * 10 + minor, "sass"
        elif kind == "compute" and (major, minor) <= cap:
            score, how = major * 10 + minor, "ptx"
        else:
            continue
        if best is None or score > best[0]:
            best = (score, entry, how)
    return (best[1], best[2]) if best else None


def _capability(ctx: CheckContext) -> tuple[int, int] | None:
    dev = ctx.facts.gpu.devices[0] if ctx.facts.gpu.devices else None
    if dev is not None and known(dev.capability):
        return tuple(dev.capability)  # type: ignore[arg-type, return-value]
    live = ctx.facts.target.live
    if isinstance(live, TorchLive) and live.capability:
        return tuple(live.capability)  # type: ignore[return-value]
    return None


def _arch_notes(live: TorchLive, cap: tuple[int, int], warns: list[Reason], notes: list[str]) -> None:
    """Judge the arch list against the device: sm_120 code runs on 12.1 (same major, lower minor)."""
    covering = _covering(live.arch_list, cap)
    if covering is None:
        warns.append(reason("G1.arch-no-kernels", arch_list=", ".join(live.arch_list), capability=f"{cap}"))
        return
    entry, how = covering
    exact = _arch(entry)
    if how == "sass" and exact and (exact[1], exact[2]) == cap:
        return
    newest = _arch(live.arch_list[-1])
    top = f"({newest[1]}.{newest[2]})" if newest else live.arch_list[-1]
    if how == "sass":
        notes.append(f"torch's arch list ends at {live.arch_list[-1]}; {entry} code runs on a {cap[0]}.{cap[1]} "
                     f"device (same major, lower minor), so the '(8.0) - {top}' capability warning is harmless")
    else:
        notes.append(f"no SASS for {cap[0]}.{cap[1]} in torch's arch list; kernels run from {entry} PTX, "
                     "JIT-compiled by the driver at first use (slow first start, then normal)")


def _loaded_variants(exts: list[ExtensionNeeds], cuda: str | None, token: str,
                     notes: list[str]) -> list[ExtensionNeeds]:
    """The extensions that can be loaded: of a family of per-CUDA-version alternatives
    (``libbitsandbytes_cuda121.so`` ... ``_cuda130.so``) only the one torch's CUDA selects, since
    the others' CUDA 11/12 needs are never loaded. When none matches torch's CUDA, all stay judged."""
    pattern = re.compile(token)
    families: dict[tuple[str, str], list[tuple[str, ExtensionNeeds]]] = {}
    for ext in exts:
        m = pattern.search(ext.file)
        if m:
            families.setdefault((ext.package, pattern.sub("*", ext.file)), []).append((m.group(2), ext))
    want = {cuda.replace(".", ""), cuda.split(".")[0]} if cuda else set()
    dropped: set[int] = set()
    for (package, name), members in families.items():
        chosen = [e for digits, e in members if digits in want]
        if len(members) < 2 or not chosen:
            continue
        dropped.update(id(e) for _, e in members if e not in chosen)
        notes.append(f"{package} ships one {name} per CUDA version ({len(members)} files): judged the one torch's "
                     f"CUDA {cuda} loads ({chosen[0].file})")
    return [e for e in exts if id(e) not in dropped]


def _torch_family(dists: dict[str, str]) -> list[str]:
    """The installed packages built against one CUDA that must move with torch: torch, torchvision,
    torchaudio, and any other distribution whose local version tag names a CUDA (``+cu128``)."""
    family = [n for n in ("torch", "torchvision", "torchaudio") if n in dists]
    family += sorted(n for n, v in dists.items() if n not in family and re.search(r"\+cu\d{2,3}\b", v or ""))
    return family or ["torch"]


def _index_for(cuda: str | None, indexes: Sequence[str]) -> str:
    """The newest PyTorch wheel index a driver supporting CUDA ``cuda`` can run (cu128 for 12.8, 12.9)."""
    m = re.match(r"\s*(\d+)\.(\d+)", cuda or "")
    if not m:
        return indexes[-1]
    have = int(m.group(1)) * 10 + int(m.group(2))
    fitting = [i for i in indexes if int(i[2:]) <= have]
    return fitting[-1] if fitting else indexes[0]


def _reinstall_values(dists: dict[str, str], index: str) -> dict[str, str]:
    """Template values for a reinstall that moves every package of torch's CUDA family together and
    removes the CUDA-12 runtime wheels it leaves behind."""
    family = _torch_family(dists)
    cu12 = sorted(d for d in dists if d.startswith("nvidia-") and d.endswith("-cu12"))
    moving = ", ".join(f"{n} {dists[n]}" if n in dists else n for n in family)
    drop = f"; then `pip uninstall -y {' '.join(cu12)}` (CUDA-12 runtime wheels left behind)" if cu12 else ""
    return {"packages": " ".join(family), "moving": moving, "index": index,
            "index_url": f"https://download.pytorch.org/whl/{index}", "uninstall": drop}


def check(ctx: CheckContext) -> Finding:
    facts, kb = ctx.facts, ctx.kb
    target = facts.target
    python = target.python or "the target interpreter"
    static = target.torch
    ts = static if isinstance(static, TorchStatic) else None
    tl = target.live if isinstance(target.live, TorchLive) else None
    dists = installed(facts)
    evidence: list[Evidence] = [ev("target.python", target.python)]
    fails: list[Reason] = []
    warns: list[Reason] = []
    notes: list[str] = []
    unknowns: list[Reason] = []
    gpu_host = ctx.platform != "none"
    indexes: tuple[str, ...] = kb.thresholds.g1.torch_indexes
    where = "container" if container.classify(ctx.facts.host.container).in_container else "target-env"

    # -- what torch says about itself: the static read first, the live import second
    version: str | None = None
    cuda: str | None = None
    tag = ""
    if ts is not None:
        version, cuda, tag = ts.version, ts.cuda, ts.local_tag
        evidence.append(ev("target.torch", ts))
    if tl is not None:
        evidence.append(ev("target.live", tl.model_dump(mode="json", include={
            "import_ok", "error", "died_by_signal", "timed_out", "duration_s", "version", "cuda",
            "cuda_available", "capability", "arch_list", "cuda_error"})))
        if version is None and tl.import_ok:
            version, cuda = tl.version, tl.cuda
            tag = version.split("+", 1)[1] if "+" in version else ""
    torch_missing = version is None and (
        (isinstance(static, Unavailable) and static.unavailable is Why.not_found)
        or (tl is not None and not tl.import_ok and "No module named 'torch'" in tl.error)
    )
    expected = ctx.profile.expected_cuda_major if ctx.profile else None
    cuda_major = _major(cuda)
    driver_cuda = str(facts.gpu.cuda_driver_version) if known(facts.gpu.cuda_driver_version) else None
    driver_major = _major(driver_cuda)
    want_index = f"cu{expected}0" if expected and f"cu{expected}0" in indexes else _index_for(driver_cuda, indexes)
    reinstall = _reinstall_values(dists, want_index)

    # -- the live import: a raise or a signal is proof, a timeout is not
    if tl is not None and not tl.import_ok and not torch_missing:
        if tl.died_by_signal:
            fails.append(reason("G1.import-died", signal=_signal_name(tl.died_by_signal),
                                error=f" ({tl.error})" if tl.error else "", **reinstall))
        elif tl.timed_out:
            unknowns.append(reason("G1.import-timeout", seconds=round(tl.duration_s)))
        else:
            fails.append(reason("G1.import-raised", error=tl.error or "an unnamed error", **reinstall))

    # -- the torch build against the platform
    evidence.append(ev("gpu.cuda_driver_version", str(facts.gpu.cuda_driver_version)))
    built = ""
    if version is not None:
        cpu_build = cuda is None or tag.startswith("cpu")
        ngc = ".nv" in tag and not tag.startswith("cu")
        built = (f"torch {version} is a CPU-only build" if cpu_build
                 else f"torch {version} built for CUDA {cuda}" + (" (NGC build: no cu tag, as expected)" if ngc else ""))
        if cpu_build and gpu_host:
            fails.append(reason("G1.cpu-only", version=version, **reinstall))
        elif cpu_build:
            notes.append("no NVIDIA GPU is visible, so a CPU-only torch is consistent with this host")
        elif gpu_host and driver_major is not None and cuda_major is not None and cuda_major > driver_major:
            older = _index_for(driver_cuda, indexes)
            fails.append(reason("G1.driver-cuda-too-old", version=version, cuda=cuda, driver_cuda=driver_cuda,
                                cuda_major=cuda_major, **_reinstall_values(dists, older)))
        elif ctx.platform == "dgx-spark" and expected and cuda_major is not None and cuda_major < expected:
            fails.append(reason("G1.wheel-cuda12", version=version, cuda=cuda, expected=expected,
                                driver=f" (driver supports {driver_cuda})" if driver_cuda else "", **reinstall))
        elif gpu_host and driver_major is None and not (ctx.platform == "dgx-spark" and expected):
            notes.append("the driver's CUDA version was not read, so torch's CUDA major was not compared with it")

    # -- torch imports but sees no GPU although the host has one: the triage decides whose problem it is
    if tl is not None and tl.import_ok and gpu_host and tl.cuda_available is False and cuda_major:
        tri = gpu_visibility.triage(facts, kb)
        err = f" ({tl.cuda_error})" if tl.cuda_error else ""
        if tri.fired is not None and tri.fired < 5:
            notes.append(f"torch {version} imports but sees no GPU{err}: {tri.summary()} — a visibility problem "
                         "(identity), not the CUDA ABI")
        elif not fails:
            fails.append(reason("G1.no-gpu-in-torch", version=version, error=err, triage=tri.summary(), **reinstall))

    # -- arch list against the device
    cap = _capability(ctx)
    if tl is not None and tl.import_ok and tl.arch_list and cap:
        _arch_notes(tl, cap, warns, notes)
    if tl is not None:
        for w in tl.warnings:
            if "capability" in w.lower():
                notes.append("torch warned at import: " + " ".join(w.split())[:200])
                break

    # -- extensions that need CUDA libraries nobody provides
    wheels_for: dict[str, list[str]] = kb.thresholds.g1.cuda_lib_wheels
    ldc = facts.cuda_libs.ldconfig
    registered: set[str] | None = set(ldc) if known(ldc) else None  # type: ignore[arg-type]
    exts = target.extensions
    if known(exts):
        unjudged: set[str] = set()
        for ext in _loaded_variants(exts, cuda, kb.thresholds.g1.per_cuda_variant_token, notes):  # type: ignore[arg-type]
            for lib in ext.needed:
                if lib not in wheels_for or lib in ext.resolved:  # found through its RUNPATH
                    continue
                if any(canonical_name(w) in dists for w in wheels_for[lib]):
                    continue
                if registered is None:
                    unjudged.add(lib)
                elif lib not in registered:
                    fails.append(reason("G1.extension-missing-lib", package=ext.package, lib=lib, file=ext.file,
                                        wheels=" / ".join(wheels_for[lib]), cuda=cuda or "?"))
                    evidence.append(ev(f"target.extensions[{ext.package}]", ext))
        if unjudged:
            notes.append(f"ldconfig was not read, so extensions needing {', '.join(sorted(unjudged))} were not judged")
        if target.extensions_truncated:
            notes.append("the extension scan stopped at its file/time limit: not every extension was read")
    elif isinstance(exts, Unavailable) and exts.unavailable is not Why.not_collected:
        notes.append(f"installed extensions not scanned: {exts}")

    # -- leftovers: two runtimes registered, cu12 wheels beside cu13
    if registered is not None:
        evidence.append(ev("cuda_libs.ldconfig[libcudart*]",
                           {k: v for k, v in ldc.items() if k.startswith("libcudart")}))  # type: ignore[union-attr]
        if "libcudart.so.12" in registered and "libcudart.so.13" in registered:
            warns.append(reason("G1.cudart12-registered"))
    cu12 = sorted(d for d in dists if d.startswith("nvidia-") and d.endswith("-cu12"))
    has_cu13 = any(d.startswith("nvidia-") and d.endswith("-cu13") for d in dists) or (cuda_major or 0) >= 13
    if cu12 and has_cu13 and not fails:
        warns.append(reason("G1.cu12-wheels-beside-cu13", wheels=", ".join(cu12), uninstall=" ".join(cu12)))
        evidence.append(ev("target.distributions[nvidia-*-cu12]", {d: dists[d] for d in cu12}))
    cudart13 = facts.cuda_libs.cudart13_load
    if cudart13 is False and ctx.platform == "dgx-spark":
        notes.append("ctypes could not load the system libcudart.so.13"
                     + (f" ({facts.cuda_libs.cudart13_error})" if facts.cuda_libs.cudart13_error else "")
                     + ": wheels that bundle their runtime still work, system-linked extensions will not")
    if where == "container":
        notes.append("this runs inside a container: a package fix belongs in the image (its Dockerfile), a driver "
                     "fix on the host")

    # -- one status: fail > unknown > warn > pass/info/skip
    warn_lines = [ctx.line(w) for w in warns]
    if fails:
        return ctx.conclude(GID, fails + warns, evidence=evidence, notes=notes + [ctx.line(u) for u in unknowns])
    if torch_missing:
        return ctx.decide(GID, "G1.torch-missing", python=python, evidence=evidence, notes=notes + warn_lines)
    if unknowns:
        return ctx.conclude(GID, unknowns, reading=built, evidence=evidence, notes=notes + warn_lines)
    if version is None:
        why = f": {static}" if isinstance(static, Unavailable) else ""
        return ctx.decide(GID, "G1.build-unread", python=python, why=why, evidence=evidence, notes=notes + warn_lines)
    if warns:
        return ctx.conclude(GID, warns, reading=built, evidence=evidence, notes=notes)
    if not gpu_host:
        return ctx.decide(GID, "G1.no-gpu-host", built=built, evidence=evidence, notes=notes)
    driver = f"; driver supports CUDA {driver_cuda}" if driver_cuda else ""
    # the spec wants the harmless (8.0)-(12.0) warning explained where the user reads, not only in notes
    arch = next((n for n in notes if n.startswith(("torch's arch list ends at", "no SASS for"))), "")
    return ctx.decide(GID, "G1.ok", built=built, driver=driver, arch=f"; {arch}" if arch else "",
                      evidence=evidence, notes=notes)
