"""G5 — bandwidth ceiling.

Memory-bound work plans against the spec figure and plateaus far below it. On GB10 the spec is
273 GB/s, a clone-based copy measures 180–192 GB/s and a read kernel 231–234 GB/s: plan on the
measured range. Without a measurement (it is opt-in and intrusive) this is an ``info`` with the
budget to plan against, taken from the GPU's profile.
"""

from __future__ import annotations

from sparkops.checks import identity
from sparkops.checks.base import CheckContext, Finding, Status, ev

GID = "G5"


def check(ctx: CheckContext) -> Finding:
    if ctx.platform == "none":
        return ctx.finding(GID, Status.skip, "no NVIDIA GPU visible: no memory bandwidth to budget")
    ident = identity.identify(ctx.facts, ctx.kb)
    name = ident.gpu_name or "this GPU"
    prof = ctx.profile
    evidence = [ev("gpu.devices[0].name", ident.gpu_name), ev("profile", prof.key if prof else None)]
    if prof is None or prof.spec_bandwidth_gbs is None:
        return ctx.finding(GID, Status.info, f"no spec bandwidth on file for {name}: a measured figure would be "
                           "reported in GB/s without a ratio to spec", evidence=evidence,
                           detail="Add the model's datasheet figure to gpu_profiles.yaml to get a budget.")
    spec = prof.spec_bandwidth_gbs
    evidence.append(ev("profile.spec_bandwidth_gbs", spec))
    if prof.measured_bandwidth_gbs:
        lo, hi = prof.measured_bandwidth_gbs
        evidence.append(ev("profile.measured_bandwidth_gbs", [lo, hi]))
        return ctx.finding(GID, Status.info,
                           f"{name}: spec {spec:.0f} GB/s; plan on {lo:.0f}–{hi:.0f} GB/s measured "
                           f"({lo / spec:.0%}–{hi / spec:.0%} of spec)",
                           detail=prof.notes or "", evidence=evidence,
                           notes=["not measured in this run (the copy test is opt-in: it allocates memory and "
                                  "loads the GPU)"])
    return ctx.finding(GID, Status.info, f"{name}: spec {spec:.0f} GB/s (datasheet); expect a copy test to reach "
                       "well below it — budget from a measurement, not the spec figure", evidence=evidence,
                       notes=["not measured in this run (the copy test is opt-in)"])
