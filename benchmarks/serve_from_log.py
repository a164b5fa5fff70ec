#!/usr/bin/env python3
"""Score `plan --serve --from-log` on ordered pairs of real vLLM start-up logs (round 20au, issue 20).

Usage: python benchmarks/serve_from_log.py [--out FILE]
Protocol: benchmarks/results/serve-from-log-protocol.md (written and committed before this script). Every ordered pair
(a, b) of vLLM records in tests/planner/serve_logs/logs.yaml with KV GiB observed in both, the same source group
(serve_learned_terms_cv.group_of), model, GPU and engine version: b is planned from its flags plus a's logged KV pool
(serve_calibrate.calibrate, the code that ships), against b's logged KV GiB and tokens. The records are IN-SAMPLE for the
planner. Pure CPU.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402
from serve_learned_terms_cv import group_of  # noqa: E402

from sparkops.planner import serve  # noqa: E402
from sparkops.planner.serve_calibrate import calibrate  # noqa: E402
from sparkops.planner.serve_log import read_vllm_log  # noqa: E402

TOL = 10.0  # +-10 %, the scorer's rule


def tokens_obs(rec: dict) -> int | None:
    obs = rec.get("observed") or {}
    blocks = obs.get("blocks")
    return obs.get("tokens") or (blocks * obs.get("block_size", 16) if blocks else None)


def pairs(records: list[dict]) -> list[tuple[dict, dict]]:
    vl = [r for r in records if r["engine"] == "vllm" and (r.get("observed") or {}).get("kv_gib") is not None]
    key = {r["id"]: (group_of(r), r.get("model"), r.get("gpu"), str(r.get("engine_version"))) for r in vl}
    return [(a, b) for a in vl for b in vl if a is not b and key[a["id"]] == key[b["id"]]]


def predict(a: dict, b: dict) -> dict:
    """b planned from its flags plus a's log (a's flags stand for the launch line a's log prints)."""
    spec_a, spec_b = sa.spec_of(a), sa.spec_of(b)
    machine = sa.machine_of(b)
    shape_b = serve.resolve_shape(spec_b.model)
    shape_a = serve.resolve_shape(spec_a.model)
    # a's logged pool: its own KV figure as recorded (observed.kv_gib is copied from the quoted line); the reader is
    # used for what else the log shows (version, compile state), never for b
    reading = read_vllm_log(a.get("log") or "").model_copy(update={"kv_gib": float(a["observed"]["kv_gib"])})
    cal = calibrate(reading, spec_a, spec_b, machine, log_shape=shape_a, shape=shape_b, source=a["id"],
                    log_launch=a["id"], same_machine=True)  # a series is one machine's, by its records
    res = serve.plan_serve(shape_b, spec_b, machine, calibration=cal)
    return {"a": a["id"], "b": b["id"], "applied": cal.applied, "refused": cal.refused, "delta": cal.delta_gib,
            "kv": res.kv.available_gib, "tokens": res.kv.tokens, "kv_obs": float(b["observed"]["kv_gib"]),
            "tok_obs": tokens_obs(b), "unified": machine.unified}


def pct(pred: float | None, obs: float | None) -> float | None:
    if pred is None or obs is None or not obs:
        return None
    return (pred - obs) / abs(obs) * 100


def ok(p: float | None) -> bool:
    return p is not None and abs(p) <= TOL


def dl(d: float | None) -> str:
    return "-" if d is None else f"{d:+.2f}"


