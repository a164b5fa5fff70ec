#!/usr/bin/env python3
"""Score `plan --serve` against real engine start-up logs (tests/planner/serve_logs/logs.yaml).

Usage: python benchmarks/serve_accuracy.py [--out FILE]
Each record is predicted from its model name, flags and GPU alone, never from its observed
numbers, except where a row says "given": those rows feed the engine's own KV memory (or token
count) in to test the bytes-per-token model by itself. Writes a markdown table and a summary.
Pure CPU; no GPU, no network.
"""

from __future__ import annotations

import argparse
import math
import platform
import re
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from sparkops.planner import serve  # noqa: E402
from sparkops.planner.serve_engines import ServeSpec  # noqa: E402

LOGS = ROOT / "tests" / "planner" / "serve_logs" / "logs.yaml"
GIB = 1024**3
MIB = 1024**2

# cudaMemGetInfo totals of GPUs named without a total in their log (public vLLM logs print these;
# +-0.2 GiB between boards). Used only for records whose log names the GPU.
GPU_TOTAL_GIB = {"A100 80GB": 79.2, "H100 80GB": 79.2, "4x H100 80GB": 79.2,
                 "A100 40GB": 39.39}  # PyTorch's "total capacity of 39.39 GiB" on A100 40GB

SPEC_KEYS = {"gpu_memory_utilization", "max_model_len", "tensor_parallel_size", "tp", "kv_cache_dtype", "max_num_seqs",
             "max_num_batched_tokens", "enforce_eager", "mem_fraction_static", "ctx_size", "parallel", "n_gpu_layers",
             "quantization", "pipeline_parallel_size", "enable_expert_parallel", "flash_attn", "kv_unified"}


ENV_KV = "KV GiB (environment given)"
ENV_TOKENS = "KV tokens (environment given)"
VLLM_GOAL = ("KV GiB (end to end)", "KV tokens (end to end)", ENV_KV, ENV_TOKENS,
             "KV GiB given the log's CUDA-graph estimate", "KV tokens given KV GiB")


def spec_of(rec: dict) -> ServeSpec:
    f = dict(rec.get("flags") or {})
    kw: dict = {"engine": rec["engine"], "model": rec.get("model"), "engine_version": rec.get("engine_version")}
    for k, v in f.items():
        if k in ("tensor_parallel_size", "tp"):
            kw["tensor_parallel"] = v
        elif k == "pipeline_parallel_size":
            kw["pipeline_parallel"] = v
        elif k == "quantization":
            kw["quantization"] = {"int8-w8a8": "int8"}.get(v, v)
        elif k in ("enable_expert_parallel", "flash_attn", "kv_unified"):
            continue
        elif k == "env":  # variables set on the launch line (VLLM_USE_FLASHINFER_SAMPLER=1 ...)
            kw["env"] = dict(v)
        elif k == "max_num_tokens":  # TensorRT-LLM's build/serve limit: the profiled token count
            kw["max_num_batched_tokens"] = v
        elif k == "max_seq_len":
            kw["max_model_len"] = v
        elif k in ServeSpec.model_fields:
            kw[k] = v
    if rec["engine"] == "ollama" and kw.get("ctx_size") and kw.get("parallel"):
        kw["ctx_size"] //= kw["parallel"]  # the runner's --ctx-size is num_ctx x parallel
    return ServeSpec(**kw)


def total_of(rec: dict) -> float | None:
    if rec.get("gpu_total_gib"):
        return float(rec["gpu_total_gib"])
    return GPU_TOTAL_GIB.get(rec.get("gpu", ""))


def machine_of(rec: dict) -> serve.Machine:
    """The machine a record's log ran on, as the scorer predicts it: its GPU's total (1000 GiB when unknown), the free
    memory the log shows (else the total), one pool for CPU and GPU on a GB10."""
    total = total_of(rec) or 1000.0
    return serve.Machine(source="log", total_gib=total, free_gib=(rec.get("observed") or {}).get("free_gib") or total,
                         unified=bool(re.search(r"GB10|DGX Spark|GX10", rec.get("gpu", ""))), gpu_name=rec.get("gpu", ""))


