#!/usr/bin/env python3
"""Count what the reports state as facts and what the gotchas' owners say on them (issue 18, round 18x).

Usage:
  python benchmarks/diagnose_text_facts.py [--sets cases,holdout,...] [--list]

For every report of the sets (default: the CV's 293 training reports; never the sealed holdout12..16): the facts
its failure and context lines state (diagnose/text_facts.py extract), the owners' decisions on them that confirm a
gotcha whatever the unstated readings are (judge_text), per label. Prints a Markdown table; ``--list`` adds one
line per report with a confirmation.
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
from diagnose_learn import LABELS, SETS  # noqa: E402

from sparkops.diagnose.reading import line_roles  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402
from sparkops.diagnose.text_facts import READ_ROLES, extract, judge_text  # noqa: E402
from sparkops.knowledge import load as load_catalog  # noqa: E402

SEALED = ("holdout12", "holdout13", "holdout14", "holdout15", "holdout16")


def read(case: dict, kb, roles_read=READ_ROLES) -> tuple[dict, dict]:  # noqa: ANN001
    inp = from_text(case["text"], case["id"])
    roles = line_roles(inp.lines)
    tf = extract(inp.lines, roles, kb, roles_read)
    return tf.stated, judge_text(tf, kb).confirms


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--read", default=",".join(READ_ROLES),
                    help="the line roles read (diagnostic: failure,context,plain reads prose too; never quoted)")
    args = ap.parse_args(argv)
    sets = [s for s in args.sets.split(",") if s]
    if any(s in SEALED for s in sets):
        raise SystemExit("the sealed sets are not read here")
    kb = load_catalog()
    cases = load_sets(sets)
    rows: dict[str, Counter] = {lab: Counter() for lab in LABELS}
    listed = []
    for c in cases:
        stated, confirms = read(c, kb, tuple(args.read.split(",")))
        r = rows[c["label"]]
        r["reports"] += 1
        r["any fact"] += bool(stated)
        r["a watched version"] += any(k.startswith("target.distributions") for k in stated)
        r["the GPU"] += "gpu.devices[0].name" in stated
        r["driver CUDA"] += "gpu.cuda_driver_version" in stated
        r["torch's CUDA"] += "target.torch" in stated
        r["container / env"] += any(k.startswith(("host.container", "target.env")) for k in stated)
        r["owners confirm some G"] += bool(confirms)
        r["confirm the label"] += c["label"] in confirms
        r["confirm another G"] += any(g != c["label"] for g in confirms)
        for g in confirms:
            r["confirm " + g] += 1
        if confirms:
            listed.append(f"| {c['set']}/{c['id']} | {c['label']} | "
                          + "; ".join(f"{g}: {', '.join(codes)}" for g, codes in sorted(confirms.items())) + " |")
    cols = ["reports", "any fact", "a watched version", "the GPU", "driver CUDA", "torch's CUDA", "container / env",
            "owners confirm some G", "confirm the label", "confirm another G"]
    gs = sorted({k[len("confirm "):] for r in rows.values() for k in r if k.startswith("confirm G")},
                key=lambda g: int(g[1:]))
    out = ["| label | " + " | ".join(cols) + "".join(f" | confirm {g}" for g in gs) + " |",
           "|---|" + "---:|" * (len(cols) + len(gs))]
    total = Counter()
    for lab in LABELS:
        r = rows[lab]
        if r["reports"]:
            out.append(f"| {lab} | " + " | ".join(str(r[k]) for k in cols)
                       + "".join(f" | {r['confirm ' + g]}" for g in gs) + " |")
            if lab != "none":
                total.update(r)
    out.append("| all G | " + " | ".join(str(total[k]) for k in cols)
               + "".join(f" | {total['confirm ' + g]}" for g in gs) + " |")
    print("\n".join(out))
    if args.list:
        print("\n| report | label | the owners confirm |\n|---|---|---|")
        print("\n".join(listed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
