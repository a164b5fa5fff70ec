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

from sparkops.checks import gpu_visibility
from sparkops.checks.base import CheckContext, Evidence, Finding, Status, canonical_name, ev, installed
from sparkops.facts.model import ExtensionNeeds, TorchLive, TorchStatic
from sparkops.facts.reading import Unavailable, Why, known

GID = "G1"

TRIAGE_FIX = (
    "Work the GPU-visibility triage in order: container flags `--runtime=nvidia --gpus all`, "
    "CUDA_VISIBLE_DEVICES, /dev/nvidia* permissions, a wedged CUDA context (retry from a fresh shell); "
    "reinstall torch only when torch.version.cuda is not the driver's CUDA major."
)
LEFTOVER_FIX = (
    "Remove the leftovers: `pip uninstall` the nvidia-*-cu12 wheels and drop the stale libcudart.so.12 "
    "path from /etc/ld.so.conf.d (then `sudo ldconfig`), unless something you still run needs them."
)


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


def _arch_notes(live: TorchLive, cap: tuple[int, int], warns: list[tuple[str, str]], notes: list[str]) -> None:
    """Judge the arch list against the device: sm_120 code runs on 12.1 (same major, lower minor)."""
    covering = _covering(live.arch_list, cap)
    if covering is None:
        warns.append((f"torch's arch list ({', '.join(live.arch_list)}) has no kernels that run on capability "
                      f"{cap}: expect 'no kernel image is available for execution on the device'",
                      "Install a torch build whose arch list covers this GPU (cu130 wheels or an NGC container)."))
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


