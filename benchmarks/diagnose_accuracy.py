#!/usr/bin/env python3
"""Score `spark-ops diagnose` on labelled cases, next to a naive keyword baseline.

Usage: python benchmarks/diagnose_accuracy.py CASES_DIR [--out FILE] [--show-misses] [--symptoms FILE]
Reads every CASES_DIR/*.yaml in the shared case format (id, source, label: G1..G10 | none, kind,
why, input_kind, text) and writes a Markdown report (default benchmarks/results/diagnose-accuracy.md):
  - top-1 accuracy of the matcher and of the baseline (overall, positives, hard negatives);
  - per-label confusion of the matcher (rows: the label, columns: what it answered);
  - time per case (median and max of the matcher; the whole diagnose_text call, knowledge cached).
The matcher's answer is its top finding's gotcha, or "none" when it returns no findings. The baseline
counts the words of each gotcha's symptom column in knowledge/gotchas.yaml (backticked phrases whole,
other words of 4+ letters) in the text and answers the gotcha with most hits, "none" with none.
``--symptoms FILE`` scores another knowledge file of the same shape (e.g. an older version, for a before/after
confusion: ``git show REV:src/sparkops/knowledge/symptoms.yaml > old.yaml``).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from sparkops.diagnose import diagnose_text, load_symptoms  # noqa: E402
from sparkops.diagnose.rules import GOTCHAS, SymptomKnowledge, load_file  # noqa: E402
from sparkops.knowledge import load as load_catalog  # noqa: E402
from sparkops.knowledge import safe_load  # noqa: E402

LABELS = (*GOTCHAS, "none")
_STOP = {"with", "that", "than", "from", "when", "while", "into", "after", "shows", "fails", "fail", "runs",
         "hours", "although", "requested", "following", "official", "local", "cause", "environment",
         "environments", "behave", "differently", "identical", "unrelated", "install", "installed", "fine",
         "some", "work", "plan", "below", "far", "mid", "run", "either", "logs", "process"}


def load_cases(folder: Path) -> list[dict]:
    cases = []
    for p in sorted(folder.glob("*.yaml")):
        data = safe_load(p.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or "label" not in data or "text" not in data:
            print(f"skipped {p.name}: not a case (needs label and text)", file=sys.stderr)
            continue
        data.setdefault("id", p.stem)
        cases.append(data)
    return cases


def baseline_keywords() -> dict[str, list[str]]:
    """Per gotcha: the symptom column's backticked phrases and its other words of 4+ letters."""
    out: dict[str, list[str]] = {}
    for g in GOTCHAS:
        symptom = load_catalog().gotcha(g).symptom
        phrases = [p.lower() for p in re.findall(r"`([^`]+)`", symptom)]
        rest = re.sub(r"`[^`]+`", " ", symptom)
        words = [w.lower() for w in re.findall(r"[A-Za-z][A-Za-z0-9_.-]{3,}", rest)]
        out[g] = list(dict.fromkeys(phrases + [w.strip(".-") for w in words if w.lower() not in _STOP]))
    return out


def baseline_answer(text: str, kw: dict[str, list[str]]) -> str:
    low = text.lower()
    hits = {g: sum(low.count(k) for k in words if k) for g, words in kw.items()}
    best = max(GOTCHAS, key=lambda g: (hits[g], -GOTCHAS.index(g)))
    return best if hits[best] > 0 else "none"


def run(cases: list[dict], kb: SymptomKnowledge | None = None) -> list[dict]:
    kb = kb or load_symptoms()
    diagnose_text("warm-up", kb=kb)  # compile the regexes once, outside the timing
    kw = baseline_keywords()
    rows = []
    for c in cases:
        t0 = time.perf_counter()
        d = diagnose_text(str(c["text"]), source=str(c["id"]), kb=kb)
        dt = time.perf_counter() - t0
        rows.append({"id": c["id"], "label": str(c["label"]), "kind": str(c.get("kind", "")),
                     "got": d.top, "conf": d.findings[0].confidence if d.findings else None,
                     "second": d.findings[1].gotcha if len(d.findings) > 1 else "",
                     "baseline": baseline_answer(str(c["text"]), kw), "seconds": dt})
    return rows


def _acc(rows: list[dict], key: str) -> str:
    if not rows:
        return "-"
    ok = sum(r[key] == r["label"] for r in rows)
    return f"{ok}/{len(rows)} = {100 * ok / len(rows):.1f}%"


def report(rows: list[dict], folder: Path, show_misses: bool, kb: SymptomKnowledge | None = None,
           kb_name: str = "symptoms.yaml") -> str:
    kb = kb or load_symptoms()
    pos = [r for r in rows if r["kind"] == "positive"]
    neg = [r for r in rows if r["kind"] == "hard-negative"]
    times = [r["seconds"] for r in rows]
    lines = [f"# diagnose accuracy on {folder}",
             "",
             f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC · {len(rows)} cases · {kb_name} v{kb.version} "
             f"(last verified {kb.last_verified}) · `python benchmarks/diagnose_accuracy.py {folder}"
             + ("" if kb_name == "symptoms.yaml" else f" --symptoms {kb_name}") + "`",
             "",
             "| | matcher (spark-ops diagnose) | keyword baseline (gotchas.yaml symptom words) |",
             "|---|---|---|",
             f"| top-1, all | {_acc(rows, 'got')} | {_acc(rows, 'baseline')} |",
             f"| top-1, positive | {_acc(pos, 'got')} | {_acc(pos, 'baseline')} |",
             f"| top-1, hard-negative | {_acc(neg, 'got')} | {_acc(neg, 'baseline')} |",
             "",
             f"Time per case (matcher): median {1000 * statistics.median(times):.2f} ms, "
             f"max {1000 * max(times):.2f} ms." if times else "No cases.",
             "",
             "## Matcher confusion (rows: label, columns: answer)",
             "",
             "| label | n | " + " | ".join(LABELS) + " |",
             "|---|---|" + "---|" * len(LABELS)]
    by_label: dict[str, Counter] = defaultdict(Counter)
    for r in rows:
        by_label[r["label"]][r["got"]] += 1
    for lab in LABELS:
        if lab in by_label:
            cnt = by_label[lab]
            lines.append(f"| {lab} | {sum(cnt.values())} | "
                         + " | ".join(str(cnt[a]) if cnt[a] else "·" for a in LABELS) + " |")
    misses = [r for r in rows if r["got"] != r["label"]]
    if show_misses or len(rows) <= 80:
        lines += ["", "## Misses", ""]
        if not misses:
            lines.append("none")
        lines += [f"- `{r['id']}` ({r['kind']}): label {r['label']}, answered {r['got']}"
                  + (f" ({r['conf']:.2f}; next {r['second'] or '-'})" if r["conf"] is not None else "")
                  for r in misses]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cases", type=Path, help="folder of case YAML files")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "diagnose-accuracy.md")
    ap.add_argument("--show-misses", action="store_true", help="list every miss even for a large set")
    ap.add_argument("--symptoms", type=Path, help="score this knowledge file instead of the packaged symptoms.yaml")
    args = ap.parse_args(argv)
    cases = load_cases(args.cases)
    if not cases:
        print(f"no cases in {args.cases}", file=sys.stderr)
        return 2
    kb = load_file(args.symptoms) if args.symptoms else None
    name = str(args.symptoms) if args.symptoms else "symptoms.yaml"
    text = report(run(cases, kb), args.cases, args.show_misses, kb, name)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
