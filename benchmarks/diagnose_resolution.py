#!/usr/bin/env python3
"""Count the resolution lines of the labelled training sets (issue 18, round 18t; sparkops/diagnose/resolution.py).

Usage: python benchmarks/diagnose_resolution.py [--sets cases,holdout,...]

Per label: how many reports tell a resolution at all, how many of those have a resolution whose fix words lead
toward the label's own fix (for a G label) or toward some gotcha's fix, and how many have a resolution that matches
none of the ten fixes (its best match under resolution.BAR). Reads the kept lines of each excerpt (text.from_text),
the same lines the learned layer reads. Never reads the sealed sets.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from diagnose_cv import load_sets  # noqa: E402
from diagnose_learn import LABELS, SETS  # noqa: E402

from sparkops.diagnose.resolution import BAR, catalog_fixes, fix_weights, resolution_features  # noqa: E402
from sparkops.diagnose.rules import load  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

SEALED = ("holdout12", "holdout13", "holdout14")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if set(sets) & set(SEALED):
        raise SystemExit("holdout12..14 are sealed")
    kb = load()
    w = fix_weights(catalog_fixes())
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0, 0])
    for c in load_sets(sets):
        lines = from_text(c["text"], c["id"], kb.text_limits).lines
        lead, unmatched, n = resolution_features(lines, w, BAR)
        r = rows[c["label"]]
        r[0] += 1
        if n:
            r[1] += 1
            r[2] += c["label"] in lead and lead[c["label"]] > 0
            r[3] += any(v > 0 for v in lead.values())
            r[4] += unmatched
    print("| label | reports | with a resolution line | of which lead to the label's fix | lead to some gotcha's fix "
          "| a resolution matching no fix |")
    print("|---|---:|---:|---:|---:|---:|")
    tot = [0] * 5
    for lab in LABELS:
        r = rows.get(lab, [0] * 5)
        tot = [a + b for a, b in zip(tot, r, strict=True)]
        print(f"| {lab} | {r[0]} | {r[1]} | {r[2] if lab != 'none' else '-'} | {r[3]} | {r[4]} |")
    print(f"| all | {tot[0]} | {tot[1]} ({100 * tot[1] / max(tot[0], 1):.1f} %) | {tot[2]} | {tot[3]} | {tot[4]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
