#!/usr/bin/env python3
"""Every report where G10 was answered or was the label, on the CV's own held-out predictions (issue 18, round 18z).

Usage:
  python benchmarks/diagnose_g10_cases.py [--salt S] [--cache FILE] [--json OUT]

Runs the v14 protocol's grouped CV (benchmarks/diagnose_learn.py: default sets, 10 folds, blind rules, rocchio text
layer) for one dealing and lists, for each report labelled G10 or answered G10: the label, the answer, G10's held-out
probability (capped as diagnose caps it), the lines G10's rule evidence stands on with their reading.py role (read by
the rules version that had not seen the set, as the CV reads it), and the case's ``why`` (the labeller's conclusion:
what the reporter traced the failure to). Nothing here trains anything beyond the CV itself.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose_learn as dl  # noqa: E402
from diagnose_cv import BLIND_RULES, blind_kb  # noqa: E402
from yaml import safe_load  # noqa: E402

from sparkops.diagnose.matcher import match  # noqa: E402
from sparkops.diagnose.rules import load  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

GOTCHA = "G10"  # --gotcha: round 18ac lists G1 the same way


def g10_lines(case: dict, kbs: dict, kb) -> list[tuple[int, str, str, str]]:
    """(line number, role, excerpt, why) of each line G10's evidence stands on, as the CV's rules read the case."""
    if case["set"] not in kbs:
        kbs[case["set"]] = blind_kb(case["set"], kb) if BLIND_RULES.get(case["set"]) else kb
    k = kbs[case["set"]]
    inp = from_text(case["text"], case["id"], k.text_limits)
    res = match(inp, k)
    out = []
    for s in res.scored + res.below:
        if s.gotcha != GOTCHA:
            continue
        for ev in s.evidence:
            i = inp.numbers.index(ev.line) if ev.line in inp.numbers else -1
            out.append((ev.line, res.roles[i] if i >= 0 else "?", ev.text, ev.why))
    return out


def _why(case: dict) -> str:
    path = ROOT / "tests" / "diagnose" / case["set"] / (case["id"] + ".yaml")
    return safe_load(path.read_text(encoding="utf-8")).get("why", "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--salt", default="")
    ap.add_argument("--cache", type=Path)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--gotcha", default="G10", help="the gotcha to list (round 18ac: G1)")
    ap.add_argument("--g10", default="off", choices=("off", "gate", "gate2"), help="the G10 gate the CV runs with")
    args = ap.parse_args(argv)
    global GOTCHA
    GOTCHA = args.gotcha
    dl.SALT, dl.G10 = args.salt, args.g10
    cases = dl.featurized_cases(list(dl.SETS), args.cache)
    dl.grouped_cv(cases, 10)
    kb = load()
    kbs: dict = {}
    rows = []
    for c in cases:
        if c["label"] != GOTCHA and c["pred"] != GOTCHA:
            continue
        p10 = c["probs"].get(GOTCHA, 0.0)
        rows.append({"case": c["set"] + "/" + c["id"], "label": c["label"], "answer": c["pred"],
                     "p_answer": round(c["p"], 3), "p_g10": round(p10, 3),
                     "g10_candidate": GOTCHA in c["labels"], "lines": g10_lines(c, kbs, kb),
                     "readings": {k: c.get(k) for k in ("tp_failure", "tp_hang", "cuda_mismatch", "kernel_gap")},
                     "why": " ".join(str(_why(c)).split())})
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1) + "\n")
    for r in rows:
        print(f"## {r['case']}  label {r['label']}  answer {r['answer']} ({r['p_answer']})  p({GOTCHA}) {r['p_g10']}  {r['readings']}")
        for ln, role, ex, why in r["lines"]:
            print(f"   L{ln} [{role}] {ex[:140]}  <- {why[:60]}")
        print(f"   why: {r['why'][:400]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
