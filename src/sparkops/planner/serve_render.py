"""``plan --serve`` as a readable table: verdict, the engine's start-up check, where the memory goes."""

from __future__ import annotations

from sparkops.planner.serve import ServePlanResult

MARK = {"fits": "FITS", "tight": "TIGHT", "does-not-fit": "DOES NOT FIT"}


def _g(x: float | None, unit: str = " GiB") -> str:
    return "-" if x is None else f"{x:,.2f}{unit}"


def _as_version(res: ServePlanResult) -> str:
    """Which vLLM release the terms that change by version (sampler, CUDA-graph estimate, V0) were taken at."""
    if res.engine != "vllm":
        return ""
    v = res.spec.engine_version
    if v:
        return f"; terms by version taken at vLLM {v}" + (f" (installed in {res.spec.installed_in})"
                                                         if res.spec.installed_in else "")
    return ("; terms by version taken at the newest modelled, but without 0.34's extensible KV cache, which only a named "
            "0.34 turns on (--engine-version or an image tag names yours)")


def render_serve(res: ServePlanResult) -> str:
    s = res.spec
    m = res.machine
    par = f", TP {s.tensor_parallel}" if s.tensor_parallel > 1 else ""
    par += f", PP {s.pipeline_parallel}" if s.pipeline_parallel > 1 else ""
    src = res.model.source
    read = f"; read from the Hub: {src.split('hub:', 1)[1]}" if "hub:" in src else ""
    lines = [f"{res.model.name} ({res.model.params_b:g}B params, {res.model.format}{read}) on {res.engine}{par}",
             f"engine accounting modelled: {res.engine_modelled_version}" + _as_version(res),
             f"machine: {m.source}: total {_g(m.total_gib)}, CUDA free {_g(m.free_gib)}"
             + (f", page cache {_g(m.page_cache_gib)}" if m.page_cache_gib is not None else "")
             + (" (unified memory)" if m.unified else ""), ""]
    planned = sum(b.gib for b in res.beside)
    # judged against the running jobs' reservations (plan_serve: the stricter of the two budgets), what they reserve
    reserved = res.budget_gib - res.footprint_gib - res.headroom_gib - planned
    lines.append(f"{MARK[res.verdict]}: holds {res.footprint_gib:,.2f} GiB of a {res.budget_gib:,.2f} GiB budget"
                 + (f" beside {planned:,.2f} GiB of other jobs" if res.beside else "")
                 + (f"{' and' if res.beside else ' beside'} {reserved:,.2f} GiB the running jobs have reserved"
                    if res.running and reserved > 0.05 else "")
                 + f"; headroom {res.headroom_gib:,.2f} GiB")
    st = res.start
    verdict = {True: "passes", False: "FAILS", None: "unknown (free memory not read)"}[st.passes]
    if st.passes is False and st.passes_after_flush:
        verdict = "FAILS now, passes after dropping the page cache"
    if st.check.startswith("none"):  # vLLM >= 0.34's extensible KV cache: no check, the share is only a cap
        lines.append(f"start-up check: none ({st.check.split(':', 1)[-1].strip()}) — the share is a cap of "
                     f"{_g(st.requested_gib)}, free {_g(st.free_gib)}")
    else:
        lines.append(f"start-up check ({st.check}): {verdict}"
                     + (f" — asks {_g(st.requested_gib)}, free {_g(st.free_gib)}" if st.requested_gib is not None else ""))
    lines.append("")
    kv = res.kv
    rows = [("weights (per GPU)", _g(res.weights_gib), res.model.weights_detail)]
    rows += [(k.replace("_", " "), _g(v) if k != "profiled_tokens" else f"{v:,.0f} tokens", "") for k, v in res.overheads.items()]
    if kv.none:
        rows.append(("KV cache pool", "none", kv.none))
    else:
        rows.append(("KV cache pool", _g(kv.available_gib), f"{kv.bytes_per_token:,.0f} bytes/token at {kv.dtype_bytes:g} B/elem"
                     + (f", {kv.sliding_layers} sliding-window layers" if kv.sliding_layers else "") + (", MLA" if kv.mla else "")))
    if kv.available_range_gib is not None:
        low, high = kv.available_range_gib
        rows.append(("KV pool range", f"{low:,.2f} to {high:,.2f} GiB",
                     "over the terms this plan cannot see (below)"
                     + ("; at 0 the engine refuses to start: no memory left for KV blocks" if low <= 0 else "")))
    if kv.other_ranks_gib is not None:
        rows.append(("KV the other ranks print", _g(kv.other_ranks_gib),
                     "V0: only the driver samples; the pool is the smallest rank's, the driver's"))
    if not kv.none:
        rows.append(("KV tokens", "-" if kv.tokens is None else f"{kv.tokens:,}", "what the engine reports as its cache size"))
    if kv.request_gib is not None:
        rows.append(("one request at full length", _g(kv.request_gib),
                     "-" if kv.max_concurrency is None else f"{kv.max_concurrency:g} such requests at once"))
    if kv.max_model_len_fitting is not None:
        rows.append(("longest single request", f"{kv.max_model_len_fitting:,} tokens", ""))
    w = max(len(r[0]) for r in rows) + 2
    lines += [f"{a:<{w}}{b:>16}  {c}".rstrip() for a, b, c in rows]
    for b in res.beside:
        lines.append(f"beside: {b.name} — {b.gib:,.2f} GiB ({b.how})")
    for b in res.running:
        lines.append(f"running now: {b.name} — {b.gib:,.2f} GiB ({b.how}; already out of the free memory above)")
    if res.suggestions:
        lines.append("")
        lines.append("to change it:")
        lines += [f"  - {x}" for x in res.suggestions]
    for n in res.notes:
        lines.append(f"note: {n}")
    for u in res.uncertainties:
        lo, hi = u.kv_change_gib
        lines.append(f"uncertain: {u.term}: assumed {u.assumed}; KV pool {lo:+.2f}..{hi:+.2f} GiB — {u.why}")
    return "\n".join(lines) + "\n"
