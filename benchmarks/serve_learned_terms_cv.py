#!/usr/bin/env python3
"""Leave-one-group-out CV of the fitted non-KV terms of vLLM's KV budget (round 20al, issue 20).

Usage: python benchmarks/serve_learned_terms_cv.py [--groups-only] [--out FILE]
Protocol: benchmarks/results/serve-learned-terms-v1.md. Groups records by source (group_of), holds out one group at a
time, fits each term's one number on the others (a median of the residual non-KV memory) and scores the held-out
group's vLLM rows with serve_accuracy.evaluate(), the unchanged planner scored in the same run. Pure CPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import serve_accuracy as sa  # noqa: E402

from sparkops.planner import serve  # noqa: E402

GROUPS_OUT = ROOT / "benchmarks" / "results" / "serve-learned-terms-groups.yaml"
ENGINE_REPOS = ("vllm-project/", "pytorch/pytorch", "sgl-project/", "ggml-org/")
# handles that are one author or one notes set (rule 5 of the protocol), each with its reason
MERGES = {
    "gb10": ("wsl", "the GB10 docker-compose notes say 'the same user's arm64' setup as the WSL2 docker-compose notes"),
    "kr": ("llmso", "vllm-kr-lab3 cites the same code-index file (61815222665) as the llmso-orca3 records"),
    "orca3": ("llmso", "the orca3/llm-model-inference Korean notes are the course the llmso-orca3 records follow"),
    "twogpu": ("kubesimplify", "'Running a single LLM across two GPUs with vLLM' and 'Running a big LLM across multiple "
                               "GPUs with vLLM': one series, likely one author (merging is the conservative choice)"),
    "gh:orca3": ("llmso", "the llmso-orca3 records' source names the orca3/llm-model-inference course notebooks (the "
                          "course's repository, not the author's); the same code-index file as the llmso notes"),
    "recon": ("gh:alexostapiuk11", "alexostapiuk11/coldstart-recon-worker, the same repository as the a5 records"),
    "a5": ("gh:alexostapiuk11", "alexostapiuk11/coldstart-recon-worker"),
    "paperhkv": ("tiara", "blind v26: the RTX 3090 'platform A' RUNLOG and the MI300X 'platform B' RUNLOG of one project, one "
                          "harness (code/m1_capacity.py, code index file 71370065512)"),
}
# record-level exceptions to the handle rule: id -> (group, reason)
BY_ID = {
    "vllm-llmd-qwen25-1.5b-instruct-gb10-kvbytes6g-u010-8k": (
        "gh:gyliu513", "an llm-d demo on a DGX Spark, like gyliu513/langX101's llm-d notes (merging is conservative)"),
    "vllm-llmd-qwen3-0.6b-rtx3050-u060-2k-eager": (
        "llmd-study-kr", "a Korean study group's llm-d notes (RTX 3050): not the gyliu513 notes that share the handle"),
}


def group_of(rec: dict) -> str:
    """The source group of a record (protocol rules 1-5)."""
    rid, src = rec["id"], str(rec.get("source") or "")
    if rid in BY_ID:
        return BY_ID[rid][0]
    m = re.search(r"github\.com/([^/\s]+)/([^/\s]+)(?:/(?:issues|pull|discussions)/(\d+))?", src)
    w = re.search(r"https?://([^/\s]+)", src)
    if m:
        repo = f"{m.group(1)}/{m.group(2)}"
        key = f"gh:{repo}#{m.group(3)}" if repo.startswith(ENGINE_REPOS) and m.group(3) else f"gh:{m.group(1)}"
    elif w:
        key = f"web:{w.group(1)}"
    else:
        key = rid.split("-")[1]
    return MERGES[key][0] if key in MERGES else key


def mapping(records: list[dict]) -> dict:
    groups: dict[str, list[str]] = {}
    for r in records:
        if r["engine"] == "vllm":
            groups.setdefault(group_of(r), []).append(r["id"])
    return {"rule": "benchmarks/results/serve-learned-terms-v1.md (Groups); group_of() in benchmarks/serve_learned_terms_cv.py",
            "merges": {k: {"into": v[0], "why": v[1]} for k, v in MERGES.items()},
            "by_id": {k: {"group": v[0], "why": v[1]} for k, v in BY_ID.items()},
            "groups": dict(sorted(groups.items()))}


KV_ROWS = ("KV GiB (end to end)", "KV tokens (end to end)")
TERMS = ("cold_compile", "unified_non_torch")  # the protocol's fitting order: T2, then T1
CONFIGS = {"unchanged": (), "T2 cold_compile alone": ("cold_compile",), "T1 unified_non_torch alone": ("unified_non_torch",),
           "T2 + T1": ("cold_compile", "unified_non_torch")}


@contextmanager
def fitted(values: dict[str, float]):
    """The planner's own fitted-term data (engines.yaml vllm.fitted_non_kv) set to ``values`` for the block: the terms
    enter through serve.vllm_fitted_terms, the code that ships; nothing else of the knowledge changes."""
    extra = serve.engines_knowledge().engines["vllm"].extra
    had, old = "fitted_non_kv" in extra, extra.get("fitted_non_kv")
    extra["fitted_non_kv"] = {k: {"gib": v} for k, v in values.items()}
    try:
        yield
    finally:
        if had:
            extra["fitted_non_kv"] = old
        else:
            extra.pop("fitted_non_kv", None)


def features(records: list[dict]) -> dict[str, dict]:
    """Per vLLM record: its group, whether it is on unified memory, which terms hold, and the unchanged planner's
    residual non-KV memory (plan KV GiB - log KV GiB, GiB per rank; None without a logged KV GiB)."""
    with fitted({}):
        rows, _ = sa.evaluate(records)
    resid = {r["id"]: r["pred"] - r["obs"] for r in rows if r["what"] == KV_ROWS[0] and r["pred"] is not None}
    out = {}
    for rec in records:
        try:
            holds = serve.vllm_fitted_term_conditions(sa.spec_of(rec), sa.machine_of(rec).unified)
        except Exception:  # noqa: BLE001 - a record the scorer cannot take holds no term (it stays a miss)
            holds = dict.fromkeys(TERMS, False)
        out[rec["id"]] = {"group": group_of(rec), "unified": sa.machine_of(rec).unified, "holds": holds,
                          "resid": resid.get(rec["id"])}
    return out


def fit(feats: dict[str, dict], ids: set[str], terms: tuple[str, ...]) -> dict[str, float]:
    """The protocol's medians on the records ``ids``: cold_compile on discrete rows where it holds, then
    unified_non_torch on unified rows less the cold_compile value where that holds too."""
    vals: dict[str, float] = {}
    if "cold_compile" in terms:
        rs = [f["resid"] for i, f in feats.items() if i in ids and f["resid"] is not None
              and f["holds"]["cold_compile"] and not f["holds"]["unified_non_torch"]]
        vals["cold_compile"] = round(statistics.median(rs), 3) if rs else 0.0
    if "unified_non_torch" in terms:
        rs = [f["resid"] - (vals.get("cold_compile", 0.0) if f["holds"]["cold_compile"] else 0.0)
              for i, f in feats.items() if i in ids and f["resid"] is not None and f["holds"]["unified_non_torch"]]
        vals["unified_non_torch"] = round(statistics.median(rs), 3) if rs else 0.0
    return vals


def run_cv(records: list[dict], out: Path | None) -> int:
    vrecs = [r for r in records if r["engine"] == "vllm" and r.get("model")]
    feats = features(vrecs)
    groups = sorted({f["group"] for f in feats.values()})
    held: dict[str, dict[tuple[str, str], bool]] = {c: {} for c in CONFIGS}  # config -> (id, what) -> ok
    values: dict[str, dict[str, list[float]]] = {c: {} for c in CONFIGS}
    all_ids = set(feats)
    for g in groups:
        test = [r for r in vrecs if feats[r["id"]]["group"] == g]
        train = all_ids - {r["id"] for r in test}
        for cname, terms in CONFIGS.items():
            vals = fit(feats, train, terms)
            for k, v in vals.items():
                values[cname].setdefault(k, []).append(v)
            with fitted(vals):
                rows, _ = sa.evaluate(test)
            for r in rows:
                if r["what"] in KV_ROWS and r["id"].startswith("vllm-"):
                    held[cname][(r["id"], r["what"])] = r["ok"]
    base = held["unchanged"]
    lines = ["| configuration | KV GiB ok (held out) | KV tokens ok (held out) | sum | GB10 rows: in / out | discrete rows: "
             "in / out | bar |", "|---|---|---|---|---|---|---|"]
    verdict = {}
    for cname in CONFIGS:
        h = held[cname]
        n = {w: (sum(ok for (i, ww), ok in h.items() if ww == w), sum(1 for (i, ww) in h if ww == w)) for w in KV_ROWS}
        cls = {}
        for u, label in ((True, "GB10"), (False, "discrete")):
            keys = [k for k in h if feats[k[0]]["unified"] == u]
            cls[label] = (sum(1 for k in keys if h[k] and not base[k]), sum(1 for k in keys if base[k] and not h[k]))
        b = {w: sum(ok for (i, ww), ok in base.items() if ww == w) for w in KV_ROWS}
        total, btotal = sum(v[0] for v in n.values()), sum(b.values())
        ok = (cname != "unchanged" and total > btotal and all(n[w][0] >= b[w] for w in KV_ROWS)
              and all(i >= o for i, o in cls.values()))
        verdict[cname] = ok
        lines.append(f"| {cname} | {n[KV_ROWS[0]][0]}/{n[KV_ROWS[0]][1]} | {n[KV_ROWS[1]][0]}/{n[KV_ROWS[1]][1]} | "
                     f"{total} | +{cls['GB10'][0]} / -{cls['GB10'][1]} | +{cls['discrete'][0]} / -{cls['discrete'][1]} | "
                     f"{'—' if cname == 'unchanged' else ('PASS' if ok else 'fail')} |")
    lines += ["", "Fitted values across the folds (GiB per rank; min / median / max over the "
              f"{len(groups)} training folds):", "", "| configuration | term | min | median | max |", "|---|---|---|---|---|"]
    for cname, vals in values.items():
        for k, vs in vals.items():
            lines.append(f"| {cname} | {k} | {min(vs):+.2f} | {statistics.median(vs):+.2f} | {max(vs):+.2f} |")
    full = {c: fit(feats, all_ids, t) for c, t in CONFIGS.items() if t}
    n_fit = {k: sum(1 for f in feats.values() if f["resid"] is not None and f["holds"][k]
                    and (k == "unified_non_torch" or not f["holds"]["unified_non_torch"])) for k in TERMS}
    lines += ["", "Fitted on all records (what would ship; rows with a logged KV GiB where the term holds: "
              + ", ".join(f"{k} {v}" for k, v in n_fit.items()) + "):", ""]
    lines += [f"- {c}: " + ", ".join(f"{k} = {v:+.3f} GiB" for k, v in vals.items()) for c, vals in full.items()]
    lines += ["", "Rows whose verdict a configuration changes (held out; + into the band, - out of it):", ""]
    for cname in CONFIGS:
        if cname == "unchanged":
            continue
        moved = [f"{'+' if held[cname][k] else '-'}{k[0]} ({k[1].split(' (')[0]})" for k in held[cname]
                 if held[cname][k] != base[k]]
        lines.append(f"- {cname}: " + ("; ".join(moved) if moved else "none"))
    text = "\n".join(lines) + "\n"
    if out:
        out.write_text(text)
    sys.stdout.write(text)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups-only", action="store_true", help="write the group mapping and stop (no count)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    records = yaml.safe_load(sa.LOGS.read_text())["records"]
    GROUPS_OUT.write_text(yaml.safe_dump(mapping(records), sort_keys=False, allow_unicode=True, width=120))
    if args.groups_only:
        return 0
    return run_cv(records, args.out)


if __name__ == "__main__":
    raise SystemExit(main())