def kv_mib_unbounded(rec: dict) -> float:
    """The plan's KV cache in MiB for a record on a machine too large to bind (1000 GiB total and free): what the
    engine's own cell / token arithmetic gives, whatever the log's GPU (llama.cpp's -c cells, q8_0 bytes, slots)."""
    m = serve.Machine(source="log", total_gib=1000.0, free_gib=1000.0, gpu_name=rec.get("gpu", ""))
    spec = spec_of(rec)
    return serve.plan_serve(serve.resolve_shape(spec.model), spec, m).kv.available_gib * 1024


def plan_of(rec: dict, **update) -> serve.ServePlanResult:
    """A record predicted from its model name, flags and GPU alone, as the scorer predicts it; ``update`` changes the
    spec (a test's what-if)."""
    spec = spec_of(rec)
    return serve.plan_serve(serve.resolve_shape(spec.model), spec.model_copy(update=update), machine_of(rec))


def pct(pred: float, obs: float) -> float:
    return (pred - obs) / abs(obs) * 100 if obs else float("nan")


def evaluate(records: list[dict]) -> tuple[list[dict], list[str]]:
    rows: list[dict] = []
    skipped: list[str] = []
    for rec in records:
        obs = rec.get("observed") or {}
        rid = rec["id"]
        try:
            spec = spec_of(rec)
        except Exception as exc:  # noqa: BLE001 - an engine the predictor does not model: a miss, reported
            skipped.append(f"{rid}: no spec for engine {rec['engine']!r} ({str(exc).splitlines()[0]})")
            rows.extend(_unpredicted(rec, obs))
            continue
        total = total_of(rec)
        if rec.get("model") is None:  # start-up check only
            util = spec.gpu_memory_utilization or 0.9
            requested = math.ceil(total * util * GIB) / GIB
            pred = "pass" if obs["free_gib"] >= requested else "fail"
            rows.append({"id": rid, "what": "start check", "pred": pred, "obs": obs["start"],
                         "ok": pred == obs["start"], "note": f"free {obs['free_gib']} vs {requested:.2f} GiB"})
            continue
        name = spec.model or rec["model"]  # the spec's reading of the name (an Ollama library tag gains its size)
        try:
            shape = serve.resolve_shape(name)
        except Exception as exc:  # noqa: BLE001 - a benchmark row, reported
            skipped.append(f"{rid}: model not resolved ({exc})")
            rows.extend(_unpredicted(rec, obs))
            continue
        machine = machine_of(rec)
        res = serve.plan_serve(shape, spec, machine)
        tp = max(1, spec.tensor_parallel)
        # weights
        if rec["engine"] in ("vllm", "sglang") and "weights_gib" in obs:
            rows.append(_num(rid, "weights GiB/rank", res.weights_gib, obs["weights_gib"]))
        if rec["engine"] == "llama.cpp" and "weights_mib" in obs:
            w_obs = (obs["weights_mib"] + obs.get("weights_cpu_mib", 0)) / 1024
            rows.append(_num(rid, "weights GiB (file tensors)", res.weights_gib, w_obs))
        if rec["engine"] == "ollama" and "weights_gib" in obs:
            rows.append(_num(rid, "weights GiB (file tensors)", res.weights_gib, obs["weights_gib"]))
        # KV memory and tokens
        blocks = obs.get("blocks")
        tokens_obs = obs.get("tokens") or (blocks * obs.get("block_size", 16) if blocks else None)
        if rec["engine"] == "vllm":
            note = _range_note(res, obs.get("kv_gib"))
            if total and "kv_gib" in obs:
                # a V0 log line quoted from a non-driver worker (kv_rank: worker) is that rank's KV figure,
                # not the pool's (only the driver samples; the pool is the smallest rank's)
                worker = obs.get("kv_rank") == "worker" and res.kv.other_ranks_gib is not None
                pred_kv = res.kv.other_ranks_gib if worker else res.kv.available_gib
                rows.append(_num(rid, "KV GiB (end to end)", pred_kv, obs["kv_gib"],
                                 ("a non-driver rank's KV; " + note) if worker else note))
            if total and tokens_obs:
                rows.append(_num(rid, "KV tokens (end to end)", res.kv.tokens, tokens_obs, note))
            if total and rec.get("environment") and ("kv_gib" in obs or tokens_obs):
                # the log shows the environment vLLM ran in (e.g. "Using FlashInfer for top-p & top-k sampling" /
                # "FlashInfer is not available"): the record carries it as `plan --serve --python` would read it
                # on that machine (ServeSpec.flashinfer_installed), and the torch.compile cache it found where its
                # own lines say (ServeSpec.compile_state, serve.vllm_compile_state); flags alone stay the
                # "end to end" rows
                envd = rec["environment"]
                update: dict = {}
                if "flashinfer_installed" in envd:
                    update.update(flashinfer_installed=envd["flashinfer_installed"], installed_in="the log's environment")
                if envd.get("compile_state") in ("cold", "warm"):
                    update["compile_state"] = envd["compile_state"]
                given = serve.plan_serve(shape, spec.model_copy(update=update), machine)
                what = ", ".join(f"{k}={envd[k]}" for k in ("flashinfer_installed", "compile_state") if k in envd)
                if "kv_gib" in obs:
                    rows.append(_num(rid, ENV_KV, given.kv.available_gib, obs["kv_gib"], what))
                if tokens_obs:
                    rows.append(_num(rid, ENV_TOKENS, given.kv.tokens, tokens_obs, what))
            # only where the version subtracts its estimate from the budget (serve.graphs_in_budget): a 0.19.1 log
            # prints the estimate but sizes the pool without it, so feeding it in would move nothing real
            if total and "kv_gib" in obs and "cudagraph_estimate_gib" in obs and res.overheads.get("cudagraph") \
                    and serve.graphs_in_budget(spec, shape) and not serve.v2_graphs_outside_budget(shape, spec):
                given_kv = res.kv.available_gib + res.overheads["cudagraph"] - obs["cudagraph_estimate_gib"]
                rows.append(_num(rid, "KV GiB given the log's CUDA-graph estimate", given_kv, obs["kv_gib"],
                                 f"estimate {obs['cudagraph_estimate_gib']} GiB vs modelled {res.overheads['cudagraph']}"))
            if "kv_gib" in obs and tokens_obs:
                # the plan's own token model (serve.vllm_token_model): drafter, MTP layers, hybrid report
                given = serve.vllm_token_model(shape, spec, batched_tokens=int(res.overheads["profiled_tokens"]))\
                    .tokens(obs["kv_gib"])
                rows.append(_num(rid, "KV tokens given KV GiB", given, tokens_obs))
            if "fits_max_model_len" in obs and total:
                rows.append({"id": rid, "what": "fits max_model_len", "pred": res.kv.fits_max_model_len,
                             "obs": obs["fits_max_model_len"], "ok": res.kv.fits_max_model_len == obs["fits_max_model_len"],
                             "note": f"pool {res.kv.available_gib} GiB, one request {res.kv.request_gib} GiB"})
            if obs.get("start") and total:
                rows.append({"id": rid, "what": "start check", "pred": "pass" if res.start.passes else "fail",
                             "obs": obs["start"], "ok": ("pass" if res.start.passes else "fail") == obs["start"], "note": ""})
            if obs.get("kv_lines") == "none":  # an encoder-only start prints no KV line: the plan must say "none"
                rows.append({"id": rid, "what": "no KV pool", "pred": res.kv.none is not None, "obs": True,
                             "ok": res.kv.none is not None, "note": ""})
        if rec["engine"] == "trtllm":
            if "kv_gib" in obs:
                rows.append(_num(rid, "KV GiB (end to end)", res.kv.available_gib, obs["kv_gib"]))
            if tokens_obs:
                rows.append(_num(rid, "KV tokens (end to end)", res.kv.tokens, tokens_obs))
            if "free_after_load_gib" in obs and "kv_gib" in obs:
                frac = spec.free_gpu_memory_fraction or 0.9
                rows.append(_num(rid, "KV GiB given free after load", frac * obs["free_after_load_gib"], obs["kv_gib"]))
            if "kv_gib" in obs and tokens_obs:
                kvb = serve.kv_dtype_bytes(spec)
                blk = obs.get("block_size", 32)
                page = serve.kv_layer_bytes(shape, kvb, tp) * shape.attn_layers * blk
                rows.append(_num(rid, "KV tokens given KV GiB", int(obs["kv_gib"] * GIB // page) * blk, tokens_obs))
        if rec["engine"] == "sglang" and total and tokens_obs:
            # SGLang's "max_total_num_tokens" / "KV Cache is allocated. #tokens": the pool from flags alone
            rows.append(_num(rid, "KV tokens (end to end)", res.kv.tokens, tokens_obs))
        if rec["engine"] == "sglang" and tokens_obs and "k_gib" in obs:
            kvb = serve.kv_dtype_bytes(spec)
            k_pred = tokens_obs * serve.kv_bytes_per_token(shape, kvb, tp) / 2 / GIB
            rows.append(_num(rid, "K GiB given tokens", k_pred, obs["k_gib"]))
        if rec["engine"] in ("llama.cpp", "ollama") and "kv_mib" in obs:
            rows.append(_num(rid, "KV MiB (end to end)", res.kv.available_gib * 1024, obs["kv_mib"]))
        if rec["engine"] in ("llama.cpp", "ollama"):
            rows.extend(_gguf_slot_rows(rid, obs, shape, spec, res))
    return rows, skipped


def _gguf_slot_rows(rid: str, obs: dict, shape, spec: ServeSpec, res) -> list[dict]:
    """llama.cpp's own slot layout as `llama_context` prints it: n_seq_max (the slots) against the plan's slot count
    (serve._gguf_kv_cells), and n_ctx_seq / n_ctx_per_seq (the cells one sequence may use) against the plan's longest
    request (kv.max_model_len_fitting). Both are counts the engine sets from the flags: equal or not."""
    out = []
    if "n_seq_max" in obs:
        pred = serve._gguf_kv_cells(shape, spec).slots
        out.append({"id": rid, "what": "slots (n_seq_max)", "pred": pred, "obs": obs["n_seq_max"],
                    "ok": pred == obs["n_seq_max"], "note": ""})
    if "n_ctx_seq" in obs:
        pred = res.kv.max_model_len_fitting
        out.append({"id": rid, "what": "per-slot context (n_ctx_seq)", "pred": pred, "obs": obs["n_ctx_seq"],
                    "ok": pred == obs["n_ctx_seq"], "note": ""})
    return out


def _unpredicted(rec: dict, obs: dict) -> list[dict]:
    """A record the predictor could not take (unknown model or engine) counts as a miss on every
    quantity its log shows, under the row names a predicted record of its engine gets, so a skipped
    record can never raise the score."""
    rid, engine = rec["id"], rec.get("engine")
    out = []
    gguf = engine in ("llama.cpp", "ollama")
    if "weights_gib" in obs:
        out.append(_num(rid, "weights GiB (file tensors)" if gguf else "weights GiB/rank", None, obs["weights_gib"]))
    if "weights_mib" in obs:
        out.append(_num(rid, "weights GiB (file tensors)", None, obs["weights_mib"] / 1024))
    if "kv_gib" in obs:
        out.append(_num(rid, "KV GiB (end to end)", None, obs["kv_gib"]))
    if "kv_mib" in obs:
        out.append(_num(rid, "KV MiB (end to end)", None, obs["kv_mib"]))
    tokens = obs.get("tokens") or (obs["blocks"] * obs.get("block_size", 16) if obs.get("blocks") else None)
    if tokens:
        out.append(_num(rid, "KV tokens (end to end)", None, tokens))
    if obs.get("start"):  # round 20ap: a start check the predictor could not take is a miss too
        out.append({"id": rid, "what": "start check", "pred": None, "obs": obs["start"], "ok": False,
                    "note": "not predicted"})
    if obs.get("kv_lines") == "none":
        out.append({"id": rid, "what": "no KV pool", "pred": None, "obs": True, "ok": False, "note": "not predicted"})
    for key, what in (("n_seq_max", "slots (n_seq_max)"), ("n_ctx_seq", "per-slot context (n_ctx_seq)")):
        if gguf and key in obs:
            out.append({"id": rid, "what": what, "pred": None, "obs": obs[key], "ok": False, "note": "not predicted"})
    return out


def _range_note(res, kv_obs: float | None) -> str:
    """The plan's KV range over its named uncertainties, and whether the log's KV falls inside it."""
    rng = res.kv.available_range_gib
    if not rng:
        return ""
    terms = ", ".join(u.term for u in res.uncertainties)
    inside = "" if kv_obs is None else (" (log inside)" if rng[0] <= kv_obs <= rng[1] else " (log OUTSIDE)")
    return f"range {rng[0]}..{rng[1]} GiB over {terms}{inside}"


def _num(rid: str, what: str, pred: float | None, obs: float, note: str = "") -> dict:
    if pred is None:
        return {"id": rid, "what": what, "pred": None, "obs": obs, "ok": False, "err": float("nan"), "note": "no prediction"}
    e = pct(pred, obs)
    return {"id": rid, "what": what, "pred": round(float(pred), 2), "obs": obs, "ok": abs(e) <= 10, "err": e, "note": note}


def goal_lines(rows: list[dict]) -> list[str]:
    """The goal counted twice: from the flags alone, and with the environment where the log shows it (a
    record's "environment given" row stands in for its "end to end" row, every other record unchanged)."""
    out = []
    for e2e, env in (("KV GiB (end to end)", ENV_KV), ("KV tokens (end to end)", ENV_TOKENS)):
        vllm = [r for r in rows if r["id"].startswith("vllm-")]
        given = {r["id"]: r for r in vllm if r["what"] == env}
        alone = [r for r in vllm if r["what"] == e2e]
        mixed = [given.get(r["id"], r) for r in alone]
        for label, rs in (("flags alone", alone), ("environment given where the log shows it", mixed)):
            ok = sum(1 for r in rs if r["ok"])
            pct_ok = f"{ok / len(rs) * 100:.0f} %" if rs else "n/a"
            out.append(f"| {e2e.split(' (')[0]}, {label} | {len(rs)} | {ok}/{len(rs)} = {pct_ok} | goal: 90 % |")
    # the plan's range over the terms it cannot see: how often the log's KV falls inside it (rows with a range)
    ranged = [r for r in rows if r["id"].startswith("vllm-") and r["what"] == "KV GiB (end to end)"
              and ("(log inside)" in r["note"] or "(log OUTSIDE)" in r["note"])]
    inside = sum(1 for r in ranged if "(log inside)" in r["note"])
    if ranged:
        out.append(f"| KV GiB inside the plan's stated range | {len(ranged)} | {inside}/{len(ranged)} = "
                   f"{inside / len(ranged) * 100:.0f} % | (a range, not the goal) |")
    return out


def summary(rows: list[dict]) -> list[str]:
    out = []
    kinds = sorted({r["what"] for r in rows})
    for k in kinds:
        rs = [r for r in rows if r["what"] == k]
        errs = [abs(r["err"]) for r in rs if "err" in r and not math.isnan(r["err"])]
        ok = sum(1 for r in rs if r["ok"])
        med = f"median |error| {statistics.median(errs):.1f} %" if errs else "exact match"
        out.append(f"| {k} | {len(rs)} | {ok}/{len(rs)} | {med} |")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="markdown file to write (default: print)")
    ap.add_argument("--title", default="Serving planner against real engine start-up logs")
    ap.add_argument("--ids", default=None,
                    help="comma-separated record ids to score (default: every record); a blind round scores its own")
    args = ap.parse_args()
    data = yaml.safe_load(LOGS.read_text())
    records = data["records"]
    if args.ids:
        wanted = [i.strip() for i in args.ids.split(",") if i.strip()]
        missing = sorted(set(wanted) - {r["id"] for r in records})
        if missing:
            ap.error(f"unknown record ids: {', '.join(missing)}")
        records = [r for r in records if r["id"] in wanted]
    rows, skipped = evaluate(records)
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [f"# {args.title}", "",
             f"Run {now} on {platform.node() or 'host'} ({platform.machine()}, Python {platform.python_version()}); "
             f"{len(records)} records from `tests/planner/serve_logs/logs.yaml` (v{data['version']}).",
             "Predicted from model name, flags and GPU alone; \"given\" rows feed the engine's own number in.",
             "ok = within ±10 % (numbers) or equal (verdicts).", "",
             "| quantity | rows | ok | error |", "|---|---|---|---|", *summary(rows), "",
             "vLLM records only (the issue's goal: KV within 10 % for 90 % of the logs):", "",
             "| quantity | rows | ok | error |", "|---|---|---|---|",
             *summary([r for r in rows if r["id"].startswith("vllm-") and r["what"] in VLLM_GOAL]),
             *goal_lines(rows), "",
             "| record | quantity | predicted | observed | error | ok | note |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        err = f"{r['err']:+.1f} %" if "err" in r and not math.isnan(r["err"]) else ""
        lines.append(f"| {r['id']} | {r['what']} | {r['pred']} | {r['obs']} | {err} | {'yes' if r['ok'] else 'NO'} | {r['note']} |")
    if skipped:
        lines += ["", "Skipped:", *(f"- {s}" for s in skipped)]
    text = "\n".join(lines) + "\n"
    if args.out:
        args.out.write_text(text)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
