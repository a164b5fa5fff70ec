#!/usr/bin/env python3
"""The inner grouped CV's top-1 for every candidate answer bar (round 18ad): the curve diagnose_learn.choose_bar picks
from, on all the training sets (the --write path) and inside each outer fold of the grouped CV.

Usage:
  python benchmarks/diagnose_bar_curve.py [--cache FILE] [--g10 gate2] [--salts ",a,b,c,d"] [--folds 10]

Prints, per bar of the learned policy's grid, the inner-CV group-mean top-1 (choose_bar's score), the count right, and
the gotchas answered under each bar; the --write path first, then per dealing and outer fold which bar won and by how
much over the runner-up. Reads the default training sets only (diagnose_learn.SETS); the sealed sets are never read.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose_learn as dl  # noqa: E402

GRID = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7)


def curve(train: list[dict], folds: int = 4) -> list[tuple[float, float, int, int]]:
    """choose_bar's scores: (bar, group-mean top-1, right, gotchas answered) for every bar of the grid."""
    oof = {}
    for k in range(folds):
        inner = [c for c in train if dl._fold_of(c["group"], folds, "inner") != k]
        held = [c for c in train if dl._fold_of(c["group"], folds, "inner") == k]
        if inner and held:
            w = dl.fit(inner)
            for c in held:
                oof[c["id"]] = w
    out = []
    for pm in GRID:
        for c in train:
            w = oof.get(c["id"])
            c["_inner"] = dl.decide(w, c, (1.01, pm))[0] if w is not None else c["rules"]
        out.append((pm, dl.group_mean(train, "_inner"), sum(c["_inner"] == c["label"] for c in train),
                    sum(c["_inner"] != dl.NONE for c in train)))
    return out


def show(rows, head: str) -> None:
    best = max(r[1] for r in rows)
    print(head)
    for pm, gm, right, answered in rows:
        print(f"  bar {pm:.1f}: inner top-1 {gm:6.2f} %  ({right} right, {answered} answered)"
              f"{'  <- best' if gm == best else f'  ({gm - best:+.2f})'}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--g10", default="gate2")
    ap.add_argument("--salts", default=",a,b,c,d")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--no-outer", action="store_true")
    args = ap.parse_args()
    dl.G10 = args.g10
    cases = dl.featurized_cases(list(dl.SETS), args.cache)
    dl.attach_oof(cases)
    show(curve(cases), f"--write path: all {len(cases)} reports, {len({c['group'] for c in cases})} groups")
    if args.no_outer:
        return 0
    for salt in args.salts.split(","):
        for k in range(args.folds):
            train = [c for c in cases if dl._fold_of(c["group"], args.folds, salt) != k]
            dl.attach_oof(train)
            rows = curve(train)
            order = sorted(rows, key=lambda r: -r[1])
            print(f"dealing {salt!r} fold {k + 1}: " + ", ".join(f"{pm:.1f}:{gm:.2f}" for pm, gm, _r, _a in rows)
                  + f"  best {order[0][0]:.1f} by {order[0][1] - order[1][1]:.2f} over {order[1][0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
