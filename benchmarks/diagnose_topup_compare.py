#!/usr/bin/env python3
"""Compare CV arms of diagnose_learn.py on the original training reports only (issue 18, round 18ai, v31).

Usage:
  python benchmarks/diagnose_topup_compare.py --arm a=/tmp/p_a_{S}.json --arm b=/tmp/p_b_{S}.json [--salts ,a,b,c,d]

Each arm is a ``--predictions`` file pattern with ``{S}`` for the dealing (salt). Only the reports of
``diagnose_learn.SETS`` are read (an arm that also predicted a top-up set is scored on the same reports as the others):
group-mean top-1 per dealing (every source group weighs the same, as diagnose_learn's report), pooled precision of
answers at p >= 0.8, "none" recall and right answers per dealing. Read-only: it fits nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from diagnose_cv import load_sets  # noqa: E402
from diagnose_learn import HIGH, SETS  # noqa: E402


def group_mean(rows: list[tuple[str, bool]]) -> float:
    by: dict[str, list[bool]] = defaultdict(list)
    for g, ok in rows:
        by[g].append(ok)
    return 100 * sum(sum(v) / len(v) for v in by.values()) / len(by)


def score(pred: dict, groups: dict[str, str]) -> dict:
    keys = sorted(groups)
    missing = [k for k in keys if k not in pred]
    if missing:
        raise SystemExit(f"{len(missing)} original reports missing from a prediction file, e.g. {missing[0]}")
    rows = [(groups[k], pred[k]["answer"] == pred[k]["label"]) for k in keys]
    hi = [k for k in keys if pred[k]["answer"] != "none" and pred[k]["p"] >= HIGH]
    return {"gm": group_mean(rows), "right": sum(ok for _, ok in rows),
            "hi": len(hi), "hi_ok": sum(pred[k]["answer"] == pred[k]["label"] for k in hi),
            "none": sum(pred[k]["label"] == "none" for k in keys),
            "none_ok": sum(pred[k]["label"] == "none" and pred[k]["answer"] == "none" for k in keys)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="name=pattern with {S} for the dealing")
    ap.add_argument("--salts", default=",a,b,c,d")
    args = ap.parse_args(argv)
    salts = args.salts.split(",")
    groups = {c["set"] + "/" + c["id"]: c["group"] for c in load_sets(list(SETS))}
    arms = [a.split("=", 1) for a in args.arm]
    res = {name: [score(json.loads(Path(pat.format(S=s)).read_text()), groups) for s in salts] for name, pat in arms}
    base = arms[0][0]
    print(f"{len(groups)} original reports, {len(set(groups.values()))} groups; dealings {salts}; reference arm {base}\n")
    print("| arm | top-1 per dealing | mean top-1 | rises vs " + base + " | pooled p >= 0.8 precision | "
          "\"none\" recall | right per dealing |")
    print("|---|---|---:|---:|---:|---:|---|")
    for name, _ in arms:
        r = res[name]
        rises = sum(x["gm"] > y["gm"] + 1e-9 for x, y in zip(r, res[base], strict=True))
        hi, hi_ok = sum(x["hi"] for x in r), sum(x["hi_ok"] for x in r)
        print(f"| {name} | " + ", ".join(f"{x['gm']:.2f}" for x in r) + f" | {sum(x['gm'] for x in r) / len(r):.2f} % | "
              + ("–" if name == base else f"{rises} of {len(r)}") + f" | {hi_ok}/{hi} = {100 * hi_ok / hi:.1f} % | "
              f"{sum(x['none_ok'] for x in r)}/{sum(x['none'] for x in r)} | " + ", ".join(str(x["right"]) for x in r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
