#!/usr/bin/env python3
"""Does diagnose decide as the harness does? (issue 18, round 18ae: an equivalence check of the wired gates).

Usage:
  python benchmarks/diagnose_gate_equivalence.py [--g10 gate2] [--g1 gate2] [--json OUT]

For every report of the CV's default sets (293), the shipped ``diagnose_text`` answer (today's rules, the shipped
``knowledge/diagnose_model.yaml``, no facts) is set beside ``decide()`` of ``benchmarks/diagnose_learn.py`` on the
same report read by the same rules, with the same model file's weights, text layer and answer bar, under the given
gate variants. Any difference is a wiring difference between ``_learned`` and the harness. No model is fitted:
this scores nothing and shapes nothing (both sides are in-sample for the shipped model).
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

from sparkops.diagnose import diagnose_text  # noqa: E402
from sparkops.diagnose.rules import load  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--g10", default="gate2", choices=("off", "gate", "gate2"))
    ap.add_argument("--g1", default="gate3", choices=("off", "gate", "gate2", "gate3", "gate4"))
    ap.add_argument("--json", type=Path, help="write every report's two answers here")
    args = ap.parse_args(argv)
    kb = load()
    lm = kb.learned
    if lm is None or lm.text is None:
        raise SystemExit("the shipped model has no text layer: nothing to compare with the rocchio harness")
    dl.RULES, dl.TEXT, dl.G10, dl.G1 = "current", "rocchio", args.g10, args.g1
    dl.SCALE, dl.TEXT_ONLY_AT = lm.text.scale, lm.text.only_at
    dl.TOKENS = {("failure",): "tokens", ("failure", "plain"): "tokens_fp",
                 ("failure", "plain", "context", "quoted"): "tokens_all"}[tuple(lm.text.read)]
    w = [0.0] * len(dl.PARAMS)
    for k, v in lm.weights.items():
        w[dl.INDEX[k]] = v
    for g, v in lm.priors.items():
        w[dl.INDEX["p." + g]] = v
    model = (lm.text.idf, lm.text.centroids)
    cases = dl.featurized_cases(list(dl.SETS))
    rows, differ = {}, []
    for c in cases:
        dl.attach(c, dl.text_scores(c, model))
        harness = dl.decide(w, c, (1.01, lm.answer_at))[0]
        shipped = diagnose_text(c["text"], source=c["id"], kb=kb).top
        key = c["set"] + "/" + c["id"]
        rows[key] = {"label": c["label"], "harness": harness, "diagnose": shipped}
        if harness != shipped:
            differ.append(key)
    right_h = sum(r["harness"] == r["label"] for r in rows.values())
    right_d = sum(r["diagnose"] == r["label"] for r in rows.values())
    print(f"reports: {len(rows)}; --g10 {args.g10} --g1 {args.g1}; answers that differ: {len(differ)}")
    print(f"in-sample right (shipped model, today's rules): harness {right_h}, diagnose {right_d}")
    for key in differ:
        r = rows[key]
        print(f"  {key}: label {r['label']}, harness {r['harness']}, diagnose {r['diagnose']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