def check(ctx: CheckContext) -> Finding:
    facts, kb = ctx.facts, ctx.kb
    target = facts.target
    python = target.python or "the target interpreter"
    static = target.torch
    ts = static if isinstance(static, TorchStatic) else None
    tl = target.live if isinstance(target.live, TorchLive) else None
    dists = installed(facts)
    evidence: list[Evidence] = [ev("target.python", target.python)]
    fails: list[str] = []
    warns: list[tuple[str, str]] = []  # (text, fix)
    notes: list[str] = []
    unknowns: list[str] = []
    abi_fail = False  # a failure the catalog fix (reinstall from cu130 / use a container) addresses
    gpu_host = ctx.platform != "none"

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

    # -- the live import: a raise or a signal is proof, a timeout is not
    if tl is not None and not tl.import_ok and not torch_missing:
        if tl.died_by_signal:
            fails.append(f"`import torch` died by {_signal_name(tl.died_by_signal)}"
                         + (f" ({tl.error})" if tl.error else ""))
            abi_fail = True
        elif tl.timed_out:
            unknowns.append(f"`import torch` did not finish within {tl.duration_s:.0f} s (a hang at import "
                            "is a sign of trouble, not proof of an ABI mismatch)")
        else:
            fails.append(f"`import torch` raised: {tl.error or 'an unnamed error'}")
            abi_fail = True

    # -- the torch build against the platform
    cuda_major = _major(cuda)
    driver_cuda = str(facts.gpu.cuda_driver_version) if known(facts.gpu.cuda_driver_version) else None
    driver_major = _major(driver_cuda)
    evidence.append(ev("gpu.cuda_driver_version", str(facts.gpu.cuda_driver_version)))
    built = ""
    if version is not None:
        cpu_build = cuda is None or tag.startswith("cpu")
        ngc = ".nv" in tag and not tag.startswith("cu")
        built = (f"torch {version} is a CPU-only build" if cpu_build
                 else f"torch {version} built for CUDA {cuda}" + (" (NGC build: no cu tag, as expected)" if ngc else ""))
        expected = ctx.profile.expected_cuda_major if ctx.profile else None
        if cpu_build and gpu_host:
            fails.append(f"{built} on a GPU host")
            abi_fail = True
        elif cpu_build:
            notes.append("no NVIDIA GPU is visible, so a CPU-only torch is consistent with this host")
        elif ctx.platform == "dgx-spark" and expected and cuda_major is not None and cuda_major < expected:
            fails.append(f"{built}; DGX Spark runs CUDA {expected}"
                         + (f" (driver supports {driver_cuda})" if driver_cuda else ""))
            abi_fail = True
        elif gpu_host and driver_major is not None and cuda_major is not None and cuda_major > driver_major:
            fails.append(f"{built}, newer than the driver supports (CUDA {driver_cuda})")
            abi_fail = True
        elif gpu_host and driver_major is None and not (ctx.platform == "dgx-spark" and expected):
            notes.append("the driver's CUDA version was not read, so torch's CUDA major was not compared with it")

    # -- torch imports but sees no GPU although the host has one: the triage, not a reinstall
    triage_fix = TRIAGE_FIX
    if tl is not None and tl.import_ok and gpu_host and tl.cuda_available is False and cuda_major:
        err = f" ({tl.cuda_error})" if tl.cuda_error else ""
        tri = gpu_visibility.triage(facts)
        fails.append(f"torch {version} imports but torch.cuda.is_available() is False{err}; {tri.summary()}")
        triage_fix = tri.fix() or TRIAGE_FIX

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
    wheels_for: dict[str, list[str]] = kb.t("g1.cuda_lib_wheels")
    ldc = facts.cuda_libs.ldconfig
    registered: set[str] | None = set(ldc) if known(ldc) else None  # type: ignore[arg-type]
    exts = target.extensions
    if known(exts):
        unjudged: set[str] = set()
        for ext in _loaded_variants(exts, cuda, kb.t("g1.per_cuda_variant_token"), notes):  # type: ignore[arg-type]
            for lib in ext.needed:
                if lib not in wheels_for or lib in ext.resolved:  # found through its RUNPATH
                    continue
                if any(canonical_name(w) in dists for w in wheels_for[lib]):
                    continue
                if registered is None:
                    unjudged.add(lib)
                elif lib not in registered:
                    fails.append(f"{ext.package} needs {lib} ({ext.file}): not registered with ldconfig and no "
                                 f"{' / '.join(wheels_for[lib])} wheel provides it")
                    evidence.append(ev(f"target.extensions[{ext.package}]", ext))
                    abi_fail = True
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
            warns.append(("libcudart.so.12 and libcudart.so.13 are both registered with ldconfig (an earlier "
                          "install's leftover: CUDA-12 wheels then load a runtime the rest of the stack does not use)",
                          LEFTOVER_FIX))
    cu12 = sorted(d for d in dists if d.startswith("nvidia-") and d.endswith("-cu12"))
    has_cu13 = any(d.startswith("nvidia-") and d.endswith("-cu13") for d in dists) or (cuda_major or 0) >= 13
    if cu12 and has_cu13:
        warns.append((f"CUDA-12 wheels installed beside a CUDA-13 stack: {', '.join(cu12)}", LEFTOVER_FIX))
        evidence.append(ev("target.distributions[nvidia-*-cu12]", {d: dists[d] for d in cu12}))
    cudart13 = facts.cuda_libs.cudart13_load
    if cudart13 is False and ctx.platform == "dgx-spark":
        notes.append("ctypes could not load the system libcudart.so.13"
                     + (f" ({facts.cuda_libs.cudart13_error})" if facts.cuda_libs.cudart13_error else "")
                     + ": wheels that bundle their runtime still work, system-linked extensions will not")

    # -- one status: fail > unknown > warn > pass/info/skip
    if fails:
        summary = fails[0] + (f" (+{len(fails) - 1} more)" if len(fails) > 1 else "")
        detail = "; ".join(fails[1:] + [w for w, _ in warns])
        kw = {} if abi_fail else {"fix": triage_fix}
        return ctx.finding(GID, Status.fail, summary, detail=detail, evidence=evidence,
                           notes=notes + unknowns, **kw)
    if torch_missing:
        return ctx.finding(GID, Status.skip, f"torch not installed in {python}", evidence=evidence,
                           notes=notes + [w for w, _ in warns])
    if unknowns:
        return ctx.finding(GID, Status.unknown, unknowns[0] + (f"; {built}" if built else ""),
                           detail="Run `python -c 'import torch'` in that environment by hand to see whether it "
                                  "hangs, or re-run with a longer timeout.",
                           evidence=evidence, notes=notes + [w for w, _ in warns])
    if version is None:
        why = f": {static}" if isinstance(static, Unavailable) else ""
        return ctx.finding(GID, Status.skip, f"torch's build could not be read in {python}{why}",
                           detail="Tried torch/version.py (static) and the live import.", evidence=evidence,
                           notes=notes + [w for w, _ in warns])
    if warns:
        summary = warns[0][0] + (f" (+{len(warns) - 1} more)" if len(warns) > 1 else "")
        return ctx.finding(GID, Status.warn, summary, detail="; ".join([built] + [w for w, _ in warns[1:]]),
                           evidence=evidence, notes=notes, fix=warns[0][1])
    if not gpu_host:
        return ctx.finding(GID, Status.info, f"{built}; no NVIDIA GPU visible, so the build is not judged against "
                           "a driver (identity fails first)", evidence=evidence, notes=notes)
    driver = f"; driver supports CUDA {driver_cuda}" if driver_cuda else ""
    # the spec wants the harmless (8.0)-(12.0) warning explained where the user reads, not only in notes
    arch = next((n for n in notes if n.startswith(("torch's arch list ends at", "no SASS for"))), "")
    return ctx.finding(GID, Status.passed, f"{built}{driver}" + (f"; {arch}" if arch else ""), evidence=evidence,
                       notes=notes)
