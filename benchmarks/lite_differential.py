"""How often the lite model runtime (sparkops.core.lite) agrees with pydantic, declines, or differs.

Draws N facts documents mutated from tests/fixtures/facts (the generator of
tests/test_lite_models.py: changed values, wrong types, deleted and extra keys, scaled numbers),
validates them in one subprocess per runtime (``Facts.model_validate`` and ``load_facts``), and
counts per document: the same dump, both refused, the lite runtime declined (pydantic answers
instead in the tool), or DIFFERENT (a bug). Random draw each run unless --seed is given.

    python benchmarks/lite_differential.py --n 400 --out benchmarks/results/NAME.md
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    from hypothesis import HealthCheck, Phase, given, seed, settings

    import test_lite_models as t

    docs: list[dict] = []

    @settings(max_examples=args.n, deadline=None, phases=[Phase.generate], database=None,
              suppress_health_check=list(HealthCheck))
    @given(t.mutated())
    def draw(doc: dict) -> None:
        docs.append(doc)

    (seed(args.seed)(draw) if args.seed is not None else draw)()
    tmp = Path(tempfile.mkdtemp())
    got_lite, got_pyd = t._batch(tmp, True, docs), t._batch(tmp, False, docs)
    counts: Counter = Counter()
    for a, b in zip(got_lite, got_pyd, strict=True):
        for what in ("validate", "load"):
            answer = "refused" if b[what] == "REJECTED" else "accepted"
            if a[what] == "DECLINED":
                counts[(what, f"lite declined (pydantic {answer})")] += 1
            elif a[what] == b[what]:
                counts[(what, f"same ({answer})")] += 1
            else:
                counts[(what, "DIFFERENT")] += 1
    lines = [f"# lite runtime vs pydantic on mutated facts documents{' (' + args.label + ')' if args.label else ''}",
             "", f"- {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC, {platform.machine()}, Python "  # noqa: UP017
             f"{platform.python_version()}; {len(docs)} documents, seed {args.seed}",
             f"- command: `python benchmarks/lite_differential.py --n {args.n}"
             f"{' --seed ' + str(args.seed) if args.seed is not None else ''}`", "",
             "| call | outcome | documents |", "|---|---|---:|"]
    lines += [f"| {w} | {o} | {n} |" for (w, o), n in sorted(counts.items())]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 1 if any(o == "DIFFERENT" for _w, o in counts) else 0


if __name__ == "__main__":
    sys.exit(main())