def fmt(p: float | None) -> str:
    return "-" if p is None else f"{p:+.1f} %"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serve-from-log.md")
    ap.add_argument("--ids", default=None, help="comma-separated record ids: pairs among these only (a blind round)")
    ap.add_argument("--blind", default=None, help="say the records are blind, and why (the sentence printed)")
    ap.add_argument("--title", default="# plan --serve --from-log: ordered pairs of real vLLM start-up logs (round 20au)")
    args = ap.parse_args()
    records = yaml.safe_load(sa.LOGS.read_text())["records"]
    if args.ids:
        wanted = set(args.ids.split(","))
        records = [r for r in records if r["id"] in wanted]
    by_id = {r["id"]: r for r in records}
    all_pairs = pairs(records)
    no_total = [(a, b) for a, b in all_pairs if sa.total_of(b) is None]
    scored = [(a, b) for a, b in all_pairs if sa.total_of(b) is not None]
    rows = [predict(a, b) for a, b in scored]
    for r in rows:
        r["kv_pct"], r["tok_pct"] = pct(r["kv"], r["kv_obs"]), pct(r["tokens"], r["tok_obs"])
    # (iii) flags alone: the existing scorer's end-to-end rows
    base_rows, _ = sa.evaluate([by_id[i] for i in sorted({r["b"] for r in rows})])
    base = {(x["id"], x["what"]): x for x in base_rows}

    def base_pct(rid: str, what: str) -> float | None:
        x = base.get((rid, what))
        return None if x is None else pct(x["pred"], x["obs"])

    out: list[str] = []
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out += [args.title, "",
            f"Machine: {platform.machine()}, {platform.system()} {platform.release()}, Python {platform.python_version()}."
            f" Date: {now}. Script: benchmarks/serve_from_log.py; protocol: "
            "benchmarks/results/serve-from-log-protocol.md (committed before the code).", "",
            (f"**BLIND**: {args.blind}. " if args.blind else
             "**IN-SAMPLE**: every record here shaped the planner over 13 sessions. ")
            + "The calibration has no fitted constant (delta = a's logged pool - the plan's pool for a's own line on "
            "the same machine), so these numbers measure the method, not a fit. ok = within +-10 %.", ""]
    sets = {"all": rows, "GB10": [r for r in rows if r["unified"]], "discrete": [r for r in rows if not r["unified"]]}
    out += ["## (i) all ordered pairs, calibrated", "",
            f"{len(all_pairs)} ordered pairs meet the protocol's rules 1-3; {len(no_total)} of them have a b whose GPU "
            "total the scorer does not know (no KV row from flags alone either) and are not scored; "
            f"{len(scored)} are scored.", "",
            "| set | pairs | calibrated | refused | KV GiB ok | KV tokens ok |", "|---|---|---|---|---|---|"]
    for name, rs in sets.items():
        kv = [r for r in rs if r["kv_pct"] is not None]
        tk = [r for r in rs if r["tok_pct"] is not None]
        out.append(f"| {name} | {len(rs)} | {sum(r['applied'] for r in rs)} | {sum(not r['applied'] for r in rs)} | "
                   f"{sum(ok(r['kv_pct']) for r in kv)}/{len(kv)} | {sum(ok(r['tok_pct']) for r in tk)}/{len(tk)} |")
    out += ["", "| a (the log) | b (planned) | delta GiB | KV pred | KV obs | KV err | tokens pred | tokens obs | "
            "tokens err | refused |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['a']} | {r['b']} | {dl(r['delta'])} | "
                   f"{r['kv']} | {r['kv_obs']} | {fmt(r['kv_pct'])} | {r['tokens']} | {r['tok_obs'] or '-'} | "
                   f"{fmt(r['tok_pct'])} | {r['refused'] or ''} |")
    if no_total:
        out += ["", "Not scored (b's GPU total unknown to the scorer): "
                + "; ".join(f"{a['id']} -> {b['id']}" for a, b in no_total)]
    # (ii) + (iii) per record b
    per_b: dict[str, list[dict]] = {}
    for r in rows:
        per_b.setdefault(r["b"], []).append(r)
    brows = []
    for bid, rs in sorted(per_b.items()):
        kvs = [r["kv_pct"] for r in rs if r["kv_pct"] is not None]
        tks = [r["tok_pct"] for r in rs if r["tok_pct"] is not None]
        brows.append({"b": bid, "n": len(rs), "unified": rs[0]["unified"],
                      "kv": statistics.median(kvs) if kvs else None, "tok": statistics.median(tks) if tks else None,
                      "kv0": base_pct(bid, "KV GiB (end to end)"), "tok0": base_pct(bid, "KV tokens (end to end)")})
    out += ["", "## (ii) per record b: the median over its a's, calibrated; (iii) the same b from flags alone", "",
            "| set | records b | KV GiB ok (calibrated, median over a) | KV GiB ok (flags alone) | "
            "KV tokens ok (calibrated) | KV tokens ok (flags alone) |", "|---|---|---|---|---|---|"]
    bsets = {"all": brows, "GB10": [x for x in brows if x["unified"]], "discrete": [x for x in brows if not x["unified"]]}
    for name, bs in bsets.items():
        def c(key: str, bs: list[dict] = bs) -> str:
            vals = [x[key] for x in bs if x[key] is not None]
            return f"{sum(ok(v) for v in vals)}/{len(vals)}"
        out.append(f"| {name} | {len(bs)} | {c('kv')} | {c('kv0')} | {c('tok')} | {c('tok0')} |")
    out += ["", "| b | GPU | a's | KV err calibrated (median) | KV err flags alone | tokens err calibrated (median) | "
            "tokens err flags alone |", "|---|---|---|---|---|---|---|"]
    for x in brows:
        out.append(f"| {x['b']} | {'GB10' if x['unified'] else 'discrete'} | {x['n']} | {fmt(x['kv'])} | {fmt(x['kv0'])} | "
                   f"{fmt(x['tok'])} | {fmt(x['tok0'])} |")
    out += ["", "## (iv) by GPU kind", "", "The 'GB10' and 'discrete' rows of the tables above (GB10 = the scorer's "
            "machine_of(b).unified: the record's GPU names GB10 / DGX Spark / GX10).", ""]
    args.out.write_text("\n".join(out) + "\n")
    print("\n".join(out[:40]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
