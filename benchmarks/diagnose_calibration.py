#!/usr/bin/env python3
"""Score the calibration of diagnose's displayed confidence on held-out answers (issue 18, round 18ah).

Usage:
  python benchmarks/diagnose_calibration.py --before P0.json [P0_a.json ...] --after P1.json [P1_a.json ...]

Reads prediction files written by ``diagnose_learn.py --predictions`` (one per dealing, the same order in both lists;
``--after`` files come from a ``--calibrate isotonic`` run and carry ``p_cal``), and prints, per dealing and pooled:
top-1 and whether every answer is the same in both runs, the answers at displayed >= 0.8 and their precision, the
expected calibration error of the answered findings, and the reliability curve before and after
(benchmarks/results/diagnose-calibration-v1.md declares all of it).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HIGH = 0.8
BINS = (0.0, 0.2, 0.4, 0.6, 0.8, 0.9, 1.0001)
NONE = "none"


def answered(preds: dict, key: str) -> list[tuple[float, bool]]:
    """(displayed confidence, right) of every answer with a gotcha."""
    return [(v[key], v["answer"] == v["label"]) for v in preds.values() if v["answer"] != NONE]


def ece(pairs: list[tuple[float, bool]]) -> float:
    """Count-weighted mean over the bins of |mean displayed - share right|."""
    total = 0.0
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        b = [(p, r) for p, r in pairs if lo <= p < hi]
        if b:
            total += len(b) * abs(sum(p for p, _ in b) / len(b) - sum(r for _, r in b) / len(b))
    return total / len(pairs) if pairs else 0.0


def confident(pairs: list[tuple[float, bool]]) -> str:
    hi = [r for p, r in pairs if p >= HIGH]
    return f"{sum(hi)}/{len(hi)} = {100 * sum(hi) / len(hi):.1f} %" if hi else "0/0"


def reliability(pairs: list[tuple[float, bool]]) -> list[str]:
    out = ["| bin | answers | mean displayed | share right |", "|---|---:|---:|---:|"]
    for lo, hi in zip(BINS, BINS[1:], strict=False):
        b = [(p, r) for p, r in pairs if lo <= p < hi]
        if b:
            right = sum(r for _, r in b)
            out.append(f"| {lo:.1f}–{min(hi, 1.0):.1f} | {len(b)} | {sum(p for p, _ in b) / len(b):.3f} | "
                       f"{right}/{len(b)} = {100 * right / len(b):.1f} % |")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", nargs="+", type=Path, required=True)
    ap.add_argument("--after", nargs="+", type=Path, required=True)
    args = ap.parse_args(argv)
    if len(args.before) != len(args.after):
        raise SystemExit("--before and --after need one file per dealing each, in the same order")
    out = ["| dealing | top-1 before | top-1 after | same answers | p >= 0.8 before | p >= 0.8 after | ECE before | "
           "ECE after |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    pooled_b: list[tuple[float, bool]] = []
    pooled_a: list[tuple[float, bool]] = []
    for fb, fa in zip(args.before, args.after, strict=True):
        b, a = json.loads(fb.read_text()), json.loads(fa.read_text())
        same = sum(b[k]["answer"] == a[k]["answer"] for k in b) if set(a) == set(b) else -1
        pb, pa = answered(b, "p"), answered(a, "p_cal")
        pooled_b += pb
        pooled_a += pa
        out.append(f"| {fa.stem} | {sum(v['answer'] == v['label'] for v in b.values())}/{len(b)} | "
                   f"{sum(v['answer'] == v['label'] for v in a.values())}/{len(a)} | {same}/{len(b)} | "
                   f"{confident(pb)} | {confident(pa)} | {ece(pb):.3f} | {ece(pa):.3f} |")
    out.append(f"| pooled | | | | {confident(pooled_b)} | {confident(pooled_a)} | {ece(pooled_b):.3f} | "
               f"{ece(pooled_a):.3f} |")
    out += ["", "Reliability before (the answers' displayed confidence, pooled):", "", *reliability(pooled_b),
            "", "Reliability after (calibrated):", "", *reliability(pooled_a)]
    sys.stdout.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
