#!/usr/bin/env python3
"""Count the genres of the labelled training reports per label (issue 18, round 18u), before any variant is run.

Usage:
  python benchmarks/diagnose_genre.py [--sets cases,holdout,...] [--list]

For every report of the CV's training sets (diagnose_learn.SETS; never the sealed holdout12/13/14): the genre that
sparkops.diagnose.genre reads from its structure (pr, docs, writeup, question, or none reached), whether it is a
user's own failure report (first person + an error / trace / log), and whether reading.py finds any failure line.
Prints one table per label ("none" vs every G label, and all G pooled), the not-a-report share on each side, and
(``--list``) the reports flagged not-a-report with their label, so a G report the flag would hit is seen by name.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from diagnose_cv import load_sets  # noqa: E402
from diagnose_learn import SETS  # noqa: E402

from sparkops.diagnose.genre import GENRES, genre  # noqa: E402
from sparkops.diagnose.reading import FAILURE, line_roles  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

SEALED = ("holdout12", "holdout13", "holdout14")


def read(cases: list[dict]) -> None:
    for c in cases:
        lines = from_text(c["text"], c["id"]).lines
        roles = line_roles(lines)
        g = genre(lines, roles)
        c["genre"], c["report"], c["not_report"] = g.genre or "-", g.report, g.not_a_report
        c["fail_line"] = FAILURE in roles


def table(cases: list[dict]) -> str:
    cols = [*GENRES, "-"]
    out = ["| label | reports | " + " | ".join(f"genre {g}" for g in cols) + " | failure report (1st person + error) "
           "| **not a report** | not a report, no failure line |",
           "|---|---:|" + "---:|" * (len(cols) + 3)]
    rows = [("none", [c for c in cases if c["label"] == "none"]), ("all G", [c for c in cases if c["label"] != "none"])]
    rows += [(lab, [c for c in cases if c["label"] == lab]) for lab in sorted({c["label"] for c in cases} - {"none"},
                                                                              key=lambda s: int(s[1:]))]
    for lab, cs in rows:
        n = len(cs)
        cnt = Counter(c["genre"] for c in cs)
        nr = sum(c["not_report"] for c in cs)
        nrf = sum(c["not_report"] and not c["fail_line"] for c in cs)
        out.append(f"| {lab} | {n} | " + " | ".join(str(cnt[g]) for g in cols)
                   + f" | {sum(c['report'] for c in cs)} | {nr} ({100 * nr / max(n, 1):.0f} %) | {nrf} |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--list", action="store_true", help="list the reports read as not-a-report, with their label")
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if any(s in SEALED for s in sets):
        raise SystemExit("holdout12/13/14 are sealed: never counted here")
    cases = load_sets(sets)
    read(cases)
    print(table(cases))
    if args.list:
        print()
        for c in sorted(cases, key=lambda c: (c["label"] == "none", c["set"], c["id"])):
            if c["not_report"]:
                print(f"- {c['set']}/{c['id']}: label {c['label']}, genre {c['genre']}, "
                      f"failure line {'yes' if c['fail_line'] else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
