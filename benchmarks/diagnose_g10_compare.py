#!/usr/bin/env python3
"""Compare arms of the G10 gate on the CV's held-out predictions (issue 18, rounds 18z / 18ab).

Usage:
  python benchmarks/diagnose_g10_compare.py --arm off=/tmp/p_off_{s}.json --arm gate=/tmp/p_gate_{s}.json ...

Each arm's path holds ``{s}`` for the dealing (salts "", a, b, c, d), files written by
``diagnose_learn.py --predictions``. Prints, per arm: the group-mean top-1 per dealing (diagnose_learn.group_mean)
and their mean, pooled precision at p >= 0.8, G10 recall / precision, "none" recall, right per dealing; and, per
case, where an arm's answer differs from the first arm's (how many dealings, to what).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose_learn as dl  # noqa: E402
from diagnose_cv import load_sets  # noqa: E402

SALTS = ("", "a", "b", "c", "d")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=PATH with {s} for the dealing")
    ap.add_argument("--gotcha", default="G10", help="the gotcha whose recall / precision is counted (18ac: G1)")
    args = ap.parse_args(argv)
    gx = args.gotcha
    groups = {c["set"] + "/" + c["id"]: c["group"] for c in load_sets(list(dl.SETS))}
    arms = [a.split("=", 1) for a in args.arm]
    preds = {n: {s: json.loads(Path(p.format(s=s)).read_text()) for s in SALTS} for n, p in arms}
    print(f"| arm | top-1 per dealing | mean | p>=0.8 precision | {gx} recall | {gx} precision | none recall | right |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for n, _p in arms:
        means, right, hi, hi_ok, g10, g10_ok, ans10, ans10_ok, nn, nn_ok = [], [], 0, 0, 0, 0, 0, 0, 0, 0
        for s in SALTS:
            cases = [{"group": groups[k], "label": v["label"], "answer": v["answer"]} for k, v in preds[n][s].items()]
            means.append(dl.group_mean(cases, "answer"))
            right.append(sum(c["label"] == c["answer"] for c in cases))
            for v in preds[n][s].values():
                ok = v["answer"] == v["label"]
                if v["answer"] != "none" and v["p"] >= 0.8:
                    hi, hi_ok = hi + 1, hi_ok + ok
                if v["label"] == gx:
                    g10, g10_ok = g10 + 1, g10_ok + ok
                if v["answer"] == gx:
                    ans10, ans10_ok = ans10 + 1, ans10_ok + ok
                if v["label"] == "none":
                    nn, nn_ok = nn + 1, nn_ok + ok
        print(f"| {n} | {', '.join(f'{m:.2f}' for m in means)} | {sum(means) / 5:.2f} % | {hi_ok}/{hi} = "
              f"{100 * hi_ok / max(hi, 1):.1f} % | {g10_ok}/{g10} | {ans10_ok}/{ans10} | {nn_ok}/{nn} | "
              f"{', '.join(map(str, right))} |")
    base = arms[0][0]
    for n, _p in arms[1:]:
        print(f"\n## {n} vs {base}: cases whose answer differs (dealings, label, {base} -> {n})")
        diff: Counter = Counter()
        for s in SALTS:
            for k, v in preds[n][s].items():
                b = preds[base][s][k]
                if v["answer"] != b["answer"]:
                    diff[(k, v["label"], b["answer"], v["answer"])] += 1
        for (k, lab, a, b), cnt in sorted(diff.items()):
            print(f"- {k}  label {lab}: {a} -> {b} on {cnt}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
