#!/usr/bin/env python3
"""Error analysis of diagnose's learned layer under the blind-rules grouped cross-validation (issue 18).

Usage:
  python benchmarks/diagnose_misses.py [--salts ,a,b,c,d] [--folds 10] [--list] [--out FILE]

Runs benchmarks/diagnose_learn.py's grouped cross-validation (blind rules, the shipped text layer, the same sets,
never the spent holdouts) once per dealing of the groups into folds (``--salts``; "" is the v9 dealing) and sorts
every held-out miss into the issue's three kinds:

- A  the signal is there but nothing is answered: a G label, answered "none" (A1: the rules found the label among
     their candidates and the model abstained; A2: no rule found it);
- B  a gotcha is answered on a report whose label is "none" (incidental words fire a gotcha; B+: at p >= 0.8);
- C  the right area, the wrong gotcha: a G label answered with another G (C2: the label was not a rules' candidate).

Prints the mean count per dealing of each kind, overall and per label, and with ``--list`` the misses of the first
dealing one per line (case, label, answer, probability, the three candidates diagnose names).
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import diagnose_learn as dl  # noqa: E402

KINDS = ("A1", "A2", "B", "B+", "C", "C2")
NAMES = {"A1": "missed: the label among the rules' candidates", "A2": "missed: no rule found the label",
         "B": "gotcha answered on a 'none' report, p < 0.8", "B+": "gotcha answered on a 'none' report, p >= 0.8",
         "C": "wrong gotcha, the label among the candidates", "C2": "wrong gotcha, the label not a candidate"}


def kind(c: dict) -> str | None:
    """The kind of miss of one held-out prediction (None: right)."""
    if c["pred"] == c["label"]:
        return None
    if c["label"] == dl.NONE:
        return "B+" if c["p"] >= dl.HIGH else "B"
    found = c["label"] in c["labels0"]
    if c["pred"] == dl.NONE:
        return "A1" if found else "A2"
    return "C" if found else "C2"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--salts", default=",a,b,c,d", help="the dealings, comma-separated ('' first: the v9 dealing)")
    ap.add_argument("--folds", type=int, default=10)
    ap.add_argument("--list", action="store_true", help="list the first dealing's misses")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    salts = args.salts.split(",")
    cases = dl.load_sets(list(dl.SETS))
    dl.featurize(cases)
    for c in cases:
        c["rows0"], c["labels0"], c["cap0"] = c["rows"], c["labels"], c["cap"]
    total: Counter[str] = Counter()
    by_label: dict[str, Counter[str]] = defaultdict(Counter)
    lines = []
    for n, salt in enumerate(salts):
        dl.SALT = salt
        dl.grouped_cv(cases, args.folds)
        for c in cases:
            k = kind(c)
            if k:
                total[k] += 1
                by_label[c["label"]][k] += 1
                if n == 0 and args.list:
                    lines.append(f"{k:3} {c['set']}/{c['id']} label {c['label']} answer {c['pred']} "
                                 f"p {c['p']:.2f} named {','.join(c['named'])}")
    d = len(salts)
    out = [f"Misses of the blind-rules grouped {args.folds}-fold CV, mean per dealing over {d} dealings "
           f"({len(cases)} cases):", "", "| kind | what | misses per dealing |", "|---|---|---:|"]
    out += [f"| {k} | {NAMES[k]} | {total[k] / d:.1f} |" for k in KINDS]
    out += [f"| all | | {sum(total.values()) / d:.1f} |", "",
            "| label | " + " | ".join(KINDS) + " | all |", "|---|" + "---:|" * (len(KINDS) + 1)]
    for lab in dl.LABELS:
        row = by_label[lab]
        out.append(f"| {lab} | " + " | ".join(f"{row[k] / d:.1f}" if row[k] else "·" for k in KINDS)
                   + f" | {sum(row.values()) / d:.1f} |")
    text = "\n".join(out + ([""] + lines if lines else [])) + "\n"
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
