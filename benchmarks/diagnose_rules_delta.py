#!/usr/bin/env python3
"""Before -> after of a symptoms.yaml change on the training sets (issue 18, round 18v), and the "none" guard.

Usage: python benchmarks/diagnose_rules_delta.py --old OLD.yaml [--new NEW.yaml] [--out FILE]
  - per training set: top-1 of OLD and of NEW (the packaged file unless --new), and the confident (p >= 0.8) findings
    on reports labelled ``none`` (those NEW has and OLD had not are listed);
  - per pattern or signal that NEW has and OLD has not: the reports it matches (the matcher's own ``matched`` set),
    split into reports labelled with its own gotcha, with another gotcha, and ``none``.
Only the training sets are read (TRAINING below); the sealed blind sets are never opened. Both numbers are IN-SAMPLE:
these sets are not blind for the rules (the rules were written beside them).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from diagnose_accuracy import load_cases  # noqa: E402 - the one case reader of the diagnose benchmarks

from sparkops.diagnose import diagnose_input, load_symptoms  # noqa: E402
from sparkops.diagnose.matcher import match  # noqa: E402
from sparkops.diagnose.rules import SymptomKnowledge, load_file  # noqa: E402
from sparkops.diagnose.text import from_text  # noqa: E402

CASES = HERE.parent / "tests" / "diagnose"
TRAINING = ("cases", "holdout", "holdout2", "holdout3", "holdout4", "holdout5", "holdout6", "holdout7", "holdout8",
            "holdout9", "holdout10", "topup8", "topup11", "dev")
SEALED = ("holdout12", "holdout13", "holdout14", "holdout15", "holdout16", "holdout17", "holdout18")
HIGH = 0.8
assert not set(TRAINING) & set(SEALED)


def load_sets() -> dict[str, list[dict]]:
    return {s: load_cases(CASES / s) for s in TRAINING}


def answers(kb: SymptomKnowledge, cases: list[dict]) -> list[tuple[str, float | None, set[str]]]:
    out = []
    for c in cases:
        inp = from_text(str(c["text"]), str(c.get("id", "-")), kb.text_limits)
        d = diagnose_input(inp, None, kb)
        matched = match(inp, kb, set(), {}).matched
        out.append((d.top, d.findings[0].confidence if d.findings else None, matched))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--old", type=Path, required=True, help="the symptoms file before the change")
    ap.add_argument("--new", type=Path, help="the symptoms file after (default: the packaged one)")
    ap.add_argument("--out", type=Path, help="write the Markdown here (default: print)")
    a = ap.parse_args(argv)
    old, new = load_file(a.old), (load_file(a.new) if a.new else load_symptoms())
    new_ids = ({p.id for ps in new.patterns.values() for p in ps} | {s.id for s in new.signals}) - (
        {p.id for ps in old.patterns.values() for p in ps} | {s.id for s in old.signals})
    gotcha_of = new.gotcha_of
    sets = load_sets()
    lines = [f"symptoms v{old.version} -> v{new.version}; training sets only (IN-SAMPLE, not blind).", "",
             "| set | n | top-1 before | top-1 after | change | p >= 0.8 on `none`, before | after | new ones |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    hits: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    moved: list[str] = []
    tot = [0, 0, 0]
    for s, cases in sets.items():
        before, after = answers(old, cases), answers(new, cases)
        ok_b = sum(b[0] == str(c["label"]) for c, b in zip(cases, before, strict=True))
        ok_a = sum(x[0] == str(c["label"]) for c, x in zip(cases, after, strict=True))
        conf_b = [c["id"] for c, b in zip(cases, before, strict=True)
                  if str(c["label"]) == "none" and b[1] is not None and b[1] >= HIGH]
        conf_a = [c["id"] for c, x in zip(cases, after, strict=True)
                  if str(c["label"]) == "none" and x[1] is not None and x[1] >= HIGH]
        fresh = sorted(set(conf_a) - set(conf_b))
        tot[0] += len(cases)
        tot[1] += ok_b
        tot[2] += ok_a
        lines.append(f"| {s} | {len(cases)} | {ok_b} | {ok_a} | {ok_a - ok_b:+d} | {len(conf_b)} | {len(conf_a)} | "
                     + (", ".join(f"`{i}`" for i in fresh) or "-") + " |")
        for c, b, x in zip(cases, before, after, strict=True):
            lab = str(c["label"])
            if b[0] != x[0]:
                moved.append(f"- `{s}/{c['id']}` (label {lab}): {b[0]} -> {x[0]}"
                             + (f" ({x[1]:.2f})" if x[1] is not None else "")
                             + (" right" if x[0] == lab else " WRONG" if b[0] == lab else ""))
            for pid in x[2] & new_ids:
                own = gotcha_of.get(pid)
                side = "none" if lab == "none" else ("own" if own == lab or own is None else "other")
                hits[pid][side].append(f"{s}/{c['id']}({lab})")
    lines.append(f"| **all** | {tot[0]} | {tot[1]} | {tot[2]} | {tot[2] - tot[1]:+d} | | | |")
    lines += ["", "## Answers that changed", "", *(moved or ["none"]), "",
              "## New patterns and signals: reports they match (the matcher's `matched` set)", "",
              "| id | gotcha | own-gotcha reports (a signal: any G) | other-G reports | `none` reports | kept? |",
              "|---|---|---:|---:|---:|---|"]
    for pid in sorted(new_ids):
        h = hits.get(pid, {})
        own, oth, non = (len(h.get(k, [])) for k in ("own", "other", "none"))
        verdict = "signal" if pid not in gotcha_of else ("DROP (fires more on none)" if non > own else "kept")
        lines.append(f"| `{pid}` | {gotcha_of.get(pid, '-')} | {own} | {oth} | {non} | {verdict} |")
    lines += ["", "### Which reports", ""]
    for pid in sorted(hits):
        for k in ("own", "other", "none"):
            if hits[pid].get(k):
                lines.append(f"- `{pid}` {k}: " + ", ".join(hits[pid][k]))
    text = "\n".join(lines) + "\n"
    if a.out:
        a.out.write_text(text, encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
